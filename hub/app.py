"""The composition root: one hub assembled from its layers, and its lifetime.

:class:`HubServer` opens the storage (``hub.storage``), builds the core that
decides (``hub.core``), the mesh when configured (``hub.mesh``), and runs the
shell's tasks (``hub.shell``): the client listener, the pump, the timers and the
fsync thread.  It is the only place that knows all of them; each part receives
the collaborators it uses.
"""

from __future__ import annotations

import json
import logging
import secrets
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from .config import HubConfig
from .core.acl import Permissions
from .core.auth_file import AuthFileError
from .core.clock import Clock
from .core.consumers import ConsumerRegistry
from .core.events import ev
from .core.histogram import Histogram
from .core.hub import CoreSettings, HubCore
from .core.status import hub_status, topics_status
from .core.subscribing import SubscriptionLimits
from .core.topic_budget import TopicLimits
from .shell.auth import read_auth_file
from .shell.clock import TrioClock
from .shell.committer import run_committer
from .shell.compactor import run_compaction
from .shell.fdlimit import FdLimit, connection_limit, raise_fd_limit
from .shell.gc_freeze import run_gc_freezer
from .shell.listener import ClientListener, open_client_listeners
from .shell.loops import run_consumer_saves, run_group_deadlines, run_heartbeats, run_pump, run_rates, run_retention
from .shell.position_saver import run_position_saver
from .shell.tls import server_context
from .shell.watchdog import LoopWatchdog, run_loop_watchdog
from .storage.compaction_policy import CompactionPolicy
from .storage.store import LogStore
from .storage.topic_log import LogSettings

if TYPE_CHECKING:
    from .mesh.mesh import Mesh
    from .shell.metrics_http import OpsServer

log = logging.getLogger("pub0sub.hub")


def core_settings(config: HubConfig, fds: FdLimit) -> CoreSettings:
    return CoreSettings(
        name=config.name,
        max_body=config.max_body,
        max_connections=connection_limit(config.max_connections, fds),
        max_pending_bytes=config.max_pending_bytes,
        slow_consumer_deadline=config.slow_consumer_deadline,
        heartbeat_interval=config.heartbeat_interval,
        heartbeat_misses=config.heartbeat_misses,
        hello_timeout=config.hello_timeout,
        max_client_version=config.max_client_version,
        subscriptions=SubscriptionLimits(
            max_subscriptions=config.max_subscriptions,
            max_topics_per_connection=config.max_topics_per_connection,
            ack_wait_seconds=config.ack_wait_seconds,
        ),
        topics=TopicLimits(
            max_topics=config.max_topics,
            max_new_topics_per_connection=config.max_new_topics_per_connection,
            max_new_topics_per_user=config.max_new_topics_per_user,
            max_new_topics_per_frame=config.max_new_topics_per_frame,
        ),
        connect_rate=config.connect_rate,
    )


