"""One compaction pass over a topic's closed segments: the file work, run in a worker thread.

Keeps the latest record of every key (Kafka's ``cleanup.policy=compact``) and drops a
tombstone (a record with empty data in a set carrying ``wire.TOMBSTONE_HEADER``) once it
is in the clean part and older than the tombstone retention.  Records keep their offsets: a
surviving run of consecutive records is written as its own LOG_BATCH with its original base
offset and origin sequence, so a compacted segment is an ordinary version 2 segment whose
batches leave gaps between their offsets (docs/compaction.md).

As Kafka's log cleaner: the topic's checkpoint (hub/storage/compaction_checkpoint.py) says
where the clean part ends.  Phase 1 reads the dirty part (from there to the active segment)
into a bounded :class:`OffsetMap` until it is full: the dirty prefix up to ``cut``.  Phase 2
rewrites the clean part and that prefix, judging each record by the map (:class:`_Judge`);
the next pass goes on from ``cut``.  Consecutive segments are merged into one output file
until it passes ``segment_bytes``; a segment with nothing to remove and at least half that
size is left as it is.  Each output ends as a durable ``.swap`` file
(hub/storage/compaction_files.py); the event loop then puts it in place
(hub/storage/compaction_commit.py), then the new checkpoint is written.  Nothing here touches
the loop's state: segments are read through descriptors of their own.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from wire import LogBatch, LogBatchHeaders, RecordBatch, SegmentHeader, is_tombstone_block
from wire.records import encode_records, iter_records

from .compaction_checkpoint import Checkpoint, load_checkpoint
from .compaction_dirty import fill_map
from .compaction_files import SWAP_SUFFIX, TEMP_SUFFIX, range_name
from .compaction_read import Frame, SegmentReader, SegmentRef, pause_if_asked
from .offset_map import OffsetMap
from .segment import INDEX_INTERVAL
from .statefile import sync_directory

#: Default bytes of a pass's offset map (``--compaction-map-bytes``): 2.1 M keys per round.
DEFAULT_MAP_BYTES = 64 << 20


@dataclass(slots=True)
class Written:
    """One output file, durable as ``swap``, replacing ``replaces`` (all of ``[base, end)``)."""

    swap: Path
    topic: str
    base: int
    end: int
    replaces: list[SegmentRef]
    size: int = 0
    batches: int = 0
    next_offset: int = 0
    first_timestamp: int = 0
    last_timestamp: int = 0
    index: list[tuple[int, int, int]] = field(default_factory=list)


@dataclass(slots=True)
class PassResult:
    groups: list[Written] = field(default_factory=list)
    records_read: int = 0
    records_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    #: µs when the earliest surviving tombstone may go (0: none survives)
    tombstone_due: int = 0
    seconds: float = 0.0
    #: bytes read from segment files, both phases
    bytes_read: int = 0
    #: the map: keys it held, and how many it could hold
    map_entries: int = 0
    map_capacity: int = 0
    #: where the dirty part began and ended (the active segment's base), and the checkpoint to
    #: write once every output is in place
    dirty_start: int = 0
    dirty_end: int = 0
    checkpoint: Checkpoint = field(default_factory=Checkpoint)


class _Judge:
    """Phase 2's rule for each record of the part a pass rewrites (docs/compaction.md, "a pass").

    A record below ``cut`` goes if a later record of its key exists: in the dirty prefix, phase 1
    marked it superseded (``superseded``: a bit per offset from ``clean_end``); in the clean
    part, the map (the dirty prefix's keys) holds its key, or it is one of the checkpoint's
    ``held`` records -- unless it is a producer mark, then it stays and is held.  The latest record of a key stays,
    except a tombstone in the clean part (below ``clean_end``: it went through a pass already)
    past its retention.  Records from ``cut`` on are dirty records the map did not reach: kept
    as they are, for the next pass."""

    def __init__(self, offsets: OffsetMap, superseded: bytearray, before: Checkpoint, cut: int,
                 expired_before: int, producers: Mapping[int, int]) -> None:  # fmt: skip
        self.offsets = offsets
        self.superseded = superseded
        self.clean_end = before.clean_end
        self.held_before = frozenset(before.held)
        self.cut = cut
        self.expired_before = expired_before
        self.producers = producers
        self.held: list[int] = []
        #: append times (µs) of the tombstones kept
        self.tombstones: list[int] = []

    def is_mark(self, frame: Frame) -> bool:
        """Does ``frame``'s last record stay whatever its key?  The last record of each producer's
        newest batch in the topic (``producers``: producer -> highest sequence when the pass
        began), for the tombstone retention: the producer table rebuilt from the log on a
        restart then still knows the producer's sequence and answers a retry of that batch as a
        duplicate (Kafka's cleaner keeps producers' last batches for the same reason).  Such a
        record is older than any tombstone of its key, so it is gone before that tombstone."""
        pid = frame.producer_id
        return bool(pid) and frame.append_ts >= self.expired_before and frame.producer_seq >= self.producers.get(pid, 0)

    def survivors(self, frame: Frame) -> list[tuple[int, list[tuple[bytes, bytes]]]]:
        """The runs of consecutive records of ``frame`` that survive: ``(first index, records)``."""
        runs: list[tuple[int, list[tuple[bytes, bytes]]]] = []
        batch = frame.batch
        base, cut = batch.base_offset, self.cut
        if base >= cut:
            return [(0, list(iter_records(batch.records)))]
        mark = base + batch.count - 1 if self.is_mark(frame) else -1
        deletes = is_tombstone_block(frame.headers)
        get, superseded, clean_end = self.offsets.get, self.superseded, self.clean_end
        current: list[tuple[bytes, bytes]] | None = None
        for i, (key, data) in enumerate(iter_records(batch.records)):
            offset = base + i
            if offset >= cut:
                keep = True
            elif (
                superseded[(offset - clean_end) >> 3] & (1 << ((offset - clean_end) & 7))
                if offset >= clean_end
                else get(key) >= 0 or offset in self.held_before
            ):  # a later record of its key is in the part cleaned
                keep = offset == mark
                if keep:
                    self.held.append(offset)
            elif deletes and not data:  # a tombstone, the latest of its key
                keep = offset >= self.clean_end or frame.append_ts >= self.expired_before
                if keep:
                    self.tombstones.append(frame.append_ts)
            else:
                keep = True
            if keep:
                if current is None:
                    current = []
                    runs.append((i, current))
                current.append((key, data))
            else:
                current = None
        return runs


def _encode_run(frame: Frame, first: int, records: list[tuple[bytes, bytes]]) -> bytes:
    b = frame.batch
    count, region = encode_records(records)
    batch = RecordBatch(topic=b.topic, base_offset=b.base_offset + first, timestamp=b.timestamp, origin=b.origin,
                        origin_seq=b.origin_seq + first, count=count, records=region)  # fmt: skip
    if frame.headers:
        return LogBatchHeaders.create(append_ts=frame.append_ts, producer_id=frame.producer_id,
                                      producer_seq=frame.producer_seq, batch=batch, topics=frame.topics,
                                      headers=frame.headers).encode()  # fmt: skip
    return LogBatch.create(append_ts=frame.append_ts, producer_id=frame.producer_id,
                           producer_seq=frame.producer_seq, batch=batch, topics=frame.topics).encode()  # fmt: skip


class _Output:
    """The file a group is written to: the temporary name, then (durable) the swap name."""

    def __init__(self, directory: Path, header: SegmentHeader, first: SegmentRef) -> None:
        self.directory = directory
        self.temp = directory / f"{first.base:020d}{TEMP_SUFFIX}"
        self.fd = os.open(self.temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.written = Written(self.temp, header.topic, first.base, first.end, [])
        self._last_indexed = -INDEX_INTERVAL
        self.write(SegmentHeader(topic=header.topic, base_offset=first.base, created=header.created).encode())

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        self.written.size += len(data)

    def add_segment(self, ref: SegmentRef, frames: list[tuple[bytes, int, int, int]]) -> None:
        """Append one input segment's surviving frames: ``(bytes, base offset, count, append_ts)``."""
        w = self.written
        w.replaces.append(ref)
        w.end = ref.end
        for data, base, count, append_ts in frames:
            if w.size - self._last_indexed >= INDEX_INTERVAL or not w.index:
                w.index.append((base, w.size, append_ts))
                self._last_indexed = w.size
            w.first_timestamp = w.first_timestamp or append_ts
            w.last_timestamp = append_ts
            w.next_offset = base + count
            w.batches += 1
            self.write(data)
        w.next_offset = w.next_offset or w.base

    def finish(self) -> Written:
        """fsync the file, rename it to its swap name (the commit point) and make the name durable."""
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        w = self.written
        pause_if_asked("temp", self.directory)
        w.swap = self.directory / range_name(w.base, w.end, SWAP_SUFFIX)
        os.replace(self.temp, w.swap)
        sync_directory(self.directory)
        return w

    def abandon(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.temp.unlink(missing_ok=True)


def compact(
    directory: Path,
    refs: list[SegmentRef],
    *,
    now_us: int,
    tombstone_us: int,
    segment_bytes: int,
    stop: threading.Event,
    producers: Mapping[int, int],
    map_bytes: int = DEFAULT_MAP_BYTES,
) -> PassResult:
    """Blocking: one pass over ``refs`` (closed segments, oldest first).  Returns the durable
    swap files for the loop to put in place, oldest first (their order matters:
    docs/compaction.md, "crash safety"), and the checkpoint to write after them.
    ``producers``: the topic's producer table when the pass began (producer -> highest
    sequence), see :meth:`_Judge.is_mark`."""
    started = time.perf_counter()
    result = PassResult()
    saved = load_checkpoint(directory)
    active = refs[-1].end
    # Clamped: retention may have removed the start of the log; a checkpoint past the closed
    # segments (a log started again) is no promise about them.
    clean_end = min(max(saved.clean_end, refs[0].base), active)
    before = Checkpoint(clean_end, tuple(o for o in saved.held if o < clean_end))
    # One bit per dirty offset the pass may clean; at most map_bytes / 8 bytes (the prefix ends there too).
    superseded = bytearray((min(active - clean_end, map_bytes) + 7) // 8)
    cut, result.bytes_read, offsets = fill_map(map_bytes, superseded, refs, clean_end, stop)
    expired_before = now_us - tombstone_us
    judge = _Judge(offsets, superseded, before, cut, expired_before, producers)
    output: _Output | None = None
    group_removed = 0
    try:
        for ref in refs:
            if ref.base >= cut:
                break  # dirty, not reached by the map: the next pass
            header, frames, removed, size = _rewrite(ref, judge, stop, result)
            result.records_removed += removed
            result.bytes_before += size
            if output is None and not removed and size >= segment_bytes // 2:
                result.bytes_after += size
                continue  # nothing to gain: left as it is
            if output is None:
                output, group_removed = _Output(directory, header, ref), 0
            output.add_segment(ref, frames)
            group_removed += removed
            if output.written.size >= segment_bytes:
                result.bytes_after += output.written.size
                result.groups.append(output.finish())
                output = None
        if output is not None:
            result.bytes_after += output.written.size
            if len(output.written.replaces) == 1 and not group_removed:
                output.abandon()  # one small segment with nothing removed: rewriting it changes nothing
            else:
                result.groups.append(output.finish())
            output = None
    finally:
        if output is not None:
            output.abandon()
    result.tombstone_due = min(judge.tombstones, default=-tombstone_us) + tombstone_us
    result.map_entries, result.map_capacity = offsets.entries, offsets.capacity
    result.dirty_start, result.dirty_end = clean_end, active
    result.checkpoint = Checkpoint(cut, tuple(sorted(judge.held)))
    result.seconds = time.perf_counter() - started
    return result


def _rewrite(
    ref: SegmentRef, judge: _Judge, stop: threading.Event, result: PassResult
) -> tuple[SegmentHeader, list[tuple[bytes, int, int, int]], int, int]:
    """Phase 2 for one segment: its header, surviving frames, records removed, and its size."""
    header: SegmentHeader | None = None
    frames: list[tuple[bytes, int, int, int]] = []
    removed = 0
    reader = SegmentReader(ref.path, stop)
    for frame in reader:
        if isinstance(frame, SegmentHeader):
            header = frame
            continue
        runs = judge.survivors(frame)
        kept = sum(len(records) for _, records in runs)
        removed += frame.batch.count - kept
        result.records_read += frame.batch.count
        for first, records in runs:
            frames.append(
                (_encode_run(frame, first, records), frame.batch.base_offset + first, len(records), frame.append_ts)
            )
    result.bytes_read += reader.bytes_read
    assert header is not None, ref.path
    return header, frames, removed, os.stat(ref.path).st_size
