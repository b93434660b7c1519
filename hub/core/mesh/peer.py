"""The protocol state of one mesh stream with a peer hub.

:class:`PeerProtocol` speaks one negotiated version on one stream (the peer's
record across streams is its :class:`~hub.core.mesh.link.PeerLink`), as a state
machine without I/O: frames in (:meth:`PeerProtocol.receive`),
bytes out (:meth:`PeerProtocol.take_chunk`), the time in (:meth:`PeerProtocol.tick`).
The shell's ``hub.mesh.session.PeerSession`` owns the stream and runs the reader,
writer (with its pacing), timer and ack tasks around it; a simulator can drive
the very same object.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import wire
from wire.limits import MAX_TOPICS_PER_MESSAGE

from ..events import ev
from .config import MeshConfig
from .inbound import V1_ORIGIN, InboundForwards, InboundResult
from .interest import LocalInterest, valid_pattern
from .link import silence_reason
from .protocols import MAX_BATCH_BODY, MAX_SETS_PER_BATCH, MeshVersion, forward_frame
from .replay import Replay, ReplaySource
from .status import CloseReason

if TYPE_CHECKING:
    from ..clock import Clock
    from .link import PeerLink

log = logging.getLogger("hub.mesh.session")

PING_FRAME = wire.PING.encode()
PONG_FRAME = wire.PONG.encode()
#: Positions fit a u16 count in MESH_HELLO.
MAX_HELLO_POSITIONS = 0xFFFF


class ProtocolOwner(Protocol):
    """What a :class:`PeerProtocol` needs from its mesh (``hub.core.mesh.core.MeshCore``)."""

    hub_id: int
    config: MeshConfig
    local: LocalInterest
    inbound: InboundForwards
    replay: ReplaySource | None

    def hello_positions(self) -> dict[int, int]: ...

    def hello_refusal(self, link: PeerLink, hub_id: int) -> str | None: ...

    def replay_after(self, link: PeerLink, hub_id: int, position: int) -> int | None: ...

    def open_replay(self, link: PeerLink, after: int, before: int | None) -> Replay | None: ...

    def peer_subscribed(self, link: PeerLink, topics: list[str]) -> None: ...

    def peer_unsubscribed(self, link: PeerLink, topics: list[str]) -> None: ...


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


def _nothing() -> None:
    pass


class PeerProtocol:
    """Speaks one negotiated mesh version on one stream until it closes; no I/O of its own.

    The shell connects four hooks: ``on_urgent`` (something the write pacing never holds
    was queued: control frames, a replay), ``on_forwards`` (forwards were queued),
    ``on_acks`` (cumulative acks wait to be flushed) and ``on_close`` (the session ended).
    """

    def __init__(self, owner: ProtocolOwner, link: PeerLink, version: MeshVersion, *, outbound: bool, clock: Clock):
        self.owner = owner
        self.link = link
        self.version = version
        self.outbound = outbound
        self.config = owner.config
        self.counters = link.counters
        self.clock = clock
        self.reason: CloseReason | None = None
        now = clock.monotonic()
        self.started_at = now
        self.on_urgent: Callable[[], None] = _nothing
        self.on_forwards: Callable[[], None] = _nothing
        self.on_acks: Callable[[], None] = _nothing
        self.on_close: Callable[[], None] = _nothing
        self._pending_acks: dict[int, int] = {}
        self._control: list[bytes] = []
        self._v1_out = bytearray()
        self._v1_out_frames = 0
        self._pending_subs: deque[_PendingSubscribe] = deque()
        self.last_received = now
        self._last_ping = now
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

    def start(self) -> None:
        """The stream is up: MESH_HELLO first (v2), then this hub's interest."""
        self.counters.sessions += 1
        if self.version.sequenced:
            self._queue_control(self._hello_frame())
        self.announce(list(self.owner.local.patterns))

    def close(self, reason: CloseReason) -> None:
        if self.reason is None:
            self.reason = reason
            # Shown at once: the stream's reset may take up to a second on a dead link,
            # and status must not say "not connected" without saying why.
            self.link.last_close = reason
            self.link.session_closed(reason)  # counted and logged with its reason
        self.on_close()

    # -- what the mesh asks of a session -----------------------------------------

    def announce(self, patterns: list[str]) -> None:
        now = self.clock.monotonic()
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
        self.on_forwards()
        return True

    def forwards_queued(self) -> None:
        """The mesh pushed forwards into this peer's window."""
        self.on_forwards()

    # -- bytes out ---------------------------------------------------------------

    def _queue_control(self, frame: wire.Frame) -> None:
        self._queue_raw(frame.encode())

    def _queue_raw(self, encoded: bytes) -> None:
        self._control.append(encoded)
        self.counters.frames_sent += 1
        self.on_urgent()

    def _hello_frame(self) -> wire.MeshHello:
        positions = sorted(self.owner.hello_positions().items())[:MAX_HELLO_POSITIONS]
        return wire.MeshHello(
            hub_id=self.owner.hub_id,
            positions=tuple(wire.ResumePosition(origin=o, seq=s) for o, s in positions if o != V1_ORIGIN),
        )

    def take_chunk(self) -> bytes | None:
        """What to write next, as one chunk of about ``write_chunk`` bytes (None: nothing).

        Control frames first; then, on v2, a replay from the log if one is running, else
        the window's unsent forwards, each FORWARD_BATCH up to the batch bounds.
        """
        parts = self._control
        size = sum(map(len, parts))
        self._control = []
        limit = self.config.write_chunk
        if self.version.sequenced:
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
                frame = forward_frame(self.owner.hub_id, entries, headers=self.version.headers)
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

    def take_acks(self) -> None:
        """Turn the cumulative acks gathered since the last call into FORWARD_ACK frames."""
        acks, self._pending_acks = self._pending_acks, {}
        for origin, seq in acks.items():
            self._queue_control(wire.ForwardAck(origin=origin, seq=seq))
            self.counters.acks_sent += 1

    # -- frames in ---------------------------------------------------------------

    def receive(self, frames: list[wire.Frame]) -> None:
        """Handle the frames of one read, in order; acks for them are gathered (``on_acks``)."""
        self.last_received = self.clock.monotonic()
        acks: dict[int, int] = {}
        v1_forwards: list[wire.Forward] = []
        subscribed = False
        inbound = self.owner.inbound
        for frame in frames:
            self.counters.frames_received += 1
            if self._first_frame and self.version.sequenced and type(frame) is not wire.MeshHello:
                self.link.misbehaved(CloseReason.PROTOCOL_ERROR, "sent %s first, not MESH_HELLO", frame.name)
                self.close(CloseReason.PROTOCOL_ERROR)
                return
            self._first_frame = False
            if not self.alive:
                return  # refused (a bad MESH_HELLO): nothing more from this peer is acted on
            kind = type(frame)
            if kind is wire.Forward:
                v1_forwards.append(frame)  # type: ignore[arg-type]
                continue
            if v1_forwards:
                self._account(inbound.receive_v1(v1_forwards, self.link.peer_id))
                v1_forwards = []
            if kind is wire.ForwardBatch or kind is wire.ForwardBatchHeaders:
                batch: wire.ForwardBatch = frame  # type: ignore[assignment]
                if batch.origin != self.remote_hub_id:
                    # In the direct mesh every hub hears from the origin itself: a peer forwards
                    # its own publishes only.  Anything else would let it forge another hub's
                    # messages, or poison that origin's dedup position here.
                    self.refuse(
                        CloseReason.FORGED_ORIGIN,
                        f"it forwarded messages of origin {batch.origin:016x}, not its own "
                        f"({self.remote_hub_id or 0:016x})",
                    )
                    return
                result = inbound.receive_batch(batch.origin, batch.sets, self.link.peer_id)
                self._account(result)
                if result.ack_seq is not None:
                    acks[batch.origin] = result.ack_seq
            else:
                subscribed |= kind is wire.Subscribe
                self._handle_control(frame)
        if v1_forwards:
            self._account(inbound.receive_v1(v1_forwards, self.link.peer_id))
        if subscribed and self._replay_after is not None:
            # The peer announces its interest right after MESH_HELLO, in the same write.
            self._start_replay()
        if acks:
            # Acks are cumulative: the latest per origin says everything.  The shell flushes
            # them after a short delay, so one ack covers every read meanwhile.
            self._pending_acks.update(acks)
            self.on_acks()

    def _account(self, result: InboundResult) -> None:
        self.counters.messages_received += result.delivered + result.duplicates + result.dropped_no_interest
        self.counters.duplicates_dropped += result.duplicates
        self.counters.forwards_dropped_no_interest += result.dropped_no_interest
        if result.unwanted_topics:
            self._reply_unwanted(result.unwanted_topics)

    def _reply_unwanted(self, topics: set[str]) -> None:
        """Seed: an unwanted FORWARD is answered with UNSUBSCRIBE so the peer stops sending it."""
        now = self.clock.monotonic()
        due = [t for t in topics if now - self._unwanted_replied.get(t, -1e9) >= self.config.unwanted_reply_interval]
        for t in due:
            self._unwanted_replied[t] = now
        if due:
            self.withdraw(due)

    def _handle_control(self, frame: wire.Frame) -> None:
        kind = type(frame)
        if kind is wire.Heartbeat:
            if frame.word == "ping":  # type: ignore[attr-defined]
                self._queue_raw(PONG_FRAME)
            else:
                self.link.pong_received(self.clock.monotonic())
        elif kind is wire.Unsubscribe:
            self.owner.peer_unsubscribed(self.link, list(frame.topics))  # type: ignore[attr-defined]
            self._queue_control(wire.UnsubscribeAck(success=True))
        elif kind is wire.Subscribe:
            topics = list(frame.topics)  # type: ignore[attr-defined]
            ok = all(valid_pattern(t) for t in topics)
            if ok:
                self.owner.peer_subscribed(self.link, topics)
            self._queue_control(wire.SubscribeAck(success=ok))
        elif kind is wire.UnsubscribeAck:
            pass
        elif kind is wire.SubscribeAck:
            # Acks carry no id: each answers the oldest SUBSCRIBE still waiting.
            if self._pending_subs:
                self._pending_subs.popleft()
            if not frame.success:  # type: ignore[attr-defined]
                self.counters.subscribes_refused += 1
        elif kind is wire.MeshHello:
            self._on_hello(frame)  # type: ignore[arg-type]
        elif kind is wire.ForwardAck:
            self.counters.acks_received += 1
            if frame.origin == self.owner.hub_id:  # type: ignore[attr-defined]
                self.link.window.ack(frame.seq)  # type: ignore[attr-defined]

    def _on_hello(self, frame: wire.MeshHello) -> None:
        if self._hello_done:
            self.link.misbehaved(CloseReason.PROTOCOL_ERROR, "sent a second MESH_HELLO")
            self.close(CloseReason.PROTOCOL_ERROR)
            return
        refusal = self.owner.hello_refusal(self.link, frame.hub_id)
        if refusal is not None:
            self.refuse(CloseReason.REFUSED, refusal)
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
            # live forwards only (MeshCore.replay_after).
            self._replay_after = after
            self._replay_due_at = self.clock.monotonic() + self.config.subscribe_ack_timeout
        self._hello_done = True
        self.on_urgent()

    #: Where the peer's connection comes from, for logs (set by the shell).
    remote_address = "address unknown"

    def refuse(self, reason: CloseReason, why: str) -> None:
        """End the session for something the peer may not do; counted and logged with who it was."""
        self.counters.refused += 1
        log.warning("mesh peer %s (%s) refused: %s", self.link.key, self.remote_address, why,
                    extra=ev("mesh_peer_refused", peer=self.link.key, reason=reason.value))
        self.close(reason)

    def _start_replay(self) -> None:
        after = self._replay_after
        assert after is not None
        self._replay_after = None
        # Everything queued so far comes again from the log, filtered by the interest the
        # peer has now; forwards published from here on queue behind the replay.
        self.link.window.clear()
        self._replay = self.owner.open_replay(self.link, after, None)
        self.on_urgent()

    # -- time --------------------------------------------------------------------

    def tick(self) -> None:
        """Heartbeats, timeouts, resends: called every few hundred ms by the shell."""
        cfg = self.config
        now = self.clock.monotonic()
        silent = silence_reason(cfg, now, last_received=self.last_received, started_at=self.started_at,
                                greeted=self._hello_done)  # fmt: skip
        if silent is not None:
            self.close(silent)
            return
        if self._replay_after is not None and now >= self._replay_due_at:
            self._start_replay()  # the peer announced nothing: replay for what it had
        if now - self._last_ping >= cfg.heartbeat_interval:
            self._last_ping = now
            self.link.ping_sent(now)
            self._queue_raw(PING_FRAME)
        for pending in self._pending_subs:
            if now - pending.sent_at < cfg.subscribe_ack_timeout:
                continue
            if pending.resends >= cfg.subscribe_resends:
                self.link.misbehaved(CloseReason.SUBSCRIBE_UNACKED, "never acknowledged SUBSCRIBE %s", pending.topics)
                self.close(CloseReason.SUBSCRIBE_UNACKED)
                return
            pending.resends += 1
            pending.sent_at = now
            self.counters.subscribe_resends += 1
            self._queue_raw(pending.frame)

    def tick_interval(self) -> float:
        cfg = self.config
        return max(0.01, min(cfg.heartbeat_interval, cfg.subscribe_ack_timeout) / 4)