class HubServer:
    """Serve clients on ``config.listen`` (and link to other hubs on ``config.mesh_listen``).

    >>> async def main():                                       # doctest: +SKIP
    ...     async with trio.open_nursery() as nursery:
    ...         address = await nursery.start(HubServer(HubConfig(listen="127.0.0.1:0")).serve)
    """

    def __init__(self, config: HubConfig, *, clock: Clock | None = None) -> None:
        self.config = config
        self.address = ""
        clock = clock or TrioClock()
        # Read before the data directory is opened: a bad users file or certificate stops the hub
        # with one line (AuthFileError, TlsSetupError) before it locks or recovers anything.
        auth = read_auth_file(config.auth_file) if config.auth_file is not None else None
        self._tls = server_context(config.tls_cert, config.tls_key, config.tls_client_ca) if config.tls_cert else None
        # With a mesh, the hub id is derived from the mesh identity, so peers can check that a
        # hub speaks only for its own origin (hub.mesh.identity.hub_id_for).
        mesh_key: Any = None
        derived_id: int | None = None
        if config.mesh_listen:
            # Imported here: libp2p costs ~1 s and ~85 MiB, and a hub without a mesh needs none of it.
            from .mesh.identity import hub_id_for, load_or_create_identity, peer_id_of

            mesh_key = load_or_create_identity(config.data_dir)
            derived_id = hub_id_for(peer_id_of(mesh_key))
        hub_id = derived_id or int.from_bytes(secrets.token_bytes(8), "big") or 1
        self.store: LogStore | None = None
        self.consumers: ConsumerRegistry | None = None
        if config.data_dir is not None:
            hub_id = self._open_storage(derived_id)
            if derived_id is not None and hub_id != derived_id:
                log.warning(
                    "hub id %016x comes from a data dir older than derived hub ids: peers cannot verify it "
                    "from this hub's mesh identity and pin it on first contact instead", hub_id,
                    extra=ev("legacy_hub_id"),
                )
        # Every client is a file descriptor: the soft limit (often 1024) would be the hub's
        # real connection limit.
        self.fd_limit = raise_fd_limit()
        self.core = HubCore(core_settings(config, self.fd_limit), hub_id=hub_id, clock=clock, store=self.store,
                            consumers=self.consumers)  # fmt: skip
        self.core.status_document = self._status_document
        self.mesh: Mesh | None = None
        if config.mesh_listen:
            self.mesh = self._open_mesh(mesh_key)
            self.core.mesh.attach(self.mesh)
        self._listener = ClientListener(self.core, write_chunk=config.write_chunk, tls=self._tls)
        if auth is not None:
            self.core.use_auth(auth)
        #: How long each group commit's fsyncs took (the metrics' histogram).
        self.fsync_seconds = Histogram()
        #: The operators' port (metrics, probes, status page), when ``--metrics-listen`` is set.
        self.ops: OpsServer | None = None
        self._serving = False
        self._cancel: trio.CancelScope | None = None
        self._stopped = trio.Event()

    @property
    def hub_id(self) -> int:
        return self.core.hub_id

    def _open_storage(self, new_hub_id: int | None) -> int:
        config = self.config
        assert config.data_dir is not None
        config.data_dir.mkdir(parents=True, exist_ok=True)
        settings = LogSettings(
            segment_bytes=config.segment_bytes,
            retention_bytes=config.retention_bytes,
            retention_seconds=config.retention_seconds,
        )
        store = LogStore(config.data_dir, settings, durability=config.durability,
                         max_open_files=config.max_open_files or None)  # fmt: skip
        store.open()
        if config.compact:
            store.compaction = CompactionPolicy(config.compact, tombstone_seconds=config.compact_tombstone_seconds,
                                                map_bytes=config.compaction_map_bytes)  # fmt: skip
        self.store = store
        self.consumers = ConsumerRegistry(config.data_dir, expiry_seconds=config.consumer_expiry_seconds)
        self.consumers.load()
        return store.hub_id(new_hub_id)

    def _open_mesh(self, key_pair: Any) -> Mesh:
        from .core.mesh.admission import AdmissionRules, read_secrets
        from .core.mesh.config import MeshConfig
        from .core.mesh.overlay_store import OverlayLogStore
        from .core.mesh.protocols import ALL_VERSIONS, OVERLAY_VERSIONS
        from .core.overlay.config import OverlayConfig
        from .mesh.admit import parse_allow_list
        from .mesh.identity import hub_id_for, peer_id_of
        from .mesh.mesh import Mesh

        config = self.config
        assert config.mesh_listen is not None
        overlay_from = 1 if config.mesh_overlay else config.mesh_overlay_from
        if overlay_from > 1 and self.core.hub_id != hub_id_for(peer_id_of(key_pair)):
            # --mesh-overlay says so at start (OverlayLinks.start); the default only stays on v2.
            log.warning("hub id %016x comes from a data dir older than derived hub ids: this hub stays on mesh v2 "
                        "(the overlay routes by the id a hub's key gives)", self.core.hub_id,
                        extra=ev("overlay_unavailable", reason="legacy_hub_id"))  # fmt: skip
            overlay_from = 0
        mesh_config = MeshConfig(
            listen=config.mesh_listen, announce=tuple(config.mesh_announce),
            bootstrap=tuple(config.bootstrap),
            cluster=config.cluster,
            data_dir=config.data_dir,
            discovery=config.discovery,
            max_peers=config.max_peers,
            heartbeat_interval=config.mesh_heartbeat_interval,
            heartbeat_misses=config.mesh_heartbeat_misses,
            suspect_after=config.mesh_suspect_after, idle_close=config.mesh_idle_close,
            resume_linger=config.mesh_resume_linger,
            write_interval=config.mesh_write_interval,
            window_max_bytes=config.mesh_window_bytes,
            plain_io=config.mesh_plain_io,
            admission=AdmissionRules(
                allowed_peers=parse_allow_list(config.mesh_allow) if config.mesh_allow else None,
                cluster_secrets=read_secrets(config.cluster_secret_file) if config.cluster_secret_file else (),
                allow_v1=config.allow_mesh_v1,
            ),
            dump_dir=config.mesh_dump,
            versions=OVERLAY_VERSIONS if overlay_from else ALL_VERSIONS,
            overlay_from=overlay_from,
        )
        link = self.core.mesh
        overlay = overlay_store = None
        if overlay_from:
            overlay = OverlayConfig(degree=min(config.mesh_degree, config.max_peers), max_peers=config.max_peers,
                                    shortcuts=config.mesh_shortcuts, link_trials=config.mesh_link_trials)  # fmt: skip
            overlay_store = OverlayLogStore(link, self.store, hub_id=self.core.hub_id, data_dir=config.data_dir)
        return Mesh(
            mesh_config,
            hub_id=self.core.hub_id,
            on_forward=link.on_forward,
            resume_positions=link.positions,
            replay=link if self.store is not None else None,
            key_pair=key_pair,
            overlay=overlay,
            overlay_store=overlay_store,
        )

    # -- lifetime ----------------------------------------------------------------------

    # Typed Any: libp2p pulls in trio-typing, whose stale trio-stubs hide trio.TaskStatus from mypy.
    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until :meth:`aclose` (or cancellation); the storage is closed on the way out.
        Raises :class:`hub.shell.ports.PortInUseError` when the client or the mesh port has a listener already."""
        self._stopped = trio.Event()
        core = self.core
        core.start()
        try:
            host, port = self.config.host_port
            listeners = await open_client_listeners(host, port)
            sockname = listeners[0].socket.getsockname()
            self.address = f"{sockname[0]}:{sockname[1]}"
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                nursery.start_soon(run_pump, core)
                nursery.start_soon(run_heartbeats, core)
                nursery.start_soon(run_group_deadlines, core)
                nursery.start_soon(run_rates, core)
                nursery.start_soon(run_gc_freezer, core.stats)
                nursery.start_soon(run_loop_watchdog, LoopWatchdog(core.stats))
                if self.config.metrics_listen:
                    self.ops = self._open_ops()
                    await nursery.start(self.ops.run, *self.config.metrics_host_port or ("127.0.0.1", 0))
                if self.store is not None:
                    nursery.start_soon(partial(run_committer, self.store, timings=self.fsync_seconds))
                    nursery.start_soon(run_retention, core, self.store, self.config.retention_check_seconds)
                    if self.store.compaction is not None:
                        nursery.start_soon(run_compaction, self.store, self.store.compaction, core.clock,
                                           self.config.compact_check_seconds)  # fmt: skip
                if self.consumers is not None:
                    nursery.start_soon(run_consumer_saves, self.consumers)
                    nursery.start_soon(run_position_saver, self.consumers)
                if self.mesh is not None:
                    await nursery.start(self.mesh.run)
                await nursery.start(self._listener.serve, listeners)
                log.info("hub %016x listening on %s%s", core.hub_id, self.address, " (TLS)" if self._tls else "",
                         extra=ev("hub_listening", x_address=self.address, x_tls=self._tls is not None))
                self._say_how_open()
                fds = self.fd_limit
                log.info(
                    "file descriptor limit %d (soft, was %d; hard %d): up to %d client connections",
                    fds.soft, fds.before, fds.hard, core.settings.max_connections,
                    extra=ev("fd_limit"),
                )  # fmt: skip
                self._serving = True
                task_status.started(self.address)
        finally:
            self._serving = False
            self._close_storage()
            self._stopped.set()

    def _say_how_open(self) -> None:
        """Loudly, at start: who may do what on the client port (docs/security.md)."""
        config = self.config
        if config.auth_file is None:
            log.warning(
                "OPEN HUB: no --auth-file, so any client that reaches %s may publish and subscribe to every topic",
                self.address, extra=ev("hub_open", x_address=self.address),
            )
        else:
            auth = self.core.auth.status()
            anonymous = "allowed (per [anonymous])" if auth["anonymous_allowed"] else "refused"
            log.info("users file %s: %d users, anonymous clients %s; SIGHUP reloads it",
                     config.auth_file, auth["users"], anonymous,
                     extra=ev("auth_file_loaded", x_path=str(config.auth_file), x_users=auth["users"]))  # fmt: skip
        if self._tls is None and config.host_port[0] not in ("127.0.0.1", "::1", "localhost"):
            log.warning("no --tls-cert: clients' credentials and messages cross the network in the clear",
                        extra=ev("hub_no_tls", x_address=self.address))

    def reload_auth(self) -> bool:
        """Read the users file again and put it in force (SIGHUP); a file that cannot be used
        leaves the one in force unchanged.  False if there is no users file or it failed."""
        path = self.config.auth_file
        if path is None:
            return False
        try:
            config = read_auth_file(path)
        except AuthFileError as exc:
            self.core.auth.reload_failed(str(exc))
            log.error("users file NOT reloaded, the previous one stays in force: %s", exc,
                      extra=ev("auth_reload_failed", reason=str(exc), x_path=str(path)))
            return False
        ended, closed = self.core.use_auth(config)
        log.info("users file %s reloaded: %d users; %d subscriptions and %d connections ended by revoked grants",
                 path, len(config.users), ended, closed,
                 extra=ev("auth_reloaded", x_path=str(path), x_users=len(config.users),
                          x_subscriptions_ended=ended, x_connections_closed=closed))  # fmt: skip
        return True

    def reload_mesh_admission(self) -> bool:
        """Read ``--cluster-secret-file`` and the files of ``--mesh-allow`` again (SIGHUP): new mesh
        streams prove the first secret and are judged by the new rules (a rotation, docs/security.md),
        and every live link whose peer they no longer admit is closed.  Rules that cannot be used
        leave those in force unchanged.  False if there are none or they failed."""
        from .core.mesh.admission import AdmissionSetupError, read_secrets
        from .mesh.admit import parse_allow_list

        config, path = self.config, self.config.cluster_secret_file
        if self.mesh is None or (path is None and not config.mesh_allow):
            return False
        try:
            secrets = read_secrets(path) if path is not None else None
            allowed = parse_allow_list(config.mesh_allow) if config.mesh_allow else None
        except AdmissionSetupError as exc:
            log.error("mesh admission NOT reloaded, the rules in force stay: %s", exc,
                      extra=ev("cluster_secret_reload_failed", reason=str(exc), x_path=str(path)))  # fmt: skip
            return False
        policy = self.mesh.core.admission
        if allowed is not None:
            policy.use_allowed_peers(allowed)
        if secrets is not None:
            policy.use_secrets(secrets)
            log.info("cluster secret file %s reloaded: %d secret(s) accepted, the first one proved", path,
                     len(secrets), extra=ev("cluster_secret_reloaded", x_path=str(path), x_secrets=len(secrets)))
        closed = self.mesh.core.readmit()
        if self.mesh.overlay is not None:
            self.mesh.overlay.readmit()
        log.info("mesh admission reloaded: %s; %d link(s) closed as no longer admitted", policy.rules.describe(),
                 closed, extra=ev("mesh_admission_reloaded", x_links_closed=closed))  # fmt: skip
        return True

    def reload(self) -> None:
        """SIGHUP: the users file, the cluster secret file and --mesh-allow's files, those the hub has."""
        if self.config.auth_file is not None:
            self.reload_auth()
        self.reload_mesh_admission()

    def _close_storage(self) -> None:
        if self.consumers is not None:
            try:
                self.consumers.save()
            except OSError as exc:
                log.error("cannot save consumer positions on the way out: %s", exc, extra=ev("consumers_save_failed"))
        if self.store is not None:
            self.store.close()

    async def aclose(self) -> None:
        """Tell every client we are going, give them a moment, then stop."""
        gone = trio.Event()
        self.core.on_no_sessions = gone.set
        self.core.shutdown()
        if self.core.sessions:
            with trio.move_on_after(1.0):
                await gone.wait()
        if self._cancel is not None:
            self._cancel.cancel()
            # Until serve() has closed the storage, the data directory stays locked: a hub
            # started again on it right after aclose() would be refused.
            await self._stopped.wait()

    # -- the operators' view -------------------------------------------------------------

    def _open_ops(self) -> OpsServer:
        # Imported here: prometheus-client is needed only by a hub that serves metrics.
        from .core.metrics import MetricsSources
        from .core.overview import Overview
        from .shell.metrics_http import OpsServer
        from .shell.prometheus import hub_registry

        mesh_core, links = (self.mesh.core, self.mesh.overlay) if self.mesh is not None else (None, None)
        sources = MetricsSources(self.core, mesh_core, self.fsync_seconds, top_topics=self.config.metrics_topics,
                                 overlay=links.running if links is not None else lambda: None)  # fmt: skip
        overview = Overview(self.core, mesh_core, listen=lambda: self.address, recent=self.recent_events)
        return OpsServer(registry=hub_registry(sources), overview=overview, readiness=self.readiness)

    def recent_events(self) -> list[dict[str, Any]]:
        """The latest notable log events (closes, refusals, errors), newest last: see hub/logs.py."""
        from .logs import RECENT

        return RECENT.events()

    def readiness(self) -> dict[str, bool | None]:
        """/readyz: each check and whether it passes (None: not configured here)."""
        mesh: bool | None = None
        if self.mesh is not None:
            # A hub told where to join is ready once linked to a peer; the first hub is ready alone.
            mesh = bool(self.mesh.connected_peers()) or not self.config.bootstrap
        return {
            "storage": None if self.store is None else self.store.storage_error is None,
            "listening": self._serving,
            "mesh": mesh,
        }

    def _status_document(self, narrowed_to: Permissions | None) -> bytes:
        doc = self.status() if narrowed_to is None else topics_status(self.core, narrowed_to)
        return json.dumps(doc, separators=(",", ":")).encode()

    def status(self) -> dict[str, Any]:
        doc = hub_status(self.core, listen=self.address)
        doc["tls"] = {"enabled": self._tls is not None, "client_certificates": self.config.tls_client_ca is not None}
        if self.mesh is not None:
            doc["mesh"] = {**self.mesh.status(), "forwarded_messages_in": self.core.mesh.forwarded_messages_in}
        return doc
