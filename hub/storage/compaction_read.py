"""Reading closed segments for a compaction pass, in its worker thread: every frame, checksums
verified, through a descriptor of its own, counting the bytes read (docs/compaction.md)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from wire import FRAME_TYPES, Limits, LogBatch, LogBatchHeaders, ProtocolError, SegmentHeader, check_header
from wire.frames import HEADER, HEADER_SIZE
from wire.opcodes import LOG_OPCODES

from .segment import MAX_STORED_BODY, READ_CHUNK

log = logging.getLogger("pub0sub.hub.storage")

Frame = LogBatch | LogBatchHeaders

#: Test hook (tests/test_compaction_crash.py): the name of a step (``temp``, ``swap``,
#: ``unlinked``, ``placed``, ``checkpointed``) at which compaction stops for good after writing
#: ``DATA/compaction-paused-STEP``, so a test can SIGKILL the hub in exactly that state.
PAUSE_ENV = "PUB0SUB_COMPACTION_PAUSE"


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A closed segment as the loop saw it when the pass began."""

    path: Path
    base: int
    #: the base offset of the segment after it: the end of the offsets it covers
    end: int


class CompactionStopped(Exception):
    """The hub is stopping: the pass was abandoned (its temporary file removed)."""


class SegmentReader:
    """The frames of one closed segment; :attr:`bytes_read` counts the bytes read so far."""

    def __init__(self, path: Path, stop: threading.Event | None = None) -> None:
        self.path = path
        self.stop = stop
        self.bytes_read = 0

    def __iter__(self) -> Iterator[SegmentHeader | Frame]:
        path, stop = self.path, self.stop
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
                    buf, start = self._read(fd, READ_CHUNK, pos), pos
                value, length = HEADER.unpack_from(buf, pos - start)
                end = pos + HEADER_SIZE + length
                if end > start + len(buf):
                    buf, start = self._read(fd, max(READ_CHUNK, end - pos), pos), pos
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

    def _read(self, fd: int, size: int, pos: int) -> bytes:
        data = os.pread(fd, size, pos)
        self.bytes_read += len(data)
        return data


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
