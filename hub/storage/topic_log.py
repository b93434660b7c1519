"""One topic's append-only log: segments on disk plus a tail cache in memory.

Offsets are dense: a batch of ``n`` messages takes offsets ``base .. base+n-1``.
Reads serve recent batches from the tail cache (the live and catching-up
readers) and older ones from the segment files, verifying every checksum on
the way: a batch that fails is never served, its offsets come back as a
:class:`Hole` the reader turns into a GAP notice.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import re
import struct
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from wire import FRAME_TYPES, Limits, LogBatch, LogBatchHeaders, Opcode, ProtocolError, check_header
from wire.frames import HEADER, HEADER_SIZE, log_batch_head
from wire.opcodes import LOG_OPCODES

from . import compaction_files
from .batches import Hole, SharedBatch, StoredBatch
from .file_cache import FileCache
from .origin_index import OriginIndex
from .segment import MAX_STORED_BODY, SUFFIX, RecoveryReport, Segment, TornSegmentError

log = logging.getLogger("pub0sub.hub.storage")

_u32 = struct.Struct(">I")
READ_AHEAD = 256 << 10


@dataclass(kw_only=True)
class LogSettings:
    #: Roll to a new segment file past this size.
    segment_bytes: int = 64 << 20
    #: Keep at most this many bytes per topic (0: no size limit).
    retention_bytes: int = 0
    #: Keep messages at least this many seconds (0: no age limit).
    retention_seconds: float = 0.0
    #: Recent batches kept in memory per topic for live and catching-up readers.
    tail_bytes: int = 4 << 20


def topic_directory_name(topic: str) -> str:
    """A file-system-safe, collision-free directory name for ``topic``.

    The readable prefix helps an operator; the hash makes it unique.  The real
    name is in every segment header, so nothing depends on reversing this.
    """
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", topic)[:60]
    digest = hashlib.sha1(topic.encode()).hexdigest()[:12]
    return f"{readable}-{digest}"


class TopicLog:
    def __init__(self, topic: str, directory: Path, settings: LogSettings, files: FileCache) -> None:
        self.topic = topic
        self.directory = directory
        self.settings = settings
        #: where its segments borrow their open descriptors (shared by every log of a store)
        self.files = files
        self.segments: list[Segment] = []
        self.next_offset = 0
        #: producer id -> highest batch sequence stored in this topic
        self.producers: dict[int, int] = {}
        #: origin hub id -> highest origin sequence stored in this topic
        self.origins: dict[int, int] = {}
        #: where each origin's sequences are in this log (the mesh replays from it)
        self.origin_index = OriginIndex()
        self.tail: deque[StoredBatch] = deque()
        self._tail_bytes = 0
        self.messages_appended = 0
        self.bytes_appended = 0
        self.last_timestamp = 0

    # -- opening ---------------------------------------------------------------------

    @classmethod
    def create(cls, topic: str, root: Path, settings: LogSettings, now: int, files: FileCache) -> TopicLog:
        directory = root / topic_directory_name(topic)
        directory.mkdir(parents=True, exist_ok=True)
        topic_log = cls(topic, directory, settings, files)
        topic_log.segments.append(Segment.create(directory, topic, 0, now, files))
        return topic_log

    @classmethod
    def open(
        cls, directory: Path, settings: LogSettings, files: FileCache
    ) -> tuple[TopicLog | None, list[RecoveryReport]]:
        reports: list[RecoveryReport] = []
        segments: list[Segment] = []
        compaction_files.recover(directory)  # a crash mid-compaction: finish or undo it first
        for path in sorted(directory.glob(f"*{SUFFIX}")):
            if path.stat().st_size == 0:
                log.warning("%s: empty segment file (never written to disk before a crash): removed", path,
                            extra={"event": "segment_removed", "reason": "empty"})
                path.unlink()
                continue
            try:
                segment, report = Segment.open(path, files)
            except TornSegmentError as exc:
                if path != max(directory.glob(f"*{SUFFIX}")):
                    raise  # only the newest segment can be mid-creation; anything else is real damage
                log.warning("%s: removed (a crash while the segment was being created)", exc,
                            extra={"event": "segment_removed", "reason": "torn_header"})
                path.unlink()
                continue
            reports.append(report)
            segments.append(segment)
        if not segments:
            return None, reports
        topic_log = cls(segments[0].topic, directory, settings, files)
        topic_log.segments = segments
        topic_log.next_offset = segments[-1].next_offset
        topic_log._rebuild_positions()
        return topic_log, reports

    def _rebuild_positions(self) -> None:
        """Producer and origin high-water marks, from every stored batch."""
        for item in _ScanIterator(self, self.first_offset):
            if isinstance(item, tuple):
                frame = item[0]
                if frame.producer_id:
                    seq = self.producers.get(frame.producer_id, 0)
                    self.producers[frame.producer_id] = max(seq, frame.producer_seq)
                b = frame.batch
                self._note_origin(b.origin, b.origin_seq, b.count, b.base_offset, len(b.records))
                self.last_timestamp = frame.append_ts

    @property
    def first_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else self.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- appending ---------------------------------------------------------------------

    def append(
        self, batch: SharedBatch, *, topics: tuple[str, ...], producer_id: int, producer_seq: int, append_ts: int
    ) -> Segment:
        """Write ``batch`` (its base offset must be ``next_offset``) as one LOG_BATCH."""
        assert batch.base_offset == self.next_offset, (batch.base_offset, self.next_offset)
        head = log_batch_head(append_ts, producer_id, producer_seq, topics)
        opcode = Opcode.LOG_BATCH
        if batch.headers:  # the set's headers block goes between the topics and the batch
            head += batch.headers
            opcode = Opcode.LOG_BATCH_HEADERS
        header = batch.header
        records = batch.records
        crc = zlib.crc32(records, zlib.crc32(header, zlib.crc32(head)))
        body_len = 4 + len(head) + len(header) + len(records)
        pieces = [HEADER.pack(opcode, body_len) + _u32.pack(crc) + head, header, records]
        segment = self._writable_segment(append_ts)
        segment.append(pieces, HEADER_SIZE + body_len, batch.base_offset, batch.count, append_ts)
        self.next_offset = batch.base_offset + batch.count
        if producer_id:
            self.producers[producer_id] = max(self.producers.get(producer_id, 0), producer_seq)
        self._note_origin(batch.origin, batch.origin_seq, batch.count, batch.base_offset, len(records))
        self.messages_appended += batch.count
        self.bytes_appended += len(records)
        self.last_timestamp = append_ts
        self._remember(StoredBatch(batch, topics, append_ts))
        return segment

    def _note_origin(self, origin: int, origin_seq: int, count: int, offset: int, size: int) -> None:
        """A batch of ``origin`` is in the log at ``offset``: its high-water mark and index."""
        last = origin_seq + count - 1
        if last > self.origins.get(origin, 0):
            self.origins[origin] = last
        self.origin_index.note(origin=origin, origin_seq=origin_seq, offset=offset, size=size)

    def _writable_segment(self, now: int) -> Segment:
        segment = self.segments[-1]
        if segment.size >= self.settings.segment_bytes and segment.batches:
            segment = Segment.create(self.directory, self.topic, self.next_offset, now, self.files)
            self.segments.append(segment)
        return segment

    def _remember(self, stored: StoredBatch) -> None:
        self.tail.append(stored)
        self._tail_bytes += len(stored.batch.records)
        while self._tail_bytes > self.settings.tail_bytes and len(self.tail) > 1:
            gone = self.tail.popleft()
            self._tail_bytes -= len(gone.batch.records)

    def forget_tail_below(self, offset: int) -> None:
        """Drop cached batches below ``offset`` (compaction rewrote them: readers go to the files)."""
        tail = self.tail
        while tail and tail[0].base_offset < offset:
            gone = tail.popleft()
            self._tail_bytes -= len(gone.batch.records)

    # -- reading -----------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> list[StoredBatch | Hole]:
        """Batches from ``offset`` on (the first one trimmed to start there), up to ~``max_bytes``."""
        if offset >= self.next_offset:
            return []
        out: list[StoredBatch | Hole] = []
        if offset < self.first_offset:
            out.append(Hole(offset, self.first_offset - offset, "removed by retention"))
            offset = self.first_offset
        tail = self.tail
        if tail and tail[0].base_offset <= offset:
            i = bisect.bisect_right(tail, offset, key=lambda s: s.base_offset) - 1
            size = 0
            while i < len(tail) and size < max_bytes:
                stored = tail[i]
                out.append(_trim(stored, offset))
                size += len(stored.batch.records)
                i += 1
            return out
        size = 0
        for item in _ScanIterator(self, offset):
            if isinstance(item, Hole):
                # The scan starts at an index entry before ``offset``: a hole wholly
                # below it is none of this reader's business; one that straddles it
                # is reported from ``offset`` on.
                end = item.first + item.count
                if end <= offset:
                    continue
                if item.first < offset:
                    item = Hole(offset, end - offset, item.reason)
                out.append(item)
                continue
            frame, _ = item
            if frame.batch.base_offset + frame.batch.count <= offset:
                continue
            b = frame.batch
            stored = StoredBatch(
                SharedBatch(b.topic, b.base_offset, b.timestamp, b.origin, b.origin_seq, b.count, b.records,
                            frame.headers),
                frame.topics,
                frame.append_ts,
            )
            out.append(_trim(stored, offset))
            size += len(b.records)
            if size >= max_bytes:
                break
        return out

    def offset_for_origin_seq(self, origin: int, origin_seq: int) -> int | None:
        """Where to start reading for the batch of ``origin`` holding ``origin_seq`` (None: it has none).

        The offset is a lower bound: the reader skips what comes before.
        """
        offset = self.origin_index.start_offset(origin, origin_seq)
        return None if offset is None else max(offset, self.first_offset)

    def origin_seq_maybe_removed(self, origin: int, origin_seq: int) -> bool:
        """True if retention may have removed the batch of ``origin`` holding ``origin_seq``."""
        return self.origin_index.maybe_cut(origin, origin_seq)

    def offset_for_timestamp(self, timestamp: int) -> int:
        """The first offset appended at or after ``timestamp`` (µs); ``next_offset`` if none."""
        for segment in self.segments:
            if segment.last_timestamp and segment.last_timestamp >= timestamp:
                start = segment.offset_before_timestamp(timestamp)
                for item in _ScanIterator(self, start, segments=[segment]):
                    if isinstance(item, tuple) and item[0].append_ts >= timestamp:
                        return item[0].batch.base_offset
        return self.next_offset

    # -- retention ---------------------------------------------------------------------

    def enforce_retention(self, now_us: int, keep_from: int) -> list[Path]:
        """Delete whole old segments past retention and below ``keep_from``; never the active one."""
        settings = self.settings
        removed: list[Path] = []
        total = self.size_bytes
        while len(self.segments) > 1:
            oldest = self.segments[0]
            too_big = settings.retention_bytes and total > settings.retention_bytes
            too_old = settings.retention_seconds and oldest.last_timestamp < now_us - settings.retention_seconds * 1e6
            if not (too_big or too_old) or oldest.next_offset > keep_from:
                break
            self.segments.pop(0)
            total -= oldest.size
            oldest.close()
            oldest.path.unlink(missing_ok=True)
            removed.append(oldest.path)
        if removed:
            self.origin_index.forget_below(self.first_offset)
        return removed

    def close(self) -> None:
        for segment in self.segments:
            segment.close()


def _trim(stored: StoredBatch, offset: int) -> StoredBatch:
    if stored.base_offset >= offset:
        return stored
    _, rest = stored.batch.split(offset - stored.base_offset)
    return StoredBatch(rest, stored.topics, stored.append_ts)


@dataclass
class _ScanIterator:
    """Walk LOG_BATCH frames from the segment holding ``offset``, verifying checksums.

    Yields ``(LogBatch, position)`` for good batches and :class:`Hole` for a
    corrupted one (its offsets are known once the next good batch is read).
    """

    topic_log: TopicLog
    offset: int
    segments: list[Segment] | None = None
    _limits: Limits = field(default_factory=lambda: Limits(max_body=MAX_STORED_BODY))

    def __iter__(self) -> Iterator[tuple[LogBatch | LogBatchHeaders, int] | Hole]:
        segments = self.segments if self.segments is not None else self.topic_log.segments
        bases = [s.base_offset for s in segments]
        start = max(bisect.bisect_right(bases, self.offset) - 1, 0)
        expected: int | None = None
        for segment in segments[start:]:
            pos = segment.position_for(self.offset) if segment is segments[start] else 0
            size = segment.size
            buf = b""
            buf_start = pos
            pending_hole = False
            while pos < size:
                if pos + HEADER_SIZE > buf_start + len(buf):
                    buf = segment.read(pos, max(READ_AHEAD, HEADER_SIZE))
                    buf_start = pos
                rel = pos - buf_start
                value, length = HEADER.unpack_from(buf, rel)
                end = pos + HEADER_SIZE + length
                if end > buf_start + len(buf):
                    buf = segment.read(pos, max(READ_AHEAD, end - pos))
                    buf_start = pos
                    rel = 0
                body = buf[rel + HEADER_SIZE : rel + HEADER_SIZE + length]
                pos = end
                try:
                    opcode = check_header(value, length, limits=self._limits, accept=LOG_OPCODES)
                    if opcode is Opcode.SEGMENT_HEADER:
                        continue
                    frame = FRAME_TYPES[opcode].decode_body(body)
                except ProtocolError as exc:
                    log.error("%s: batch at position %d not served: %s", segment.path, pos - length - 5, exc,
                              extra={"event": "batch_unreadable", "topic": segment.topic})
                    pending_hole = True
                    continue
                assert isinstance(frame, LogBatch | LogBatchHeaders)
                base = frame.batch.base_offset
                if pending_hole:
                    first = expected if expected is not None else min(self.offset, base)
                    if base > first:
                        yield Hole(first, base - first, "checksum mismatch in the log")
                pending_hole = False
                expected = base + frame.batch.count
                yield frame, pos
            if pending_hole and expected is not None and segment.next_offset > expected:
                yield Hole(expected, segment.next_offset - expected, "checksum mismatch in the log")
