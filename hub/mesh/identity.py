"""The hub's mesh identity: an ed25519 key kept in the data dir, so the peer id is stable.

Other hubs, bootstrap lists and operators name a hub by its libp2p peer id; a new
id on every restart would orphan all of them.  The file holds the 32-byte seed
only, readable by the owner alone (mode 0600) because it *is* the hub's identity.
"""

from __future__ import annotations

from pathlib import Path

from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID

from ..core.mesh.hub_id import hub_id_for as hub_id_from_bytes
from ..storage.statefile import replace_atomically

IDENTITY_FILE = "mesh_identity.key"
SEED_BYTES = 32
FILE_MODE = 0o600


class IdentityError(RuntimeError):
    """The identity file exists but cannot be used."""


def load_or_create_identity(data_dir: Path | None) -> KeyPair:
    """The key pair stored in ``data_dir``, generated and saved on first use.

    Without a data dir the identity is ephemeral (tests, throwaway hubs).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> load_or_create_identity(d).public_key.to_bytes() == load_or_create_identity(d).public_key.to_bytes()
    True
    """
    if data_dir is None:
        return create_new_key_pair()
    path = Path(data_dir) / IDENTITY_FILE
    if path.exists():
        seed = path.read_bytes()
        if len(seed) != SEED_BYTES:
            raise IdentityError(f"{path}: expected a {SEED_BYTES}-byte ed25519 seed, found {len(seed)} bytes")
        return create_new_key_pair(seed)
    key_pair = create_new_key_pair()
    seed = key_pair.private_key.to_bytes()
    # Created 0600 from the start (no window where the key is world-readable), then renamed
    # so a crash never leaves a truncated identity behind.
    replace_atomically(path, seed, mode=FILE_MODE)
    return key_pair


def hub_id_for(peer_id: ID) -> int:
    """The hub id that belongs to ``peer_id`` (see :func:`hub.core.mesh.hub_id.hub_id_for`)."""
    return hub_id_from_bytes(peer_id.to_bytes())


def peer_id_of(key_pair: KeyPair) -> ID:
    return ID.from_pubkey(key_pair.public_key)
