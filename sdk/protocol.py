"""The client side of the pub0sub client protocol, sans-IO (shaped like h11's ``Connection``).

Bytes in (:meth:`ClientProtocol.receive_data`), bytes out
(:meth:`ClientProtocol.data_to_send`), and a clock for heartbeats
(:meth:`ClientProtocol.poll`).  The async driver (:mod:`sdk.client`) and the
blocking driver (:mod:`sdk.blocking`) only move bytes and wait; every protocol
decision lives here: handshake, heartbeat bookkeeping, the subscription table,
acks matched in order, producer sequence numbers, publish batching, and what
happens to all of it across a reconnect (``docs/client-behaviour.md``).

>>> p = ClientProtocol(name="demo", producer_id=7)
>>> p.connection_made()
>>> p.data_to_send()[:1] == bytes([wire.Opcode.HELLO])
True
"""

from __future__ import annotations

import enum
import json
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, cast

import wire
from wire import ErrorCode, Opcode
from wire.limits import DEFAULT_MAX_PEER_BODY
from wire.query import parse as parse_query

from .batching import DEFAULT_FLUSH_BYTES, AckTicket, PendingBatch, PublishBuffer, Ticket, has_headers
from .commits import PendingCommits
from .errors import (
    ConnectionLostError,
    HubError,
    ProtocolError,
    SlowConsumerError,
    SubscriptionClosedError,
    UnsupportedFeatureError,
)
from .messages import Gap, Message
from .subscriptions import (
    MAX_SENT_RANGES,
    POLICIES,
    SubState,
    _Op,
    add_range,
    key_filter_of,
    parse_start,
    resolve_ack,
)
from .versions import COMMIT, HEADERS, KEY_FILTERS, QUERIES, next_version, require

#: A subscription without a key filter: every key (what KEY_FILTER's ADD and REMOVE start from).
_EVERY_KEY = wire.KeyFilter(all=True)

_PING = wire.PING.encode()
_PONG = wire.PONG.encode()
#: How many heartbeat intervals of silence mean the hub is dead (docs/client-behaviour.md).
HEARTBEAT_MISSES = 3
#: Default client-side cap on bytes buffered for one subscription before its policy applies.
DEFAULT_MAX_PENDING_BYTES = 64 << 20
#: Error codes after which reconnecting cannot help (an ACK the hub refused would be resent).
FATAL_CODES = frozenset({ErrorCode.NOT_AUTHORIZED, ErrorCode.UNSUPPORTED_VERSION, ErrorCode.INVALID_ACK})


class State(enum.Enum):
    DISCONNECTED = "disconnected"
    HANDSHAKE = "handshake"
    READY = "ready"
    CLOSED = "closed"


