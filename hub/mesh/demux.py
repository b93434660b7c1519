"""Yamux DATA frames demultiplexed in a tight loop under py-libp2p's own reader task.

Why: py-libp2p 0.8.1's ``Yamux.handle_incoming`` spends, per frame, two
``read_exactly`` calls through the secure session, a ``fail_after`` scope for
the body, the connection-wide ``streams_lock`` (a trio checkpoint: one more
trip around the run loop before the data reaches the stream's buffer) and a
handful of debug f-strings.  Under L2 load that loop was 30% of the receiving
hub's CPU samples (``docs/benchmarks.md``, "Where the latency goes").

:class:`MeshDemux` replaces the secure session's ``read``, which only that
reader task calls.  When the task asks for the next frame header, the demux
first takes every complete DATA frame without flags for a stream yamux knows
-- by far the most frames on a busy mesh link -- and does what
``handle_incoming`` does with it: append the payload to the stream's buffer,
spend the stream's receive window, set the stream's event.  Nothing in between
awaits, so no task sees a half-done frame.  Every other frame (SYN/ACK/FIN/RST
flags, window updates, pings, go-away, an unknown stream, an oversized frame)
is handed to ``handle_incoming`` unchanged: its header, then its body as the
task reads it.  Any read shape it does not expect turns the demux into a plain
pass-through for good, so it can make libp2p's reader no less correct, only
sometimes not faster.  Written against py-libp2p 0.8.1 (pinned);
``tests/test_mesh_demux.py`` checks it against real Noise/yamux peers.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

from libp2p.io.exceptions import ConnectionClosedError
from libp2p.stream_muxer.yamux.yamux import HEADER_SIZE, MAX_WINDOW_SIZE, TYPE_DATA, YAMUX_HEADER_FORMAT

from ..core.events import ev
from .bytebuf import take_front

log = logging.getLogger("hub.mesh")

_HEADER = struct.Struct(YAMUX_HEADER_FORMAT)
#: Connections of this process whose demux fell back to pass-through reads (see _fall_back).
_fallbacks = 0


class MeshDemux:
    """Installed with :func:`install` as ``session.read`` of one yamux connection's secure session."""

    def __init__(self, yamux: Any, session: Any) -> None:
        self.yamux = yamux
        self.session = session
        self._plain = bytearray()
        #: Body bytes of a frame handed to libp2p that it has not read yet.
        self._body_left = 0
        self._passthrough = False
        #: DATA frames taken here / frames handed to libp2p's loop.
        self.frames_fast = 0
        self.frames_delegated = 0

    async def read(self, n: int | None = None) -> bytes:
        if n == 0:
            return b""
        session = self.session
        if session.low_watermark != session.high_watermark:
            # Bytes a read from before the install left in the session's own buffer are
            # older than anything read here.
            self._plain[:0] = session._drain(None)
        if self._passthrough or n is None:
            self._fall_back("a read of everything buffered")
            return await self._take(n)
        if self._body_left:
            data = await self._take(min(n, self._body_left))
            self._body_left -= len(data)
            return data
        if n != HEADER_SIZE:
            # Not the header read this expects at a frame boundary: from here on, stay out of
            # the way rather than guess.
            self._fall_back(f"a read of {n} bytes at a frame boundary")
            return await self._take(n)
        header = await self._next_delegated_header()
        _version, typ, _flags, _stream_id, length = _HEADER.unpack(header)
        self._body_left = length if typ == TYPE_DATA else 0
        self.frames_delegated += 1
        return header

    def _fall_back(self, why: str) -> None:
        global _fallbacks
        if not self._passthrough:
            self._passthrough = True
            # Correct either way (only slower), and the same on every connection of a hub: said
            # once per process at INFO, then at DEBUG, not once per link at WARNING (the 50-hub
            # test bed's logs held 552 of these).
            _fallbacks += 1
            log.log(logging.INFO if _fallbacks == 1 else logging.DEBUG,
                    "mesh connection demux: libp2p's reader asked for %s; passing its reads through from now on "
                    "(connection %d to do so)", why, _fallbacks, extra=ev("mesh_demux_fallback"))  # fmt: skip

    async def _next_delegated_header(self) -> bytes:
        """Take the complete plain DATA frames at the front; return the header of the first
        frame that is not one (waiting for bytes as needed)."""
        plain = self._plain
        yamux = self.yamux
        streams, buffers, events = yamux.streams, yamux.stream_buffers, yamux.stream_events
        unpack = _HEADER.unpack_from
        while True:
            while len(plain) < HEADER_SIZE:
                await self._fill()
            _version, typ, flags, sid, length = unpack(plain)
            if typ != TYPE_DATA or flags or not 0 < length <= MAX_WINDOW_SIZE or sid not in streams:
                header = bytes(plain[:HEADER_SIZE])
                del plain[:HEADER_SIZE]
                return header
            while len(plain) < HEADER_SIZE + length:
                await self._fill()
            # The frame is whole: the same steps as handle_incoming, with no await between
            # looking the stream up and giving it the bytes.
            stream = streams.get(sid)
            buffer = buffers.get(sid)
            event = events.get(sid)
            if stream is None or buffer is None or event is None or stream.closed:
                # (libp2p finalizes a closed stream when data reaches it: its loop does that.)
                header = bytes(plain[:HEADER_SIZE])
                del plain[:HEADER_SIZE]
                return header
            buffer += plain[HEADER_SIZE : HEADER_SIZE + length]
            del plain[: HEADER_SIZE + length]
            stream.recv_window = max(0, stream.recv_window - length)
            event.set()
            self.frames_fast += 1

    async def _take(self, n: int | None) -> bytes:
        """Up to ``n`` bytes (all buffered if None), at least one, from the buffer or the next message."""
        if not self._plain:
            await self._fill()
        return take_front(self._plain, n)

    async def _fill(self) -> None:
        msg = await self.session.conn.read_msg()
        if not msg:
            raise ConnectionClosedError("Connection closed")
        self._plain += msg


def install(yamux: Any) -> MeshDemux:
    """Put a :class:`MeshDemux` under ``yamux`` (once).  Only for a connection that
    ``fastread.noise_over_tcp`` recognised: its session is py-libp2p's ``SecureSession``."""
    session = yamux.secured_conn
    existing = getattr(session, "mesh_demux", None)
    if isinstance(existing, MeshDemux):
        return existing
    demux = MeshDemux(yamux, session)
    session.mesh_demux = demux
    session.read = demux.read
    return demux
