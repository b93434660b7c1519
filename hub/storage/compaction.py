"""One compaction pass over a topic's closed segments: the file work, run in a worker thread.

Keeps the latest record of every key (Kafka's ``cleanup.policy=compact``) and drops a
tombstone (a record with empty data in a set carrying ``wire.TOMBSTONE_HEADER``) once it
is the latest of its key and older than the tombstone retention.  Records keep their
offsets: a surviving run of consecutive records is written as its own LOG_BATCH with its
original base offset and origin sequence, so a compacted segment is an ordinary version 2
segment whose batches leave gaps between their offsets (docs/compaction.md).

The pass reads the closed segments twice: once to find the latest offset of every key,
once to write what survives.  Consecutive segments are merged into one output file until
it passes ``segment_bytes``; a segment with nothing to remove and at least half that size
is left as it is.  Each output ends as a durable ``.swap`` file (hub/storage/compaction_files.py);
the event loop then puts it in place (hub/storage/compaction_commit.py).  Nothing here
touches the loop's state: segments are read through descriptors of their own.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from wire import (
    FRAME_TYPES,
    Limits,
    LogBatch,
    LogBatchHeaders,
    ProtocolError,
    RecordBatch,
    SegmentHeader,
    check_header,
    is_tombstone_block,
)
from wire.frames import HEADER, HEADER_SIZE
from wire.opcodes import LOG_OPCODES
from wire.records import encode_records, iter_records

from .compaction_files import SWAP_SUFFIX, TEMP_SUFFIX, range_name
from .segment import INDEX_INTERVAL, MAX_STORED_BODY, READ_CHUNK
from .statefile import sync_directory

log = logging.getLogger("pub0sub.hub.storage")

#: Test hook (tests/test_compaction_crash.py): the name of a step (``temp``, ``swap``,
#: ``unlinked``) at which compaction stops for good after writing ``DATA/compaction-paused-STEP``,
#: so a test can SIGKILL the hub in exactly that state.
PAUSE_ENV = "PUB0SUB_COMPACTION_PAUSE"


class CompactionStopped(Exception):
    """The hub is stopping: the pass was abandoned (its temporary file removed)."""


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A closed segment as the loop saw it when the pass began."""

    path: Path
    base: int
    #: the base offset of the segment after it: the end of the offsets it covers
    end: int


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


Frame = LogBatch | LogBatchHeaders


def read_frames(path: Path, stop: threading.Event | None = None) -> Iterator[SegmentHeader | Frame]:
    """Every frame of a closed segment, checksums verified (ProtocolError on damage)."""
    limits = Limits(max_body=MAX_STORED_BODY)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        buf = b""
        start = pos = 0
        while pos < size:
            if stop is not None and stop.is_set():
                raise CompactionStopped
            if pos + HEADER_SIZE > start + len(buf):
                buf, start = os.pread(fd, READ_CHUNK, pos), pos
            value, length = HEADER.unpack_from(buf, pos - start)
            end = pos + HEADER_SIZE + length
            if end > start + len(buf):
                buf, start = os.pread(fd, max(READ_CHUNK, end - pos), pos), pos
            if end > start + len(buf):
                raise ProtocolError(f"{path}: frame at {pos} runs past the end of the file")
            opcode = check_header(value, length, limits=limits, accept=LOG_OPCODES)
            rel = pos - start
            frame = FRAME_TYPES[opcode].decode_body(buf[rel + HEADER_SIZE : rel + HEADER_SIZE + length])
            assert isinstance(frame, SegmentHeader | LogBatch | LogBatchHeaders)  # check_header accepted only these
            yield frame
            pos = end
    finally:
        os.close(fd)


