"""A mesh stream writer that costs one system call and no trio checkpoint per write,
instead of about seven checkpoints.

Why: py-libp2p 0.8.1's ``NetStream.write`` passes a state lock, yamux's stream
write lock and window lock, the connection's write lock, the TCP stream's write
lock, ``send_all`` and a trailing checkpoint.  Every one of those is a trio
checkpoint, and every checkpoint puts the writer at the back of the run queue.
Behind a hub busy with client publishes one run-queue pass took up to ~2 ms,
so a forward waited up to ~10 ms inside libp2p before reaching the socket
(measured with a trio Instrument under L2 load; ``docs/benchmarks.md``).

:class:`FastStreamWriter` does the same work -- yamux DATA frames within the
send window, each one Noise transport message with its 2-byte length -- holding
the same connection and TCP locks, taken without waiting, and sends all of it
with one non-blocking ``send``: the caller decides when to yield (the session
writer sleeps out its pacing interval right after), and each checkpoint skipped
is one trip around a busy run loop saved on the path of every forward.  Only
when the socket takes part of it does the rest go through ``send_all``.
Whenever anything is not exactly as expected (another libp2p version or
transport, a lock held, a short send window, a closing stream) it hands the
write to ``stream.write`` unchanged, so it is never less correct than the slow
path, only sometimes not faster.  Either way the write is
shielded from cancellation and bounded by ``SEND_BOUND``: a write cancelled
half-way would leave part of a Noise message on the wire, and one that cannot
finish in time closes the connection instead (the mesh redials and resumes).
It is written against py-libp2p 0.8.1 (pinned in pyproject.toml);
``tests/test_mesh_fastwrite.py`` checks it against a real Noise/yamux peer.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

import trio
from libp2p.security.noise.io import MAX_PLAINTEXT_LENGTH
from libp2p.stream_muxer.yamux.yamux import (
    HEADER_SIZE,
    MAX_MESSAGE_SIZE,
    TYPE_DATA,
    YAMUX_HEADER_FORMAT,
)

from ..core.events import ev
from ..shell.sockio import send_now
from .fastread import noise_over_tcp, yamux_of

log = logging.getLogger("pub0sub.hub.mesh")

_HEADER = struct.Struct(YAMUX_HEADER_FORMAT)
#: Payload per yamux frame: one frame must fit one Noise message, as in yamux's own path.
_FRAME_PAYLOAD = min(MAX_MESSAGE_SIZE, MAX_PLAINTEXT_LENGTH) - HEADER_SIZE
#: Longest a write may wait for the peer's socket (seconds) before the connection is given up.
SEND_BOUND = 2.0


class FastStreamWriter:
    """``await writer.write(data)`` for one libp2p stream; see the module docstring."""

    def __init__(self, stream: Any, *, fast: bool = True) -> None:
        """``fast`` False: libp2p's own write path (``hub/mesh/fastpath.py`` decides)."""
        self.stream = stream
        self._parts = _resolve(stream) if fast else None

    async def write(self, data: bytes) -> bool:
        """Write ``data``; True if it went the fast way, False if through ``stream.write``."""
        parts = self._parts
        if parts is None:
            await self.stream.write(data)
            return False
        if not _ready(parts, len(data)):
            await self._slow_write(data, parts[3])
            return False
        ys, yamux, noise, tcp = parts
        # No await between the checks in _ready() and taking the locks: nothing can slip in.
        yamux._write_lock.acquire_nowait()
        tcp.write_lock.acquire_nowait()
        try:
            ys.send_window -= len(data)
            out = bytearray()
            pack, encrypt, sid = _HEADER.pack, noise.encrypt, ys.stream_id
            for start in range(0, len(data), _FRAME_PAYLOAD):
                chunk = data[start : start + _FRAME_PAYLOAD]
                sealed = encrypt(pack(0, TYPE_DATA, 0, sid, len(chunk)) + chunk)
                out += len(sealed).to_bytes(2, "big")
                out += sealed
            sent = send_now(tcp.stream, out)
            if sent < len(out):
                # A send_all cancelled half-way leaves half a Noise message on the wire and the
                # connection useless (the peer would wait for the rest forever), so the send is
                # shielded -- a session closing mid-write lets the write finish -- with a bound.
                with trio.CancelScope(shield=True, deadline=trio.current_time() + SEND_BOUND) as scope:
                    await tcp.stream.send_all(memoryview(out)[sent:])
                if scope.cancelled_caught:
                    _give_up(tcp)
        finally:
            tcp.write_lock.release()
            yamux._write_lock.release()
        return True

    async def _slow_write(self, data: bytes, tcp: Any) -> None:
        """libp2p's own write, under the same shield and bound as the fast one: its Noise
        messages are sent by ``send_all`` too, and a cancel half-way through one would leave
        the connection useless in the same way.  (It may also wait here for send window.)"""
        with trio.CancelScope(shield=True, deadline=trio.current_time() + SEND_BOUND) as scope:
            await self.stream.write(data)
        if scope.cancelled_caught:
            _give_up(tcp)


def _give_up(tcp: Any) -> None:
    """The peer took nothing for SEND_BOUND seconds: close the connection rather than leave it
    mid-frame (the mesh redials and resumes), and fail the write."""
    tcp.stream.socket.close()
    raise trio.BrokenResourceError(f"mesh peer took no data for {SEND_BOUND} s")


def _resolve(stream: Any) -> tuple[Any, Any, Any, Any] | None:
    """The yamux stream, yamux connection, Noise writer and TCP stream under ``stream``, or None."""
    muxed = yamux_of(stream)
    lower = noise_over_tcp(muxed[1]) if muxed is not None else None
    if muxed is None or lower is None:
        log.warning("mesh stream is not Noise/yamux/TCP as the fast writer expects: using libp2p's write path",
                    extra=ev("mesh_plain_write_path", reason="not Noise/yamux/TCP"))
        return None
    noise, raw = lower
    return muxed[0], muxed[1], noise, raw.stream


def _ready(parts: tuple[Any, Any, Any, Any], size: int) -> bool:
    ys, yamux, _noise, tcp = parts
    return (
        0 < size <= ys.send_window
        and not (ys.closed or ys.send_closed or ys.reset_received)
        and not yamux.event_shutting_down.is_set()
        and ys.rw_lock._writer_lock.value == 1  # no libp2p write of this stream in progress
        and not yamux._write_lock.locked()
        and not tcp.write_lock.locked()
    )
