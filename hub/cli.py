"""``pub0sub hub``: run a hub until SIGINT/SIGTERM (SIGHUP reloads its users and cluster secret files)."""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from .app import HubServer
from .config import HubConfig, load_config
from .core.auth_file import AuthFileError
from .core.events import ev
from .core.mesh.admission import AdmissionSetupError
from .logs import configure_logging
from .shell.ports import PortInUseError, check_port_free
from .shell.tls import TlsSetupError
from .storage.store import DataDirInUseError

#: The built-in settings, shown as each option's default.
_DEFAULTS = HubConfig()
#: What the hub logs unless told otherwise: INFO shows start-up, mesh peers linking and
#: leaving, and refused clients -- what an operator needs to see that the hub works.
DEFAULT_LOG_LEVEL = "INFO"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _shown(value: object, metavar: str | None) -> str:
    """A default as a person reads it: sizes in binary units too, long durations in days or hours."""
    if value is None or value == "" or value == ():
        return "none"
    if isinstance(value, float):
        value = int(value) if value.is_integer() else value
    if metavar == "BYTES" and isinstance(value, int) and value >= 1 << 10:
        for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
            if value % (1 << shift) == 0:
                return f"{value} = {value >> shift} {unit}"
    if metavar == "SECONDS" and isinstance(value, int) and value >= 3600:
        for unit, size in (("days", 86400), ("hours", 3600)):
            if value % size == 0:
                return f"{value} = {value // size} {unit}"
    return str(value)


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run a pub0sub hub. Settings come from the built-in defaults (shown below), then a --config "
        "file, then PUB0SUB_HUB_<SETTING> environment variables, then these options.",
    )

    def option(flag: str, help: str, *, shown: str | None = None, **kw: object) -> None:
        # argparse's own default stays None: a flag not given must not hide the file or environment.
        if shown is None:
            name = flag.removeprefix("--").replace("-", "_")
            shown = _shown(getattr(_DEFAULTS, name), kw.get("metavar"))  # type: ignore[arg-type]
        p.add_argument(flag, help=f"{help} (default: {shown})", **kw)  # type: ignore[arg-type]

    option("--listen", "client listener; port 0 picks a free port", metavar="HOST:PORT")
    option("--config", "TOML file with hub settings ([hub] table)", metavar="FILE", type=Path, shown="none")
    option("--name", "hub name shown to clients, in status and at the start of each log line", metavar="NAME")
    option("--data-dir", "directory for topic logs, durable positions and the mesh identity; without one the "
           "hub keeps nothing and serves live subscriptions only", metavar="DIR", type=Path)  # fmt: skip
    option("--max-body", "largest client frame body in bytes", metavar="BYTES", type=int)
    option("--max-connections", "client connections beyond this are refused with an ERROR frame", metavar="N",
           type=int, shown="what the file descriptor limit leaves for clients, its soft limit raised to the hard one")
    option("--max-connects-per-second-per-address", "connections a second one source address (an IPv6 /64) "
           "may open after a burst of --connect-burst-per-address; beyond it a connection gets ERROR "
           "LIMIT_EXCEEDED and is closed at once; 0: no limit; loopback is limited too", metavar="N",
           type=float)  # fmt: skip
    option("--connect-burst-per-address", "connections one source address may open at once before its rate "
           "applies", metavar="N", type=int)  # fmt: skip
    option("--failed-connect-cost", "connections of its address's rate that a connection ending before it is "
           "welcomed (bad frames, no HELLO in time, refused credentials) costs on top of its own; 0: none",
           metavar="N", type=float)  # fmt: skip
    option("--max-accepts-per-second", "connections accepted a second from all addresses together, after a "
           "burst of --accept-burst; past it new connections wait in the kernel's backlog; 0: no budget",
           metavar="N", type=float)  # fmt: skip
    option("--accept-burst", "connections accepted at once before --max-accepts-per-second applies", metavar="N",
           type=int)  # fmt: skip
    option("--connect-rate-exempt", "an address or CIDR the connection rate limit leaves alone (repeatable, or "
           "comma-separated)", metavar="CIDR", action="append", shown="none")  # fmt: skip
    option("--max-subscriptions", "open subscriptions per connection", metavar="N", type=int)
    option("--max-topics-per-connection", "topics and patterns across one connection's subscriptions",
           metavar="N", type=int)  # fmt: skip
    option("--max-topics", "topic logs the hub holds in all; publishes creating more are refused", metavar="N",
           type=int)  # fmt: skip
    option("--max-new-topics-per-connection", "topics one connection may create by publishing to new names",
           metavar="N", type=int)  # fmt: skip
    option("--max-new-topics-per-user", "topics one user of --auth-file may create over the hub's life, all its "
           "connections together", metavar="N", type=int)  # fmt: skip
    option("--max-new-topics-per-frame", "topics one publish frame may create", metavar="N", type=int)
    option("--max-open-files", "segment files kept open at once, least recently used closed first; 0: derived "
           "from the descriptor limit", metavar="N", type=int)  # fmt: skip
    option("--max-pending-bytes", "outbound bytes queued per connection before the slow-consumer policy applies",
           metavar="BYTES", type=int)  # fmt: skip
    option("--slow-consumer-deadline", "seconds a client may leave its replies unread, and so not be read from, "
           "before it is closed", metavar="SECONDS", type=float)  # fmt: skip
    option("--heartbeat-interval", "seconds between heartbeats on idle client connections", metavar="SECONDS",
           type=float)  # fmt: skip
    option("--heartbeat-misses", "silent intervals before a client is declared dead", metavar="N", type=int)
    option("--hello-timeout", "seconds from accept (TLS handshake included) to WELCOME; a client not welcomed by "
           "then is closed", metavar="SECONDS", type=float)  # fmt: skip
    option("--max-client-version", "newest client protocol version accepted (default: the newest this hub "
           "speaks); pin an older one while a rolling upgrade goes on: clients step down to it",
           metavar="N", type=int)  # fmt: skip
    option("--auth-file", "users, hashed secrets and topic grants (TOML, docs/security.md; `pub0sub auth` makes "
           "entries); SIGHUP reloads it; none: an OPEN hub, anyone may publish and subscribe to anything",
           metavar="FILE", type=Path)  # fmt: skip
    option("--tls-cert", "certificate chain (PEM): with --tls-key the client port speaks TLS only",
           metavar="FILE", type=Path)  # fmt: skip
    option("--tls-key", "private key (PEM) of --tls-cert", metavar="FILE", type=Path)
    option("--tls-client-ca", "CA (PEM) that must have signed each client's certificate (mutual TLS)",
           metavar="FILE", type=Path)  # fmt: skip
    option("--durability", "when a publish is acknowledged: once written to the OS, or once fsync'ed",
           choices=("received", "fsync"))  # fmt: skip
    option("--segment-bytes", "roll a topic's log segment past this size", metavar="BYTES", type=int)
    option("--retention-bytes", "per-topic retention by size; 0: unlimited", metavar="BYTES", type=int)
    option("--retention-seconds", "per-topic retention by age; 0: unlimited", metavar="SECONDS", type=float)
    option("--retention-check-seconds", "seconds between retention checks", metavar="SECONDS", type=float)
    option("--compact", "a topic or pattern whose log keeps only the latest record per key (docs/compaction.md), "
           "with its own tombstone retention if given; repeatable", metavar="'TOPIC|PATTERN [tombstone-seconds=S]'",
           action="append", shown="none")  # fmt: skip
    option("--compact-tombstone-seconds", "seconds a deletion marker is kept on a compacted topic (entries of "
           "--compact that do not say)", metavar="SECONDS", type=float)  # fmt: skip
    option("--compaction-map-bytes", "the most bytes of one compaction pass's offset map (about 31 per key; "
           "more dirty keys: several passes)", metavar="BYTES", type=int)  # fmt: skip
    option("--compact-check-seconds", "seconds between checks for compacted topics due for a pass",
           metavar="SECONDS", type=float)  # fmt: skip
    option("--consumer-expiry-seconds", "forget durable subscriptions and groups idle this long",
           metavar="SECONDS", type=float)  # fmt: skip
    option("--ack-wait-seconds", "seconds a group waits for an ack before delivering again", metavar="SECONDS",
           type=float)  # fmt: skip
    option("--mesh-listen", "libp2p multiaddr for the mesh, e.g. /ip4/127.0.0.1/tcp/0; none: no mesh",
           metavar="MULTIADDR")  # fmt: skip
    option("--mesh-announce", "multiaddr other hubs dial instead of --mesh-listen's, e.g. a proxy's or a "
           "port forward's /ip4/HOST/tcp/PORT (repeatable)", metavar="MULTIADDR", action="append")  # fmt: skip
    option("--bootstrap", "multiaddr of a hub to join through, ending in /p2p/<peer id> (repeatable)",
           metavar="MULTIADDR", action="append")  # fmt: skip
    option("--cluster", "cluster name: hubs find each other under it in the DHT", metavar="NAME")
    option("--max-peers", "full mesh up to this many peers; bounds inbound links too", metavar="N", type=int)
    option("--mesh-overlay", "mesh v3 from the start: a bounded-degree overlay instead of a full mesh (docs/scale.md)",
           shown="off", action="store_true")  # fmt: skip
    option("--mesh-overlay-from", "switch to the overlay once this hub knows N hubs, itself included (0: never)",
           metavar="N", type=int)  # fmt: skip
    option("--mesh-degree", "on the overlay: links each hub keeps (at most --max-peers)", metavar="N", type=int)
    option("--mesh-shortcuts", "on the overlay: direct links to far hubs this one sends to (0: none)",
           metavar="N", type=int)  # fmt: skip
    option("--mesh-link-trials", "on the overlay: seconds between tries of a faster link, times hubs/100 "
           "past 100 hubs (0: never)", metavar="SECONDS", type=float)  # fmt: skip
    option("--no-discovery", "link only to --bootstrap hubs, no DHT discovery", shown="discovery on",
           action="store_true")  # fmt: skip
    option("--mesh-heartbeat-interval", "seconds between mesh heartbeats", metavar="SECONDS", type=float)
    option("--mesh-heartbeat-misses", "missed mesh heartbeats before a peer is dead", metavar="N", type=int)
    option("--mesh-suspect-after", "on the overlay: route around a neighbour that answers nothing this long "
           "while sent sets (0: never)", metavar="SECONDS", type=float)  # fmt: skip
    option("--mesh-idle-close", "on the overlay: close a libp2p connection no mesh stream used this long "
           "(0: never)", metavar="SECONDS", type=float)  # fmt: skip
    option("--mesh-resume-linger", "seconds a dead peer's interest is kept so a healed link loses nothing; "
           "0: withdraw at once", metavar="SECONDS", type=float)  # fmt: skip
    option("--mesh-write-interval", "least seconds between the starts of two small writes on a mesh link, so "
           "the frames queued meanwhile leave together; 0: no pacing", metavar="SECONDS", type=float)  # fmt: skip
    option("--mesh-window-bytes", "bytes of unacknowledged forwards kept per peer; beyond: replayed from the log",
           metavar="BYTES", type=int)  # fmt: skip
    option("--mesh-plain-io", "libp2p's own read/write path on every mesh stream, never the fast paths that "
           "reach into its internals (slower; rules them out when chasing a problem)", shown="fast paths when the "
           "installed libp2p is the one they were written for", action="store_true")  # fmt: skip
    option("--mesh-allow", "peer ids that may link over the mesh, or a file of them (one a line); repeatable; "
           "any other peer's stream is reset", metavar="FILE|PEER_ID[,PEER_ID...]", action="append",
           shown="any peer")  # fmt: skip
    option("--cluster-secret-file", "a file with the cluster secret (`pub0sub cluster secret` makes one); every "
           "mesh link must prove it in a handshake before any frame counts", metavar="FILE", type=Path,
           shown="none: no proof asked")  # fmt: skip
    option("--allow-mesh-v1", "admit peers speaking the seed mesh protocol v1, which has no handshake: a cluster "
           "secret cannot be proven in it (only --mesh-allow still applies)", shown="v1 refused",
           action="store_true")  # fmt: skip
    option("--mesh-dump", "write each mesh stream's decrypted bytes to files in DIR, one per direction, for "
           "pub0sub decode (debugging: they hold every forwarded payload)", metavar="DIR", type=Path)  # fmt: skip
    option("--metrics-listen", "serve Prometheus /metrics, /healthz, /readyz and the status page over HTTP here "
           "(a bare PORT listens on 127.0.0.1 only; the page shows clients and topics: keep it private)",
           metavar="HOST:PORT")  # fmt: skip
    option("--metrics-topics", "topics given their own metric series: the N busiest by messages stored",
           metavar="N", type=int)  # fmt: skip
    option("--log-format", "text: one line per event for people; json: one object per line", choices=("text", "json"))
    p.add_argument("--log-level", default=DEFAULT_LOG_LEVEL, type=str.upper, choices=LOG_LEVELS, metavar="LEVEL",
                   help=f"one of {', '.join(LOG_LEVELS)} (default: {DEFAULT_LOG_LEVEL})")  # fmt: skip
    return p


