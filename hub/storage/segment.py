"""One segment file: a SEGMENT_HEADER frame, then LOG_BATCH frames.

Appends are one ``os.writev`` per batch.  Opening an existing segment walks
every frame with the same :class:`~wire.FrameDecoder` the hub uses on the
network, so every stored checksum is verified before anything is served.
A torn tail (a frame cut short by a crash) is truncated and reported; a batch
whose checksum fails is kept out of service, recorded as a bad range, and
reported loudly -- the topic is never silently shortened past it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from wire import (
    FRAME_TYPES,
    SEGMENT_VERSIONS,
    Limits,
    LogBatch,
    LogBatchHeaders,
    ProtocolError,
    SegmentHeader,
    check_header,
)
from wire.frames import HEADER, HEADER_SIZE
from wire.opcodes import LOG_OPCODES

from .file_cache import FileCache

log = logging.getLogger("pub0sub.hub.storage")

SUFFIX = ".log"
#: A sparse index entry every this many bytes: seeking reads at most this much extra.
INDEX_INTERVAL = 64 << 10
READ_CHUNK = 1 << 20
#: Largest LOG_BATCH body a segment may hold (a client batch plus headers).
MAX_STORED_BODY = 64 << 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SUFFIX}"


class TornSegmentError(OSError):
    """A segment file that does not even hold its whole header: a crash while creating it."""


@dataclass
class BadRange:
    """A stretch of a segment that failed its checksum: never served."""

    position: int
    end: int
    reason: str


@dataclass
class RecoveryReport:
    path: Path
    batches: int = 0
    truncated_bytes: int = 0
    bad_ranges: list[BadRange] = field(default_factory=list)
    corrupt_copy: Path | None = None


class Segment:
    """Its descriptor is borrowed from a :class:`FileCache`: closed when others need room,
    reopened on the next read or write."""

    def __init__(self, path: Path, topic: str, base_offset: int, files: FileCache, size: int) -> None:
        self.path = path
        self.topic = topic
        self.base_offset = base_offset
        self.files = files
        self.size = size
        #: bytes known to be on stable storage (fsync'ed)
        self.synced = size
        self.next_offset = base_offset
        self.first_timestamp = 0
        self.last_timestamp = 0
        self.batches = 0
        #: sparse (first offset, file position, append timestamp) entries, ascending
        self.index: list[tuple[int, int, int]] = []
        self.bad_ranges: list[BadRange] = []
        self._last_indexed = -INDEX_INTERVAL

    @property
    def fd(self) -> int:
        return self.files.fd(self)

    @staticmethod
    def reopen_flags() -> int:
        return os.O_RDWR | os.O_APPEND

    # -- creating and opening ---------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, topic: str, base_offset: int, created: int, files: FileCache) -> Segment:
        path = directory / segment_name(base_offset)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            header = SegmentHeader(topic=topic, base_offset=base_offset, created=created).encode()
            os.write(fd, header)
        except BaseException:
            os.close(fd)
            raise
        segment = cls(path, topic, base_offset, files, len(header))
        files.adopt(segment, fd)
        segment.synced = 0
        return segment

    @classmethod
    def open(cls, path: Path, files: FileCache) -> tuple[Segment, RecoveryReport]:
        """Open and verify an existing segment, repairing a torn tail."""
        report = RecoveryReport(path)
        fd = os.open(path, cls.reopen_flags())
        try:
            segment = cls._recover(path, fd, report, files)
        except BaseException:
            os.close(fd)
            raise
        files.adopt(segment, fd)
        return segment, report

    @classmethod
    def _recover(cls, path: Path, fd: int, report: RecoveryReport, files: FileCache) -> Segment:
        size = os.fstat(fd).st_size
        reader = _ChunkReader(fd)
        limits = Limits(max_body=MAX_STORED_BODY)
        segment: Segment | None = None
        pos = 0
        while pos < size:
            header = reader.get(pos, HEADER_SIZE)
            if len(header) < HEADER_SIZE:
                break  # torn tail: part of a header
            value, length = HEADER.unpack(header)
            try:
                opcode = check_header(value, length, limits=limits, accept=LOG_OPCODES)
            except ProtocolError as exc:
                cls._quarantine_rest(path, fd, pos, size, exc.reason, report)
                size = pos
                break
            end = pos + HEADER_SIZE + length
            if end > size:
                break  # torn tail: the last frame was cut short
            try:
                frame = FRAME_TYPES[opcode].decode_body(reader.get(pos + HEADER_SIZE, length))
            except ProtocolError as exc:
                if segment is None:
                    raise TornSegmentError(f"{path}: unreadable segment header: {exc.reason}") from None
                if end == size:
                    break  # a last frame that fails: an incomplete write, treated as torn
                # The frame boundary is intact: keep the bytes, never serve them.
                bad = BadRange(pos, end, exc.reason)
                segment.bad_ranges.append(bad)
                report.bad_ranges.append(bad)
                log.error(
                    "%s: CORRUPTED batch at positions %d..%d (%s); it is never served, "
                    "readers get a GAP notice for it",
                    path, pos, end, exc.reason, extra={"event": "segment_corrupted", "reason": "bad_batch"},
                )
                pos = end
                continue
            if segment is None:
                if not isinstance(frame, SegmentHeader):
                    raise OSError(f"{path}: does not start with a SEGMENT_HEADER")
                if frame.version not in SEGMENT_VERSIONS:
                    # A newer hub's format: refused whole, never half read (docs/protocol.md §11).
                    raise OSError(f"{path}: segment format version {frame.version}; this hub reads "
                                  f"{', '.join(map(str, sorted(SEGMENT_VERSIONS)))}")
                segment = cls(path, frame.topic, frame.base_offset, files, 0)
            elif isinstance(frame, LogBatch | LogBatchHeaders):
                segment._note_batch(frame, pos)
                report.batches += 1
            pos = end
        if segment is None:
            raise TornSegmentError(f"{path}: no complete segment header ({size} bytes)")
        if pos < size:
            report.truncated_bytes = size - pos
            log.warning(
                "%s: torn tail: truncated %d bytes after position %d (an incomplete write from a crash)",
                path, size - pos, pos, extra={"event": "segment_repaired", "reason": "torn_tail"},
            )
        if pos < os.fstat(fd).st_size:
            os.ftruncate(fd, pos)
        segment.size = pos
        segment.synced = pos
        return segment

    @staticmethod
    def _quarantine_rest(path: Path, fd: int, pos: int, size: int, reason: str, report: RecoveryReport) -> None:
        """Unparseable bytes: keep a copy beside the segment, then cut them off, loudly."""
        copy = path.with_name(f"{path.name}.corrupt-{pos}")
        with open(copy, "wb") as out:
            out.write(os.pread(fd, size - pos, pos))
        os.ftruncate(fd, pos)
        report.corrupt_copy = copy
        report.truncated_bytes = size - pos
        log.error(
            "%s: CORRUPTED data from position %d (%s): %d bytes cannot be parsed; "
            "moved them to %s and truncated the segment there",
            path, pos, reason, size - pos, copy, extra={"event": "segment_corrupted", "reason": "unparsable_tail"},
        )

    def _note_batch(self, frame: LogBatch | LogBatchHeaders, position: int) -> None:
        batch = frame.batch
        if position - self._last_indexed >= INDEX_INTERVAL or not self.index:
            self.index.append((batch.base_offset, position, frame.append_ts))
            self._last_indexed = position
        if not self.first_timestamp:
            self.first_timestamp = frame.append_ts
        self.last_timestamp = frame.append_ts
        self.next_offset = batch.base_offset + batch.count
        self.batches += 1

    # -- writing -----------------------------------------------------------------------

    def append(self, pieces: list[bytes], nbytes: int, base_offset: int, count: int, append_ts: int) -> None:
        """Write one LOG_BATCH frame (given as pieces) in one system call."""
        position = self.size
        fd = self.fd
        written = os.writev(fd, pieces)
        if written != nbytes:  # a short write on a regular file means the disk is full
            os.ftruncate(fd, position)
            raise OSError(f"{self.path}: short write ({written} of {nbytes} bytes)")
        self.size = position + nbytes
        if position - self._last_indexed >= INDEX_INTERVAL or not self.index:
            self.index.append((base_offset, position, append_ts))
            self._last_indexed = position
        if not self.first_timestamp:
            self.first_timestamp = append_ts
        self.last_timestamp = append_ts
        self.next_offset = base_offset + count
        self.batches += 1


    # -- reading -----------------------------------------------------------------------

    def position_for(self, offset: int) -> int:
        """File position of the indexed batch at or before ``offset``."""
        best = self.index[0][1] if self.index else self.size
        for first, position, _ in self.index:
            if first > offset:
                break
            best = position
        return best

    def offset_before_timestamp(self, timestamp: int) -> int:
        """First offset of the last indexed batch appended before ``timestamp``: where a scan
        for the first message at or after it can start (at most one index interval early)."""
        best = self.base_offset
        for first, _, ts in self.index:
            if ts >= timestamp:
                break
            best = first
        return best

    def read(self, position: int, nbytes: int) -> bytes:
        return os.pread(self.fd, nbytes, position)

    def close(self) -> None:
        self.files.release(self)


class _ChunkReader:
    """Serve small reads from 1 MiB ``pread`` chunks (recovery walks every frame)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.start = 0
        self.data = b""

    def get(self, pos: int, n: int) -> bytes:
        if not (self.start <= pos and pos + n <= self.start + len(self.data)):
            self.start = pos
            self.data = os.pread(self.fd, max(n, READ_CHUNK), pos)
        return self.data[pos - self.start : pos - self.start + n]
