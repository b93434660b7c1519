"""``pub0sub bench`` S1 and S2: the methods each lists, and the narrowed queries against a real hub.

The benchmark itself (a standalone cluster, 1M rows, four methods alternating) is too long for the
suite; here the S1 query and the S2 stream that the ``-narrow`` methods time run on the test
session's SparkSession, with option ``columns`` as those methods set it, and every row is checked.
Nothing here asserts a speed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

import sdk
from sdk.tools.bench import scenarios as _scenarios  # noqa: F401  (fills the registry, as the CLI does)
from sdk.tools.bench.registry import SCENARIOS
from sdk.tools.bench.spark import S1_COLUMNS, s1_dataframe, s1_query
from sdk.tools.spark_runs.pipeline import QUERY_COLUMNS, Streams, next_offsets, read_topic
from tests.support.hubprocess import HubProcess

METHODS = ["spark-local", "spark-local-narrow", "spark-cluster", "spark-cluster-narrow"]


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubProcess]:
    process = HubProcess("--data-dir", str(tmp_path / "hub"))
    yield process
    process.stop()


def publish(address: str, topic: str, count: int) -> list[bytes]:
    values = [b"v%06d-" % i + b"x" * (i % 50) for i in range(count)]
    with sdk.connect_blocking(address) as client:
        client.publish_acked_many([(topic, value, b"k%d" % (i % 5)) for i, value in enumerate(values)])
    return values


@pytest.mark.parametrize("scenario", ["S1", "S2"])
def test_each_master_is_measured_with_all_columns_and_narrowed(scenario: str) -> None:
    methods = SCENARIOS[scenario].methods
    # Alternating in this order switches SparkContexts once per master in a round.
    assert [m.method for m in methods] == METHODS
    for m in methods:
        narrowed = m.method.endswith("-narrow")
        columns = S1_COLUMNS if scenario == "S1" else QUERY_COLUMNS
        assert (f"columns={columns}" in m.tooling) is narrowed, m.tooling
        assert ("all seven source columns" in m.tooling) is not narrowed, m.tooling


def test_s1_narrow_query_counts_every_row(spark: Any, hub: HubProcess) -> None:
    values = publish(hub.address, "bench", 3_000)
    df = s1_dataframe(spark, hub.address, "bench", 1_000, 3_000, S1_COLUMNS)
    assert df.columns == ["value"]
    assert df.rdd.getNumPartitions() == 2
    row = s1_query(df)
    assert (row.n, row.bytes) == (2_000, sum(len(v) for v in values[1_000:]))
    everything = s1_query(s1_dataframe(spark, hub.address, "bench", 0, 3_000, None))
    assert (everything.n, everything.bytes) == (3_000, sum(map(len, values)))


def test_s2_narrow_stream_stamps_every_row_once_in_order(spark: Any, hub: HubProcess, tmp_path: Path) -> None:
    streams = Streams(spark, hub.address, hub.address, "bench.out", tmp_path / "stream",
                      {"processingTime": "0 seconds"}, topics=("subscribe", "bench"),
                      columns=QUERY_COLUMNS)  # fmt: skip
    values = publish(hub.address, "bench", 500)  # before the start: the stream begins at "earliest"
    streams.start()
    try:
        values += publish(hub.address, "bench", 1_500)
        deadline = time.monotonic() + 120
        while next_offsets(hub.address).get("bench.out", 0) < len(values):
            streams.check_alive()
            assert time.monotonic() < deadline, "the stream did not write every row in 120 s"
            time.sleep(0.1)
    finally:
        streams.stop()
    inputs = read_topic(hub.address, "bench")
    outputs = read_topic(hub.address, "bench.out")
    assert [value.rpartition(b"@")[0] for _, value, _ in outputs] == values
    assert [(key, b"%s@%d" % (value, ts)) for key, value, ts in inputs] == [(k, v) for k, v, _ in outputs]
    # The Parquet half of the pipeline writes the source's rows as they are: only the narrowed columns.
    parquet = spark.read.parquet(str(streams.parquet))
    assert parquet.columns == QUERY_COLUMNS.split(",")
    assert sorted(bytes(r.value) for r in parquet.select("value").collect()) == sorted(values)
