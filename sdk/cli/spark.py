"""``pub0sub spark up|exactly-once|scale``: a local Spark standalone cluster, and the runs made on it.

    pub0sub spark up --workers 2            # master + 2 workers on 127.0.0.1 until Ctrl-C
    pub0sub spark exactly-once --seconds 60 # streaming through a 3-hub mesh, with failures; prints figures
    pub0sub spark scale --messages 10000000 # the analytics job on the cluster beside local[2]

Exit status: 0 done (or stopped by Ctrl-C/SIGTERM), 1 a daemon failed or a check failed, 2 usage errors.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..tools.cluster import port_free
from ..tools.stopping import run_until_stopped

DEFAULT_ROOT = Path("pub0sub-spark")
#: Spark's own defaults, so the usual URLs work; a port in use is replaced by a free one.
DEFAULT_PORT = 7077
DEFAULT_UI_PORT = 8080
WATCH_INTERVAL = 0.5


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="A local Spark standalone cluster, and runs on it.")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start a master and N workers on 127.0.0.1 (until Ctrl-C)")
    up.add_argument("--workers", type=int, default=2, help="number of workers (default 2)")
    up.add_argument("--cores", type=int, default=1, help="cores each worker offers (default 1)")
    up.add_argument("--memory", default="1g", help="memory each worker offers to executors (default 1g)")
    up.add_argument("--port", type=int, default=DEFAULT_PORT,
                    help=f"master port (default {DEFAULT_PORT}; taken: a free one; 0: any free one)")
    up.add_argument("--webui-port", type=int, default=DEFAULT_UI_PORT,
                    help=f"master web UI port (default {DEFAULT_UI_PORT}; taken: a free one)")
    up.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                    help=f"daemon logs and executor work dirs (default ./{DEFAULT_ROOT})")
    up.add_argument("--seconds", type=float, help="stop after this many seconds (default: until Ctrl-C)")

    from ..tools.spark_runs import exactly_once, scale

    exactly_once.add_arguments(commands.add_parser("exactly-once", help=exactly_once.HELP))
    scale.add_arguments(commands.add_parser("scale", help=scale.HELP))
    return parser


def missing_requirements() -> str | None:
    missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
    if missing:
        return f"needs {', '.join(missing)}: pip install 'pub0sub[spark]'"
    if shutil.which("java") is None:
        return "needs Java 17 on the PATH (java not found)"
    return None


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub spark") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    why = missing_requirements()
    if why is not None:
        print(f"{prog} {args.command}: error: {why}", file=sys.stderr)
        return 2
    if args.command == "up":
        if args.workers < 1 or args.cores < 1:
            parser.error("--workers and --cores must be at least 1")
        return up(args, f"{prog} up")
    from ..tools.spark_runs import exactly_once, scale

    run = {"exactly-once": exactly_once.main, "scale": scale.main}[args.command]
    return run(args, f"{prog} {args.command}")


def _port(wanted: int, what: str, note: list[str]) -> int:
    if wanted == 0 or port_free(wanted):
        return wanted
    note.append(f"{what} port {wanted} is in use on 127.0.0.1; using a free one instead")
    return 0


def up(args: argparse.Namespace, prog: str) -> int:
    from ..tools.spark_cluster import LocalSparkCluster

    notes: list[str] = []
    cluster = LocalSparkCluster(
        args.workers, args.root, cores=args.cores, memory=args.memory,
        port=_port(args.port, "master", notes), ui_port=_port(args.webui_port, "web UI", notes),
    )  # fmt: skip
    for line in notes:
        print(line, file=sys.stderr, flush=True)
    stopped = 0

    def watch() -> int:
        print(f"starting a Spark master and {args.workers} worker{'s' if args.workers != 1 else ''} ...", flush=True)
        cluster.start()
        cluster.write_state()
        print(cluster.describe(), flush=True)
        print(f"try: pub0sub analyze DATA_DIR --master {cluster.master_url}", flush=True)
        print(f"running {f'for {args.seconds:g}s' if args.seconds else 'until Ctrl-C'}", flush=True)
        deadline = time.monotonic() + args.seconds if args.seconds else None
        reported: set[int] = set()
        while deadline is None or time.monotonic() < deadline:
            time.sleep(WATCH_INTERVAL)
            for d in cluster.exited():
                if d.pid in reported:
                    continue
                reported.add(d.pid)
                status = d.proc.returncode if d.proc is not None else "?"
                print(f"{prog}: {d.name} (PID {d.pid}) exited with status {status}; see {d.log_path}",
                      file=sys.stderr, flush=True)  # fmt: skip
                if d is cluster.master:
                    return 1
                # A worker lost is what a cluster lives through (and what exactly-once runs do on purpose).
        return 0

    def stop() -> None:
        nonlocal stopped
        stopped = cluster.stop()
        cluster.state_path.unlink(missing_ok=True)

    try:
        outcome = run_until_stopped(watch, cleanup=stop)
    except RuntimeError as exc:  # a daemon did not start; the message names its log
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    how = f" on {outcome.signal}" if outcome.stopped else ""
    print(f"stopped the master and {len(cluster.workers)} workers{how} ({stopped} processes, by PID); "
          f"logs in {args.root}", flush=True)  # fmt: skip
    return 0 if outcome.stopped else (outcome.value or 0)
