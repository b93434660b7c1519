"""A mesh stream reader that costs one trio checkpoint per read, and a window update per half window.

Why: py-libp2p 0.8.1's ``NetStream.read`` takes the stream's state lock and
yamux's connection-wide ``streams_lock``, then (``PY_YAMUX_RELEASE_ON_READ``,
on by default) writes a WINDOW_UPDATE for every read through the slow write
path -- about nine trio checkpoints on the receiving hub per read, and one
more Noise message the sending hub must read and decrypt.  Under L2 load
(10k msgs/s across two hubs on two cores) that was half of both hubs' task
steps, and the run-queue delays it caused were most of the latency tail
(``docs/benchmarks.md``, "Where the latency goes").

:class:`FastStreamReader` takes what yamux's own reader task has already put
in the stream's buffer, without a lock (trio is single-threaded and nothing
here awaits between looking and taking), and waits on the stream's event when
the buffer is empty.  Credit goes back to the sender the way go-yamux does it:
one WINDOW_UPDATE once half the receive window has been consumed, written by
libp2p's own ``_auto_tune_and_send_window_update`` so its window auto-tuning
still applies.  Whenever the stream is closing, reset, or not the expected
yamux stream, it hands the read to ``stream.read``, which raises what libp2p
raises.  Written against py-libp2p 0.8.1 (pinned); ``tests/test_mesh_fastread.py``
checks it against real Noise/yamux peers.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from libp2p.io.exceptions import ConnectionClosedError
from libp2p.io.trio import TrioTCPStream
from libp2p.network.connection.raw_connection import RawConnection
from libp2p.security.noise.io import NoisePacketReadWriter, NoiseTransportReadWriter
from libp2p.security.secure_session import SecureSession
from libp2p.stream_muxer.yamux.yamux import Yamux, YamuxStream

from . import demux
from .bytebuf import take_front

log = logging.getLogger("pub0sub.hub.mesh")

#: Bytes asked of the socket per receive: a few Noise messages' worth (each is at most 64 KiB).
SOCKET_READ_SIZE = 1 << 16


class FastStreamReader:
    """``await reader.read(max_bytes)`` for one libp2p stream; see the module docstring."""

    def __init__(self, stream: Any, *, fast: bool = True) -> None:
        """``fast`` False: libp2p's own read path (``hub/mesh/fastpath.py`` decides)."""
        self.stream = stream
        self._parts = yamux_of(stream) if fast else None
        if self._parts is not None and buffer_socket_reads(self._parts[1]):
            demux.install(self._parts[1])

    async def read(self, max_bytes: int) -> tuple[bytes, bool]:
        """(up to ``max_bytes`` bytes, whether they came the fast way); raises what ``stream.read``
        raises at the end of the stream."""
        parts = self._parts
        if parts is None:
            return bytes(await self.stream.read(max_bytes)), False
        ys, yamux = parts
        sid = ys.stream_id
        while True:
            buffer = yamux.stream_buffers.get(sid)
            if buffer:
                data = bytes(buffer[:max_bytes])
                del buffer[:max_bytes]
                if not await self._maybe_release(ys, len(buffer)):
                    # Every read yields once, as libp2p's does, or a reader with a full buffer
                    # (a window grown to 16 MiB) would run read after read without letting
                    # anything else in.  A yield that never raises: the bytes are taken.
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return data, True
            event = yamux.stream_events.get(sid)
            if buffer is None or event is None or ys.recv_closed or ys.reset_received or ys.closed \
                    or yamux.event_shutting_down.is_set():  # fmt: skip
                # Ending: libp2p's read raises the EOF or reset (and keeps its stream state right).
                return bytes(await self.stream.read(max_bytes)), False
            await event.wait()
            # As yamux's read_stream does: a fresh event for the next wait.  No await between
            # the wait and this, so a set() meant for the next read cannot be lost; the buffer
            # is looked at again before waiting.
            if yamux.stream_events.get(sid) is event:
                yamux.stream_events[sid] = trio.Event()

    @staticmethod
    async def _maybe_release(ys: YamuxStream, buffered: int) -> bool:
        """Send credit if half the window is consumed; True if it did (and so yielded)."""
        # Consumed since the last update = target - (what the sender may still send + what is
        # buffered here); go-yamux sends credit once that reaches half the window.
        consumed = ys.target_recv_window - (ys.recv_window + buffered)
        if consumed < ys._grow_threshold():
            return False
        # Not shielded (as in libp2p's own read): a session cancelled here is closing, and what
        # it took is sent again from the receiver's position in the next session.
        await ys._auto_tune_and_send_window_update()
        return True


