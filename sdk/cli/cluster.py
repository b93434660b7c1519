"""``pub0sub cluster up|status|down|secret``: N meshed hubs on loopback, for trying pub0sub out.

    pub0sub cluster up --hubs 3             # 127.0.0.1:7420, :7430, :7440 until Ctrl-C
    pub0sub cluster up --hubs 3 --detach    # the same, in the background
    pub0sub cluster up --metrics            # each hub also serves metrics and its status page (:7422, ...)
    pub0sub cluster status                  # each hub: up or down, its addresses, peers, topics
    pub0sub cluster down                    # stop the hubs of the state file
    pub0sub cluster secret FILE             # a random secret for --cluster-secret-file

``up`` writes ``DATA_ROOT/cluster.json`` (:mod:`sdk.tools.cluster_state`); ``status`` and ``down``
read it, from any terminal.  Exit status: 0 done (``status``: every hub up), 1 a hub failed
to start or is down, 2 usage errors.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..blocking import connect_blocking
from ..errors import Pub0subError
from ..tools.cluster import LocalCluster, describe
from ..tools.cluster_secret import SECRET_FILE, make_secret_file
from ..tools.cluster_state import ClusterState, HubEntry, stop_hubs
from ..tools.start_lines import last_line
from ..tools.stopping import run_until_stopped

DEFAULT_ROOT = Path("pub0sub-cluster-data")
DEFAULT_BASE_PORT = 7420
#: How often ``up`` in the foreground looks at its hubs.
WATCH_INTERVAL = 0.5
#: ``status`` asks each live hub; one that does not answer within this is shown as not answering.
STATUS_TIMEOUT = 3.0


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Run a local cluster of meshed hubs on 127.0.0.1.")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start N meshed hubs (until Ctrl-C, or in the background with --detach)")
    up.add_argument("--hubs", type=int, default=3, help="number of hubs (default 3)")
    up.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT,
                    help=f"client port of the first hub (default {DEFAULT_BASE_PORT}); the next hubs take +10, "
                         "+20, ...; each hub's mesh port is its client port + 1; ports in use are replaced by "
                         "free ones; 0: free ports for all")  # fmt: skip
    up.add_argument("--metrics", action="store_true",
                    help="each hub serves Prometheus metrics, /healthz, /readyz and its status page over HTTP, "
                         "on its client port + 2 (7422, 7432, ...; free ports with --base-port 0)")  # fmt: skip
    up.add_argument("--seconds", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    up.add_argument("--detach", "-d", action="store_true",
                    help="start the hubs, print their addresses and return; they run until pub0sub cluster down")
    up.add_argument("--tls", action="store_true",
                    help="the hubs speak TLS, with a throwaway CA made in DATA_ROOT/tls (clients: --ca-file "
                         "DATA_ROOT/tls/ca.pem)")  # fmt: skip
    commands.add_parser("status", help="show each hub of the cluster: up or down, addresses, peers, topics")
    commands.add_parser("down", help="stop the hubs of the cluster (by PID, from its state file)")
    secret = commands.add_parser("secret", help="write a new random cluster secret for --cluster-secret-file "
                                 "(mode 0600; an existing file is never replaced)")  # fmt: skip
    secret.add_argument("file", type=Path, nargs="?", help="where (default DATA_ROOT/cluster.secret)")
    for command in commands.choices.values():
        command.add_argument("--data-root", type=Path, default=DEFAULT_ROOT,
                             help=f"one data dir per hub below it, and the cluster state file "
                                  f"(default ./{DEFAULT_ROOT})")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub cluster") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.command == "up":
        if args.hubs < 1:
            parser.error("--hubs must be at least 1")
        last_port = args.base_port + 10 * (args.hubs - 1) + (2 if args.metrics else 1)
        if args.base_port < 0 or (args.base_port and last_port > 65535):
            parser.error(f"--base-port {args.base_port} leaves no room for {args.hubs} hubs below port 65536")
    run = {"up": up, "status": status, "down": down, "secret": secret}[args.command]
    try:
        return run(args, f"{prog} {args.command}")
    except ValueError as exc:  # an unreadable state file
        print(f"{prog} {args.command}: {exc}", file=sys.stderr)
        return 1


def _root_option(root: Path) -> str:
    return "" if root == DEFAULT_ROOT else f" --data-root {root}"


# -- secret -------------------------------------------------------------------------------------


def secret(args: argparse.Namespace, prog: str) -> int:
    path: Path = args.file or args.data_root / SECRET_FILE
    try:
        make_secret_file(path)
    except FileExistsError:
        print(f"{prog}: {path} exists; a secret hubs may be using is never replaced", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{prog}: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"cluster secret written to {path}; start every hub with --cluster-secret-file {path} (or a copy)")
    return 0


# -- up -----------------------------------------------------------------------------------------


def up(args: argparse.Namespace, prog: str) -> int:
    root: Path = args.data_root
    existing = ClusterState.read(root)
    running = existing.running() if existing is not None else []
    if running:
        hubs = ", ".join(f"{h.name} (PID {h.pid}, {h.address})" for h in running)
        print(f"{prog}: a cluster already runs from {root}: {hubs}; stop it with: "
              f"pub0sub cluster down{_root_option(root)}", file=sys.stderr)  # fmt: skip
        return 1

    cluster = LocalCluster(args.hubs, root, base_port=args.base_port or None, tls=args.tls, metrics=args.metrics,
                           note=lambda line: print(line, file=sys.stderr, flush=True))  # fmt: skip
    state: ClusterState | None = None
    left_running = False
    ended_by = ""

    def watch() -> int:
        nonlocal state, left_running, ended_by
        cluster.start()
        state = ClusterState.of(cluster, detached=args.detach)
        state.write()
        print(describe(cluster), flush=True)
        print(f"mesh: the hubs prove the cluster secret in {cluster.secret_file} to each other", flush=True)
        if cluster.tls is not None:
            print(f"TLS: clients verify the hubs with --ca-file {cluster.tls.ca}", flush=True)
        converged = cluster.wait_converged()
        print("mesh converged" if converged else "mesh not fully linked yet (see pub0sub cluster status)", flush=True)
        print(f"state in {state.path}, hub logs in {root}/hub-*.log", flush=True)
        if args.detach:
            left_running = True
            print(f"the hubs run in the background: pub0sub cluster status{_root_option(root)}, "
                  f"pub0sub cluster down{_root_option(root)}", flush=True)  # fmt: skip
            return 0
        until = f"for {args.seconds:g}s" if args.seconds else "until Ctrl-C"
        print(f"running {until} (or pub0sub cluster down{_root_option(root)})", flush=True)
        deadline = time.monotonic() + args.seconds if args.seconds else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(WATCH_INTERVAL)
            gone = cluster.exited()
            if not gone:
                continue
            now = ClusterState.read(root)
            if now is None or now.stopping or now.launcher_pid != os.getpid():
                ended_by = " by pub0sub cluster down"
                return 0
            for hub in gone:
                assert hub.proc is not None
                print(f"{prog}: {hub.name} exited with status {hub.proc.returncode}: {last_line(hub.log_path)}",
                      file=sys.stderr)  # fmt: skip
            return 1
        return 0

    def stop() -> None:
        if left_running:
            return
        cluster.stop()
        if state is not None:
            now = ClusterState.read(root)
            if now is not None and now.launcher_pid == os.getpid():
                state.remove()

    try:
        outcome = run_until_stopped(watch, cleanup=stop)
    except RuntimeError as exc:  # a hub did not start (its own one-line reason is in the message)
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    if not left_running:
        how = f" on {outcome.signal}" if outcome.stopped else ended_by
        print(f"stopped {len(cluster.hubs)} hubs{how}; their data stays in {root}", flush=True)
    return 0 if outcome.stopped else (outcome.value or 0)


# -- status ---------------------------------------------------------------------------------------


def status(args: argparse.Namespace, prog: str) -> int:
    root: Path = args.data_root
    state = ClusterState.read(root)
    if state is None:
        print(f"no cluster in {root} (no {root}/cluster.json): start one with pub0sub cluster up{_root_option(root)}")
        return 1
    how = "in the background" if state.detached else f"by pub0sub cluster up (PID {state.launcher_pid})"
    print(f"cluster in {root}: {len(state.hubs)} hubs, started {how}")
    up_count = 0
    for hub in state.hubs:
        holder = hub.holder()
        if holder == hub.pid:
            up_count += 1
            line = f"{hub.name}  up    PID {hub.pid}  address {hub.address}  {_live_figures(hub, len(state.hubs))}"
        elif holder is None:
            line = f"{hub.name}  down  (was PID {hub.pid})  address {hub.address}"
        else:
            line = f"{hub.name}  down  (was PID {hub.pid}; its data dir is in use by PID {holder})"
        print(line)
        print(f"       mesh {hub.multiaddr}")
        if hub.metrics_url:
            print(f"       metrics {hub.metrics_url}/metrics  status page {hub.metrics_url}/")
        print(f"       data {hub.data_dir}  log {hub.log}")
    print(f"{up_count} of {len(state.hubs)} hubs up")
    return 0 if up_count == len(state.hubs) else 1


def _live_figures(hub: HubEntry, cluster_size: int) -> str:
    """Peers, topics, connections and uptime from the hub's own status, or why it did not answer."""
    try:
        with connect_blocking(hub.address, name="pub0sub-cluster", reconnect=None, ca_file=hub.ca_file or None,
                              connect_timeout=STATUS_TIMEOUT, handshake_timeout=STATUS_TIMEOUT) as client:  # fmt: skip
            doc: dict[str, Any] = client.status(timeout=STATUS_TIMEOUT)
    except (Pub0subError, OSError) as exc:
        return f"not answering: {exc}"
    peers = sum(1 for p in doc.get("mesh", {}).get("peers", []) if p.get("connected"))
    others = max(0, doc.get("connections", 1) - 1)  # not counting this status connection
    return (f"peers {peers}/{cluster_size - 1}  topics {doc.get('topics', 0)}  "
            f"clients {others}  uptime {_duration(doc.get('uptime_s', 0))}")  # fmt: skip


def _duration(seconds: float) -> str:
    """12s, 3m 20s, 2h 05m."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


# -- down -----------------------------------------------------------------------------------------


def down(args: argparse.Namespace, prog: str) -> int:
    root: Path = args.data_root
    state = ClusterState.read(root)
    if state is None:
        print(f"no cluster in {root} (no {root}/cluster.json): nothing to stop")
        return 0
    # Said before the hubs go: a foreground ``cluster up`` seeing them exit ends quietly.
    state.stopping = True
    state.write()
    outcome = stop_hubs(state.hubs)
    for hub in state.hubs:
        print(f"{hub.name} (PID {hub.pid}, {hub.address}): {outcome[hub.name]}")
    state.remove()
    stopped = sum(1 for what in outcome.values() if what != "not running")
    print(f"stopped {stopped} of {len(state.hubs)} hubs; their data stays in {root}")
    return 0
