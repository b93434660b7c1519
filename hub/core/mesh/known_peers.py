"""The peers this hub has linked with before, kept in the data dir across restarts.

A v2 peer's MESH_HELLO gives, per origin, the last sequence it stored.  For
this hub's own origin, position 0 alone cannot tell "a new hub" (it gets live
forwards only, not this hub's history) from "a hub that was linked and
interested while this hub published, but stored nothing of it yet" -- it was
paused, or cut off, while the forwards were lost with a crashed window.  The
second must get everything it missed, or acknowledged messages never reach it.

It also pins each peer's hub id (its origin id, from MESH_HELLO) to its peer
id, the key Noise authenticated.  A hub id derived from the peer id
(``identity.hub_id_for``) proves itself; a random one from an older data dir
cannot, and is trusted on first contact: another peer claiming it later is
refused (``Mesh.hello_refusal``).

So the hub records, the first time a peer links, where its own origin stood
then (``since``).  A known peer is replayed everything after
``max(position, since)`` that it wants; a peer never seen is recorded and gets
live forwards only.  The record also bounds what a peer can ask for: a
MESH_HELLO claiming a low position does not reach history from before the peer
first linked.

The file is tiny and changes only when a new peer links: each change is
written whole, fsynced and renamed into place.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from ...storage.statefile import write_json
from ..events import ev

log = logging.getLogger("hub.mesh.known_peers")

FILE_NAME = "mesh_peers.json"


@dataclass(frozen=True, slots=True)
class KnownPeer:
    #: This hub's last origin sequence when the peer first linked: its history starts after it.
    since: int
    #: The hub id the peer gave in its first MESH_HELLO.
    hub_id: int


class KnownPeers:
    """``peer id -> KnownPeer``, in memory and (with a data dir) on disk."""

    def __init__(self, data_dir: Path | None) -> None:
        self.path = None if data_dir is None else Path(data_dir) / FILE_NAME
        self._peers: dict[str, KnownPeer] = {}
        self._by_hub_id: dict[int, str] = {}
        if self.path is not None and self.path.exists():
            self._load(self.path)

    def _load(self, path: Path) -> None:
        try:
            document = json.loads(path.read_text())
            for peer_id, entry in document["peers"].items():
                self._remember(peer_id, KnownPeer(since=int(entry["since"]), hub_id=int(entry["hub_id"], 16)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            # Without the record every peer counts as new: live forwards only until it stores
            # something of ours -- a peer that missed forwards may miss them for good.  Say so.
            log.error("%s unreadable (%s): every peer is treated as new (no replay from position 0)", path, exc,
                      extra=ev("known_peers_unreadable", reason=str(exc)))
            self._peers.clear()
            self._by_hub_id.clear()

    def _remember(self, peer_id: str, peer: KnownPeer) -> None:
        self._peers[peer_id] = peer
        self._by_hub_id[peer.hub_id] = peer_id

    def get(self, peer_id: str) -> KnownPeer | None:
        return self._peers.get(peer_id)

    def peer_with_hub_id(self, hub_id: int) -> str | None:
        """The peer id that first spoke for ``hub_id``, if any."""
        return self._by_hub_id.get(hub_id)

    def add(self, peer_id: str, *, since: int, hub_id: int) -> KnownPeer:
        old = self._peers.get(peer_id)
        if old is not None and self._by_hub_id.get(old.hub_id) == peer_id:
            del self._by_hub_id[old.hub_id]
        peer = KnownPeer(since=since, hub_id=hub_id)
        self._remember(peer_id, peer)
        self._save()
        return peer

    def __len__(self) -> int:
        return len(self._peers)

    def _save(self) -> None:
        if self.path is None:
            return
        document = {"peers": {pid: {"since": p.since, "hub_id": f"{p.hub_id:016x}"} for pid, p in self._peers.items()}}
        try:
            write_json(self.path, document)
        except OSError as exc:
            log.error("cannot save %s: %s (the peer is known until this hub restarts)", self.path, exc,
                      extra=ev("known_peers_save_failed", reason=str(exc)))
