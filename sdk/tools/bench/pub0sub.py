"""pub0sub's own measurements: T1, T2, L1 beside the peers, and R1 (replay), D1 (acked + fsync).

Two ways, like every peer (BENCHMARKS.md):

* ``fastest``: raw sockets speaking the wire protocol -- pre-encoded PUBLISH
  frames of 1000 messages, and subscribers that count messages from each
  DELIVER's record-count field without building a Python object per message.
  This shows the hub's capacity.
* ``python``: the SDK on both sides (``client.publish`` in a loop,
  ``sub.batches()``), which is what an application gets.

The hub runs as ``python -m hub`` with a large ``--max-pending-bytes``: the
publishers here are unpaced, and with the default 8 MiB cap a subscriber that
falls behind would (correctly) be cancelled as a slow consumer -- as Redis
disconnects one past its ``client-output-buffer-limit``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from .orchestrate import address_of as _addr
from .orchestrate import paced_latency, run_pubsub, throughput, worker
from .peers import READY_TIMEOUT, AnnouncedServer, Server
from .procs import EXEMPT_LOOPBACK, LineReader, python_module, spawn, stop_process
from .registry import Method, Params, Scenario, register_method, register_scenario, register_server, with_defaults
from .results import FigureSpec, Measurement

#: Outbound bytes the bench hub lets a subscriber fall behind by (see the module docstring).
BENCH_PENDING_BYTES = 1 << 30


class Pub0subHub(AnnouncedServer):
    """``python -m hub`` on a free loopback port; optional data directory."""

    def __init__(self, *extra: str, data_dir: bool = False) -> None:
        # WARNING: the hub shares bench's stderr, where its INFO lines would bury the progress lines.
        args = ["--listen", "127.0.0.1:0", "--max-pending-bytes", str(BENCH_PENDING_BYTES), "--log-level", "WARNING",
                *EXEMPT_LOOPBACK, *extra]  # fmt: skip
        super().__init__("pub0sub", python_module("hub", *args))
        if data_dir:
            # The base class removes this directory when the server stops.
            self._tmp = tempfile.TemporaryDirectory(prefix="pub0sub-bench-hub-")
            self.argv += ["--data-dir", self._tmp.name]

    def start(self) -> None:
        self._proc = spawn(self.argv)
        try:
            line = LineReader(self._proc).next_line(timeout=READY_TIMEOUT, what=self.name)
            if not line.startswith("listening on "):
                raise RuntimeError(f"hub said {line!r}")
            host, _, port = line.split()[-1].rpartition(":")
            self._address = (host, int(port))
        except BaseException:
            self.stop()
            raise

register_server("pub0sub", Pub0subHub)
register_server("pub0sub-fsync", lambda: Pub0subHub("--durability", "fsync", data_dir=True))
register_server("pub0sub-log", lambda: Pub0subHub(data_dir=True))


# -- measure functions -------------------------------------------------------------


def _t1(sub_role: str, pub_role: str, **pub_options: Any) -> Callable[[Server | None, Params], Measurement]:
    def measure(server: Server | None, p: Params) -> Measurement:
        kw = {**_addr(server), "messages": p.messages, "size": p.size}
        results = run_pubsub([worker(sub_role, **kw, timeout=p.timeout)], worker(pub_role, **kw, **pub_options),
                             timeout=p.timeout)  # fmt: skip
        t = throughput(results)
        return Measurement(figures={"delivered": t.pop("rate")}, details=t)

    return measure


def _t2(server: Server | None, p: Params) -> Measurement:
    kw = {**_addr(server), "messages": p.messages, "size": p.size}
    shares = [p.subscribers // 2 + (i < p.subscribers % 2) for i in range(2)]
    subs = [worker("sub-pub0sub-raw", **kw, connections=n, timeout=p.timeout) for n in shares if n]
    t = throughput(run_pubsub(subs, worker("pub-pub0sub-raw", **kw), timeout=p.timeout))
    return Measurement(figures={"deliveries": t.pop("rate")}, details=t)


def _run_to_end(argv: list[str], timeout: float) -> dict[str, Any]:
    proc = spawn(argv)
    try:
        line = LineReader(proc).next_line(timeout=timeout, what="worker")
        return dict(json.loads(line))
    finally:
        stop_process(proc)


def _r1(server: Server | None, p: Params) -> Measurement:
    """Fill the log (not timed), then replay it all from ``earliest`` to one raw subscriber."""
    kw = {**_addr(server), "messages": p.messages, "size": p.size}
    pub = spawn(worker("pub-pub0sub-raw", **kw), capture=False)
    try:
        pub.wait(timeout=p.timeout)
    finally:
        stop_process(pub)
    results = run_pubsub([worker("sub-pub0sub-raw", **kw, start="earliest", timeout=p.timeout)],
                         [sys.executable, "-c", "pass"], timeout=p.timeout)  # fmt: skip
    t = throughput(results)
    return Measurement(figures={"replayed": t.pop("rate")}, details=t)


def _d1(server: Server | None, p: Params) -> Measurement:
    result = _run_to_end(worker("pub-pub0sub-acked", **_addr(server), messages=p.messages, size=p.size), p.timeout)
    return Measurement(figures={"acked": result["acked"] / result["seconds"]}, details=result)


_RAW = "raw socket PUBLISH frames (1000 msgs each) -> hub -> "
for _scenario, _method in (
    ("T1", Method(system="pub0sub", method="fastest", server="pub0sub",
                  measure=_t1("sub-pub0sub-raw", "pub-pub0sub-raw"),
                  tooling=_RAW + "subscriber counting DELIVER record counts")),
    ("T1", Method(system="pub0sub", method="python", server="pub0sub",
                  measure=_t1("sub-pub0sub-sdk", "pub-pub0sub-sdk"),
                  tooling="SDK client.publish loop -> hub -> SDK sub.batches()")),
    ("T1", Method(system="pub0sub", method="python-headers", server="pub0sub",
                  measure=_t1("sub-pub0sub-sdk", "pub-pub0sub-sdk", headers=True),
                  tooling="as pub0sub:python, every message with the same two headers (msg.headers)")),
    ("T2", Method(system="pub0sub", method="fastest", server="pub0sub", measure=_t2,
                  tooling=_RAW + "100 sockets counting DELIVER record counts, 2 processes")),
    ("L1", Method(system="pub0sub", method="python", server="pub0sub",
                  measure=paced_latency("lat-sub-pub0sub", "lat-pub-pub0sub"),
                  tooling="SDK paced publisher (flush per wake-up) -> hub -> SDK sub.batches()")),
    ("L1", Method(system="pub0sub", method="python-callback", server="pub0sub",
                  measure=paced_latency("lat-sub-pub0sub-callback", "lat-pub-pub0sub"),
                  tooling="SDK paced publisher (flush per wake-up) -> hub -> SDK on_batch subscriber (reader task)")),
    ("L1", Method(system="pub0sub", method="fastest", server="pub0sub",
                  measure=paced_latency("lat-sub-pub0sub-raw", "lat-pub-pub0sub-raw"),
                  tooling="raw paced publisher (one PUBLISH per wake-up) -> hub -> raw decoding subscriber")),
):  # fmt: skip
    register_method(_scenario, _method)

R1 = register_scenario(Scenario(
    id="R1", title="replay stored messages from earliest, msgs/s",
    figures=(FigureSpec(name="replayed", unit="msgs/s"),),
    defaults=with_defaults(messages=1_000_000, quick_messages=10_000),
))  # fmt: skip
register_method("R1", Method(system="pub0sub", method="fastest", server="pub0sub-log", measure=_r1,
                             tooling="hub --data-dir; fill, then a raw subscriber from earliest counting records"))
D1 = register_scenario(Scenario(
    id="D1", title="acknowledged publishes with fsync group commit, msgs/s",
    figures=(FigureSpec(name="acked", unit="msgs/s"),),
    defaults=with_defaults(messages=300_000, quick_messages=2_000),
))  # fmt: skip
register_method("D1", Method(system="pub0sub", method="fastest", server="pub0sub-fsync", measure=_d1,
                             tooling="hub --durability fsync; raw publisher, batches of 100 with ACK, 64 in flight"))
