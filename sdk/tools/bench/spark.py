"""S1 and S2: the ``pub0sub`` Spark data source on ``local[2]`` and on a standalone cluster.

* S1, batch read: the hub (``--data-dir``) is filled first by the raw publisher (not timed):
  ``messages`` records of ``size`` bytes on one topic.  Then one Spark query reads exactly that
  offset range through the data source and aggregates every row (``count(*)``,
  ``sum(length(value))``), in two partitions (one per core).
* S2, streaming read to the sink: :mod:`sdk.tools.bench.spark_stream`.

Each is measured twice per master: reading all seven source columns (``spark-local``,
``spark-cluster``: comparable with the figures before 2026-11-28) and reading only the columns
its query uses through the source's option ``columns`` (``spark-local-narrow``,
``spark-cluster-narrow``; S1: ``value``), as a user should write such a query: PySpark gives
Python data sources no column pruning, so without the option the JVM copies every column of
every row out of Arrow.

Both masters measure against one server: a hub with a data directory plus a standalone master
and two 1-core workers on loopback (:class:`HubAndSparkCluster`, started on the first cluster
measurement), idle while ``local[2]`` runs.
A process holds one SparkContext, so :func:`session_for` stops the other master's session
when the methods alternate: every measurement starts new Python workers, and on the cluster new
executor JVMs.  (The driver JVM stays: pyspark keeps its gateway when a context stops, so on
``local[2]``, whose executor lives in the driver JVM, only a run's first sample starts on a
fresh JVM.)  So each first runs the same query untimed over the whole range: the executors'
Python workers start, and the JVM compiles the Arrow-to-row copy that takes most of a read's CPU
(measured with JFR: ~60% of the CPU of a 1M-row S1 is the JVM, mostly ``UnsafeProjection`` of
the six columns).  With a 20,000-row warm-up, as before 2026-11-24, the timed query also paid
for that compilation: the JVM's CPU per 1M rows was ~1.0 s on the first full read and ~0.6 s
from the second on.  One warm-up is not all of it: on a fresh JVM the JVM's CPU per full read
kept falling until the 4th-6th read (1.5 s on the 2nd, 0.75-1.1 s by the 5th-6th at load 6-8,
2026-11-28), so the first ``spark-local`` sample of a run pays more than the later ones.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..spark_cluster import DRIVER_CONF, LocalSparkCluster
from .orchestrate import worker
from .peers import Server
from .procs import spawn, stop_process
from .pub0sub import Pub0subHub
from .registry import Method, Params, Scenario, register_method, register_scenario, register_server, with_defaults
from .results import FigureSpec, Measurement
from .wireproto import CHANNEL

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCAL = "local[2]"
WORKERS = 2


def unavailable() -> str | None:
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[spark]')"
    if shutil.which("java") is None:
        return "java is not on the PATH"
    return None


class HubAndSparkCluster:
    """A hub with a data dir and a standalone Spark cluster of :data:`WORKERS` 1-core workers."""

    name = "pub0sub-log+spark"

    def __init__(self) -> None:
        self.hub = Pub0subHub(data_dir=True)
        self._root = Path(tempfile.mkdtemp(prefix="pub0sub-bench-spark-"))
        self.cluster = LocalSparkCluster(WORKERS, self._root)

    @property
    def address(self) -> tuple[str, int]:
        return self.hub.address

    def start(self) -> None:
        self.hub.start()

    def master_url(self) -> str:
        """The cluster's master, started on first use (a local[2]-only run never pays for it)."""
        if self.cluster.master is None:
            self.cluster.start()
        return self.cluster.master_url

    def stop(self) -> None:
        global _session
        if _session is not None:
            _session.stop()
            _session = None
        try:
            self.cluster.stop()
        finally:
            self.hub.stop()
            shutil.rmtree(self._root, ignore_errors=True)


register_server("pub0sub-log+spark", HubAndSparkCluster)

_session: SparkSession | None = None


def session_for(master: str, app: str) -> SparkSession:
    """The SparkSession on ``master``, stopping another master's first (one context per process)."""
    global _session
    from ...spark import register
    from ...spark.session import build_session

    if _session is not None and _session.sparkContext.master != master:
        _session.stop()
        _session = None
    if _session is None:
        conf = {} if master == LOCAL else {**DRIVER_CONF, "spark.cores.max": str(WORKERS)}
        _session = build_session(master, app_name=app, conf=conf)
        register(_session)
    return _session


def master_of(server: Server | None, which: str) -> str:
    assert isinstance(server, HubAndSparkCluster)
    return LOCAL if which == "local" else server.master_url()