def yamux_of(stream: Any) -> tuple[YamuxStream, Yamux] | None:
    """The yamux stream and connection under a libp2p ``stream``, or None if it is anything else
    (the fast paths, here and in fastwrite.py, rely on py-libp2p 0.8.1's yamux internals)."""
    ys = getattr(stream, "muxed_stream", None)
    yamux = getattr(ys, "conn", None)
    if type(ys) is not YamuxStream or type(yamux) is not Yamux:
        return None
    return ys, yamux


class BufferedTCPStream(TrioTCPStream):
    """libp2p's TCP stream, reading the socket ``SOCKET_READ_SIZE`` bytes at a time.

    Below yamux, each Noise message is read as its 2-byte length and then its body:
    two ``receive_some`` calls, each behind the stream's read lock -- four trio
    checkpoints and two syscalls per message.  This serves both from one receive
    while the bytes last, without a checkpoint.  The read lock is the original
    stream's, so a read already waiting on the old object keeps its place.
    """

    def __init__(self, inner: TrioTCPStream) -> None:
        super().__init__(inner.stream)
        self.read_lock = inner.read_lock
        self.write_lock = inner.write_lock
        self._cached_remote_address = inner._cached_remote_address
        self._buffer = bytearray()

    async def read(self, n: int | None = None) -> bytes:
        if n == 0:
            return b""
        # With the lock free nobody is receiving, so the buffer holds the oldest bytes.
        if self._buffer and not self.read_lock.locked():
            return take_front(self._buffer, n)
        async with self.read_lock:
            if not self._buffer:
                try:
                    self._buffer += await self.stream.receive_some(SOCKET_READ_SIZE)
                except trio.BrokenResourceError as exc:  # as TrioTCPStream.read maps them
                    raise ConnectionClosedError(f"TCP connection reset by remote peer: {exc}", transport="tcp") from exc
                except trio.ClosedResourceError:
                    return b""
            return take_front(self._buffer, n)


def noise_over_tcp(yamux: Any) -> tuple[NoiseTransportReadWriter, RawConnection] | None:
    """The Noise transport and raw TCP connection under ``yamux``, if it is exactly that stack
    (py-libp2p 0.8.1's TCP + Noise; the fast paths rely on their internals), else None."""
    try:
        session = yamux.secured_conn
        noise = session.conn
        packets = noise.read_writer
        raw = packets.read_write_closer
        tcp = raw.stream
    except AttributeError:
        return None
    expected = ((session, SecureSession), (noise, NoiseTransportReadWriter), (packets, NoisePacketReadWriter),
                (raw, RawConnection))  # fmt: skip
    if not all(type(obj) is cls for obj, cls in expected) or type(tcp) not in (TrioTCPStream, BufferedTCPStream):
        return None
    if not isinstance(tcp.stream, trio.SocketStream):
        return None
    return noise, raw


def buffer_socket_reads(yamux: Yamux) -> bool:
    """Give ``yamux``'s Noise-over-TCP connection buffered socket reads (once); False if it is
    not exactly that stack, which then keeps libp2p's reads."""
    parts = noise_over_tcp(yamux)
    if parts is None:
        return False
    raw = parts[1]
    if type(raw.stream) is TrioTCPStream:
        raw.stream = BufferedTCPStream(raw.stream)
    return True
