"""One client's session and its subscriptions: what the hub knows of a connection, without its socket.

The shell's connection (``hub.shell.connection``) owns the socket and two tasks;
it hands received bytes to the core and sends what this session's
:class:`OutboundQueue` holds.  Everything decided about a client lives here:
its subscriptions, its bounded queue and the slow-consumer policy applied to it,
credit, held batches, when it is done, and why.  Output is announced through the
hub's :class:`OutputBatch` to the session's :class:`Transport`, so a whole input
chunk's output leaves in one send.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from wire import (
    CLIENT_TO_HUB_OPCODES,
    AckMode,
    Error,
    ErrorCode,
    FrameDecoder,
    Limits,
    SlowConsumerPolicy,
    StartPosition,
)

from .events import ev
from .flushing import OutputBatch
from .outbound import OutboundQueue
from .stats import HubStats, bump

if TYPE_CHECKING:
    from wire import KeyFilter

    from ..storage.batches import SharedBatch
    from .auth import Identity, Verification
    from .clock import Clock
    from .consumers import ConsumerState
    from .key_filters import KeyMatcher
    from .work import Job, WorkQueue

log = logging.getLogger("pub0sub.hub.connection")


class CloseReason(enum.Enum):
    """Why a client connection ended; carried into logs (the mesh's sessions have their own,
    in the same style: ``hub.core.mesh.status.CloseReason``)."""

    #: The client closed its side of the connection.
    CLIENT_CLOSED = "client_closed"
    #: The client sent an ERROR frame.
    CLIENT_ERROR = "client_error"
    #: The client sent bytes that are not a valid frame, or a frame out of place (ERROR sent).
    PROTOCOL_ERROR = "protocol_error"
    #: Nothing arrived for ``heartbeat_misses`` heartbeat intervals (ERROR sent).
    HEARTBEAT_TIMEOUT = "heartbeat_timeout"
    #: A named limit was hit (ERROR sent).
    LIMIT_EXCEEDED = "limit_exceeded"
    #: Replies to the client's own requests piled up unread (ERROR sent).
    NOT_READING = "not_reading"
    #: The hub is shutting down (ERROR sent).
    SHUTDOWN = "shutdown"
    #: Reading from the socket failed.
    READ_FAILED = "read_failed"
    #: Writing to the socket failed.
    WRITE_FAILED = "write_failed"
    #: Bad or missing credentials, or credentials a reload revoked (ERROR sent).
    NOT_AUTHORIZED = "not_authorized"


class Transport(Protocol):
    """What a session needs from the shell's side of its connection."""

    def flush_now(self) -> None:
        """Send queued output from the calling task, without waiting (see :mod:`hub.core.flushing`)."""
        ...

    def wake_writer(self) -> None:
        """Queued output: the writer task should send it."""
        ...

    def closing(self) -> None:
        """The session closed: send what is queued (its ERROR frame), then hang up soon."""
        ...


class SlowConsumers(Protocol):
    """The slow-consumer policies (``hub.core.subscribing``), applied when a queue is full."""

    def make_room(self, session: ClientSession, sub: Subscription, batch: SharedBatch, nbytes: int) -> bool: ...

    def held_overflow(self, session: ClientSession, sub: Subscription, batch: SharedBatch) -> None: ...


#: How a subscription is served: ``live`` (router -> queue), ``follower`` (reads the logs),
#: ``durable`` (a named follower whose position the hub keeps), ``group`` (a group member).
SUBSCRIPTION_KINDS = ("live", "follower", "durable", "group")