class ClientProtocol:
    """One client's protocol state, surviving reconnects (only the decoder is per connection)."""

    def __init__(
        self,
        *,
        name: str = "",
        token: bytes = b"",
        producer_id: int | None = None,
        heartbeat: float | None = None,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        flush_bytes: int = DEFAULT_FLUSH_BYTES,
        max_frame: int = DEFAULT_MAX_PEER_BODY,
        clock: Callable[[], float] = time.monotonic,
        address: str = "",
    ) -> None:
        self.name = name
        #: the hub's address, for errors
        self.address = address
        self.token = token
        self.clock = clock
        self.max_pending_bytes = max_pending_bytes
        self.max_frame = max_frame
        self._heartbeat_override = heartbeat
        #: heartbeat interval in seconds on the current connection (0: off)
        self.heartbeat = 0.0
        self.state = State.DISCONNECTED
        self.welcome: wire.Welcome | None = None
        #: the client protocol version the next HELLO offers: the newest, lower while stepping
        #: down to an older hub (sdk.versions)
        self.hello_version = wire.CLIENT_PROTOCOL_VERSION
        # An idempotent producer id by default, so publishes resent after a reconnect are not stored twice.
        # From the OS, not `random`: two processes that seed `random` alike (a simulation, a test run)
        # would get one id, and the hub would take the second one's frames for resends of the first's.
        pid = (secrets.randbits(63) or 1) if producer_id is None else producer_id
        self.buffer = PublishBuffer(producer_id=pid, flush_bytes=flush_bytes, emit=self.flush)
        # The per-message call goes straight to the buffer: no extra Python frame on the hot path.
        self.publish: Callable[..., bool] = self.buffer.add
        self.publish_acked: Callable[..., AckTicket] = self.buffer.add_acked
        self.publish_encoded: Callable[..., int] = self.buffer.add_encoded
        self.subs: dict[int, SubState] = {}
        #: subscriptions with acknowledgements not yet turned into ACK frames
        self._ack_dirty: list[SubState] = []
        self._next_sub_id = 1
        self._status: deque[Ticket] = deque()
        self._commits = PendingCommits()
        # Outgoing frames in order: (bytes, pending batch or None, is_publish).
        self._out: list[tuple[bytes, PendingBatch | None, bool]] = []
        self._hello = b""
        self._decoder: wire.FrameDecoder | None = None
        self.failed: BaseException | None = None
        self.last_sent = self.last_received = clock()
        #: messages received over the client's lifetime (for stats and tests)
        self.received_batches = 0

    # -- connection lifecycle -------------------------------------------------

    def connection_made(self) -> None:
        """A new transport is up: queue HELLO; everything else waits for WELCOME."""
        if self.failed is not None:
            raise self.failed
        self.state = State.HANDSHAKE
        self._decoder = wire.FrameDecoder(
            limits=wire.Limits(max_body=self.max_frame), accept=wire.HUB_TO_CLIENT_OPCODES
        )
        self._hello = wire.Hello(version=self.hello_version, client_name=self.name, token=self.token).encode()
        self.last_sent = self.last_received = self.clock()

    @property
    def version(self) -> int | None:
        """The client protocol version of the last connection (None before the first WELCOME)."""
        return self.welcome.version if self.welcome is not None else None

    def require(self, feature: tuple[str, int]) -> None:
        """Raise :class:`UnsupportedFeatureError` if the connection's version lacks ``feature``
        (one of :mod:`sdk.versions`' features)."""
        require(feature, self.version, self.address)

    def step_down(self, error: BaseException) -> bool:
        """The hub refused HELLO with ``error``: True if a fresh connection should offer the older
        version now in :attr:`hello_version`; False to give up with ``error``.

        Raises a :class:`HubError` ``UNSUPPORTED_VERSION`` naming what this client holds when the
        older version could not carry it (a subscription with a key filter, a publish with
        headers not yet acknowledged): such a client fails rather than lose its filter or headers.
        """
        lower = next_version(self.hello_version, error)
        held = self._held_feature()
        if lower is None or (held is not None and lower < held[1]):
            self.hello_version = wire.CLIENT_PROTOCOL_VERSION
            if lower is None or held is None:
                return False
            assert isinstance(error, HubError)
            raise HubError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"{error.hub_reason}; this client holds {held[0]}, which need client protocol {held[1]}",
            ) from error
        self.hello_version = lower
        return True

    def _held_feature(self) -> tuple[str, int] | None:
        """A feature of the newest version this client's state relies on, if any."""
        for state in self.subs.values():
            if state.key_filter is not None:
                return KEY_FILTERS
            if state.query is not None:
                return QUERIES
        if self.buffer.holds_headers() or any(publish and has_headers(frame) for frame, _, publish in self._out):
            return HEADERS
        return None

    def connection_lost(self, error: BaseException | None = None) -> None:
        """The transport is gone; keep what a reconnect can restore."""
        if self.state == State.CLOSED:
            return
        self.state = State.DISCONNECTED
        self._decoder = None
        self._hello = b""
        # Unsent publish frames survive; control frames are rebuilt on reconnect.
        self._out = [entry for entry in self._out if entry[2]]
        lost = error if error is not None else ConnectionLostError("connection lost")
        while self._status:
            self._status.popleft().finish(error=lost)
        self._commits.fail_all(lost)
        for sub_id, state in list(self.subs.items()):
            state.open = False
            if state.unsubscribing or state.closed:
                del self.subs[sub_id]
                state.end(None)

    def fail(self, error: BaseException) -> None:
        """Give up for good: fail every waiter, end every subscription with ``error``."""
        if self.state == State.CLOSED:
            return
        self.connection_lost(error)
        self.state = State.CLOSED
        self.failed = error
        self.buffer.fail(error)
        self._out = []
        for state in self.subs.values():
            state.end(error)
        self.subs.clear()

    def close(self) -> None:
        """A deliberate close by the application: subscriptions end quietly."""
        for state in self.subs.values():
            state.end(None)
        self.subs.clear()
        self.fail(ConnectionLostError("client closed"))

    # -- bytes out ------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Everything that may be written now, as one chunk (one socket write)."""
        if self.state == State.HANDSHAKE:
            hello, self._hello = self._hello, b""
            if hello:
                self.last_sent = self.clock()
            return hello
        if self.state != State.READY:
            return b""
        if self._ack_dirty:
            self._flush_acks()
        if not self._out:
            return b""
        out, self._out = self._out, []
        for _, batch, _ in out:
            if batch is not None:
                batch.sent = True
        self.last_sent = self.clock()
        if len(out) == 1:
            return out[0][0]
        return b"".join(entry[0] for entry in out)

    @property
    def has_output(self) -> bool:
        if self.state == State.HANDSHAKE:
            return bool(self._hello)
        return self.state == State.READY and bool(self._out or self._ack_dirty)

    def _control(self, frame: wire.Frame) -> None:
        # Publishes made before this call go first, so "publish, then subscribe" keeps its order.
        if not self.buffer.empty:
            self.flush()
        if self._ack_dirty:
            # Acks made before this frame go first: acks for a subscription must precede its UNSUB.
            self._flush_acks()
        self._out.append((frame.encode(), None, False))

    # -- publishing -----------------------------------------------------------

    # publish(topics, data, key=None) -> bool: buffer one message; true when the buffer passed
    #     ``flush_bytes`` and should be flushed now (bound to PublishBuffer.add in __init__).
    # publish_acked(topics, data, key=None) -> AckTicket: the same, in a frame that asks for a
    #     PUBLISH_ACK; the ticket completes with a PublishAck.
    # publish_encoded(topics, records, ends, headers=None) -> int: records already in the wire
    #     layout; every frame that fills is queued at once (bound to PublishBuffer.add_encoded).

    def flush(self) -> None:
        """Turn the buffered messages into one PUBLISH frame, queued for sending."""
        frame, batch = self.buffer.take_frame()
        if frame:
            self._out.append((frame, batch, True))

    @property
    def unacked(self) -> int:
        """Acked-publish frames waiting for their PUBLISH_ACK."""
        return len(self.buffer.pending)

    # -- subscriptions --------------------------------------------------------

    def subscribe(
        self,
        patterns: str | Iterable[str],
        *,
        start: Any = "latest",
        policy: str = "cancel",
        credit: int = 0,
        ack: str | None = None,
        durable: str = "",
        group: str = "",
        ack_wait: float | None = None,
        keys: Iterable[bytes | str] | None = None,
        key_prefixes: Iterable[bytes | str] | None = None,
        query: str | None = None,
        owner: Any = None,
    ) -> tuple[SubState, Ticket]:
        """Open a subscription; the ticket completes with the SUB_OK offsets or fails with the SUB_END."""
        if self.failed is not None:
            raise self.failed
        names = [patterns] if isinstance(patterns, str) else list(patterns)
        if not names:
            raise ValueError("subscribe needs at least one topic or pattern")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {sorted(POLICIES)}, got {policy!r}")
        ack = resolve_ack(ack, durable=durable, group=group)
        if credit < 0:
            raise ValueError("credit must be >= 0")
        if ack_wait is not None and not (0 < ack_wait <= 0xFFFFFFFF / 1000):
            raise ValueError(f"ack_wait must be a positive number of seconds, got {ack_wait!r}")
        if keys is not None or key_prefixes is not None:
            self.require(KEY_FILTERS)
        if query is not None:
            self.require(QUERIES)
        position, value, offsets = parse_start(start)
        state = SubState(
            self._next_sub_id,
            names,
            start=position,
            start_value=value,
            offsets=offsets,
            policy=POLICIES[policy],
            credit=credit,
            ack=ack,
            durable=durable,
            group=group,
            ack_wait=ack_wait,
            max_pending_bytes=self.max_pending_bytes,
            key_filter=None if keys is None and key_prefixes is None else key_filter_of(keys or (), key_prefixes or ()),
            query=query,
        )
        if query is not None:
            parse_query(query)  # a QuerySyntaxError naming the position, before anything is sent
        frame = state.sub_frame(resume=False)  # validates the patterns before anything is recorded
        self._next_sub_id += 1
        state.owner = owner
        ticket = Ticket()
        state.ops.append(_Op("sub", [ticket]))
        self.subs[state.sub_id] = state
        if self.state == State.READY:
            self._control(frame)
        return state, ticket

    def update(self, state: SubState, op: wire.UpdateOp, patterns: str | Iterable[str]) -> Ticket:
        """Add or remove topics/patterns (SUB_UPDATE); the ticket completes with the SUB_OK offsets."""
        names = [patterns] if isinstance(patterns, str) else list(patterns)
        frame = wire.SubUpdate(sub_id=state.sub_id, op=op, patterns=tuple(names))
        self._check_open(state)
        if op == wire.UpdateOp.ADD:
            state.patterns += [n for n in names if n not in state.patterns]
        else:
            state.patterns = [p for p in state.patterns if p not in names]
        return self._send_update(state, frame)

    def update_keys(self, state: SubState, op: wire.KeyOp, change: wire.KeyFilter) -> Ticket:
        """Change the keys a subscription delivers (KEY_FILTER); the ticket completes with its SUB_OK."""
        self._check_open(state)
        self.require(KEY_FILTERS)
        state.key_filter = (state.key_filter or _EVERY_KEY).apply(op, change)
        return self._send_update(state, wire.KeyFilterUpdate(sub_id=state.sub_id, op=op, filter=change))

    def _check_open(self, state: SubState) -> None:
        if state.closed or state.sub_id not in self.subs:
            raise state.error or SubscriptionClosedError(
                state.sub_id, ErrorCode.UNSUBSCRIBED, "subscription is closed", topics=state.topics
            )

    def _send_update(self, state: SubState, frame: wire.Frame) -> Ticket:
        ticket = Ticket()
        state.ops.append(_Op("update", [ticket]))
        if self.state == State.READY:
            self._control(frame)
        # Otherwise the (re)subscription carries the new patterns and keys, and its SUB_OK completes the ticket.
        return ticket

    def unsubscribe(self, state: SubState) -> None:
        if state.closed:
            self.subs.pop(state.sub_id, None)
            return
        state.unsubscribing = True
        state.end(None)
        if self.state == State.READY and state.sub_id in self.subs:
            self._control(wire.Unsub(sub_id=state.sub_id))
        else:
            self.subs.pop(state.sub_id, None)

    def take(self, state: SubState) -> wire.RecordBatch | Gap | None:
        """The next buffered item of a subscription (None: nothing buffered); grants credit as it goes."""
        items = state.items
        if not items:
            return None
        item = items.popleft()
        if type(item) is wire.RecordBatch:
            state.pending_bytes -= len(item.records)
            if state.credit:
                state.since_grant += item.count
                # Grant in halves of the window: few CREDIT frames, and the hub never runs dry.
                if state.since_grant * 2 >= state.credit and self.state == State.READY and state.open:
                    self._out.append((wire.Credit(sub_id=state.sub_id, credit=state.since_grant).encode(), None, False))
                    state.since_grant = 0
        return item

    def ack(self, state: SubState, messages: Iterable[Message]) -> None:
        """Acknowledge delivered messages; they go out, merged into ranges, with the next write."""
        if not state.sends_acks:
            return
        for msg in messages:
            self.ack_range(state, msg.topic, msg.offset, msg.offset)

    def ack_range(self, state: SubState, topic: str, first: int, last: int) -> None:
        """Acknowledge offsets ``first..last`` of ``topic`` (merged with other pending acks, not yet sent)."""
        if not state.sends_acks:
            return  # the hub keeps no position for this subscription: an ACK would be ignored
        ranges = state.acks.get(topic)
        if ranges is None:
            state.acks[topic] = [[first, last]]
        else:
            add_range(ranges, first, last)
        if not state.ack_dirty:
            state.ack_dirty = True
            self._ack_dirty.append(state)

    def _flush_acks(self) -> None:
        """Turn pending acknowledgements into ACK frames: one per subscription (per 65535 ranges)."""
        dirty, self._ack_dirty = self._ack_dirty, []
        for state in dirty:
            state.ack_dirty = False
            if self.subs.get(state.sub_id) is not state:
                state.acks = {}
                continue  # ended by the hub: it has forgotten the sub_id and would ignore the ACK
            acks = _take_delivered(state)
            ranges: list[wire.AckRange] = []
            for topic, spans in acks.items():
                ranges += [wire.AckRange(topic=topic, first_offset=a, last_offset=b) for a, b in spans]
                sent = state.acks_sent.get(topic)
                if sent is None:
                    state.acks_sent[topic] = [list(span) for span in spans]
                else:
                    for a, b in spans:
                        add_range(sent, a, b)
                    if len(sent) > MAX_SENT_RANGES:
                        del sent[: len(sent) - MAX_SENT_RANGES]  # the oldest: most likely below the hub's floor
            for i in range(0, len(ranges), 0xFFFF):
                self._out.append(
                    (wire.Ack(sub_id=state.sub_id, ranges=tuple(ranges[i : i + 0xFFFF])).encode(), None, False)
                )

    def commit(self, state: SubState) -> Ticket:
        """Send the acks made so far, then COMMIT; the ticket completes with ``{topic: offset}``
        (the first offset not acknowledged) once the hub has the position on disk."""
        if self.failed is not None:
            raise self.failed
        if not (state.durable or state.group):
            raise ValueError("only durable subscriptions and groups keep a position to commit")
        self.require(COMMIT)
        if state.closed:
            raise state.error or SubscriptionClosedError(
                state.sub_id, ErrorCode.UNSUBSCRIBED, "subscription is closed", topics=state.topics
            )
        if self.state != State.READY or not state.open:
            raise ConnectionLostError("not connected: commit again once the subscription is open")
        ref, ticket = self._commits.add(state.sub_id)
        self._control(wire.Commit(sub_id=state.sub_id, ref=ref))
        return ticket

    def status(self) -> Ticket:
        """Ask for the hub's status document; the ticket completes with the parsed JSON."""
        if self.failed is not None:
            raise self.failed
        if self.state != State.READY:
            raise ConnectionLostError("not connected")
        ticket = Ticket()
        self._status.append(ticket)
        self._control(wire.Status())
        return ticket

    # -- bytes in -------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Consume bytes from the hub.  Raises ConnectionLostError/HubError/ProtocolError when fatal."""
        decoder = self._decoder
        if decoder is None:
            return
        self.last_received = self.clock()
        try:
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                kind = type(frame)
                if kind is wire.Deliver or kind is wire.DeliverHeaders:
                    frame = cast("wire.Deliver", frame)  # both carry sub_id and batch (its headers inside)
                    state = self.subs.get(frame.sub_id)
                    if state is not None and not state.closed:
                        self.received_batches += 1
                        if not state.deliver(frame.batch):
                            self._cancel_slow(state)
                        elif state.acks_waiting and not state.ack_dirty:
                            # The delivery may have passed acks made before a reconnect.
                            state.ack_dirty = True
                            self._ack_dirty.append(state)
                else:
                    self._dispatch(frame)
        except wire.ProtocolError as exc:
            raise ProtocolError(exc) from None

    def _dispatch(self, frame: wire.Frame) -> None:
        op = frame.OPCODE
        if self.state == State.HANDSHAKE and op not in (Opcode.WELCOME, Opcode.ERROR, Opcode.HEARTBEAT):
            raise wire.RemoteProtocolError(f"{op.name} before WELCOME", code=ErrorCode.UNEXPECTED_FRAME)
        if isinstance(frame, wire.Heartbeat):
            if frame.word == "ping":
                if self.state == State.HANDSHAKE:
                    self._hello += _PONG
                else:
                    self._out.append((_PONG, None, False))
        elif isinstance(frame, wire.PublishAck):
            try:
                self.buffer.on_ack(frame)
            except Exception as exc:
                raise wire.RemoteProtocolError(str(exc), code=ErrorCode.UNEXPECTED_FRAME) from None
        elif isinstance(frame, wire.SubOk):
            self._on_sub_ok(frame)
        elif isinstance(frame, wire.Gap):
            state = self.subs.get(frame.sub_id)
            if state is not None and not state.closed:
                state.add_gap(Gap(frame.topic, frame.first_offset, frame.dropped, "hub"))
        elif isinstance(frame, wire.SubEnd):
            self._on_sub_end(frame)
        elif isinstance(frame, wire.StatusReply):
            if not self._status:
                raise wire.RemoteProtocolError("STATUS_REPLY without a STATUS", code=ErrorCode.UNEXPECTED_FRAME)
            ticket = self._status.popleft()
            try:
                ticket.finish(json.loads(frame.document.decode("utf-8")))
            except ValueError as exc:
                ticket.finish(error=ProtocolError(wire.RemoteProtocolError(f"status document is not JSON: {exc}")))
        elif isinstance(frame, wire.Committed):
            positions = {p.topic: p.offset for p in frame.positions}
            if not self._commits.committed(frame.sub_id, frame.ref, positions):
                raise wire.RemoteProtocolError(
                    f"COMMITTED {frame.ref} without a COMMIT", code=ErrorCode.UNEXPECTED_FRAME
                )
        elif isinstance(frame, wire.Welcome):
            self._on_welcome(frame)
        elif isinstance(frame, wire.Error):
            raise HubError(frame.code, frame.reason, ref=frame.ref)

    def _on_welcome(self, frame: wire.Welcome) -> None:
        if self.state != State.HANDSHAKE:
            raise wire.RemoteProtocolError("WELCOME twice", code=ErrorCode.UNEXPECTED_FRAME)
        self.welcome = frame
        self.state = State.READY
        # The next connection offers the newest version again: a hub upgraded meanwhile speaks it.
        self.hello_version = wire.CLIENT_PROTOCOL_VERSION
        feature, needs = HEADERS
        self.buffer.refuse_headers(
            None
            if frame.version >= needs
            else partial(UnsupportedFeatureError, feature, needs=needs, version=frame.version, address=self.address)
        )
        self.buffer.set_max_body(frame.max_body)
        override = self._heartbeat_override
        self.heartbeat = override if override is not None else frame.heartbeat_ms / 1000
        self._resume()

    def _resume(self) -> None:
        """After WELCOME: re-open subscriptions, resend acked batches not yet acknowledged."""
        control: list[tuple[bytes, PendingBatch | None, bool]] = []
        for state in self.subs.values():
            state.delivered_end = {}  # nothing is delivered on this connection yet
            resume = state.confirmed
            tickets = [t for op in state.ops for t in op.tickets]
            state.ops = deque([_Op("resume" if resume else "sub", tickets)])
            state.since_grant = 0
            control.append((state.sub_frame(resume=resume).encode(), None, False))
        for state in self.subs.values():
            # Everything acknowledged before goes again, once the hub has delivered it again on
            # this connection (an ACK needs its sub_id open and the offsets delivered).
            for topic, spans in state.acks_sent.items():
                for a, b in spans:
                    self.ack_range(state, topic, a, b)
        if self._ack_dirty:
            saved, self._out = self._out, control
            self._flush_acks()
            control, self._out = self._out, saved
        resend = [(batch.frame, batch, True) for batch in self.buffer.pending if batch.sent]
        # Unsent publish frames (made while disconnected) follow: sequence order is kept.
        self._out = control + resend + self._out

    def _on_sub_ok(self, frame: wire.SubOk) -> None:
        state = self.subs.get(frame.sub_id)
        if state is None or not state.ops:
            return
        op = state.ops.popleft()
        offsets = {o.topic: o.offset for o in frame.offsets}
        latest = state.start == wire.StartPosition.LATEST and not state.durable
        if op.kind == "resume" and not state.group:
            # A latest subscription misses what was published meanwhile; a durable one with
            # ack="none" misses what the hub counted as delivered but the lost connection never
            # brought here.  Either way: a Gap, never a silent skip.
            for topic, offset in offsets.items():
                seen = state.next_offsets.get(topic)
                if seen is not None and offset > seen:
                    state.add_gap(Gap(topic, seen, offset - seen, "reconnect"))
        for topic, offset in offsets.items():
            seen = state.next_offsets.get(topic)
            if seen is None or (op.kind == "resume" and latest) or (op.kind != "resume" and offset > seen):
                state.next_offsets[topic] = offset
        state.open = state.confirmed = True
        for ticket in op.tickets:
            ticket.finish(offsets)

    def _on_sub_end(self, frame: wire.SubEnd) -> None:
        state = self.subs.pop(frame.sub_id, None)
        if state is None:
            return
        error: BaseException | None
        if frame.code == ErrorCode.UNSUBSCRIBED and state.unsubscribing:
            error = None
        elif frame.code == ErrorCode.OUT_OF_CAPACITY:
            error = SlowConsumerError(state.sub_id, frame.reason, topics=state.topics)
        else:
            error = SubscriptionClosedError(state.sub_id, frame.code, frame.reason, topics=state.topics)
        state.end(error)
        ended = SubscriptionClosedError(state.sub_id, frame.code, frame.reason, topics=state.topics)
        self._commits.fail_sub(state.sub_id, error or ended)

    def _cancel_slow(self, state: SubState) -> None:
        """The client-side buffer passed max_pending_bytes under the cancel policy."""
        error = SlowConsumerError(
            state.sub_id,
            f"client-side buffer passed max_pending_bytes={state.max_pending_bytes}",
            topics=state.topics,
            client_side=True,
            pending_bytes=state.pending_bytes,
        )
        state.end(error)
        state.unsubscribing = True
        if self.state == State.READY:
            self._out.append((wire.Unsub(sub_id=state.sub_id).encode(), None, False))

    # -- timers ---------------------------------------------------------------

    def poll(self) -> float:
        """Run the heartbeat timers: queue a ping when idle, raise when the hub went silent.

        Returns the seconds until the next call is useful.
        """
        interval = self.heartbeat
        if self.state != State.READY or interval <= 0:
            return 3600.0
        now = self.clock()
        silent = now - self.last_received
        limit = HEARTBEAT_MISSES * interval
        if silent >= limit:
            raise ConnectionLostError(f"nothing received from the hub for {silent:.1f}s (heartbeat {interval:g}s)")
        idle = now - self.last_sent
        if idle >= interval and not self._out:
            self._out.append((_PING, None, False))
            idle = 0.0
        return max(0.0, min(interval - idle, limit - silent))


def _take_delivered(state: SubState) -> dict[str, list[list[int]]]:
    """Take the acks of ``state`` that the hub delivered on this connection; keep the rest waiting.

    Normally every ack follows its delivery and all go.  After a reconnect, acks for
    messages the old connection received wait until the hub delivers those offsets again
    (a durable subscription restarts at its acknowledged floor; the SDK drops what it
    already had, but still counts it as delivered here).
    """
    ready: dict[str, list[list[int]]] = {}
    waiting: dict[str, list[list[int]]] = {}
    delivered = state.delivered_end
    for topic, spans in state.acks.items():
        end = delivered.get(topic, 0)
        if spans[-1][1] < end:
            ready[topic] = spans
            continue
        for a, b in spans:
            if b < end:
                ready.setdefault(topic, []).append([a, b])
            elif a < end:
                ready.setdefault(topic, []).append([a, end - 1])
                waiting.setdefault(topic, []).append([end, b])
            else:
                waiting.setdefault(topic, []).append([a, b])
    state.acks = waiting
    state.acks_waiting = bool(waiting)
    return ready
