"""``pub0sub spark scale``: the analytics job over a 3-hub mesh's data dirs, on the standalone
cluster and on ``local[2]``, with the same data, and their figures side by side.

The data: the raw benchmark publisher sends half the messages to hub-1 and half to hub-2 (topic
``bench``, 64-byte values, 1000 per PUBLISH); hub-3 holds a durable interest in ``bench``, so the
mesh forwards every one of them there.  The data dirs then hold ``--messages`` records (each
published message twice: on its origin hub and as a forwarded copy on hub-3), and the report's
latency figures are those of real mesh hops.  The hubs are stopped before the job runs, so the
measurement has the machine to itself; ``--reuse`` skips making the data when it is there.

Each run is ``pub0sub analyze`` as a child process, with its progress display, report and plots;
the figures are read from its progress lines.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...blocking import connect_blocking
from ..bench.orchestrate import worker
from ..cluster import LocalCluster
from ..spark_cluster import LocalSparkCluster
from ..stopping import run_until_stopped

HELP = "the analytics job over a 3-hub mesh's data dirs (>= 10M messages) on the cluster beside local[2]"
DEFAULT_ROOT = Path("pub0sub-spark-scale")
TOPIC = "bench"
#: Executors decode whole 64 MiB segments: each gets more than the 1 GiB default, the worker offers it.
WORKER_MEMORY = "2g"
EXECUTOR_MEMORY = "1600m"
FORWARD_SECONDS = 600.0
_DECODED = re.compile(r"decoded ([\d,]+) records from (\d+) files in ([\d.]+) s")
_AGGREGATED = re.compile(r"aggregated in ([\d.]+) s")
_DONE = re.compile(r"done in ([\d.]+) s")
_STARTING = re.compile(r"analyze\s+([\d.]+)s decoding segments")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=10_000_000,
                        help="records the data dirs hold in the end (half published, half forwarded; default 10M)")
    parser.add_argument("--size", type=int, default=64, help="value bytes (default 64)")
    parser.add_argument("--workers", type=int, default=2, help="Spark workers of 1 core (default 2)")
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                        help=f"hub data, reports, Spark logs (default ./{DEFAULT_ROOT})")
    parser.add_argument("--reuse", action="store_true", help="use the data already under ROOT/hubs")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the cluster's run (repeatable; local[2] keeps the project's "
                             "local settings), e.g. spark.sql.shuffle.partitions=4")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")


def make_data(root: Path, messages: int, size: int, say: Any) -> dict[str, Any]:
    """Fill a fresh 3-hub mesh under ``root`` (see the module doc); the hubs are stopped at the end."""
    shutil.rmtree(root, ignore_errors=True)
    hubs = LocalCluster(3, root, note=say)
    try:
        hubs.start()
        hubs.wait_converged()
        with connect_blocking(hubs.hubs[2].address, name="scale-interest") as client:
            client.subscribe(TOPIC, durable="scale-copies", start="latest").close()
        time.sleep(1.0)  # the interest reaches the other hubs with the next mesh round
        started = time.monotonic()
        half = messages // 4  # published per hub; each also becomes a copy on hub-3
        publishers = []
        for hub in hubs.hubs[:2]:
            host, port = hub.address.rsplit(":", 1)
            publishers.append(subprocess.Popen(worker("pub-pub0sub-raw", host=host, port=int(port),
                                                      messages=half, size=size)))  # fmt: skip
        for proc in publishers:
            proc.wait(timeout=FORWARD_SECONDS)
        published = time.monotonic() - started
        deadline = time.monotonic() + FORWARD_SECONDS
        copies = 0
        while time.monotonic() < deadline:
            with connect_blocking(hubs.hubs[2].address, name="scale-check") as client:
                ends = {t["topic"]: t["next_offset"] for t in client.status()["topic_list"]}
            copies = int(ends.get(TOPIC, 0))
            if copies >= 2 * half:
                break
            time.sleep(1.0)
        forwarded = time.monotonic() - started
        say(f"published {2 * half:,} messages in {published:.1f} s; hub-3 holds {copies:,} copies after "
            f"{forwarded:.1f} s")  # fmt: skip
        if copies < 2 * half:
            raise RuntimeError(f"hub-3 has only {copies:,} of {2 * half:,} forwarded copies after {FORWARD_SECONDS} s")
        return {"published": 2 * half, "records": 4 * half, "publish_s": round(published, 1),
                "forwarded_s": round(forwarded, 1)}  # fmt: skip
    finally:
        hubs.stop()


def analyze(data: Path, out: Path, master: str, conf: dict[str, str]) -> dict[str, Any]:
    """``pub0sub analyze`` as a child; its progress goes to our stderr; the figures from its lines."""
    argv = [sys.executable, "-m", "sdk.cli", "analyze", str(data), "--master", master, "--out", str(out)]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        sys.stderr.write(line)
        lines.append(line)
    proc.wait()
    text = "".join(lines)
    if proc.returncode != 0:
        raise RuntimeError(f"pub0sub analyze --master {master} failed (status {proc.returncode})")
    decoded, aggregated, done = _DECODED.search(text), _AGGREGATED.search(text), _DONE.search(text)
    first_job = _STARTING.search(text)
    if not (decoded and aggregated and done and first_job):
        raise RuntimeError(f"pub0sub analyze printed no figures:\n{text}")
    rows, decode_s = int(decoded.group(1).replace(",", "")), float(decoded.group(3))
    return {
        "master": master, "rows": rows, "files": int(decoded.group(2)),
        "session_s": float(first_job.group(1)), "decode_s": decode_s, "decode_rows_per_s": round(rows / decode_s),
        "aggregate_s": float(aggregated.group(1)), "total_s": float(done.group(1)),
        "wall_s": round(time.monotonic() - started, 1), "report": str(out / "report.md"),
    }  # fmt: skip


def main(args: argparse.Namespace, prog: str) -> int:
    if args.messages < 4 or args.workers < 1:
        print(f"{prog}: error: --messages must be >= 4 and --workers >= 1", file=sys.stderr)
        return 2
    if any("=" not in item for item in args.conf):
        print(f"{prog}: error: --conf takes KEY=VALUE", file=sys.stderr)
        return 2
    extra_conf = dict(item.split("=", 1) for item in args.conf)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    data = args.root / "hubs"
    cluster = LocalSparkCluster(args.workers, args.root / "spark", memory=WORKER_MEMORY, note=say)
    figures: dict[str, Any] = {}

    def body() -> int:
        if args.reuse and any(data.glob("hub-*/topics")):
            say(f"using the data under {data}")
        else:
            figures["data"] = make_data(data, args.messages, args.size, say)
        cluster.start()
        say(cluster.describe())
        cores = str(args.workers)
        figures["cluster"] = analyze(data, args.root / "report-cluster", cluster.master_url,
                                     {"spark.executor.memory": EXECUTOR_MEMORY, "spark.cores.max": cores,
                                      **extra_conf})  # fmt: skip
        cluster.stop()  # local[2] gets the cores to itself
        figures["local"] = analyze(data, args.root / "report-local", "local[2]", {})
        return 0

    try:
        outcome = run_until_stopped(body, cleanup=cluster.stop)
    except RuntimeError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    if outcome.stopped:
        print(f"{prog}: stopped on {outcome.signal}; the hubs and the cluster are stopped", file=sys.stderr)
        return 0
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"{'':26}{'local[2]':>16}{f'standalone {args.workers}x1 core':>26}")
    for name, key, fmt in (("records", "rows", "{:,}"), ("segment files", "files", "{}"),
                           ("Spark start (s)", "session_s", "{:.1f}"), ("decode + write (s)", "decode_s", "{:.1f}"),
                           ("decode rows/s", "decode_rows_per_s", "{:,}"), ("aggregates (s)", "aggregate_s", "{:.1f}"),
                           ("whole job (s)", "total_s", "{:.1f}")):  # fmt: skip
        print(f"{name:<26}{fmt.format(figures['local'][key]):>16}{fmt.format(figures['cluster'][key]):>26}")
    print(f"reports: {figures['local']['report']}, {figures['cluster']['report']}")
    return 0
