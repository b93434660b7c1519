"""The hub: client listener, frame dispatch, heartbeats, storage, status."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import trio

from wire import (
    CLIENT_PROTOCOL_VERSION,
    PING,
    PONG,
    Ack,
    Credit,
    Error,
    ErrorCode,
    Frame,
    Heartbeat,
    Hello,
    Publish,
    Status,
    StatusReply,
    Sub,
    SubUpdate,
    Unsub,
    Welcome,
)

from .acks import AckTracker
from .config import HubConfig
from .connection import ClientConnection, CloseReason
from .consumers import ConsumerRegistry, ConsumerState, StandingInterest
from .flushing import OutputBatch
from .ports import PortInUseError
from .publishing import Publisher
from .routing import RoutingTable
from .shell.committer import run_committer
from .storage.store import LogStore
from .storage.topic_log import LogSettings
from .subscribing import Subscriptions
from .subscription import SUBSCRIPTION_KINDS, Subscription

if TYPE_CHECKING:
    from .mesh.mesh import Mesh
    from .meshlink import MeshBridge

log = logging.getLogger("pub0sub.hub")

PING_FRAME = PING.encode()
PONG_FRAME = PONG.encode()


def wall_clock_us() -> int:
    return time.time_ns() // 1000


@dataclass
class HubStats:
    publish_frames: int = 0
    messages_in: int = 0
    bytes_in: int = 0
    deliveries: int = 0
    dropped_messages: int = 0
    cancelled_subscriptions: int = 0
    discarded_on_cancel: int = 0
    discarded_on_close: int = 0
    duplicate_batches: int = 0
    protocol_errors: int = 0
    #: ACKs refused because they named offsets not delivered (or a subscription without acks)
    acks_refused: int = 0
    connections_total: int = 0
    connections_refused: int = 0
    heartbeat_timeouts: int = 0


class HubServer:
    """Serve clients on ``config.listen``.

    >>> async def main():                                       # doctest: +SKIP
    ...     async with trio.open_nursery() as nursery:
    ...         address = await nursery.start(HubServer(HubConfig(listen="127.0.0.1:0")).serve)
    """

    def __init__(self, config: HubConfig, *, clock: Callable[[], int] = wall_clock_us) -> None:
        self.config = config
        self.clock = clock
        self.router: RoutingTable[Any] = RoutingTable()
        self.output = OutputBatch()
        self.connections: dict[int, ClientConnection] = {}
        self.stats = HubStats()
        self.address = ""
        self.started = time.monotonic()
        self.store: LogStore | None = None
        self.consumers: ConsumerRegistry | None = None
        # With a mesh, the hub id is derived from the mesh identity, so peers can check that a
        # hub speaks only for its own origin (hub.mesh.identity.hub_id_for).
        self._mesh_key: Any = None
        derived_id: int | None = None
        if config.mesh_listen:
            from .mesh.identity import hub_id_for, load_or_create_identity, peer_id_of

            self._mesh_key = load_or_create_identity(config.data_dir)
            derived_id = hub_id_for(peer_id_of(self._mesh_key))
        self.hub_id = derived_id or int.from_bytes(secrets.token_bytes(8), "big") or 1
        self._origin_seq = 1
        if config.data_dir is not None:
            self._open_storage(derived_id)
            if derived_id is not None and self.hub_id != derived_id:
                log.warning(
                    "hub id %016x comes from a data dir older than derived hub ids: peers cannot verify it "
                    "from this hub's mesh identity and pin it on first contact instead", self.hub_id,
                )
        self.publisher = Publisher(self)
        self.subscriptions = Subscriptions(self)
        self.mesh_bridge: MeshBridge | None = None
        self.mesh: Mesh | None = None
        if config.mesh_listen:
            self._open_mesh()
        self._next_conn_id = 1
        self._rates: dict[str, float] = {"messages_in_per_s": 0.0, "deliveries_per_s": 0.0}
        self._cancel: trio.CancelScope | None = None
        self._stopped = trio.Event()
        self._nursery: trio.Nursery | None = None
        subs = self.subscriptions
        self._handlers: dict[type[Frame], Callable[[ClientConnection, Any], None]] = {
            Publish: self.publisher.publish,
            Heartbeat: self._on_heartbeat,
            Sub: subs.on_sub,
            SubUpdate: subs.on_update,
            Unsub: subs.on_unsub,
            Credit: subs.on_credit,
            Ack: subs.on_ack,
            Status: self._on_status,
            Error: self._on_client_error,
            Hello: self._on_hello,
        }

    def _open_storage(self, new_hub_id: int | None) -> None:
        config = self.config
        assert config.data_dir is not None
        config.data_dir.mkdir(parents=True, exist_ok=True)
        settings = LogSettings(
            segment_bytes=config.segment_bytes,
            retention_bytes=config.retention_bytes,
            retention_seconds=config.retention_seconds,
        )
        store = LogStore(config.data_dir, settings, durability=config.durability)
        store.open()
        self.store = store
        self.hub_id = store.hub_id(new_hub_id)
        # Our own origin sequence continues after the highest one stored.
        stored = [lg.origins.get(self.hub_id, 0) for lg in store.logs.values()]
        self._origin_seq = max(stored, default=0) + 1
        self.consumers = ConsumerRegistry(config.data_dir, expiry_seconds=config.consumer_expiry_seconds)
        self.consumers.load()
        self._clamp_positions()
        self._standing: dict[str, StandingInterest] = {}
        self.consumers.on_patterns = self._keep_interest
        self.consumers.on_forget = self._drop_interest
        for state in self.consumers.states.values():
            self._keep_interest(state)

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

    def _clamp_positions(self) -> None:
        """Positions past a log's end mean messages delivered but lost in a crash.

        A torn or unsynced tail cut at recovery hands its offsets to new messages;
        a consumer left beyond the end would skip those, so it resumes at the end.
        """
        assert self.store is not None and self.consumers is not None
        for state in self.consumers.states.values():
            for topic, tracker in state.positions.items():
                topic_log = self.store.logs.get(topic)
                end = topic_log.next_offset if topic_log is not None else 0
                if tracker.floor > end:
                    log.warning(
                        "%s %r: position %d of %r is past the log end %d (messages lost in a crash); resuming at %d",
                        state.kind, state.name, tracker.floor, topic, end, end,
                    )
                    state.positions[topic] = AckTracker(end)
                    self.consumers.touch()

    def _open_mesh(self) -> None:
        # Imported here: libp2p costs ~1 s and ~85 MiB, and a hub without a mesh needs none of it.
        from .mesh.config import MeshConfig
        from .meshlink import MeshBridge

        config = self.config
        assert config.mesh_listen is not None
        mesh_config = MeshConfig(
            listen=config.mesh_listen,
            bootstrap=tuple(config.bootstrap),
            cluster=config.cluster,
            data_dir=config.data_dir,
            discovery=config.discovery,
            max_peers=config.max_peers,
            heartbeat_interval=config.mesh_heartbeat_interval,
            heartbeat_misses=config.mesh_heartbeat_misses,
            resume_linger=config.mesh_resume_linger,
            write_interval=config.mesh_write_interval,
            window_max_bytes=config.mesh_window_bytes,
        )
        self.mesh_bridge = MeshBridge(self, mesh_config, key_pair=self._mesh_key)
        self.mesh = self.mesh_bridge.mesh

    def next_origin_seq(self, count: int) -> int:
        seq = self._origin_seq
        self._origin_seq += count
        return seq

    @property
    def upcoming_origin_seq(self) -> int:
        """The origin sequence the next local publish will take."""
        return self._origin_seq

    def consumers_changed(self) -> None:
        if self.consumers is not None:
            self.consumers.touch()

    # -- lifecycle -------------------------------------------------------------------

    # Typed Any: libp2p pulls in trio-typing, whose stale trio-stubs hide trio.TaskStatus from mypy.
    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until :meth:`aclose` (or cancellation); the storage is closed on the way out.

        Raises :class:`hub.ports.PortInUseError` when the client or the mesh port has a listener already.
        """
        self._stopped = trio.Event()
        try:
            host, port = self.config.host_port
            try:
                listeners = await trio.open_tcp_listeners(port, host=host)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise PortInUseError(host or "0.0.0.0", port) from None
                raise
            sockname = listeners[0].socket.getsockname()
            self.address = f"{sockname[0]}:{sockname[1]}"
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                self._nursery = nursery
                nursery.start_soon(self._heartbeat_loop)
                nursery.start_soon(self._rates_loop)
                if self.store is not None:
                    nursery.start_soon(run_committer, self.store)
                    nursery.start_soon(self._retention_loop)
                if self.consumers is not None:
                    nursery.start_soon(self.consumers.save_loop)
                if self.mesh is not None:
                    await nursery.start(self.mesh.run)
                await nursery.start(trio.serve_listeners, self._handle_stream, listeners)
                log.info("hub %016x listening on %s", self.hub_id, self.address)
                task_status.started(self.address)
        finally:
            self._close_storage()
            self._stopped.set()

    def start_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(fn)

    def _close_storage(self) -> None:
        if self.consumers is not None:
            with contextlib.suppress(OSError):
                self.consumers.save()
        if self.store is not None:
            self.store.close()

    async def aclose(self) -> None:
        """Tell every client we are going, give them a moment, then stop."""
        for conn in list(self.connections.values()):
            conn.close(CloseReason.SHUTDOWN, Error(code=ErrorCode.SHUTTING_DOWN, reason="hub shutting down"))
        with trio.move_on_after(1.0):
            while self.connections:
                await trio.sleep(0.01)
        if self._cancel is not None:
            self._cancel.cancel()
            # Until serve() has closed the storage, the data directory stays locked: a hub
            # started again on it right after aclose() would be refused.
            await self._stopped.wait()

    async def _handle_stream(self, stream: trio.SocketStream) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "?"
        if len(self.connections) >= self.config.max_connections:
            self.stats.connections_refused += 1
            limit = self.config.max_connections
            refusal = Error(code=ErrorCode.LIMIT_EXCEEDED, reason=f"hub is at max_connections={limit}")
            gone = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
            with trio.move_on_after(1.0), contextlib.suppress(*gone):
                await stream.send_all(refusal.encode())
            await trio.aclose_forcefully(stream)
            return
        conn = ClientConnection(self, stream, self._next_conn_id, peer)
        self._next_conn_id += 1
        self.connections[conn.conn_id] = conn
        self.stats.connections_total += 1
        await conn.run()

    def forget(self, conn: ClientConnection) -> None:
        """The connection ended: its subscriptions end with it (durable state stays)."""
        for sub in list(conn.subs.values()):
            self.subscriptions.remove(conn, sub)
        self.connections.pop(conn.conn_id, None)

    def fail_subscription(self, conn: ClientConnection, sub: Subscription, reason: str) -> None:
        self.subscriptions.end(conn, sub, ErrorCode.INTERNAL, reason)

    async def _heartbeat_loop(self) -> None:
        interval = self.config.heartbeat_interval
        dead_after = interval * self.config.heartbeat_misses
        while True:
            await trio.sleep(interval / 2)
            now = trio.current_time()
            for conn in list(self.connections.values()):
                if conn.closing is not None:
                    continue
                if now - conn.last_received > dead_after:
                    self.stats.heartbeat_timeouts += 1
                    conn.fail(
                        ErrorCode.HEARTBEAT_TIMEOUT,
                        f"nothing received for {now - conn.last_received:.1f}s (limit {dead_after:.1f}s)",
                        why=CloseReason.HEARTBEAT_TIMEOUT,
                    )
                elif now - conn.last_sent >= interval and not conn.out.items:
                    conn.send_control(PING_FRAME)

    async def _rates_loop(self) -> None:
        last = (time.monotonic(), self.stats.messages_in, self._deliveries())
        while True:
            await trio.sleep(1.0)
            now = (time.monotonic(), self.stats.messages_in, self._deliveries())
            span = max(now[0] - last[0], 1e-9)
            self._rates = {
                "messages_in_per_s": round((now[1] - last[1]) / span, 1),
                "deliveries_per_s": round((now[2] - last[2]) / span, 1),
            }
            last = now

    async def _retention_loop(self) -> None:
        store = self.store
        assert store is not None
        while True:
            await trio.sleep(self.config.retention_check_seconds)
            store.enforce_retention(self.clock(), self._keep_from)

    def _keep_from(self, topic: str) -> int:
        """Retention never deletes what a durable subscription or group still needs."""
        floor = self.consumers.keep_from(topic) if self.consumers is not None else None
        return floor if floor is not None else 1 << 63

    def _deliveries(self) -> int:
        live = sum(s.delivered_messages for c in self.connections.values() for s in c.subs.values())
        return self.stats.deliveries + live

    # -- frames ------------------------------------------------------------------------

    def handle_frame(self, conn: ClientConnection, frame: Frame) -> None:
        if not conn.greeted and not isinstance(frame, Hello):
            conn.fail(ErrorCode.UNEXPECTED_FRAME, f"expected HELLO first, got {frame.name}")
            return
        self._handlers[type(frame)](conn, frame)

    def _on_hello(self, conn: ClientConnection, frame: Hello) -> None:
        if conn.greeted:
            conn.fail(ErrorCode.UNEXPECTED_FRAME, "HELLO sent twice")
            return
        if frame.version != CLIENT_PROTOCOL_VERSION:
            conn.fail(
                ErrorCode.UNSUPPORTED_VERSION,
                f"client protocol version {frame.version} not supported (hub speaks {CLIENT_PROTOCOL_VERSION})",
            )
            return
        conn.greeted = True
        conn.client_name = frame.client_name
        welcome = Welcome(
            version=CLIENT_PROTOCOL_VERSION,
            hub_id=self.hub_id,
            max_body=self.config.max_body,
            heartbeat_ms=int(self.config.heartbeat_interval * 1000),
            hub_name=self.config.name[:255],
        )
        conn.send_control(welcome.encode())

    def _on_heartbeat(self, conn: ClientConnection, frame: Heartbeat) -> None:
        if frame.word == "ping":
            conn.send_control(PONG_FRAME)

    def _on_client_error(self, conn: ClientConnection, frame: Error) -> None:
        log.info("connection %d (%s) sent ERROR %s: %s", conn.conn_id, conn.peer, frame.code.name, frame.reason)
        conn.close(CloseReason.CLIENT_ERROR)

    def _on_status(self, conn: ClientConnection, frame: Status) -> None:
        document = json.dumps(self.status(), separators=(",", ":")).encode()
        conn.send_control(StatusReply(document=document).encode())

    # -- status ------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        subs = [s for c in self.connections.values() for s in c.subs.values()]
        live_dropped = sum(c.out.dropped_messages for c in self.connections.values())
        topics: dict[str, Any] = self.store.logs if self.store is not None else self.publisher.memory_topics
        doc: dict[str, Any] = {
            "hub_id": f"{self.hub_id:016x}",
            "name": self.config.name,
            "pid": os.getpid(),
            "listen": self.address,
            "uptime_s": round(time.monotonic() - self.started, 1),
            "connections": len(self.connections),
            "subscriptions": len(subs),
            "subscriptions_by_kind": _count_kinds(subs),
            "topics": len(topics),
            "rates": dict(self._rates),
            "counters": {**asdict(self.stats), "deliveries": self._deliveries(), "dropped_messages_live": live_dropped},
            "topic_list": [
                {
                    "topic": name,
                    "first_offset": t.first_offset,
                    "next_offset": t.next_offset,
                    "messages": t.messages_appended,
                    "bytes": t.bytes_appended,
                }
                for name, t in list(topics.items())[:1000]
            ],
            "connection_list": [
                {**c.status(), "subs": [s.status() for s in c.subs.values()]}
                for c in list(self.connections.values())[:1000]
            ],
        }
        if self.store is not None:
            doc["storage"] = {
                "data_dir": str(self.store.root),
                "durability": self.store.durability,
                "fsyncs": self.store.fsyncs,
                "storage_error": str(self.store.storage_error) if self.store.storage_error else None,
                "recovery": [
                    {
                        "segment": str(r.path),
                        "truncated_bytes": r.truncated_bytes,
                        "corrupted_ranges": [[b.position, b.end, b.reason] for b in r.bad_ranges],
                        "corrupt_copy": str(r.corrupt_copy) if r.corrupt_copy else None,
                    }
                    for r in self.store.reports
                    if r.truncated_bytes or r.bad_ranges or r.corrupt_copy
                ],
            }
        if self.mesh_bridge is not None:
            doc["mesh"] = self.mesh_bridge.status()
        if self.subscriptions.groups:
            doc["groups"] = [g.status() for g in self.subscriptions.groups.values()]
        if self.consumers is not None:
            doc["durables"] = [
                {"name": s.name, "attached": s.attached, "positions": {t: tr.floor for t, tr in s.positions.items()}}
                for s in self.consumers.states.values()
                if s.kind == "durable"
            ]
        return doc


def _count_kinds(subs: list[Subscription]) -> dict[str, int]:
    """Open subscriptions per kind (live, follower, durable, group), every kind present."""
    counts = dict.fromkeys(SUBSCRIPTION_KINDS, 0)
    for sub in subs:
        counts[sub.kind] += 1
    return counts
