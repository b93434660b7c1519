"""``pub0sub spark exactly-once``: a streaming query through a 3-hub mesh on a standalone cluster,
while things fail; then every message is counted where it landed.

A publisher keeps publishing ``key:seq`` values on hub-1 into ``in.0 .. in.<n-1>`` (a key always
to the same topic).  hub-2 holds a durable interest in ``in.*``, so the mesh forwards everything
to it; the Spark source reads ``in.*`` from hub-2, and two queries write what it reads: the
``pub0sub`` sink to topic ``out.<phase>`` on hub-3, and Parquet.  Two phases, one per trigger:

* ``micro-batch`` (``processingTime``): during the run a worker and everything under it is
  SIGKILLed and started again, both queries are stopped and started again from their
  checkpoints, and hub-2 (the source's hub) is restarted;
* ``available-now``: ``Trigger.AvailableNow`` runs back to back, each one a restart from the
  checkpoint, with a worker killed and hub-2 restarted during them.

Afterwards the output topic is read back from hub-3 and checked against what the publisher had
acknowledged: every message exactly once, in order per key; the Parquet sink is counted by
Spark (``spark.read.parquet`` honours the sink's commit log).  Exit 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...blocking import connect_blocking
from ..cluster import LocalCluster
from ..spark_cluster import DRIVER_CONF, LocalSparkCluster
from ..stopping import run_until_stopped
from .pipeline import (
    INPUT_PATTERN,
    OutputCheck,
    Publisher,
    Streams,
    check_output,
    check_parquet,
    duplicate_frames,
    next_offsets,
    read_topic,
)

HELP = "streaming through a 3-hub mesh on a local cluster with a worker killed, restarts; checks exactly-once"
DEFAULT_ROOT = Path("pub0sub-spark-exactly-once")
#: How long the queries may take to catch up once publishing stopped.
DRAIN_SECONDS = 180.0
#: How long the first batch with data may take (executors start their Python workers for it).
WARM_SECONDS = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=60.0, help="publishing time of each phase (default 60)")
    parser.add_argument("--rate", type=float, default=2000.0, help="messages published per second (default 2000)")
    parser.add_argument("--keys", type=int, default=64, help="distinct keys (default 64)")
    parser.add_argument("--topics", type=int, default=2, help="input topics in.0 .. in.N-1 (default 2)")
    parser.add_argument("--workers", type=int, default=2, help="Spark workers of 1 core (default 2)")
    parser.add_argument("--trigger", choices=("micro-batch", "available-now", "both"), default="both")
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                        help=f"hub data, Spark logs, checkpoints and Parquet; emptied first (default ./{DEFAULT_ROOT})")
    parser.add_argument("--cluster", type=Path, metavar="ROOT",
                        help="use the cluster of a running pub0sub spark up --root ROOT instead of starting one "
                             "(its worker-1 is killed; the replacement is this run's and stops with it)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")


class Run:
    """Hubs, cluster, session and the timeline of one run; everything stopped by :meth:`close`."""

    def __init__(self, args: argparse.Namespace, say: Callable[[str], None]) -> None:
        self.args = args
        self.say = say
        self.began = time.monotonic()
        self.hubs = LocalCluster(3, args.root / "hubs", note=say)
        self.own_cluster = args.cluster is None
        self.cluster = (LocalSparkCluster(args.workers, args.root / "spark", memory="1g", note=say)
                        if self.own_cluster else LocalSparkCluster.attach(args.cluster))  # fmt: skip
        self.spark: Any = None
        self.publisher: Publisher = Publisher("", rate=args.rate, keys=args.keys, topics=args.topics)
        self.events: list[dict[str, Any]] = []

    def at(self) -> float:
        return round(time.monotonic() - self.began, 1)

    def event(self, what: str, **extra: Any) -> None:
        self.events.append({"t": self.at(), "event": what, **extra})
        self.say(f"{self.at():7.1f}s {what}" + "".join(f" {k}={v}" for k, v in extra.items()))

    def start(self) -> None:
        self.hubs.start()
        self.hubs.wait_converged()
        self.event("3 hubs meshed", hubs=" ".join(h.address for h in self.hubs.hubs))
        # hub-2 wants in.* from now on, attached or not: the mesh forwards every publish there.
        with connect_blocking(self.hub(2), name="spark-run-interest") as client:
            client.subscribe(INPUT_PATTERN, durable="spark-source-interest", start="latest").close()
        if self.own_cluster:
            self.cluster.start()
        self.event("Spark cluster up", master=self.cluster.master_url, workers=len(self.cluster.workers))
        from ...spark import register
        from ...spark.session import build_session

        conf = {**DRIVER_CONF, "spark.cores.max": str(len(self.cluster.workers) * self.cluster.cores)}
        self.spark = build_session(self.cluster.master_url, app_name="pub0sub exactly-once", conf=conf)
        register(self.spark)
        self.event("driver connected")
        self.publisher.address = self.hub(1)

    def hub(self, n: int) -> str:
        return self.hubs.hubs[n - 1].address

    def kill_worker(self, streams: Streams) -> None:
        # Aim at a batch in flight: wait (a little) until the topic query processes data.
        busy = streams.wait_busy(timeout=5.0)
        killed = self.cluster.kill_worker(0)
        self.event("SIGKILL worker-1 and its executor", processes=killed, during_a_batch=busy)

    def restart_worker(self) -> None:
        self.cluster.restart_worker(0)
        self.event("worker-1 started again")

    def restart_source_hub(self) -> None:
        self.event("restarting hub-2 (the source's hub)")
        self.hubs.restart(1)
        self.event("hub-2 back", address=self.hub(2))

    def close(self) -> None:
        self.publisher.stop()
        if self.spark is not None:
            for query in self.spark.streams.active:
                query.stop()
            self.spark.stop()
        self.cluster.stop()
        self.hubs.stop()


def _phase(run: Run, name: str, trigger: str) -> dict[str, Any]:
    """One phase: publish while the queries run under ``trigger`` and the failures happen, then
    stop publishing, let the queries catch up, stop them and check what they wrote."""
    args = run.args
    micro = trigger == "micro-batch"
    streams = Streams(run.spark, run.hub(2), run.hub(3), f"out.{name}", args.root / name,
                      {"processingTime": "1 second"} if micro else {"availableNow": True})  # fmt: skip
    # The failures, at fractions of the publishing time, counted from the first batch with data.
    plan: list[tuple[float, Callable[[], None]]] = [(0.2, lambda: run.kill_worker(streams)),
                                                    (0.3, run.restart_worker)]  # fmt: skip
    if micro:
        plan.append((0.5, lambda: _restart_queries(run, streams)))
    plan.append((0.75, run.restart_source_hub))
    dropped_before = duplicate_frames(run.hub(3))
    run.publisher.start()
    streams.start()
    run.event(f"{name}: publishing, queries started", trigger=trigger)
    runs = 1
    warm_until = time.monotonic() + WARM_SECONDS
    while not streams.has_written() and time.monotonic() < warm_until:
        runs += _service(streams, micro, 0.2)
    started = time.monotonic()
    run.event(f"{name}: first batch written")
    while plan or time.monotonic() - started < args.seconds:
        elapsed = (time.monotonic() - started) / args.seconds
        while plan and plan[0][0] <= elapsed:
            plan.pop(0)[1]()
        runs += _service(streams, micro, 0.2)
    run.publisher.stop()
    published = run.publisher.published[:]
    run.event(f"{name}: publishing stopped", published=len(published))
    runs += _drain(run, streams, len(published), micro)
    check = check_output(published, read_topic(run.hub(3), streams.out_topic))
    parquet = check_parquet(run.spark, streams.parquet, published)
    dropped = duplicate_frames(run.hub(3)) - dropped_before
    run.event(f"{name}: checked", topic=check.received, parquet=parquet["rows"], replayed_frames_dropped=dropped,
              spark_restarts=len(streams.spark_restarts))  # fmt: skip
    return {"output": check, "parquet": parquet, "runs": runs, "batches": streams.batches,
            "replayed_frames_dropped": dropped, "spark_restarts": streams.spark_restarts}  # fmt: skip


def _service(streams: Streams, micro: bool, seconds: float) -> int:
    """Watch the queries for ``seconds``; an availableNow run that ended is started again (1)."""
    if micro:
        streams.check_alive()
        time.sleep(seconds)
        return 0
    if streams.await_all(seconds):
        streams.start()  # the next availableNow run: a restart from the checkpoint
        return 1
    return 0


def _restart_queries(run: Run, streams: Streams) -> None:
    streams.stop()
    run.event("queries stopped")
    streams.start()
    run.event("queries started again from their checkpoints")


def _drain(run: Run, streams: Streams, want: int, micro: bool) -> int:
    """Wait until hub-2 holds every published message and both queries have written as many; stop them."""
    deadline = time.monotonic() + DRAIN_SECONDS
    runs = 0
    source = output = 0
    while time.monotonic() < deadline:
        source = sum(next_offsets(run.hub(2), pattern=INPUT_PATTERN).values())
        output = next_offsets(run.hub(3)).get(streams.out_topic, 0)
        if source >= want and output >= source and _parquet_caught_up(streams, source):
            break
        runs += _service(streams, micro, 0.5)
    if not micro:
        streams.await_all(DRAIN_SECONDS)
    streams.stop()
    run.event(f"{streams.out_topic}: queries stopped after catching up", source=source, output=output)
    return runs


def _parquet_caught_up(streams: Streams, source: int) -> bool:
    query = next((q for q in streams.queries if q.name.endswith("-parquet")), None)
    progress = query.lastProgress if query is not None else None
    if not progress:
        return False
    ends = progress["sources"][0].get("endOffset") or {}
    if isinstance(ends, str):
        ends = json.loads(ends)
    return sum(int(v) for v in ends.values()) >= source


def main(args: argparse.Namespace, prog: str) -> int:
    if args.seconds <= 0 or args.rate <= 0 or args.keys < 1 or args.topics < 1 or args.workers < 1:
        print(f"{prog}: error: --seconds, --rate, --keys, --topics and --workers must be positive", file=sys.stderr)
        return 2
    shutil.rmtree(args.root, ignore_errors=True)
    lines = sys.stderr

    def say(line: str) -> None:
        print(line, file=lines, flush=True)

    run = Run(args, say)
    results: dict[str, Any] = {}

    def body() -> int:
        run.start()
        phases = ["micro-batch", "available-now"] if args.trigger == "both" else [args.trigger]
        for trigger in phases:
            results[trigger] = _phase(run, "mb" if trigger == "micro-batch" else "an", trigger)
        return 0

    try:
        outcome = run_until_stopped(body, cleanup=run.close)
    except RuntimeError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    if outcome.stopped:
        print(f"{prog}: stopped on {outcome.signal}; hubs, Spark and the cluster are stopped", file=sys.stderr)
        return 0
    return _report(results, run, args)


def _batch_figures(durations: list[int]) -> dict[str, Any]:
    ordered = sorted(durations)
    return {"count": len(ordered), "median_ms": ordered[len(ordered) // 2] if ordered else None,
            "max_ms": ordered[-1] if ordered else None}  # fmt: skip


def _report(results: dict[str, Any], run: Run, args: argparse.Namespace) -> int:
    ok = all(r["output"].ok and r["parquet"]["exactly_once"] for r in results.values())
    figures = {
        "ok": ok,
        "published": len(run.publisher.published),
        "phases": {
            trigger: {"output": r["output"].to_json(), "parquet": r["parquet"], "query_runs": r["runs"],
                      "replayed_frames_dropped": r["replayed_frames_dropped"],
                      "batches": {name: _batch_figures(d) for name, d in r["batches"].items()}}
            for trigger, r in results.items()
        },
        "events": run.events,
        "seconds": run.at(),
        "root": str(args.root),
    }
    if args.json:
        print(json.dumps(figures), flush=True)
    else:
        print(f"published {figures['published']:,} messages on hub-1 in {args.seconds:g} s per phase")
        for trigger, r in results.items():
            out: OutputCheck = r["output"]
            pq = r["parquet"]
            lat = out.to_json()
            print(f"{trigger:>13}: topic {out.received:,}/{out.published:,} (missing {out.missing}, duplicates "
                  f"{out.duplicates}, out of order {out.order_violations}); parquet {pq['rows']:,} rows, "
                  f"{pq['distinct_offsets']:,} distinct (missing {pq['missing']}); publish->output p50 "
                  f"{lat['latency_p50_ms']} ms, p99 {lat['latency_p99_ms']} ms; query runs {r['runs']}; "
                  f"replayed frames dropped by hub-3: {r['replayed_frames_dropped']}")  # fmt: skip
        print("exactly once, in order per key: " + ("yes" if ok else "NO"))
    return 0 if ok else 1