async def run_hub(server: HubServer) -> None:
    # Everything alive now (trio, construct's schemas, libp2p, recovered state) lives as long
    # as the hub: moving it out of the collector's reach keeps full collections, which
    # otherwise scan all of it a few times a second under load, short (latency tail).
    gc.freeze()
    # The signal handler is in place before the address is printed: a supervisor
    # that signals as soon as it reads the address still gets a clean shutdown.
    # SIGHUP reloads the users file and the cluster secret file of a hub that has one (the
    # daemon convention, as nats-server does).  Without either, SIGHUP (a closed terminal)
    # stops the hub -- unless it was ignored at start (nohup).
    config = server.config
    reloads = config.auth_file is not None or config.cluster_secret_file is not None or bool(config.mesh_allow)
    watched = [signal.SIGINT, signal.SIGTERM]
    if reloads or signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        watched.append(signal.SIGHUP)
    with trio.open_signal_receiver(*watched) as signals:
        async with trio.open_nursery() as nursery:
            address = await nursery.start(server.serve)
            print(f"listening on {address}", flush=True)
            print(f"hub id {server.hub_id:016x}", flush=True)
            if server.mesh is not None:
                # Announced addresses first: a reader takes its dial addresses once it sees a
                # "listening" line (sdk/tools/cluster.py).
                for addr in server.mesh.listen_addrs if server.mesh.config.announce else []:
                    print(f"mesh announced as {addr}", flush=True)
                for addr in server.mesh.bound_addrs:
                    print(f"mesh listening on {addr}", flush=True)
            if server.ops is not None:
                print(f"metrics on http://{server.ops.address}/metrics", flush=True)
            async for signum in signals:
                if signum == signal.SIGHUP and reloads:
                    server.reload()
                    continue
                # A stop asked for is the normal end of a hub: INFO, not a warning.
                name = signal.Signals(signum).name
                logging.getLogger("pub0sub.hub").info("%s: shutting down", name, extra=ev("hub_stopping", reason=name))
                break
            await server.aclose()
            nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub hub") -> int:
    args = build_parser(prog).parse_args(argv)
    overrides = {
        "listen": args.listen,
        "name": args.name,
        "data_dir": args.data_dir,
        "max_body": args.max_body,
        "max_connections": args.max_connections,
        "max_connects_per_second_per_address": args.max_connects_per_second_per_address,
        "connect_burst_per_address": args.connect_burst_per_address,
        "failed_connect_cost": args.failed_connect_cost,
        "connect_rate_exempt": ",".join(args.connect_rate_exempt) if args.connect_rate_exempt else None,
        "max_accepts_per_second": args.max_accepts_per_second,
        "accept_burst": args.accept_burst,
        "max_subscriptions": args.max_subscriptions,
        "max_topics_per_connection": args.max_topics_per_connection,
        "max_topics": args.max_topics,
        "max_new_topics_per_connection": args.max_new_topics_per_connection,
        "max_new_topics_per_user": args.max_new_topics_per_user,
        "max_new_topics_per_frame": args.max_new_topics_per_frame,
        "max_open_files": args.max_open_files,
        "max_pending_bytes": args.max_pending_bytes,
        "slow_consumer_deadline": args.slow_consumer_deadline,
        "heartbeat_interval": args.heartbeat_interval,
        "heartbeat_misses": args.heartbeat_misses,
        "hello_timeout": args.hello_timeout,
        "max_client_version": args.max_client_version,
        "auth_file": args.auth_file,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "tls_client_ca": args.tls_client_ca,
        "durability": args.durability,
        "segment_bytes": args.segment_bytes,
        "retention_bytes": args.retention_bytes,
        "retention_seconds": args.retention_seconds,
        "retention_check_seconds": args.retention_check_seconds,
        "compact": tuple(args.compact) if args.compact else None,
        "compact_tombstone_seconds": args.compact_tombstone_seconds,
        "compaction_map_bytes": args.compaction_map_bytes,
        "compact_check_seconds": args.compact_check_seconds,
        "consumer_expiry_seconds": args.consumer_expiry_seconds,
        "ack_wait_seconds": args.ack_wait_seconds,
        "mesh_listen": args.mesh_listen,
        "mesh_announce": tuple(args.mesh_announce) if args.mesh_announce else None,
        "bootstrap": tuple(args.bootstrap) if args.bootstrap else None,
        "cluster": args.cluster,
        "max_peers": args.max_peers,
        "mesh_overlay": True if args.mesh_overlay else None,
        "mesh_overlay_from": args.mesh_overlay_from,
        "mesh_degree": args.mesh_degree,
        "mesh_shortcuts": args.mesh_shortcuts,
        "mesh_link_trials": args.mesh_link_trials,
        "discovery": False if args.no_discovery else None,
        "mesh_heartbeat_interval": args.mesh_heartbeat_interval,
        "mesh_heartbeat_misses": args.mesh_heartbeat_misses,
        "mesh_suspect_after": args.mesh_suspect_after,
        "mesh_idle_close": args.mesh_idle_close,
        "mesh_resume_linger": args.mesh_resume_linger,
        "mesh_write_interval": args.mesh_write_interval,
        "mesh_window_bytes": args.mesh_window_bytes,
        "mesh_plain_io": True if args.mesh_plain_io else None,
        "mesh_allow": tuple(args.mesh_allow) if args.mesh_allow else None,
        "cluster_secret_file": args.cluster_secret_file,
        "allow_mesh_v1": True if args.allow_mesh_v1 else None,
        "mesh_dump": args.mesh_dump,
        "metrics_listen": args.metrics_listen,
        "metrics_topics": args.metrics_topics,
        "log_format": args.log_format,
    }
    try:
        config = load_config(file=args.config, overrides=overrides)
    except (OSError, ValueError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    configure_logging(level=args.log_level, log_format=config.log_format, hub_name=config.name)
    try:
        # Before the data directory: a refused hub says one line and opens (and recovers) nothing.
        # serve() and the mesh check again when they bind, for a port taken in between.
        check_ports_free(config)
    except PortInUseError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    if config.mesh_dump is not None:
        try:
            config.mesh_dump.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(f"{prog}: cannot create the mesh dump directory {config.mesh_dump}: {exc}", file=sys.stderr)
            return 1
    try:
        server = HubServer(config)  # locks, opens and recovers the data directory
    except (AuthFileError, TlsSetupError, AdmissionSetupError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except DataDirInUseError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{prog}: cannot open the data directory {config.data_dir}: {exc}", file=sys.stderr)
        return 1
    try:
        trio.run(run_hub, server)
    except BaseException as exc:
        # Start-up failures (and a Ctrl-C before the signal receiver is in place) reach here
        # wrapped in the nurseries' exception groups.
        error = _unwrap(exc)
        if isinstance(error, KeyboardInterrupt):
            return 0
        if not isinstance(error, OSError):
            raise
        if isinstance(error, PortInUseError):
            print(f"{prog}: {error}", file=sys.stderr)
        else:
            print(f"{prog}: cannot listen on {config.listen}: {error.strerror or error}", file=sys.stderr)
        return 1
    return 0


def check_ports_free(config: HubConfig) -> None:
    """:class:`PortInUseError` if the client, mesh or metrics port has a listener already."""
    host, port = config.host_port
    check_port_free(host, port)
    if config.mesh_listen:
        from .mesh.host import check_mesh_port_free  # imports libp2p: only for a hub with a mesh

        check_mesh_port_free(config.mesh_listen)
    metrics = config.metrics_host_port
    if metrics is not None:
        check_port_free(*metrics, what="metrics address")


def _unwrap(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member exception groups (``exc`` itself otherwise)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
