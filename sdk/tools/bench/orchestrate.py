"""Run one measurement: subscribers first (each waits until subscribed), then the publisher."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

from .peers import Server
from .procs import LineReader, python_module, spawn, stop_process
from .registry import Params
from .results import Measurement

READY_TIMEOUT = 20.0


def worker(role: str, **kwargs: Any) -> list[str]:
    """argv of a :mod:`sdk.tools.bench.clients` worker process."""
    return python_module("sdk.tools.bench.clients", role, json.dumps(kwargs))


def run_pubsub(
    subscribers: Sequence[Sequence[str]], publisher: Sequence[str], *, timeout: float
) -> list[dict[str, Any]]:
    """Start every subscriber and wait for its ``ready``; run the publisher; collect each
    subscriber's JSON result.  Every child is stopped by its PID on the way out."""
    subs: list[tuple[subprocess.Popen[str], LineReader]] = []
    pub: subprocess.Popen[str] | None = None
    try:
        for argv in subscribers:
            proc = spawn(argv)
            subs.append((proc, LineReader(proc)))
        for proc, lines in subs:
            line = lines.next_line(timeout=READY_TIMEOUT, what=f"subscriber {proc.pid}")
            if line != "ready":
                raise RuntimeError(f"subscriber {proc.pid} said {line!r} instead of ready")
        pub = spawn(publisher, capture=False)
        deadline = time.monotonic() + timeout + READY_TIMEOUT
        results = []
        for proc, lines in subs:
            line = lines.next_line(timeout=deadline - time.monotonic(), what=f"subscriber {proc.pid}")
            results.append(json.loads(line))
        # The subscribers have their counts; a lingering publisher is stopped below.
        with contextlib.suppress(subprocess.TimeoutExpired):
            pub.wait(timeout=max(1.0, deadline - time.monotonic()))
        return results
    finally:
        stop_process(pub)
        for proc, _ in subs:
            stop_process(proc)


def throughput(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Messages per second over all subscribers, from the first stamp to the last.

    What arrived with the earliest first stamp arrived before the clock started,
    so it is left out of the rate (the count it reports stays exact).
    """
    received = sum(r["received"] for r in results)
    expected = sum(r["expected"] for r in results)
    stamped = [r for r in results if r["first_ns"]]
    if not stamped:
        return {"rate": float("nan"), "received": received, "expected": expected, "seconds": 0.0, "complete": False}
    opener = min(stamped, key=lambda r: r["first_ns"])
    first = opener["first_ns"]
    last = max(r["last_ns"] for r in stamped)
    seconds = (last - first) / 1e9
    timed = received - opener.get("at_first", 1)
    rate = timed / seconds if seconds > 0 and timed > 0 else float("nan")
    return {"rate": rate, "received": received, "expected": expected, "seconds": seconds,
            "complete": received >= expected}  # fmt: skip


def address_of(server: Server | None) -> dict[str, Any]:
    """``host`` and ``port`` keyword arguments for a worker of ``server``."""
    assert server is not None
    host, port = server.address
    return {"host": host, "port": port}


def latency_workers(sub_role: str, pub_role: str, p: Params, *, sub_at: dict[str, Any],
                    pub_at: dict[str, Any]) -> tuple[list[str], list[str]]:  # fmt: skip
    """argv of a latency subscriber and of its paced publisher (which alone takes the tick)."""
    kw = {"rate": p.rate, "seconds": p.seconds, "size": p.size}
    return worker(sub_role, **sub_at, **kw, timeout=p.timeout), worker(pub_role, **pub_at, **kw, tick=p.tick)


def paced_latency(sub_role: str, pub_role: str) -> Callable[[Server | None, Params], Measurement]:
    """L1: a paced publisher and a subscriber on one server, publish->deliver percentiles."""

    def measure(server: Server | None, p: Params) -> Measurement:
        at = address_of(server)
        sub, pub = latency_workers(sub_role, pub_role, p, sub_at=at, pub_at=at)
        [result] = run_pubsub([sub], pub, timeout=(p.seconds or 0) + p.timeout)
        return latency_measurement(result)

    return measure


def latency_measurement(result: dict[str, Any]) -> Measurement:
    """A latency subscriber's report as a measurement (p50/p99/p99.9 in µs)."""
    figures = {name: float(result[f"{name}_us"]) for name in ("p50", "p99", "p99.9") if result[f"{name}_us"]}
    return Measurement(figures=figures, details={"received": result["received"], "expected": result["expected"]})
