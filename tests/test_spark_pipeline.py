"""The Spark runs' pipeline (``sdk/tools/spark_runs/pipeline.py``) with the session's SparkSession
and a real hub: what it does when a query fails."""

from __future__ import annotations

import re
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
    Python worker that did not connect back in time); the test counts it as Spark's, beside the
    real ones, which a loaded machine gives any of these queries too (a suite run saw the last
    one fail so)."""
    writer = "Failed to initialize Python data source writer"
    monkeypatch.setattr(pipeline, "SPARK_FAILURES", (*pipeline.SPARK_FAILURES, writer))
    either = "|".join(["invalid topic 'out an'", *map(re.escape, pipeline.SPARK_FAILURES)])
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
            assert any(failure in streams.spark_restarts[-1] for failure in pipeline.SPARK_FAILURES)
        with pytest.raises(RuntimeError, match=rf"(?s)query out an-topic failed: .*({either})"):
            streams.await_all(60)
    finally:
        streams.stop()
