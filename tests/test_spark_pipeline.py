"""The Spark runs' pipeline (``sdk/tools/spark_runs/pipeline.py``) with the session's SparkSession
and a real hub: what it does when a query fails."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import sdk
from sdk.tools.spark_runs import pipeline
from sdk.tools.spark_runs.pipeline import Streams
from tests.support.hubprocess import HubProcess


def test_available_now_queries_that_fail_in_sparks_machinery_are_restarted_then_reported(
    spark: Any, start_hub: Callable[..., HubProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An availableNow query that ends with an error is judged as a micro-batch one is: a failure
    of Spark's machinery (SPARK_FAILURES) starts the queries again from their checkpoints, at most
    MAX_SPARK_RESTARTS times, and past that the run fails naming the query.  The failure is real
    (a Python data source writer that cannot start: here an invalid topic, in a suite run a
    Python worker that did not connect back in time); the test counts it as Spark's."""
    monkeypatch.setattr(pipeline, "SPARK_FAILURES", ("Failed to initialize Python data source writer",))
    hub = start_hub("--data-dir", str(tmp_path / "hub"))
    with sdk.connect_blocking(hub.address) as client:
        client.publish_acked_many([("in.0", b"k:%d" % i, b"k") for i in range(20)])
    streams = Streams(spark, hub.address, hub.address, "out an", tmp_path / "an", {"availableNow": True},
                      topics=("subscribe", "in.0"), parquet_too=False)  # fmt: skip
    streams.start()
    try:
        for restarts in range(1, pipeline.MAX_SPARK_RESTARTS + 1):
            assert not streams.await_all(60), "a failed run is not a finished one"
            assert len(streams.spark_restarts) == restarts
            assert "Failed to initialize Python data source writer" in streams.spark_restarts[-1]
        with pytest.raises(RuntimeError, match=r"(?s)query out an-topic failed: .*invalid topic 'out an'"):
            streams.await_all(60)
    finally:
        streams.stop()
