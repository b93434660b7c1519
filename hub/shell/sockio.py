"""A socket send that never waits and never yields.

The hub's direct flushes (:mod:`hub.core.flushing`) and the mesh's fast writer
(:mod:`hub.mesh.fastwrite`) both send from a task that must not yield at that
point; what the socket does not take they hand to trio's ``send_all``.
"""

from __future__ import annotations

import os

import trio


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
