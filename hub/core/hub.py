"""The hub's decisions in one object: client sessions, frames, time, and what the mesh brings.

:class:`HubCore` is what the I/O shell drives, in the manner of h11's ``Connection``:

* ``open_session(peer)`` when a connection arrives (or the refusal to send it);
* ``receive_data(session, data)`` with every chunk a connection reads: frames are
  decoded and handled synchronously, and replies and deliveries are queued on the
  sessions concerned, announced to their transports at the end of the chunk;
* ``session_ended(session)`` when the connection is gone;
* ``tick_heartbeats()``, ``tick_groups()``, ``tick_rates()`` on the shell's timers, and the :attr:`work` queue;
* ``mesh`` (:class:`~hub.core.mesh_link.MeshLink`): what the mesh delivers and asks.

It never awaits and never touches a socket; its clock is passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wire import (
    CLIENT_PROTOCOL_VERSION,
    PING,
    PONG,
    Ack,
    Commit,
    Credit,
    Error,
    ErrorCode,
    Frame,
    Heartbeat,
    Hello,
    KeyFilterUpdate,
    ProtocolError,
    Publish,
    Status,
    StatusReply,
    Sub,
    SubUpdate,
    Unsub,
    Welcome,
)

from ..storage.store import LogStore
from .acks import AckTracker
from .auth import ClientAuth, Permissions, status_narrowed_to, status_refusal
from .auth_file import AuthConfig
from .clients import ClientSession, CloseReason
from .clock import Clock
from .commits import Commits
from .connect_rate import ConnectRate, ConnectRateLimits
from .consumers import ConsumerRegistry, ConsumerState, StandingInterest
from .events import ev
from .flushing import OutputBatch
from .greeting import Greeting
from .groups import POLL_SECONDS
from .key_commands import KeyCommands
from .mesh_link import MeshLink
from .origin import OriginSequence
from .publishing import Publisher
from .read_pause import ReadPauses
from .routing import RoutingTable
from .slow_consumers import SlowConsumerPolicies
from .stats import HubStats, bump
from .subscribing import SubscriptionLimits, Subscriptions
from .topic_budget import YIELD_AFTER_NEW_TOPICS, TopicLimits
from .work import WorkQueue

#: Frames of one connection handled before the others get a turn.  A chunk read is up
#: to 64 KiB, 13,000 pings: four clients pinging without reading held the loop so long
#: per turn that a healthy client with 16 publishes in flight kept 2-4% of its acked rate
#: (``hub.tools.bounds_bench attack``).  A PUBLISH of 1,000 messages is one frame: bulk
#: publishers never meet this bound.
FRAMES_PER_TURN = 256

log = logging.getLogger("pub0sub.hub")

PING_FRAME = PING.encode()
PONG_FRAME = PONG.encode()

#: Seconds between group deadline checks (the shell's timer uses it).
GROUP_TICK_SECONDS = POLL_SECONDS


@dataclass(frozen=True, kw_only=True)
class CoreSettings:
    """The settings the core decides with (the app derives them from ``HubConfig``)."""

    name: str = ""
    #: Largest frame body accepted from a client, checked at the header.
    max_body: int = 1 << 20
    #: Client connections beyond this are refused with LIMIT_EXCEEDED.
    max_connections: int = 10_000
    #: Bytes queued for one connection before its slow-consumer policy applies.
    max_pending_bytes: int = 8 << 20
    #: Seconds between heartbeats on an idle connection; ``heartbeat_misses`` silent ones = dead.
    heartbeat_interval: float = 5.0
    heartbeat_misses: int = 3
    #: Seconds from accept (TLS handshake included) to WELCOME: a client still without one is closed.
    hello_timeout: float = 3.0
    #: Newest client protocol version accepted (1 .. wire.CLIENT_PROTOCOL_VERSION; hub.core.greeting).
    max_client_version: int = CLIENT_PROTOCOL_VERSION
    #: Seconds a connection may go unread for its unread replies before it is closed (hub.core.read_pause).
    slow_consumer_deadline: float = 10.0
    subscriptions: SubscriptionLimits = field(default_factory=SubscriptionLimits)
    topics: TopicLimits = field(default_factory=TopicLimits)
    connect_rate: ConnectRateLimits = field(default_factory=ConnectRateLimits)


class HubCore:
    def __init__(
        self,
        settings: CoreSettings,
        *,
        hub_id: int,
        clock: Clock,
        store: LogStore | None = None,
        consumers: ConsumerRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.store = store
        self.consumers = consumers
        #: When :meth:`start` ran (the clock is not read before: it may be the event loop's).
        self.started = 0.0
        self.stats = HubStats()
        self.output = OutputBatch()
        self.work = WorkQueue()
        self.router: RoutingTable[Any] = RoutingTable()
        self.sessions: dict[int, ClientSession] = {}
        self._next_conn_id = 1
        #: Asked by the listener before a session is opened (hub.core.connect_rate).
        self.connect_rate = ConnectRate(settings.connect_rate)
        # Our own origin numbering continues after the highest sequence the logs hold.
        stored = [lg.origins.get(hub_id, 0) for lg in store.logs.values()] if store is not None else []
        self.origin = OriginSequence(hub_id, last_stored=max(stored, default=0))
        self.mesh = MeshLink(origin=self.origin, store=store, router=self.router, output=self.output)
        self.router.on_change = self.mesh.interest_changed
        self.publisher = Publisher(
            store=store, router=self.router, stats=self.stats, clock=clock, origin=self.origin, mesh=self.mesh,
            limits=settings.topics,
        )
        self.mesh.publisher = self.publisher
        self.subscriptions = Subscriptions(
            router=self.router,
            store=store,
            consumers=consumers,
            stats=self.stats,
            work=self.work,
            clock=clock,
            limits=settings.subscriptions,
            existing_topic=self.publisher.existing,
            sessions=lambda: self.sessions.values(),
        )
        self.rates: dict[str, float] = {"messages_in_per_s": 0.0, "deliveries_per_s": 0.0}
        self._rates_last = (0.0, 0, 0)
        self._standing: dict[str, StandingInterest] = {}
        if consumers is not None:
            self._clamp_positions(consumers)
            consumers.on_patterns = self._keep_interest
            consumers.on_forget = self._drop_interest
            for state in consumers.states.values():
                self._keep_interest(state)
        self.slow_consumers = SlowConsumerPolicies(self.stats, self.subscriptions.end)
        #: Connections the shell stopped reading because they leave their replies unread.
        self.read_pauses = ReadPauses(self.stats, settings.slow_consumer_deadline)
        #: Who may connect and what each user may do: open until :meth:`use_auth` gives a users file.
        self.auth = ClientAuth()
        self.greeting = Greeting(auth=self.auth, stats=self.stats, welcome=self._welcome, max_body=settings.max_body,
                                 hello_timeout=settings.hello_timeout, end_subscription=self.subscriptions.end,
                                 max_version=settings.max_client_version)  # fmt: skip
        subs = self.subscriptions
        self.commits = Commits(consumers, self.stats)
        self._handlers: dict[type[Frame], Callable[[ClientSession, Any], None]] = {
            Publish: self.publisher.publish,
            Heartbeat: self._on_heartbeat,
            Sub: subs.on_sub,
            SubUpdate: subs.on_update,
            KeyFilterUpdate: KeyCommands(refuse=subs.refuse_subscription, end=subs.end).on_key_filter,
            Unsub: subs.on_unsub,
            Credit: subs.on_credit,
            Ack: subs.on_ack,
            Commit: self.commits.on_commit,
            Status: self._on_status,
            Error: self._on_client_error,
            Hello: self.greeting.on_hello,
        }
        #: Builds the STATUS_REPLY document (the app sets it: the status covers the shell too).
        self.status_document: Callable[[Permissions | None], bytes] = lambda narrowed_to: b"{}"
        #: Told when the last session ends (the app waits for it while shutting down).
        self.on_no_sessions: Callable[[], None] = lambda: None

    @property
    def hub_id(self) -> int:
        return self.origin.hub_id

    def start(self) -> None:
        """The hub starts serving: uptime and rates count from now."""
        self.started = self.clock.monotonic()
        self._rates_last = (self.started, self.stats.messages_in, self.deliveries())

    # -- standing interest of durable names and groups -----------------------------------

    def _keep_interest(self, state: ConsumerState) -> None:
        """Route ``state``'s topics here while it exists, attached or not (see StandingInterest)."""
        entry = self._standing.get(state.key)
        if entry is None:
            entry = self._standing[state.key] = StandingInterest(state)
        new, old = set(state.patterns), set(entry.patterns)
        for pattern in sorted(old - new):
            self.router.remove(pattern, entry)
        for pattern in sorted(new - old):
            self.router.add(pattern, entry)
        entry.patterns = sorted(new)

    def _drop_interest(self, state: ConsumerState) -> None:
        entry = self._standing.pop(state.key, None)
        if entry is not None:
            for pattern in entry.patterns:
                self.router.remove(pattern, entry)

    def _clamp_positions(self, consumers: ConsumerRegistry) -> None:
        """Positions past a log's end mean messages delivered but lost in a crash.

        A torn or unsynced tail cut at recovery hands its offsets to new messages;
        a consumer left beyond the end would skip those, so it resumes at the end.
        """
        for state in consumers.states.values():
            for topic, tracker in state.positions.items():
                topic_log = self.store.logs.get(topic) if self.store is not None else None
                end = topic_log.next_offset if topic_log is not None else 0
                if tracker.floor > end:
                    log.warning(
                        "%s %r: position %d of %r is past the log end %d (messages lost in a crash); resuming at %d",
                        state.kind, state.name, tracker.floor, topic, end, end,
                        extra=ev("position_past_log_end", topic=topic, x_consumer=state.name),
                    )
                    state.positions[topic] = AckTracker(end)
                    consumers.touch()

    def keep_from(self, topic: str) -> int:
        """Retention never deletes what a durable subscription or group still needs."""
        floor = self.consumers.keep_from(topic) if self.consumers is not None else None
        return floor if floor is not None else 1 << 63

    # -- sessions ----------------------------------------------------------------------

    def open_session(self, peer: str) -> ClientSession | bytes:
        """A new connection from ``peer``: its session, or the ERROR frame that refuses it."""
        limit = self.settings.max_connections
        if len(self.sessions) >= limit:
            self.stats.connections_refused += 1
            return Error(code=ErrorCode.LIMIT_EXCEEDED, reason=f"hub is at max_connections={limit}").encode()
        session = ClientSession(
            self._next_conn_id,
            peer,
            max_body=self.settings.max_body,
            max_pending_bytes=self.settings.max_pending_bytes,
            clock=self.clock,
            output=self.output,
            stats=self.stats,
            work=self.work,
            policies=self.slow_consumers,
        )
        self._next_conn_id += 1
        self.greeting.opened(session)
        self.sessions[session.conn_id] = session
        self.stats.connections_total += 1
        return session

    def receive_data(self, session: ClientSession, data: bytes) -> bool:
        """Bytes ``session``'s connection read: decode and handle every complete frame.

        Handling is synchronous; the output it makes leaves when the chunk is done.  Returns True
        when it stopped early with frames left -- after :data:`FRAMES_PER_TURN` frames, or frames that
        created many topics (:data:`~hub.core.topic_budget.YIELD_AFTER_NEW_TOPICS`): the shell lets
        other connections run, then calls again with ``b""``.

        Complete frames, not bytes, are signs of life: a client that drips one byte a
        second is still silent for the heartbeat deadline.
        """
        session.bytes_in += len(data)
        session.decoder.feed(data)
        return self._handle_frames(session)

    def _handle_frames(self, session: ClientSession) -> bool:
        """Handle the complete frames buffered, stopping while HELLO's secret is being checked;
        True when frames are left for another turn (see :meth:`receive_data`)."""
        decoder = session.decoder
        handlers = self._handlers
        stats = self.stats
        created_before = stats.topics_created
        turn_left = FRAMES_PER_TURN
        try:
            with self.output:
                while session.auth_job is None and (frame := decoder.next_frame()) is not None:
                    session.last_received = self.clock.monotonic()
                    if not session.greeted and type(frame) is not Hello:
                        session.fail(ErrorCode.UNEXPECTED_FRAME, f"expected HELLO first, got {frame.name}")
                        return False
                    handlers[type(frame)](session, frame)
                    if session.closing is not None:
                        return False
                    turn_left -= 1
                    if not turn_left or stats.topics_created - created_before >= YIELD_AFTER_NEW_TOPICS:
                        return True
        except ProtocolError as exc:
            session.fail(exc.code, str(exc))
        return False

    def session_ended(self, session: ClientSession) -> None:
        """The connection is gone: its subscriptions end with it (durable state stays)."""
        for sub in list(session.subs.values()):
            self.subscriptions.remove(session, sub)
        if session.identity is not None and session.greeted:
            session.identity.counters.connections -= 1
        elif not session.greeted:  # it never got in: its address owes more of its connect rate
            self.connect_rate.failed(session.peer.rpartition(":")[0], self.clock.monotonic())
        if self.sessions.pop(session.conn_id, None) is not None:
            stats = self.stats
            stats.bytes_in_closed += session.bytes_in
            stats.bytes_out_closed += session.bytes_out
            bump(stats.connections_closed, session.closing.value if session.closing else "ended")
        if not self.sessions:
            self.on_no_sessions()

    def shutdown(self) -> None:
        """Tell every client the hub is going."""
        for session in list(self.sessions.values()):
            session.close(CloseReason.SHUTDOWN, Error(code=ErrorCode.SHUTTING_DOWN, reason="hub shutting down"))

    # -- frames -------------------------------------------------------------------------

    def verified(self, session: ClientSession, matched: str | None) -> bool:
        """The shell checked HELLO's secret (:mod:`hub.core.greeting`): admit or refuse, then
        handle the frames that arrived behind HELLO (True: frames left, as :meth:`receive_data`)."""
        with self.output:
            admitted = self.greeting.verified(session, matched)
        return admitted and self._handle_frames(session)

    def hello_overdue(self, session: ClientSession) -> None:
        with self.output:
            self.greeting.overdue(session)

    def use_auth(self, config: AuthConfig | None) -> tuple[int, int]:
        """Put a users file in force (at start, and on each reload): see :mod:`hub.core.grants`.
        Returns the subscriptions ended and connections closed because their grant went."""
        with self.output:
            return self.greeting.use(config, self.sessions.values())

    def _welcome(self, version: int) -> bytes:
        return Welcome(
            version=version,
            hub_id=self.hub_id,
            max_body=self.settings.max_body,
            heartbeat_ms=int(self.settings.heartbeat_interval * 1000),
            hub_name=self.settings.name[:255],
        ).encode()

    def _on_heartbeat(self, session: ClientSession, frame: Heartbeat) -> None:
        if frame.word == "ping":
            session.send_control(PONG_FRAME)

    def _on_client_error(self, session: ClientSession, frame: Error) -> None:
        log.info("connection %d (%s) sent ERROR %s: %s", session.conn_id, session.peer, frame.code.name, frame.reason,
                 extra=ev("client_error", conn=session.conn_id, peer=session.peer, x_code=frame.code.name))
        session.close(CloseReason.CLIENT_ERROR)

    def _on_status(self, session: ClientSession, frame: Status) -> None:
        if (refusal := status_refusal(session.identity)) is not None:
            session.fail(ErrorCode.NOT_AUTHORIZED, refusal, why=CloseReason.NOT_AUTHORIZED)
            return
        session.send_control(StatusReply(document=self.status_document(status_narrowed_to(session.identity))).encode())

    # -- time ---------------------------------------------------------------------------

    def tick_heartbeats(self) -> None:
        """Every half heartbeat interval: ping idle connections, close silent ones."""
        interval = self.settings.heartbeat_interval
        dead_after = interval * self.settings.heartbeat_misses
        now = self.clock.monotonic()
        paused = self.read_pauses
        with self.output:
            paused.close_overdue(now)
            for session in list(self.sessions.values()):
                if session.closing is not None or session in paused:
                    continue  # a paused connection's silence is ours (hub.core.read_pause)
                if now - session.last_received > dead_after:
                    self.stats.heartbeat_timeouts += 1
                    session.fail(
                        ErrorCode.HEARTBEAT_TIMEOUT,
                        f"nothing received for {now - session.last_received:.1f}s (limit {dead_after:.1f}s)",
                        why=CloseReason.HEARTBEAT_TIMEOUT,
                    )
                elif now - session.last_sent >= interval and not session.out.items:
                    session.send_control(PING_FRAME)

    def tick_groups(self) -> bool:
        """Wake groups whose ack deadlines passed; True while any group still awaits acks."""
        now = self.clock.monotonic()
        for group in self.subscriptions.groups.values():
            if group.due(now):
                group.wake()
        return any(group.pending for group in self.subscriptions.groups.values())

    def tick_rates(self) -> None:
        """Every second: messages in and deliveries per second, for status."""
        now = (self.clock.monotonic(), self.stats.messages_in, self.deliveries())
        last = self._rates_last
        span = max(now[0] - last[0], 1e-9)
        self.rates = {
            "messages_in_per_s": round((now[1] - last[1]) / span, 1),
            "deliveries_per_s": round((now[2] - last[2]) / span, 1),
        }
        self._rates_last = now

    def deliveries(self) -> int:
        return self.stats.deliveries  # counted as they leave (hub.core.outbound)
