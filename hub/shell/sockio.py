"""A socket send and read that never wait and never yield, and what the kernel still holds unsent.

The hub's direct flushes (:mod:`hub.core.flushing`) and the mesh's fast writer
(:mod:`hub.mesh.fastwrite`) both send from a task that must not yield at that
point; what the socket does not take they hand to trio's ``send_all``.
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios

import trio

#: Linux's SIOCOUTQ (the same number as TIOCOUTQ): bytes in a TCP socket's send queue.
_SIOCOUTQ = getattr(termios, "TIOCOUTQ", None)
_INT = struct.Struct("i")


def send_now(stream: trio.SocketStream, data: bytes | bytearray) -> int:
    """Send what ``stream``'s socket takes right now, without a checkpoint: the byte count
    (0 if its buffer is full).  A broken or closed socket raises ``trio.BrokenResourceError``,
    as ``send_all`` reports it."""
    try:
        return os.write(stream.socket.fileno(), data)
    except BlockingIOError:
        return 0
    except OSError as exc:  # EPIPE, ECONNRESET, EBADF (closed: fileno -1)...
        raise trio.BrokenResourceError(f"socket send failed: {exc!r}") from exc


def read_now(fd: int, max_bytes: int = 64 << 10) -> bytes | None:
    """What socket ``fd`` holds, up to ``max_bytes``, without waiting: b"" at end of stream,
    None when nothing is there yet.  A reset connection raises ``OSError``."""
    try:
        return os.read(fd, max_bytes)
    except BlockingIOError:
        return None


def kernel_unsent(fd: int) -> int:
    """Bytes written to the TCP socket ``fd`` that its peer has not acknowledged yet (SIOCOUTQ);
    0 where the platform cannot tell or the socket is closed."""
    if _SIOCOUTQ is None or fd < 0:
        return 0
    try:
        return int(_INT.unpack(fcntl.ioctl(fd, _SIOCOUTQ, b"\0\0\0\0"))[0])
    except OSError:
        return 0
