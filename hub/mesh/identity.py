"""The hub's mesh identity: an ed25519 key kept in the data dir, so the peer id is stable.

Other hubs, bootstrap lists and operators name a hub by its libp2p peer id; a new
id on every restart would orphan all of them.  The file holds the 32-byte seed
only, readable by the owner alone (mode 0600) because it *is* the hub's identity.
"""

from __future__ import annotations

import os
from pathlib import Path

from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair

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
    path.parent.mkdir(parents=True, exist_ok=True)
    # Create with 0600 from the start (no window where the key is world-readable),
    # then rename so a crash never leaves a truncated identity behind.
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.write(fd, seed)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, FILE_MODE)
    os.replace(tmp, path)
    return key_pair
