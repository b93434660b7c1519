"""One mesh stream with one peer, as I/O: a reader task, a paced writer task, acks; and the
one timer that ticks every session of a hub.

What the session *means* -- hello, interest, forwards, dedup, replay, timeouts --
is :class:`hub.core.mesh.peer.PeerProtocol`'s.  This module moves its bytes.

The writer owns the stream's send side and coalesces everything queued
(control frames first, then forwards) into writes of ``write_chunk`` bytes: a
py-libp2p ``write()`` costs ~200-350 µs whatever its size, so one write per
message would cap a link at a few thousand messages a second.  Producers never
await: they append and wake the writer.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import trio

import wire

from ..core.mesh.overlay_peer import OverlayPeer
from ..core.mesh.peer import PeerProtocol
from ..core.mesh.protocols import make_decoder
from ..core.mesh.status import CloseReason
from .dump import StreamDump, StreamReader, StreamWriter
from .fastpath import GATE
from .fastread import FastStreamReader
from .fastwrite import FastStreamWriter

log = logging.getLogger("hub.mesh.session")

#: How long a cumulative FORWARD_ACK may wait to cover more reads (trades nothing: acks only
#: trim the sender's window; resume after a break uses the receiver's MESH_HELLO position).
#: Each ack costs a timer wake-up and a write here, a read and a decrypt at the sender: 25 ms
#: rather than 5 ms took ~4 points of a core off each hub under L2 load (10k msgs/s), and
#: latency with it (docs/benchmarks.md).  The sender's window holds 20 ms more of forwards.
ACK_DELAY = 0.025


def remote_address(stream: Any) -> str:
    """``host:port`` at the other end of a libp2p stream (for logs), or "address unknown"."""
    try:
        addr = stream.get_remote_address()
    except Exception:  # not every libp2p stream type can tell: logging must not break a session
        addr = None
    return f"{addr[0]}:{addr[1]}" if addr else "address unknown"


class PeerSession:
    """Runs ``protocol`` on one libp2p stream until it closes."""

    def __init__(self, protocol: PeerProtocol | OverlayPeer, stream: Any, ticker: SessionTicker, *,
                 dump: StreamDump | None = None) -> None:  # fmt: skip
        self.protocol = protocol
        self._ticker = ticker
        self.stream = stream
        self.link = protocol.link
        self.counters = protocol.counters
        self.config = protocol.config
        not_fast = GATE.reason_not_to(stream, plain_io=self.config.plain_io)
        if not_fast is not None:
            # A forced plain path is what was asked for; anything else is a fallback to hear about.
            level = logging.INFO if self.config.plain_io else logging.WARNING
            log.log(level, "mesh stream with %s uses libp2p's plain read/write path: %s", self.link.key, not_fast)
        self._out: StreamWriter = FastStreamWriter(stream, fast=not_fast is None)
        self._in: StreamReader = FastStreamReader(stream, fast=not_fast is None)
        if dump is not None:  # --mesh-dump: a copy of every byte read and written (hub/mesh/dump.py)
            self._in, self._out = dump.tap(self._in, self._out)
        self._scope = trio.CancelScope()
        self._wake = trio.Event()
        self._ack_wake = trio.Event()
        #: When the pacing lets the next write start (see _writer).
        self._next_write = 0.0
        #: The writer holds queued forwards until the interval ends, with the fallback timer set.
        self._holding = False
        #: Forwards were queued (wake()) since the writer last took a chunk.
        self._forwards_queued = False
        #: Something that is never held was queued (_kick()): control frames, a replay.
        self._urgent = False
        protocol.remote_address = remote_address(stream)
        protocol.on_urgent = self._kick
        protocol.on_forwards = self.wake
        protocol.on_acks = self._ack_wake.set
        protocol.on_close = self._scope.cancel

    @property
    def alive(self) -> bool:
        return self.protocol.alive

    @property
    def outbound(self) -> bool:
        return self.protocol.outbound

    def close(self, reason: CloseReason) -> None:
        self.protocol.close(reason)

    async def run(self) -> CloseReason:
        """Run until the session ends; always leaves the stream closed."""
        with self._scope:
            self.protocol.start()
            self._ticker.add(self.protocol)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._reader)
                    nursery.start_soon(self._writer)
                    nursery.start_soon(self._ack_flusher)
            finally:
                self._ticker.discard(self.protocol)
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            try:
                await self.stream.reset()
            except Exception:  # the stream may already be gone; nothing left to do
                log.debug("reset of a mesh stream failed", exc_info=True)
        return self.protocol.reason or CloseReason.PEER_CLOSED

    # -- waking the writer -------------------------------------------------------

    def wake(self) -> None:
        """Forwards are queued: wake the writer if the pacing lets it write now, or if it is
        not holding yet (it then sets the fallback timer and holds them)."""
        self._forwards_queued = True
        if not self._holding or trio.current_time() >= self._next_write:
            self._wake.set()

    def _kick(self) -> None:
        """Something the pacing never holds is queued: wake the writer to write now."""
        self._urgent = True
        self._wake.set()

    # -- writer ------------------------------------------------------------------

    async def _writer(self) -> None:
        # Writes are paced: the next write starts ``write_interval`` after the last one
        # started, so a stream of small publishes leaves as batches instead of one write each.
        # An idle link writes at once; a full chunk (the link is behind) is not paced; control
        # frames are never held.
        #
        # The first forward queued once the interval is over wakes the writer (wake()), so
        # the write follows the publish that triggered it and carries it.  A timer at the end
        # of the interval would not: it fires in the same run-loop pass as that publish's
        # arrival, often before the publish is handled, and epoll rounds its wait up to whole
        # milliseconds.  The timer is only the fallback, one interval later, for the last
        # forwards of a burst, and it is set only while forwards are held: a timer after every
        # write woke the hub once more per write whenever the next publish came later than
        # that -- every write, with publishers that wake once a millisecond.  Timing from the
        # start means time spent in the write, or waiting for the CPU after it, counts toward
        # the interval instead of adding to it.  The fast write does not yield, so this loop
        # yields once per write, in the wait (twice when it holds forwards).
        interval = self.config.write_interval
        take_chunk = self.protocol.take_chunk
        while True:
            self._urgent = False
            chunk = take_chunk()
            if chunk is None:
                # No await between taking the chunk and this: no wake-up can be lost.
                self._wake = trio.Event()
                await self._wake.wait()
                if not self._urgent and trio.current_time() < self._next_write:
                    await self._hold(interval)
                continue
            self._forwards_queued = False
            started = trio.current_time()
            try:
                fast = await self._out.write(chunk)
            except Exception as exc:  # libp2p raises several unrelated types for a dead stream
                log.debug("mesh write to %s failed: %r", self.link.short_id, exc)
                self.close(CloseReason.PEER_CLOSED)
                return
            self.counters.writes += 1
            self.counters.writes_fast += fast
            self.counters.bytes_sent += len(chunk)
            if len(chunk) >= self.config.write_chunk:
                self._next_write = started
                await trio.lowlevel.checkpoint()
                continue
            self._next_write = started + interval
            if self._forwards_queued and not self._urgent:
                # Queued while a slow write yielded: they wait for the interval like any other.
                await self._hold(interval)

    async def _hold(self, interval: float) -> None:
        """Keep queued forwards until the first forward after the interval (wake()), something
        urgent (_kick()), or the fallback one interval later."""
        self._holding = True
        self._wake = trio.Event()
        try:
            with trio.move_on_at(self._next_write + interval):
                await self._wake.wait()
        finally:
            self._holding = False

    # -- reader ------------------------------------------------------------------

    async def _reader(self) -> None:
        decoder = make_decoder(self.protocol.version)
        protocol = self.protocol
        while True:
            try:
                data, fast = await self._in.read(self.config.read_chunk)
            except Exception as exc:  # StreamEOF, StreamReset, broken connections...
                log.debug("mesh read from %s ended: %r", self.link.short_id, exc)
                self.close(CloseReason.PEER_CLOSED)
                return
            if not data:
                self.close(CloseReason.PEER_CLOSED)
                return
            self.counters.reads += 1
            self.counters.reads_fast += fast
            self.counters.bytes_received += len(data)
            try:
                decoder.feed(data)
                frames = list(decoder)
            except wire.ProtocolError as exc:
                log.warning("mesh peer %s sent a bad frame (%s): %s", self.link.key, exc.code.name, exc)
                self.close(CloseReason.PROTOCOL_ERROR)
                return
            try:
                protocol.receive(frames)  # bytes, even part of a frame, are a sign of life
            except Exception:  # one peer's input must never take the hub down: end this session only
                log.exception("mesh peer %s: handling its frames failed; closing the session", self.link.key)
                self.close(CloseReason.INTERNAL_ERROR)
                return
            if not protocol.alive:
                return

    # -- timers ------------------------------------------------------------------

    async def _ack_flusher(self) -> None:
        while True:
            await self._ack_wake.wait()
            await trio.sleep(ACK_DELAY)
            self._ack_wake = trio.Event()
            self.protocol.on_acks = self._ack_wake.set
            self.protocol.take_acks()


class SessionTicker:
    """One timer for every mesh session of a hub: heartbeats, timeouts and resends of all links
    are looked at together, so an idle hub wakes twice per heartbeat interval in all, not twice
    per link (each wake of a trio loop costs ~0.2 ms of CPU here: docs/scale.md, idle CPU)."""

    def __init__(self) -> None:
        self._protocols: dict[PeerProtocol | OverlayPeer, None] = {}
        self._interval = math.inf
        self._sooner = trio.Event()

    def add(self, protocol: PeerProtocol | OverlayPeer) -> None:
        self._protocols[protocol] = None
        if protocol.tick_interval() < self._interval:
            self._sooner.set()  # the sleep under way is too long for it

    def discard(self, protocol: PeerProtocol | OverlayPeer) -> None:
        self._protocols.pop(protocol, None)

    async def run(self) -> None:
        while True:
            self._sooner = trio.Event()
            self._interval = min((p.tick_interval() for p in self._protocols), default=math.inf)
            with trio.move_on_after(self._interval):
                await self._sooner.wait()
                continue  # a session that must tick more often came: sleep again, shorter
            for protocol in list(self._protocols):
                if not protocol.alive:
                    continue
                try:
                    protocol.tick()
                except Exception:  # a bug in one session's timers ends that session, not the mesh
                    log.exception("mesh peer %s: its timers failed; closing the session", protocol.link.key)
                    protocol.close(CloseReason.INTERNAL_ERROR)
