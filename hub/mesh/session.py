"""One mesh stream with one peer: a reader task, a writer task and a timer task.

The writer owns the stream's send side and coalesces everything queued
(control frames first, then forwards) into writes of ``write_chunk`` bytes: a
py-libp2p ``write()`` costs ~200-350 µs whatever its size, so one write per
message would cap a link at a few thousand messages a second.  Producers never
await: they append and wake the writer.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

import wire
from wire.limits import MAX_TOPICS_PER_MESSAGE

from ..core.mesh.inbound import V1_ORIGIN, InboundResult
from ..core.mesh.interest import valid_pattern
from ..core.mesh.protocols import MAX_BATCH_BODY, MAX_SETS_PER_BATCH, MeshVersion, encode_forward_batch, make_decoder
from ..core.mesh.replay import Replay
from ..core.mesh.status import CloseReason
from .fastread import FastStreamReader
from .fastwrite import FastStreamWriter

if TYPE_CHECKING:
    from .peers import PeerLink, SessionOwner

log = logging.getLogger("hub.mesh.session")

PING_FRAME = wire.PING.encode()
PONG_FRAME = wire.PONG.encode()
#: Positions fit a u16 count in MESH_HELLO.
MAX_HELLO_POSITIONS = 0xFFFF


@dataclass(slots=True)
class _PendingSubscribe:
    frame: bytes
    topics: tuple[str, ...]
    sent_at: float
    resends: int = 0


def topic_chunks(patterns: list[str]) -> list[tuple[str, ...]]:
    """SUBSCRIBE/UNSUBSCRIBE carry at most 255 topics each (``wire.Subscribe``)."""
    ordered = sorted(patterns)
    return [tuple(ordered[i : i + MAX_TOPICS_PER_MESSAGE]) for i in range(0, len(ordered), MAX_TOPICS_PER_MESSAGE)]


#: How long a cumulative FORWARD_ACK may wait to cover more reads (trades nothing: acks only
#: trim the sender's window; resume after a break uses the receiver's MESH_HELLO position).
#: Each ack costs a timer wake-up and a write here, a read and a decrypt at the sender: 25 ms
#: rather than 5 ms took ~4 points of a core off each hub under L2 load (10k msgs/s), and
#: latency with it (docs/benchmarks.md).  The sender's window holds 20 ms more of forwards.
ACK_DELAY = 0.025

class PeerSession:
    """Speaks one negotiated mesh version on one libp2p stream until it closes."""

    def __init__(self, owner: SessionOwner, link: PeerLink, stream: Any, version: MeshVersion, *, outbound: bool):
        self.owner = owner
        self.link = link
        self.stream = stream
        self._out = FastStreamWriter(stream)
        self._in = FastStreamReader(stream)
        self.version = version
        self.outbound = outbound
        self.config = owner.config
        self.counters = link.counters
        self.reason: CloseReason | None = None
        self.started_at = trio.current_time()
        self._scope = trio.CancelScope()
        self._wake = trio.Event()
        #: When the pacing lets the next write start (see _writer).
        self._next_write = 0.0
        #: The writer holds queued forwards until the interval ends, with the fallback timer set.
        self._holding = False
        #: Forwards were queued (wake()) since the writer last took a chunk.
        self._forwards_queued = False
        #: Something that is never held was queued (_kick()): control frames, a replay.
        self._urgent = False
        self._pending_acks: dict[int, int] = {}
        self._ack_wake = trio.Event()
        self._control: list[bytes] = []
        self._v1_out = bytearray()
        self._v1_out_frames = 0
        self._pending_subs: deque[_PendingSubscribe] = deque()
        self._last_received = trio.current_time()
        self._last_ping = trio.current_time()
        self._hello_done = version is MeshVersion.V1
        self._first_frame = True
        self._unwanted_replied: dict[str, float] = {}
        self.remote_hub_id: int | None = None
        #: The peer's MESH_HELLO position while the replay from the log waits for its interest.
        self._replay_after: int | None = None
        self._replay_due_at = 0.0
        self._replay: Replay | None = None

    # -- lifecycle ---------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self.reason is None

    def close(self, reason: CloseReason) -> None:
        if self.reason is None:
            self.reason = reason
            # Shown at once: the stream's reset below may take up to a second on a dead link,
            # and status must not say "not connected" without saying why.
            self.link.last_close = reason
            log.info("mesh session with %s ended: %s", self.link.short_id, reason.value)
        self._scope.cancel()

    async def run(self) -> CloseReason:
        """Run until the session ends; always leaves the stream closed."""
        self.counters.sessions += 1
        with self._scope:
            if self.version is MeshVersion.V2:
                self._queue_control(self._hello_frame())
            self.announce(list(self.owner.local.patterns))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._reader)
                nursery.start_soon(self._writer)
                nursery.start_soon(self._timers)
                nursery.start_soon(self._ack_flusher)
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            try:
                await self.stream.reset()
            except Exception:  # the stream may already be gone; nothing left to do
                log.debug("reset of a mesh stream failed", exc_info=True)
        return self.reason or CloseReason.PEER_CLOSED

    # -- what the mesh asks of a session -----------------------------------------

    def announce(self, patterns: list[str]) -> None:
        now = trio.current_time()
        for topics in topic_chunks(patterns):
            frame = wire.Subscribe(topics=topics).encode()
            self._pending_subs.append(_PendingSubscribe(frame=frame, topics=topics, sent_at=now))
            self._queue_raw(frame)

    def withdraw(self, patterns: list[str]) -> None:
        # Not resent, not waited for (seed: low priority).
        for topics in topic_chunks(patterns):
            self._queue_control(wire.Unsubscribe(topics=topics))

    def send_v1(self, frames: bytes, count: int) -> bool:
        """Queue seed FORWARD frames; False (and counted) when the peer is too far behind."""
        if len(self._v1_out) + len(frames) > self.config.v1_max_pending_bytes:
            self.counters.messages_dropped_overflow += count
            return False
        self._v1_out += frames
        self._v1_out_frames += count
        self.wake()
        return True

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

    def _queue_control(self, frame: wire.Frame) -> None:
        self._queue_raw(frame.encode())

    def _queue_raw(self, encoded: bytes) -> None:
        self._control.append(encoded)
        self.counters.frames_sent += 1
        self._kick()

    def _hello_frame(self) -> wire.MeshHello:
        positions = sorted(self.owner.hello_positions().items())[:MAX_HELLO_POSITIONS]
        return wire.MeshHello(
            hub_id=self.owner.hub_id,
            positions=tuple(wire.ResumePosition(origin=o, seq=s) for o, s in positions if o != V1_ORIGIN),
        )

    def _take_chunk(self) -> bytes | None:
        parts = self._control
        size = sum(map(len, parts))
        self._control = []
        limit = self.config.write_chunk
        if self.version is MeshVersion.V2:
            window = self.link.window
            # Forwards wait while a replay is due but its interest is not known yet; a replay
            # goes out before anything in the window (origin-sequence order, see replay.py).
            while self._hello_done and self._replay_after is None and size < limit:
                if self._replay is None and window.lost_from is not None:
                    self._replay = self.owner.open_replay(self.link, window.lost_from - 1, window.first_unsent_seq)
                    window.clear_lost()
                room = min(MAX_BATCH_BODY, limit - size)
                if self._replay is not None:
                    entries = self._replay.take(room, MAX_SETS_PER_BATCH)
                    if self._replay.done:
                        self._replay = None
                    if not entries:
                        continue
                    self.counters.messages_replayed += sum(e.count for e in entries)
                elif window.has_unsent:
                    entries = window.take_unsent(room, MAX_SETS_PER_BATCH)
                else:
                    break
                frame = encode_forward_batch(self.owner.hub_id, [e.encoded for e in entries])
                parts.append(frame)
                size += len(frame)
                self.counters.frames_sent += 1
                self.counters.messages_sent += sum(e.count for e in entries)
        elif self._v1_out:
            parts.append(bytes(self._v1_out))
            self._v1_out.clear()
            self.counters.frames_sent += self._v1_out_frames
            self.counters.messages_sent += self._v1_out_frames
            self._v1_out_frames = 0
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else b"".join(parts)

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
        while True:
            self._urgent = False
            chunk = self._take_chunk()
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
        decoder = make_decoder(self.version)
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
            self._last_received = trio.current_time()
            try:
                decoder.feed(data)
                frames = list(decoder)
            except wire.ProtocolError as exc:
                log.warning("mesh peer %s sent a bad frame (%s): %s", self.link.peer_id, exc.code.name, exc)
                self.close(CloseReason.PROTOCOL_ERROR)
                return
            try:
                await self._handle_chunk(frames)
            except Exception:  # one peer's input must never take the hub down: end this session only
                log.exception("mesh peer %s: handling its frames failed; closing the session", self.link.peer_id)
                self.close(CloseReason.INTERNAL_ERROR)
                return
            if not self.alive:
                return

    async def _handle_chunk(self, frames: list[wire.Frame]) -> None:
        acks: dict[int, int] = {}
        v1_forwards: list[wire.Forward] = []
        subscribed = False
        for frame in frames:
            self.counters.frames_received += 1
            if self._first_frame and self.version is MeshVersion.V2 and not isinstance(frame, wire.MeshHello):
                log.warning("mesh peer %s: first v2 frame is %s, not MESH_HELLO", self.link.short_id, frame.name)
                self.close(CloseReason.PROTOCOL_ERROR)
                return
            self._first_frame = False
            if not self.alive:
                return  # refused (a bad MESH_HELLO): nothing more from this peer is acted on
            if isinstance(frame, wire.Forward):
                v1_forwards.append(frame)
                continue
            if v1_forwards:
                await self._receive_v1(v1_forwards)
                v1_forwards = []
            if isinstance(frame, wire.ForwardBatch):
                if frame.origin != self.remote_hub_id:
                    # In the direct mesh every hub hears from the origin itself: a peer forwards
                    # its own publishes only.  Anything else would let it forge another hub's
                    # messages, or poison that origin's dedup position here.
                    self._refuse(
                        CloseReason.FORGED_ORIGIN,
                        f"it forwarded messages of origin {frame.origin:016x}, not its own "
                        f"({self.remote_hub_id or 0:016x})",
                    )
                    return
                result = await self.owner.inbound.receive_batch(frame.origin, frame.sets, self.link.peer_id)
                self._account(result)
                if result.ack_seq is not None:
                    acks[frame.origin] = result.ack_seq
            else:
                subscribed |= isinstance(frame, wire.Subscribe) and not isinstance(frame, wire.Unsubscribe)
                self._handle_control(frame)
        if v1_forwards:
            await self._receive_v1(v1_forwards)
        if subscribed and self._replay_after is not None:
            # The peer announces its interest right after MESH_HELLO, in the same write.
            self._start_replay()
        if acks:
            # Acks are cumulative: the latest per origin says everything.  They wait up to
            # ACK_DELAY so one ack covers every read meanwhile: acking every read doubled the
            # writes of a busy link.
            self._pending_acks.update(acks)
            self._ack_wake.set()

    async def _ack_flusher(self) -> None:
        while True:
            await self._ack_wake.wait()
            await trio.sleep(ACK_DELAY)
            self._ack_wake = trio.Event()
            acks, self._pending_acks = self._pending_acks, {}
            for origin, seq in acks.items():
                self._queue_control(wire.ForwardAck(origin=origin, seq=seq))
                self.counters.acks_sent += 1

    async def _receive_v1(self, frames: list[wire.Forward]) -> None:
        self._account(await self.owner.inbound.receive_v1(frames, self.link.peer_id))

    def _account(self, result: InboundResult) -> None:
        self.counters.messages_received += result.delivered + result.duplicates + result.dropped_no_interest
        self.counters.duplicates_dropped += result.duplicates
        self.counters.forwards_dropped_no_interest += result.dropped_no_interest
        if result.unwanted_topics:
            self._reply_unwanted(result.unwanted_topics)

    def _reply_unwanted(self, topics: set[str]) -> None:
        """Seed: an unwanted FORWARD is answered with UNSUBSCRIBE so the peer stops sending it."""
        now = trio.current_time()
        due = [t for t in topics if now - self._unwanted_replied.get(t, -1e9) >= self.config.unwanted_reply_interval]
        for t in due:
            self._unwanted_replied[t] = now
        if due:
            self.withdraw(due)

    def _handle_control(self, frame: wire.Frame) -> None:
        if isinstance(frame, wire.Heartbeat):
            if frame.word == "ping":
                self._queue_raw(PONG_FRAME)
        elif isinstance(frame, wire.Unsubscribe):  # before Subscribe: it is a subclass
            self.owner.peer_unsubscribed(self.link, list(frame.topics))
            self._queue_control(wire.UnsubscribeAck(success=True))
        elif isinstance(frame, wire.Subscribe):
            ok = all(valid_pattern(t) for t in frame.topics)
            if ok:
                self.owner.peer_subscribed(self.link, list(frame.topics))
            self._queue_control(wire.SubscribeAck(success=ok))
        elif isinstance(frame, wire.UnsubscribeAck):  # before SubscribeAck: it is a subclass
            pass
        elif isinstance(frame, wire.SubscribeAck):
            # Acks carry no id: each answers the oldest SUBSCRIBE still waiting.
            if self._pending_subs:
                self._pending_subs.popleft()
            if not frame.success:
                self.counters.subscribes_refused += 1
        elif isinstance(frame, wire.MeshHello):
            self._on_hello(frame)
        elif isinstance(frame, wire.ForwardAck):
            self.counters.acks_received += 1
            if frame.origin == self.owner.hub_id:
                self.link.window.ack(frame.seq)

    def _on_hello(self, frame: wire.MeshHello) -> None:
        if self._hello_done:
            log.warning("mesh peer %s sent a second MESH_HELLO", self.link.short_id)
            self.close(CloseReason.PROTOCOL_ERROR)
            return
        refusal = self.owner.hello_refusal(self.link, frame.hub_id)
        if refusal is not None:
            self._refuse(CloseReason.REFUSED, refusal)
            return
        self.remote_hub_id = frame.hub_id
        self.link.remote_hub_id = frame.hub_id
        position = next((p.seq for p in frame.positions if p.origin == self.owner.hub_id), 0)
        # Resume right after what the peer already stored: nothing lost, nothing twice.
        self.link.window.resume(position)
        after = self.owner.replay_after(self.link, frame.hub_id, position)
        if after is not None:
            # The window may not hold everything after ``position`` (the peer was away past
            # resume_linger, the window overflowed, this hub restarted): replay it from the
            # log once the peer's interest is known.  A peer this hub never linked with gets
            # live forwards only (Mesh.replay_after).
            self._replay_after = after
            self._replay_due_at = trio.current_time() + self.config.subscribe_ack_timeout
        self._hello_done = True
        self._kick()

    def remote_address(self) -> str:
        """``host:port`` the peer's connection comes from (for logs), or "address unknown"."""
        try:
            addr = self.stream.get_remote_address()
        except Exception:  # not every libp2p stream type can tell
            addr = None
        return f"{addr[0]}:{addr[1]}" if addr else "address unknown"

    def _refuse(self, reason: CloseReason, why: str) -> None:
        """End the session for something the peer may not do; counted and logged with who it was."""
        self.counters.refused += 1
        log.warning("mesh peer %s (%s) refused: %s", self.link.peer_id, self.remote_address(), why)
        self.close(reason)

    def _start_replay(self) -> None:
        after = self._replay_after
        assert after is not None
        self._replay_after = None
        # Everything queued so far comes again from the log, filtered by the interest the
        # peer has now; forwards published from here on queue behind the replay.
        self.link.window.clear()
        self._replay = self.owner.open_replay(self.link, after, None)
        self._kick()

    # -- timers ------------------------------------------------------------------

    async def _timers(self) -> None:
        cfg = self.config
        tick = max(0.01, min(cfg.heartbeat_interval, cfg.subscribe_ack_timeout) / 4)
        while True:
            await trio.sleep(tick)
            now = trio.current_time()
            if now - self._last_received > cfg.heartbeat_interval * cfg.heartbeat_misses:
                self.close(CloseReason.HEARTBEAT_TIMEOUT)
                return
            if not self._hello_done and now - self.started_at > cfg.hello_timeout:
                self.close(CloseReason.HELLO_TIMEOUT)
                return
            if self._replay_after is not None and now >= self._replay_due_at:
                self._start_replay()  # the peer announced nothing: replay for what it had
            if now - self._last_ping >= cfg.heartbeat_interval:
                self._last_ping = now
                self._queue_raw(PING_FRAME)
            for pending in self._pending_subs:
                if now - pending.sent_at < cfg.subscribe_ack_timeout:
                    continue
                if pending.resends >= cfg.subscribe_resends:
                    log.warning("mesh peer %s never acknowledged SUBSCRIBE %s", self.link.short_id, pending.topics)
                    self.close(CloseReason.SUBSCRIBE_UNACKED)
                    return
                pending.resends += 1
                pending.sent_at = now
                self.counters.subscribe_resends += 1
                self._queue_raw(pending.frame)
