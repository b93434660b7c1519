"""``pub0sub hub``: run a hub until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from .config import load_config
from .ports import PortInUseError
from .server import HubServer
from .storage.store import DataDirInUseError


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run a pub0sub hub.")
    p.add_argument("--listen", help="client listener HOST:PORT (port 0: any free port; default 127.0.0.1:7420)")
    p.add_argument("--config", type=Path, help="TOML file with hub settings ([hub] table)")
    p.add_argument("--name", help="hub name shown to clients and in status")
    p.add_argument("--data-dir", type=Path, help="directory for topic logs")
    p.add_argument("--max-body", type=int, help="largest client frame body in bytes")
    p.add_argument("--max-connections", type=int)
    p.add_argument("--max-subscriptions", type=int, help="open subscriptions per connection")
    p.add_argument("--max-topics-per-connection", type=int)
    p.add_argument(
        "--max-pending-bytes",
        type=int,
        help="outbound bytes queued per connection before the slow-consumer policy applies",
    )
    p.add_argument("--heartbeat-interval", type=float, help="seconds between heartbeats on idle connections")
    p.add_argument("--heartbeat-misses", type=int, help="silent intervals before a client is declared dead")
    p.add_argument(
        "--durability", choices=("received", "fsync"), help="when a publish is acknowledged (default received)"
    )
    p.add_argument("--segment-bytes", type=int, help="roll log segments past this size")
    p.add_argument("--retention-bytes", type=int, help="per-topic retention by size (0: unlimited)")
    p.add_argument("--retention-seconds", type=float, help="per-topic retention by age (0: unlimited)")
    p.add_argument("--retention-check-seconds", type=float, help="seconds between retention checks")
    p.add_argument("--consumer-expiry-seconds", type=float, help="forget idle durable subscriptions and groups")
    p.add_argument("--ack-wait-seconds", type=float, help="default group redelivery timeout")
    p.add_argument("--mesh-listen", help="libp2p multiaddr for the mesh, e.g. /ip4/127.0.0.1/tcp/0 (default: no mesh)")
    p.add_argument(
        "--bootstrap", action="append", help="multiaddr of a hub to join through, ending in /p2p/<id> (repeatable)"
    )
    p.add_argument("--cluster", help="cluster name: hubs find each other under it in the DHT (default 'default')")
    p.add_argument("--max-peers", type=int, help="full mesh up to this many peers")
    p.add_argument(
        "--no-discovery", action="store_true", default=None, help="link only to --bootstrap hubs (no DHT discovery)"
    )
    p.add_argument("--mesh-heartbeat-interval", type=float, help="seconds between mesh heartbeats")
    p.add_argument("--mesh-heartbeat-misses", type=int, help="missed mesh heartbeats before a peer is dead")
    p.add_argument(
        "--mesh-resume-linger",
        type=float,
        help="seconds a dead peer's interest is kept so a healed link loses nothing (0: withdraw at once)",
    )
    p.add_argument(
        "--mesh-write-interval",
        type=float,
        help="least seconds between the starts of two small writes on a mesh link, so the frames queued "
        "meanwhile leave together (default 0.0005; 0: no pacing)",
    )
    p.add_argument(
        "--mesh-window-bytes",
        type=int,
        help="bytes of unacknowledged forwards kept per peer (default 256 MiB; beyond: replayed from the log)",
    )
    p.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default), ERROR")
    return p


async def run_hub(server: HubServer) -> None:
    # Everything alive now (trio, construct's schemas, libp2p, recovered state) lives as long
    # as the hub: moving it out of the collector's reach keeps full collections, which
    # otherwise scan all of it a few times a second under load, short (latency tail).
    gc.freeze()
    # The signal handler is in place before the address is printed: a supervisor
    # that signals as soon as it reads the address still gets a clean shutdown.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            address = await nursery.start(server.serve)
            print(f"listening on {address}", flush=True)
            print(f"hub id {server.hub_id:016x}", flush=True)
            if server.mesh is not None:
                for addr in server.mesh.listen_addrs:
                    print(f"mesh listening on {addr}", flush=True)
            async for signum in signals:
                # A stop asked for is the normal end of a hub: INFO, not a warning.
                logging.getLogger("pub0sub.hub").info("%s: shutting down", signal.Signals(signum).name)
                break
            await server.aclose()
            nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub hub") -> int:
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {
        "listen": args.listen,
        "name": args.name,
        "data_dir": args.data_dir,
        "max_body": args.max_body,
        "max_connections": args.max_connections,
        "max_subscriptions": args.max_subscriptions,
        "max_topics_per_connection": args.max_topics_per_connection,
        "max_pending_bytes": args.max_pending_bytes,
        "heartbeat_interval": args.heartbeat_interval,
        "heartbeat_misses": args.heartbeat_misses,
        "durability": args.durability,
        "segment_bytes": args.segment_bytes,
        "retention_bytes": args.retention_bytes,
        "retention_seconds": args.retention_seconds,
        "retention_check_seconds": args.retention_check_seconds,
        "consumer_expiry_seconds": args.consumer_expiry_seconds,
        "ack_wait_seconds": args.ack_wait_seconds,
        "mesh_listen": args.mesh_listen,
        "bootstrap": tuple(args.bootstrap) if args.bootstrap else None,
        "cluster": args.cluster,
        "max_peers": args.max_peers,
        "discovery": False if args.no_discovery else None,
        "mesh_heartbeat_interval": args.mesh_heartbeat_interval,
        "mesh_heartbeat_misses": args.mesh_heartbeat_misses,
        "mesh_resume_linger": args.mesh_resume_linger,
        "mesh_write_interval": args.mesh_write_interval,
        "mesh_window_bytes": args.mesh_window_bytes,
    }
    try:
        config = load_config(file=args.config, overrides=overrides)
    except (OSError, ValueError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    try:
        server = HubServer(config)  # locks, opens and recovers the data directory
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


def _unwrap(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member exception groups (``exc`` itself otherwise)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
