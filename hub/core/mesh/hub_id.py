"""Which hub id (origin id) belongs to which peer id."""

from __future__ import annotations

import hashlib

#: Domain separation: this hash means "pub0sub hub id" and nothing else.
_HUB_ID_DOMAIN = b"pub0sub/hub-id/1\0"


def hub_id_for(peer_id_bytes: bytes) -> int:
    """The hub id that belongs to a peer id (its binary form): the first 8 bytes of a hash of it.

    Noise authenticates a peer's key, and the peer id is the hash of that key, so any
    hub can check that a MESH_HELLO's hub id is the one its sender's key gives: nobody
    can speak for another hub's origin.  Hubs whose data dir predates this keep their
    random id; peers pin it to their peer id on first contact instead (known_peers.py).

    >>> hub_id_for(b"\\x00\\x05hello") == hub_id_for(b"\\x00\\x05hello") != 0
    True
    """
    digest = hashlib.sha256(_HUB_ID_DOMAIN + peer_id_bytes).digest()
    return int.from_bytes(digest[:8], "big") or 1
