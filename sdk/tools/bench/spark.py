"""S1: the ``pub0sub`` Spark data source, batch read rows/s on ``local[2]``.

The hub (``--data-dir``) is filled first by the raw publisher (not timed): ``messages`` records
of ``size`` bytes on one topic.  Then one Spark query reads exactly that offset range through the
data source and aggregates every row (``count(*)``, ``sum(length(value))``): partitions of at
most 125k records read in parallel by ``local[2]``'s Python workers, each with the blocking SDK
client over loopback.  The hub, the JVM and both workers share this machine's cores.

The SparkSession (8-14 s to start) is created before the timed part and reused across repeats;
each repeat fills and reads its own fresh range, so the hub's log grows by ``messages`` per repeat.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import time
from typing import Any

from .orchestrate import worker
from .peers import Server
from .procs import spawn, stop_process
from .registry import Method, Params, Scenario, register_method, register_scenario, with_defaults
from .results import FigureSpec, Measurement

#: Partition size for the benchmark: 1M records -> 8 tasks, so both cores stay busy to the end.
MAX_RECORDS_PER_PARTITION = 125_000
MASTER = "local[2]"


def _unavailable() -> str | None:
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[spark]')"
    if shutil.which("java") is None:
        return "java is not on the PATH"
    return None


def _next_offsets(address: str) -> dict[str, int]:
    import sdk

    with sdk.connect_blocking(address, reconnect=None) as client:
        return {t["topic"]: int(t["next_offset"]) for t in client.status()["topic_list"]}


def _s1(server: Server | None, p: Params) -> Measurement:
    assert server is not None and p.messages is not None
    host, port = server.address
    address = f"{host}:{port}"
    before = _next_offsets(address)
    pub = spawn(worker("pub-pub0sub-raw", host=host, port=port, messages=p.messages, size=p.size), capture=False)
    try:
        pub.wait(timeout=p.timeout)
    finally:
        stop_process(pub)
    after = _next_offsets(address)
    grown = {t: (before.get(t, 0), n) for t, n in after.items() if n > before.get(t, 0)}
    if len(grown) != 1:
        raise RuntimeError(f"expected one topic to grow by {p.messages}, got {grown}")
    ((topic, (start, end)),) = grown.items()

    from ...spark import register
    from ...spark.session import build_session

    spark = build_session(MASTER, app_name="pub0sub-bench-S1")
    register(spark)
    df = (
        spark.read.format("pub0sub")
        .option("hub", address)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: start}))
        .option("endingOffsets", json.dumps({topic: end}))
        .option("maxRecordsPerPartition", str(MAX_RECORDS_PER_PARTITION))
        .load()
    )
    started = time.perf_counter()
    row = df.selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
    seconds = time.perf_counter() - started
    if row.n != end - start or row.bytes != (end - start) * p.size:
        raise RuntimeError(f"read {row.n} rows / {row.bytes} bytes, expected {end - start} x {p.size}")
    details: dict[str, Any] = {
        "rows": row.n,
        "seconds": round(seconds, 3),
        "partitions": df.rdd.getNumPartitions(),
        "master": MASTER,
    }
    return Measurement(figures={"rows": row.n / seconds}, details=details)


S1 = register_scenario(Scenario(
    id="S1", title="Spark batch read through the pub0sub data source (local[2]), rows/s",
    figures=(FigureSpec(name="rows", unit="rows/s"),),
    defaults=with_defaults(messages=1_000_000, quick_messages=20_000),
))  # fmt: skip
register_method("S1", Method(system="pub0sub", method="spark", server="pub0sub-log", measure=_s1,
                             unavailable=_unavailable,
                             tooling="hub --data-dir filled by raw PUBLISH frames; spark.read.format('pub0sub') "
                                     "on local[2], count + sum(length(value)) over the range"))  # fmt: skip