class _Latest:
    """Phase 1: the offset of each key's latest record, and which of them are tombstones; and
    each producer's newest batch (its sequence, last offset and append time)."""

    def __init__(self) -> None:
        self.offsets: dict[bytes, int] = {}
        #: key -> append time (µs) of the key's latest record, when that is a tombstone
        self.tombstones: dict[bytes, int] = {}
        self.records = 0
        #: producer id -> (producer_seq, last offset, append_ts) of its newest batch here
        self.producers: dict[int, tuple[int, int, int]] = {}

    def producer_marks(self, newest: Mapping[int, int] | None, expired_before: int) -> set[int]:
        """Offsets kept whatever their key: the last record of each producer's newest batch, so
        the producer table rebuilt from the log on a restart still knows the producer's
        sequence and answers a retry of that batch as a duplicate (Kafka's cleaner keeps
        producers' last batches for the same reason).  Only where these segments hold the
        producer's newest batch (``newest``: producer -> highest sequence of the whole topic
        when the pass began; None: assume they do), and for the tombstone retention: a record
        kept so is older than any tombstone of its key, so it is gone before that tombstone."""
        marks = set()
        for producer, (seq, last, append_ts) in self.producers.items():
            if append_ts >= expired_before and (newest is None or seq >= newest.get(producer, 0)):
                marks.add(last)
        return marks

    def note(self, frame: Frame) -> None:
        batch = frame.batch
        if frame.producer_id:
            known = self.producers.get(frame.producer_id)
            if known is None or frame.producer_seq >= known[0]:
                last = batch.base_offset + batch.count - 1
                self.producers[frame.producer_id] = (frame.producer_seq, last, frame.append_ts)
        offsets = self.offsets
        tombstones = self.tombstones
        deletes = is_tombstone_block(frame.headers)
        offset = batch.base_offset
        for key, data in iter_records(batch.records):
            offsets[key] = offset
            if deletes and not data:
                tombstones[key] = frame.append_ts
            elif tombstones:
                tombstones.pop(key, None)
            offset += 1
        self.records += batch.count


def _survivors(
    frame: Frame, latest: _Latest, expired_before: int, marks: set[int]
) -> list[tuple[int, list[tuple[bytes, bytes]]]]:
    """The runs of consecutive records of ``frame`` that survive: ``(first index, records)``."""
    runs: list[tuple[int, list[tuple[bytes, bytes]]]] = []
    offsets = latest.offsets
    tombstones = latest.tombstones
    offset = frame.batch.base_offset
    current: list[tuple[bytes, bytes]] | None = None
    for i, (key, data) in enumerate(iter_records(frame.batch.records)):
        keep = (offsets[key] == offset + i and not (key in tombstones and tombstones[key] < expired_before)) or (
            offset + i in marks
        )
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
    producers: Mapping[int, int] | None = None,
) -> PassResult:
    """Blocking: one pass over ``refs`` (closed segments, oldest first).  Returns the durable
    swap files for the loop to put in place, oldest first (their order matters:
    docs/compaction.md, "crash safety").  ``producers``: the topic's producer table when the
    pass began (producer -> highest sequence), see :meth:`_Latest.producer_marks`."""
    started = time.perf_counter()
    result = PassResult()
    latest = _Latest()
    for ref in refs:
        for frame in read_frames(ref.path, stop):
            if not isinstance(frame, SegmentHeader):
                latest.note(frame)
    result.records_read = latest.records
    expired_before = now_us - tombstone_us
    marks = latest.producer_marks(producers, expired_before)
    output: _Output | None = None
    group_removed = 0
    try:
        for ref in refs:
            header, frames, removed, size = _rewrite(ref, latest, expired_before, marks, stop)
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
    due = [ts + tombstone_us for ts in latest.tombstones.values() if ts >= expired_before]
    result.tombstone_due = min(due, default=0)
    result.seconds = time.perf_counter() - started
    return result


def _rewrite(
    ref: SegmentRef, latest: _Latest, expired_before: int, marks: set[int], stop: threading.Event
) -> tuple[SegmentHeader, list[tuple[bytes, int, int, int]], int, int]:
    """Phase 2 for one segment: its header, surviving frames, records removed, and its size."""
    header: SegmentHeader | None = None
    frames: list[tuple[bytes, int, int, int]] = []
    removed = 0
    for frame in read_frames(ref.path, stop):
        if isinstance(frame, SegmentHeader):
            header = frame
            continue
        runs = _survivors(frame, latest, expired_before, marks)
        kept = sum(len(records) for _, records in runs)
        removed += frame.batch.count - kept
        for first, records in runs:
            frames.append(
                (_encode_run(frame, first, records), frame.batch.base_offset + first, len(records), frame.append_ts)
            )
    assert header is not None, ref.path
    return header, frames, removed, os.stat(ref.path).st_size


def pause_if_asked(step: str, directory: Path) -> None:
    """The crash tests' hook (:data:`PAUSE_ENV`): stop here, saying so, until the hub is killed."""
    if os.environ.get(PAUSE_ENV) != step:
        return
    data_dir = directory.parent.parent
    (data_dir / f"compaction-paused-{step}").write_text(f"{directory}\n")
    log.warning("compaction paused at step %r (test hook %s)", step, PAUSE_ENV, extra={"event": "compaction_paused"})
    deadline = time.monotonic() + 600  # bounded: a test that forgot to kill the hub does not hang it forever
    while time.monotonic() < deadline:
        time.sleep(0.05)
