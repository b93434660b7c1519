"""Phase 1 of a compaction pass, in its worker thread: the dirty part into the offset map.

From the checkpoint's ``clean_end`` on, each closed record's key goes into the bounded
:class:`OffsetMap` with its offset, until a new key does not fit: the pass cleans the dirty
prefix up to there (docs/compaction.md, "a pass").  A record whose key comes again later in
that prefix is marked in ``superseded`` (one bit per dirty offset), so phase 2 judges the
prefix without hashing it again.
"""

from __future__ import annotations

import threading

from wire import SegmentHeader
from wire.records import iter_records

from .compaction_read import SegmentReader, SegmentRef
from .offset_map import FULL, OffsetMap

#: Keys phase 1's window holds before it goes into the offset map (about 8 MB at most).
WINDOW_KEYS = 65536


def fill_map(map_bytes: int, superseded: bytearray, refs: list[SegmentRef], start: int,
             stop: threading.Event) -> tuple[int, int, OffsetMap]:  # fmt: skip
    """Phase 1: put the dirty records from ``start`` on into an offset map of at most
    ``map_bytes`` until a new key does not fit (or ``superseded`` has no bit for the offset),
    marking in ``superseded`` each record a later one of its key replaces.  Returns the offset
    where it stopped (the end of the dirty prefix the pass cleans; the active segment's base if
    the whole dirty part fit), the bytes it read, and the map.

    Records go through a :class:`_Window` first, a dict of the last offset of each key since
    it was last emptied: a key updated many times costs one dict store per record and one
    digest per window, not one per record."""
    end = min(start + 8 * len(superseded), refs[-1].end)
    window = _Window(map_bytes, superseded, start, end)
    # The window's per-record work is inline here, not a method: it runs once per dirty record
    # (KV1, one pass: median 0.99 -> 0.86 s, docs/benchmarks.md).
    last, firsts = window.last, window.firsts  # emptied in place by each flush
    bytes_read = 0
    for ref in refs:
        if ref.end <= start:
            continue
        reader = SegmentReader(ref.path, stop)
        for frame in reader:
            if isinstance(frame, SegmentHeader):
                continue
            batch = frame.batch
            offset = batch.base_offset
            if offset + batch.count <= start:
                continue
            for key, _ in iter_records(batch.records):
                if offset >= start:
                    if offset >= end:
                        cut = window.flush(offset)
                        return (offset if cut is None else cut), bytes_read + reader.bytes_read, window.map()
                    before = last.get(key)
                    last[key] = offset
                    if before is not None:
                        rel = before - start
                        superseded[rel >> 3] |= 1 << (rel & 7)
                    else:
                        firsts.append(offset)
                        if len(firsts) >= window.limit and (cut := window.flush(offset + 1)) is not None:
                            return cut, bytes_read + reader.bytes_read, window.map()
                offset += 1
        bytes_read += reader.bytes_read
    cut = window.flush(end)
    return (refs[-1].end if cut is None else cut), bytes_read, window.map()


class _Window:
    """Phase 1's write-combining window in front of the offset map: each key's last offset since
    the last flush, in order of first appearance (a dict keeps it), and those first offsets.

    The map is made at the first flush, sized for the keys in the window plus the records still
    to read (no more can be new keys), at most ``map_bytes``: a dirty part of many updates of
    few keys, read whole in the first window, gets a map of its size."""

    def __init__(self, map_bytes: int, superseded: bytearray, start: int, end: int) -> None:
        self.map_bytes = map_bytes
        self.offsets: OffsetMap | None = None
        self.superseded = superseded
        self.start = start
        self.end = end
        self.last: dict[bytes, int] = {}
        self.firsts: list[int] = []
        self._room()

    def map(self) -> OffsetMap:
        assert self.offsets is not None  # flushed before every return of fill_map
        return self.offsets

    def _room(self) -> None:
        # Flush once the window holds more keys than the map has room for (some may be in it):
        # a flush then finds where the map fills, not much past it.
        m = self.offsets
        room = OffsetMap.capacity_for(self.map_bytes) if m is None else m.capacity - m.entries
        self.limit = min(WINDOW_KEYS, room + 1)

    def _mark(self, offset: int) -> None:
        rel = offset - self.start
        self.superseded[rel >> 3] |= 1 << (rel & 7)

    def flush(self, next_offset: int) -> int | None:
        """Put the window into the map (``next_offset``: the first record not read yet).  Returns
        the first offset of the first key that did not fit (every record before it has its key
        in the map), or None if all did.  Keys already in the map are updated even after that,
        so the map's older record of each is marked."""
        if self.offsets is None:
            keys = len(self.last) + max(0, self.end - next_offset)
            self.offsets = OffsetMap(min(self.map_bytes, OffsetMap.bytes_for(keys)))
        cut: int | None = None
        put, mark, firsts = self.offsets.put, self._mark, self.firsts
        for j, (key, offset) in enumerate(self.last.items()):
            before = put(key, offset)
            if before >= 0:
                mark(before)
            elif before == FULL and cut is None:
                cut = firsts[j]
        self.last.clear()
        firsts.clear()
        self._room()
        return cut