def hub_address(server: Server | None) -> str:
    assert server is not None
    host, port = server.address
    return f"{host}:{port}"


def next_offsets(address: str) -> dict[str, int]:
    import sdk

    with sdk.connect_blocking(address, reconnect=None) as client:
        return {t["topic"]: int(t["next_offset"]) for t in client.status()["topic_list"]}


def publish_raw(address: str, messages: int, size: int, timeout: float) -> tuple[str, int, int]:
    """Publish ``messages`` raw (topic ``bench``) and wait for the hub to store them: ``(topic, start, end)``.

    Only topic ``bench`` is looked at: in S2 the running query's output topic grows meanwhile.
    """
    before = next_offsets(address).get(CHANNEL, 0)
    host, port = address.rsplit(":", 1)
    pub = spawn(worker("pub-pub0sub-raw", host=host, port=int(port), messages=messages, size=size), capture=False)
    try:
        pub.wait(timeout=timeout)
    finally:
        stop_process(pub)
    after = next_offsets(address).get(CHANNEL, 0)
    if after - before != messages:
        raise RuntimeError(f"expected topic {CHANNEL!r} to grow by {messages}, it went from {before} to {after}")
    return CHANNEL, before, after


def s1_dataframe(spark: SparkSession, address: str, topic: str, start: int, end: int, columns: str | None) -> Any:
    reader = (
        spark.read.format("pub0sub")
        .option("hub", address)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: start}))
        .option("endingOffsets", json.dumps({topic: end}))
        .option("minPartitions", str(WORKERS))  # one partition per core: each costs a task and a subscription
    )
    return (reader.option("columns", columns) if columns else reader).load()


def s1_query(df: Any) -> Any:
    """The S1 query: every row is read and its value's length summed."""
    return df.selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]


def _s1(which: str, columns: str | None) -> Callable[[Server | None, Params], Measurement]:
    def measure(server: Server | None, p: Params) -> Measurement:
        assert p.messages is not None
        address, master = hub_address(server), master_of(server, which)
        topic, start, end = publish_raw(address, p.messages, p.size, p.timeout)
        spark = session_for(master, "pub0sub-bench-S1")
        warm_up = s1_dataframe(spark, address, topic, start, end, columns)
        s1_query(warm_up)  # Python workers, JIT (module docstring)
        df = s1_dataframe(spark, address, topic, start, end, columns)
        started = time.perf_counter()
        row = s1_query(df)
        seconds = time.perf_counter() - started
        if row.n != end - start or row.bytes != (end - start) * p.size:
            raise RuntimeError(f"read {row.n} rows / {row.bytes} bytes, expected {end - start} x {p.size}")
        details = {"rows": row.n, "seconds": round(seconds, 3), "partitions": df.rdd.getNumPartitions(),
                   "master": master, "columns": df.columns}  # fmt: skip
        return Measurement(figures={"rows": row.n / seconds}, details=details)

    return measure


TOOLING = {
    "local": "spark.read.format('pub0sub') on local[2]",
    "cluster": f"spark.read.format('pub0sub') on a standalone master + {WORKERS} workers of 1 core (loopback)",
}

S1 = register_scenario(Scenario(
    id="S1", title="Spark batch read through the pub0sub data source, rows/s (local[2] and a standalone cluster)",
    figures=(FigureSpec(name="rows", unit="rows/s"),),
    defaults=with_defaults(messages=1_000_000, quick_messages=20_000),
))  # fmt: skip
#: S1's query uses only ``value``: the narrow methods say so with option ``columns``
S1_COLUMNS = "value"


def variants() -> list[tuple[str, str, bool]]:
    """``(method suffix, master, narrow)`` in the order the methods alternate: each master's two
    methods side by side, so a round switches SparkContexts once per master, not per method."""
    return [(f"{which}{'-narrow' if narrow else ''}", which, narrow)
            for which in ("local", "cluster") for narrow in (False, True)]  # fmt: skip


def columns_tooling(columns: str | None) -> str:
    return f"the source's option columns={columns}" if columns else "all seven source columns"


for _suffix, _which, _narrow in variants():
    _columns = S1_COLUMNS if _narrow else None
    register_method("S1", Method(
        system="pub0sub", method=f"spark-{_suffix}", server="pub0sub-log+spark", measure=_s1(_which, _columns),
        unavailable=unavailable,
        tooling=f"hub --data-dir filled by raw PUBLISH frames; {TOOLING[_which]}, {columns_tooling(_columns)}, "
                f"count + sum(length(value)) over the range in {WORKERS} partitions, after the same query untimed "
                "(warm-up)",
    ))  # fmt: skip
