"""How the Spark source finds its hub when the hub is away, and how it cuts a read into partitions.

Executors retry connecting while no listed hub answers (a hub restarting), the driver's planning
tries ``fetchOffset.numRetries`` more times, and ``splitTopics=false`` keeps each topic's range in
one partition.  Real hubs on 127.0.0.1; no SparkSession needed.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from sdk.errors import ConnectionLostError
from sdk.spark.hubs import connect_first, topic_bounds
from sdk.spark.options import DEFAULT_MAX_RECORDS_PER_PARTITION, OptionError, parse_read_options, plan_ranges
from tests.support.hubprocess import HubProcess


def test_split_topics_false_keeps_each_topic_in_one_partition() -> None:
    ranges = {"b": (0, 3_000_000), "a": (5, 9), "empty": (7, 7)}
    assert plan_ranges(ranges, 1000, min_partitions=8, split=False) == [("a", 5, 9), ("b", 0, 3_000_000)]
    split = plan_ranges(ranges, DEFAULT_MAX_RECORDS_PER_PARTITION)
    assert [r for r in split if r[0] == "b"] == [("b", 0, 1_000_000), ("b", 1_000_000, 2_000_000),
                                                 ("b", 2_000_000, 3_000_000)]  # fmt: skip


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("splitTopics", "sometimes", "must be true or false"),
        ("fetchOffset.numRetries", "-1", "fetchOffset.numRetries"),
        ("fetchOffset.retryIntervalMs", "0", "fetchOffset.retryIntervalMs"),
    ],
)
def test_cluster_option_errors(option: str, value: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_read_options({"hub": "h:1", "subscribe": "a", option.lower(): value}, streaming=True)


def test_cluster_options_parse() -> None:
    opts = parse_read_options({"hub": "h:1", "subscribe": "a", "splittopics": "false", "fetchoffset.numretries": "0",
                               "fetchoffset.retryintervalms": "250"}, streaming=True)  # fmt: skip
    assert (opts.split_topics, opts.fetch_retries, opts.fetch_retry_interval) == (False, 0, 0.25)
    defaults = parse_read_options({"hub": "h:1", "subscribe": "a"}, streaming=True)
    assert (defaults.split_topics, defaults.fetch_retries, defaults.fetch_retry_interval) == (True, 3, 1.0)


def test_executor_connect_outlives_a_hub_restart() -> None:
    """``connect_first(..., retry_for=...)`` keeps trying while the hub is down and gets it once back."""
    hub = HubProcess()
    port = hub.port
    hub.stop()
    got: dict[str, Any] = {}

    def connect() -> None:
        try:
            got["client"] = connect_first([f"127.0.0.1:{port}"], connect_timeout=5, retry_for=60, reconnect=None)
        except BaseException as exc:  # reported by the assertion below
            got["error"] = exc

    thread = threading.Thread(target=connect)
    thread.start()
    thread.join(timeout=1.0)
    assert thread.is_alive() and not got  # nothing listens: still trying, neither connected nor given up
    back = HubProcess("--listen", f"127.0.0.1:{port}")  # the same address, as a restarted hub has
    try:
        thread.join(timeout=90)
        assert "error" not in got, got
        with got["client"] as client:
            assert client.status()["topic_list"] == []
    finally:
        back.stop()


def test_connect_without_retry_names_every_address() -> None:
    hub = HubProcess()
    a = hub.address
    hub.stop()
    with pytest.raises(ConnectionLostError, match=rf"no pub0sub hub reachable \(option 'hub'\): {a}: "):
        connect_first([a], connect_timeout=2, reconnect=None)


def test_planning_tries_again_then_fails(caplog: pytest.LogCaptureFixture) -> None:
    hub = HubProcess()
    a = hub.address
    hub.stop()
    raw = {"hub": a, "subscribe": "x", "fetchoffset.numretries": "2", "fetchoffset.retryintervalms": "10",
           "connecttimeout": "2"}  # fmt: skip
    opts = parse_read_options(raw, streaming=False)
    with caplog.at_level(logging.WARNING, logger="pub0sub.spark"), pytest.raises(ConnectionLostError, match=a):
        topic_bounds(opts)
    assert sum("pub0sub planning:" in r.getMessage() for r in caplog.records) == 2  # 3 tries, 2 waits
