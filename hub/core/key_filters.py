"""Key filters: a subscription that delivers only some record keys (Ray's key subscriptions).

A subscription's filter (``wire.KeyFilter``) is a set of entries -- exact keys, key prefixes,
and "every key" (``all``) -- changed by KEY_FILTER commands: ADD and REMOVE touch the entries
they name (the last command about an entry wins), SET replaces them all (``KeyFilter.apply``).
The hub that delivers applies it: a filtered-out record never leaves the hub, and for a
subscription that keeps a position (durable, group) it counts as done, so the position moves
past it (docs/protocol.md, KEY_FILTER).

A stored batch's records have consecutive offsets, and so must a delivered one: a filter cuts
a batch into the runs of records it selects (:meth:`KeyMatcher.runs`), each delivered as its
own batch.  The common case -- a few keys, records of one size -- finds its runs with
``bytes.find`` over the region (C speed), not a Python step per record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from wire import KeyFilter
from wire.records import RECORD_HEADER, uniform_record_size

from ..storage.batches import SharedBatch

#: Above this many exact keys and prefixes a batch is matched record by record (a set lookup
#: each) instead of one ``bytes.find`` pass per entry.
FIND_ENTRIES = 8


def matcher_of(key_filter: KeyFilter | None) -> KeyMatcher | None:
    """What delivery checks: None when every key is selected (the unfiltered fast path)."""
    if key_filter is None or key_filter.all:
        return None
    return KeyMatcher(frozenset(key_filter.keys), tuple(sorted(set(key_filter.prefixes))))


@dataclass(frozen=True, slots=True)
class KeyMatcher:
    keys: frozenset[bytes]
    prefixes: tuple[bytes, ...]

    def matches(self, key: bytes) -> bool:
        return key in self.keys or key.startswith(self.prefixes)

    def runs(self, records: bytes) -> list[tuple[int, int, int, int]]:
        """``(first record, count, first byte, end byte)`` of each run of selected records."""
        size = uniform_record_size(records)
        if size:
            return _runs_of_indices(self._uniform_hits(records, size), size)
        return list(self._varied_runs(records))

    def _uniform_hits(self, records: bytes, size: int) -> list[int]:
        """Indices of the selected records of a region whose records all have one header."""
        head = records[:6]
        key_len = RECORD_HEADER.unpack_from(records, 0)[0]
        count = len(records) // size
        if len(self.keys) + len(self.prefixes) > FIND_ENTRIES:
            keys = [records[p + 6 : p + 6 + key_len] for p in range(0, len(records), size)]
            return [i for i, k in enumerate(keys) if self.matches(k)]
        hits: set[int] = set()
        # Every record starts with the same 6 header bytes, so header + key (or + prefix) can only
        # occur where a record starts -- or straddling data; the alignment check throws those out.
        needles = [head + k for k in self.keys if len(k) == key_len]
        needles += [head + p for p in self.prefixes if len(p) <= key_len]
        for needle in needles:
            if len(needle) == 6:  # the empty key, or an empty prefix: every record of this region
                return list(range(count))
            pos = records.find(needle)
            while pos >= 0:
                if pos % size == 0:
                    hits.add(pos // size)
                pos = records.find(needle, pos + 1)
        return sorted(hits)

    def _varied_runs(self, records: bytes) -> Iterator[tuple[int, int, int, int]]:
        unpack = RECORD_HEADER.unpack_from
        pos = index = 0
        run: list[int] | None = None  # [first record, count, first byte]
        end = len(records)
        while pos < end:
            key_len, data_len = unpack(records, pos)
            stop = pos + 6 + key_len + data_len
            if self.matches(records[pos + 6 : pos + 6 + key_len]):
                if run is None:
                    run = [index, 0, pos]
                run[1] += 1
            elif run is not None:
                yield run[0], run[1], run[2], pos
                run = None
            pos = stop
            index += 1
        if run is not None:
            yield run[0], run[1], run[2], end


def _runs_of_indices(hits: list[int], size: int) -> list[tuple[int, int, int, int]]:
    runs: list[tuple[int, int, int, int]] = []
    for i in hits:
        if runs and runs[-1][0] + runs[-1][1] == i:
            first, n, _, _ = runs[-1]
            runs[-1] = (first, n + 1, first * size, (i + 1) * size)
        else:
            runs.append((i, 1, i * size, (i + 1) * size))
    return runs


def run_batch(batch: SharedBatch, first: int, count: int, start: int, stop: int) -> SharedBatch:
    """Records ``first .. first+count-1`` of ``batch`` (bytes ``start:stop`` of its region) as a batch."""
    if first == 0 and count == batch.count:
        return batch
    return SharedBatch(batch.topic, batch.base_offset + first, batch.timestamp, batch.origin,
                       batch.origin_seq + first, count, batch.records[start:stop], batch.headers)  # fmt: skip


def first_selected(
    matcher: KeyMatcher, batch: SharedBatch, ack: Callable[[int, int], None]
) -> SharedBatch | None:
    """The first run of ``batch`` the filter selects; the records before it are settled with
    ``ack(first, last)`` (all of them when it selects none: then None)."""
    runs = matcher.runs(batch.records)
    if not runs:
        ack(batch.base_offset, batch.base_offset + batch.count - 1)
        return None
    first, count, start, stop = runs[0]
    if first:
        ack(batch.base_offset, batch.base_offset + first - 1)
    return run_batch(batch, first, count, start, stop)


def segments(matcher: KeyMatcher, batch: SharedBatch) -> Iterator[tuple[SharedBatch | None, int]]:
    """The batch cut into ``(selected run, end offset)`` and ``(None, end offset)`` for what it skips.

    In offset order, covering the whole batch: a reader keeping a position acknowledges the
    skipped stretches and delivers the runs.
    """
    at = 0
    for first, count, start, stop in matcher.runs(batch.records):
        if first > at:
            yield None, batch.base_offset + first
        yield run_batch(batch, first, count, start, stop), batch.base_offset + first + count
        at = first + count
    if at < batch.count:
        yield None, batch.base_offset + batch.count