@dataclass(eq=False, kw_only=True)
class Subscription:
    """Identity-hashed: the routing table keys on the object itself."""

    session: ClientSession
    sub_id: int
    patterns: list[str]
    start: StartPosition = StartPosition.LATEST
    policy: SlowConsumerPolicy = SlowConsumerPolicy.CANCEL
    ack_mode: AckMode = AckMode.NONE
    #: Messages the client still allows (None: no credit limit).
    credit: int | None = None
    closed: bool = False
    #: True: the router delivers directly; False: a follower or group reads the log.
    live: bool = True
    follower: Follower | None = None
    group: Group | None = None
    #: durable state (named subscriptions)
    consumer: ConsumerState | None = None
    #: A subscription narrowed by its user's deny rules (``hub.core.acl``): topics it says
    #: True for are never delivered to it.  None: nothing to hold back (most subscriptions).
    denied: Callable[[str], bool] | None = None
    delivered_messages: int = 0
    dropped_messages: int = 0
    gap_notices: int = 0
    #: Messages queued on the connection for this subscription, not yet written.
    queued_messages: int = 0
    #: Batches waiting for credit, oldest first.
    held_batches: list[SharedBatch] = field(default_factory=list)
    #: The record keys it delivers (``hub.core.key_filters``): the entries KEY_FILTER commands
    #: left, and what delivery checks -- None when every key goes (most subscriptions).
    keys: KeyFilter | None = None
    key_filter: KeyMatcher | None = None
    #: Its tag query (``wire.query``) over a batch's headers block, and the text it was given as.
    query: Callable[[bytes], bool] | None = None
    query_text: str | None = None

    def wake(self) -> None:
        """New data in a followed topic (or new credit): let the follower look."""
        if self.follower is not None:
            self.follower.wake()

    @property
    def kind(self) -> str:
        """One of :data:`SUBSCRIPTION_KINDS`: how the hub delivers to it (see hub/core/subscribing.py)."""
        return "group" if self.group else "durable" if self.consumer else "follower" if self.follower else "live"

    def status(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "group": self.group.name if self.group else None,
            "durable": self.consumer.name if self.consumer else None,
            "sub_id": self.sub_id,
            "patterns": list(self.patterns),
            "start": self.start.name.lower(),
            "policy": self.policy.name.lower().replace("_", "-"),
            "credit": self.credit,
            "query": self.query_text,
            "keys": None if self.keys is None else {"all": self.keys.all, "keys": len(self.keys.keys),
                                                    "prefixes": len(self.keys.prefixes)},
            "delivered_messages": self.delivered_messages,
            "dropped_messages": self.dropped_messages,
            "gap_notices": self.gap_notices,
            "queued_messages": self.queued_messages,
        }


class Follower(Protocol):
    """A subscription served from the logs (``hub.core.follower.LogFollower``)."""

    def wake(self) -> None: ...

    def stop(self) -> None: ...

    def patterns_changed(self) -> None: ...

    def position_of(self, topic: str) -> int: ...

    def ack_refusal(self, topic: str, first: int, last: int) -> str | None: ...


