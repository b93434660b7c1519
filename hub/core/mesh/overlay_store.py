"""What the overlay (mesh v3) reads and writes in the hub: its topic logs, and one small state file.

* Sets delivered to this hub go through the same store-and-route path as v2 forwards
  (``MeshLink.on_forward``): stored once in each wanted topic's log with their origin,
  origin sequence and timestamp, and routed to local subscribers.
* Where each (origin, topic) stream stands is read back from the logs (each topic log
  keeps the last origin sequence per origin), so a restarted hub resumes without asking
  for what it stored.  A hub without logs keeps it in memory.
* This hub's own sets are read back from its logs to answer REPAIR past the overlay's
  memory of recent sets.
* Stream starts (JOINED) are kept in ``DATA/overlay-since.json``, the starts this hub told
  its destinations in ``DATA/overlay-joins.json`` (hub/core/overlay/joins.py), and the streams'
  floors (gaps open, starts awaited: Streams.floors) in ``DATA/overlay-floors.json``, written
  atomically.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import wire

from ...storage.batches import Hole
from ..events import ev

if TYPE_CHECKING:
    from ...storage.store import LogStore
    from ..mesh_link import MeshLink

log = logging.getLogger("hub.mesh")

SINCE_FILE = "overlay-since.json"
JOINS_FILE = "overlay-joins.json"
FLOORS_FILE = "overlay-floors.json"
#: Bytes asked of a topic log per read while answering a REPAIR.
READ_BYTES = 256 << 10


class OverlayLogStore:
    def __init__(self, mesh_link: MeshLink, store: LogStore | None, *, hub_id: int, data_dir: Path | None) -> None:
        self.mesh_link = mesh_link
        self.store = store
        self.hub_id = hub_id
        self._since_path = None if data_dir is None else Path(data_dir) / SINCE_FILE
        self._joins_path = None if data_dir is None else Path(data_dir) / JOINS_FILE
        self._floors_path = None if data_dir is None else Path(data_dir) / FLOORS_FILE
        # Without them a gap open at a crash is not found again once v2 stores past it.
        self.floors = _load_starts(self._floors_path, "overlay stream floors begin afresh")
        if mesh_link is not None:  # (a test's origin side has no hub behind it)
            mesh_link.resume_floors = self.floors
        #: (origin, topic) -> last stored, for a hub without logs
        self._positions: dict[tuple[int, str], int] = {}
        self.keeps_logs = store is not None

    # -- delivered sets --------------------------------------------------------------------

    def deliver(self, origin: int, sets: list[wire.ForwardSet]) -> int | None:
        last = self.mesh_link.on_forward(origin, sets, None)
        if self.store is None:
            for fset in sets:
                end = fset.origin_seq + fset.messages.count - 1
                for topic in fset.messages.topics:
                    self._positions[(origin, topic)] = end
        full = sets[-1].origin_seq + sets[-1].messages.count - 1
        return None if last is None or last >= full else last

    def stored_position(self, origin: int, topic: str) -> int:
        if self.store is None:
            return self._positions.get((origin, topic), 0)
        topic_log = self.store.logs.get(topic)
        return 0 if topic_log is None else topic_log.origins.get(origin, 0)

    # -- stream starts ---------------------------------------------------------------------

    def load_since(self) -> dict[tuple[int, str], int]:
        # Without it, streams start where their origins' next sets do (counted as assumed
        # starts): nothing stored is lost, sets published while this hub was down may be.
        return _load_starts(self._since_path, "overlay stream starts begin afresh")

    def save_since(self, since: Mapping[tuple[int, str], int]) -> None:
        _save_starts(self._since_path, since)

    def load_joins(self) -> dict[tuple[int, str], int]:
        # Without it, a destination that holds no start of its own takes this hub's position now.
        return _load_starts(self._joins_path, "starts told to destinations begin afresh")

    def save_joins(self, joins: Mapping[tuple[int, str], int]) -> None:
        _save_starts(self._joins_path, joins)

    def save_floors(self, floors: Mapping[tuple[int, str], int]) -> None:
        self.floors = self.mesh_link.resume_floors = dict(floors)
        _save_starts(self._floors_path, self.floors)

    # -- this hub's own sets (OwnLog) ----------------------------------------------------------

    def own_last(self, topic: str) -> int:
        topic_log = None if self.store is None else self.store.logs.get(topic)
        return 0 if topic_log is None else topic_log.origins.get(self.hub_id, 0)

    def own_topics(self) -> list[str]:
        if self.store is None:
            return []
        return [topic for topic, lg in list(self.store.logs.items()) if self.hub_id in lg.origins]

    def own_batches(self, topic: str, after: int, upto: int, on_hole: Callable[[int], None]) -> Iterator[
            tuple[int, int, int, bytes, bytes]]:  # fmt: skip
        topic_log = None if self.store is None else self.store.logs.get(topic)  # never asked without logs
        if topic_log is None:
            return
        origin = self.hub_id
        offset = topic_log.offset_for_origin_seq(origin, after + 1)
        if offset is None:
            return
        end = topic_log.next_offset
        while offset < end:
            items = topic_log.read(offset, READ_BYTES)
            if not items:
                return
            for item in items:
                if isinstance(item, Hole):
                    on_hole(item.count)  # a stretch of the log gone (retention, corruption)
                    offset = item.first + item.count
                    continue
                b = item.batch
                offset = b.base_offset + b.count
                if b.origin != origin or b.origin_seq + b.count - 1 <= after:
                    continue
                if b.origin_seq > upto:
                    return
                yield b.origin_seq, b.timestamp, b.count, b.records, b.headers


def _load_starts(path: Path | None, afresh: str) -> dict[tuple[int, str], int]:
    """``(hub, key) -> sequence`` rows of a state file (none, or unreadable: empty, said once)."""
    if path is None or not path.exists():
        return {}
    try:
        rows = json.loads(path.read_text())
        return {(int(hub), str(key)): int(seq) for hub, key, seq in rows}
    except (OSError, ValueError, TypeError) as exc:
        log.warning("%s unreadable (%s): %s", path, exc, afresh, extra=ev("overlay_state_unreadable", reason=str(exc)))
        return {}


def _save_starts(path: Path | None, starts: Mapping[tuple[int, str], int]) -> None:
    if path is None:
        return
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(sorted([h, k, s] for (h, k), s in starts.items())))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot save %s: %s", path, exc, extra=ev("overlay_state_not_saved", reason=str(exc)))