class Group(Protocol):
    """The consumer group a subscription is a member of (``hub.core.groups.ConsumerGroup``)."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> ConsumerState: ...

    def wake(self) -> None: ...

    def ack_refusal(self, topic: str, first: int, last: int) -> str | None: ...

    def ack(self, topic: str, first: int, last: int) -> None: ...


@functools.cache
def _limits(max_body: int) -> Limits:
    """One (frozen) Limits for every session of a hub, not one each."""
    return Limits(max_body=max_body)


class ClientSession:
    def __init__(
        self,
        conn_id: int,
        peer: str,
        *,
        max_body: int,
        max_pending_bytes: int,
        clock: Clock,
        output: OutputBatch,
        stats: HubStats,
        work: WorkQueue,
        policies: SlowConsumers,
    ) -> None:
        self.conn_id = conn_id
        self.peer = peer
        self.client_name = ""
        self.decoder = FrameDecoder(limits=_limits(max_body), accept=CLIENT_TO_HUB_OPCODES)
        self.out = OutboundQueue(max_pending_bytes, stats)
        self.subs: dict[int, Subscription] = {}
        self.topic_count = 0
        #: topics this connection created by publishing to new names (hub.core.topic_budget)
        self.topics_created = 0
        self.greeted = False
        #: Who the client is (``hub.core.auth``); None on a hub without a users file.
        self.identity: Identity | None = None
        #: HELLO's secret waiting for its slow hash check (the shell runs it, then ``HubCore.verified``).
        self.auth_job: Verification | None = None
        #: the client protocol version agreed in HELLO
        self.version = 0
        now = clock.monotonic()
        self.last_received = now
        self.last_sent = now
        self.closing: CloseReason | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        self.messages_in = 0
        #: Set by the shell when its connection starts.
        self.transport: Transport | None = None
        #: Log followers and groups that stopped because this queue was over half full.
        self._room_waiters: dict[Job, None] = {}
        self._clock = clock
        self._output = output
        self._stats = stats
        self._work = work
        self._policies = policies

    # -- ending ------------------------------------------------------------------

    def close(self, reason: CloseReason, error: Error | None = None) -> None:
        """Close once: drop queued output, queue ``error`` (if any), then the shell hangs up."""
        if self.closing is not None:
            return
        self.closing = reason
        self._stats.discarded_on_close += self.out.clear()
        if error is not None:
            self.out.push_control(error.encode())
            bump(self._stats.errors_sent, error.code.name)
            log.info("connection %d (%s): %s: %s", self.conn_id, self.peer, error.code.name, error.reason,
                     extra=ev("conn_error_sent", conn=self.conn_id, peer=self.peer, reason=reason.value,
                              x_code=error.code.name))
        if reason is CloseReason.PROTOCOL_ERROR:
            self._stats.protocol_errors += 1
        self._wake_room_waiters()  # they find the session closing and stop
        if self.transport is not None:
            self.transport.closing()

    def unlink(self) -> None:
        """The connection has ended: drop the references back to this session (transport,
        subscriptions, the frames in a decoding error's traceback), so that nothing of it
        waits for the cyclic collector."""
        self.transport = None
        error: BaseException | None = self.decoder.error
        while error is not None:  # the error and the one it was raised from
            error.__traceback__ = None
            error = error.__context__
        self.subs = {}
        self._room_waiters = {}

    def fail(
        self, code: ErrorCode, reason: str, *, ref: int = 0, why: CloseReason = CloseReason.PROTOCOL_ERROR
    ) -> None:
        self.close(why, Error(code=code, reason=reason, ref=ref))

    # -- output ------------------------------------------------------------------

    def _ready(self) -> None:
        if self.transport is not None:
            self._output.ready(self.transport)

    def send_control(self, frame: bytes) -> None:
        if self.closing is not None:
            return
        out = self.out
        already = out.control_bytes
        out.push_control(frame)
        if already and out.control_bytes > out.cap:
            # Only responses to the client's own requests are queued here: a client that
            # keeps asking without reading is cut off at the cap, as a slow subscriber is.
            self.fail(
                ErrorCode.LIMIT_EXCEEDED,
                f"{out.control_bytes} bytes of replies pile up unread, limit max_pending_bytes={out.cap}",
                why=CloseReason.NOT_READING,
            )
            return
        self._ready()

    def deliver(self, sub: Subscription, batch: SharedBatch) -> None:
        """Queue ``batch`` for a live ``sub`` without ever blocking (router hot path)."""
        if sub.closed or self.closing is not None:
            return
        if sub.credit is not None:
            if sub.credit <= 0:
                self._hold(sub, batch)
                return
            if batch.count > sub.credit:
                batch, rest = batch.split(sub.credit)
                self._hold(sub, rest)
            sub.credit -= batch.count
        out = self.out
        nbytes = 9 + len(batch.headers) + len(batch.header) + len(batch.records)
        if not out.fits(nbytes) and not self._policies.make_room(self, sub, batch, nbytes):
            return
        out.push_deliver(sub, batch)
        self._ready()

    def push_batch(self, sub: Subscription, batch: SharedBatch) -> None:
        """Queue a batch a follower or group read from the log (they checked for room)."""
        if sub.closed or self.closing is not None:
            return
        self.out.push_deliver(sub, batch)
        self._ready()

    def queue_gap(self, sub: Subscription, topic: str, first: int, count: int) -> None:
        """Tell ``sub`` that offsets ``first..first+count-1`` of ``topic`` cannot be delivered."""
        self.out.push_gap(sub, topic, first, count)
        self._ready()

    # -- room for log readers ------------------------------------------------------

    def has_room(self) -> bool:
        """Log followers and groups read only while the queue is at most half full."""
        return self.closing is None and self.out.pending_bytes <= self.out.cap // 2

    def wait_for_room(self, job: Job) -> None:
        """``job`` stopped for lack of room: wake it when the queue has drained to half."""
        self._room_waiters[job] = None

    def sent(self, size: int) -> None:
        """``size`` queued bytes are on the wire."""
        self.bytes_out += size
        self.last_sent = self._clock.monotonic()
        if self._room_waiters and self.out.pending_bytes <= self.out.cap // 2:
            self._wake_room_waiters()

    def _wake_room_waiters(self) -> None:
        waiters, self._room_waiters = self._room_waiters, {}
        for job in waiters:
            self._work.wake(job)

    # -- credit ----------------------------------------------------------------------

    def _hold(self, sub: Subscription, batch: SharedBatch) -> None:
        # Waiting for credit still costs memory: the same cap and policy apply.
        held_bytes = sum(len(b.records) for b in sub.held_batches)
        if held_bytes + self.out.pending_bytes + len(batch.records) > self.out.cap and sub.held_batches:
            self._policies.held_overflow(self, sub, batch)
            return
        sub.held_batches.append(batch)
        sub.queued_messages += batch.count

    def release_held(self, sub: Subscription) -> None:
        held, sub.held_batches = sub.held_batches, []
        for batch in held:
            sub.queued_messages -= batch.count
            self.deliver(sub, batch)

    def status(self) -> dict[str, object]:
        return {
            "id": self.conn_id,
            "peer": self.peer,
            "name": self.client_name,
            "user": self.identity.label if self.identity is not None else None,
            "subscriptions": len(self.subs),
            "pending_bytes": self.out.pending_bytes,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "messages_in": self.messages_in,
            "dropped_messages": self.out.dropped_messages,
        }
