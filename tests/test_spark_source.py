"""The ``pub0sub`` Spark data source against real hubs on loopback.

Option parsing and offset planning first (no Spark), then one session-scoped SparkSession
(``local[2,3]``: failed tasks are retried, see SPARK_NOTES) for batch reads, a streaming
query restarted from its checkpoint across a hub restart, writes, and idempotent rewrites.
The first session costs 8-14 s; everything else here shares it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

import sdk
from sdk.spark.options import (
    DataLossError,
    HubAccess,
    OptionError,
    TopicBounds,
    limit_offsets,
    parse_read_options,
    parse_write_options,
    pattern_matches,
    plan_ranges,
    resolve_position,
    split_range,
)
from tests.support.hubprocess import HubProcess
from tests.support.security import Certs, certs, user_entry, write_users

__all__ = ["certs"]  # a fixture, imported for pytest
from tests.support.waiting import wait_until

# -- options and planning, no Spark ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "a"}, False, "option 'hub' is required"),
        ({"hub": "nohost", "subscribe": "a"}, False, "is not HOST:PORT"),
        ({"hub": "h:1"}, False, "give exactly one of 'subscribe'"),
        ({"hub": "h:1", "subscribe": "a", "subscribePattern": "a.*"}, False, "give exactly one of"),
        ({"hub": "h:1", "subscribe": "a.*"}, False, "invalid topic 'a.*': '*' and '>' are only for subscription"),
        ({"hub": "h:1", "subscribePattern": "a.>.b"}, False, "invalid pattern 'a.>.b': '>' must be the last token"),
        ({"hub": "h:1", "subscribe": "a", "startingOffsets": "{bad"}, False, "must be 'earliest', 'latest' or a JSON"),
        ({"hub": "h:1", "subscribe": "a", "startingOffsets": '{"a": -3}'}, False, "must be an integer >= -2"),
        ({"hub": "h:1", "subscribe": "a", "startingOffsets": '{"b": 1}'}, False, "not subscribed: ['b']"),
        ({"hub": "h:1", "subscribe": "a", "startingOffsets": "latest"}, False, "not allowed for a batch read"),
        ({"hub": "h:1", "subscribe": "a", "endingOffsets": "earliest"}, False, "not allowed as an end"),
        ({"hub": "h:1", "subscribe": "a", "endingOffsets": "latest"}, True, "for batch reads only"),
        ({"hub": "h:1", "subscribe": "a", "maxOffsetsPerTrigger": "10"}, False, "for streaming reads only"),
        ({"hub": "h:1", "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "must be a positive integer"),
        ({"hub": "h:1", "subscribe": "a", "failOnDataLoss": "maybe"}, False, "must be true or false"),
        ({"hub": "h:1", "subscribe": "a", "startingOffset": "earliest"}, False, "unknown pub0sub read option"),
        ({"hub": "h:1", "subscribe": "a", "user": "u"}, False, "options 'user' and 'password' go together"),
        ({"hub": "h:1", "subscribe": "a", "user": "u", "password": "p", "token": "u:p"}, False, "not both"),
        ({"hub": "h:1", "subscribe": "a", "keyFile": "k.pem"}, False, "option 'keyFile' needs 'certFile'"),
        ({"hub": "h:1", "subscribe": "a", "tls": "false", "caFile": "ca.pem"}, False, "the files need TLS"),
        ({"hub": "h:1", "subscribe": "a", "columns": "value,size"}, False, "option 'columns': 'value,size' must name"),
        ({"hub": "h:1", "subscribe": "a", "columns": "value, VALUE"}, True, "each column at most once"),
    ],
)
def test_read_option_errors(options: dict[str, str], streaming: bool, message: str) -> None:
    lowered = {k.lower(): v for k, v in options.items()}  # as Spark hands them over
    with pytest.raises(OptionError) as exc:
        parse_read_options(lowered, streaming=streaming)
    assert message in str(exc.value)


def test_read_options_follow_kafka() -> None:
    opts = parse_read_options(
        {"hub": "a:1, b:2", "topics": "x,y,x", "startingoffsets": '{"x": {"0": 5}, "y": -2}'}, streaming=False
    )
    assert opts.hubs == ("a:1", "b:2")
    assert opts.subscription.topics == ("x", "y")
    assert opts.starting == {"x": 5, "y": -2} and opts.ending == "latest"
    assert parse_read_options({"hub": "a:1", "subscribe": "x"}, streaming=True).starting == "latest"
    with pytest.raises(OptionError, match="unknown pub0sub write option"):
        parse_write_options({"hub": "a:1", "topics": "x"})
    with pytest.raises(OptionError, match=r"option 'topic': invalid topic 'x\.\*'"):
        parse_write_options({"hub": "a:1", "topic": "x.*"})


def test_access_options_become_client_arguments_and_hide_secrets() -> None:
    opts = parse_write_options({"hub": "a:1", "user": "etl", "password": "s3cret", "cafile": "/ca.pem"})
    assert opts.access == HubAccess(user="etl", password="s3cret", ca_file="/ca.pem")
    assert opts.access.connect_kwargs() == {"user": "etl", "password": "s3cret", "tls": True, "ca_file": "/ca.pem",
                                            "cert_file": None, "key_file": None}  # fmt: skip
    assert "s3cret" not in repr(opts)  # Spark may log the options of a plan
    token = parse_read_options({"hub": "a:1", "subscribe": "x", "token": "etl:t0ken", "tls": "true"}, streaming=False)
    assert token.access.connect_kwargs() == {"token": "etl:t0ken", "tls": True, "ca_file": None, "cert_file": None,
                                             "key_file": None}  # fmt: skip
    assert "t0ken" not in repr(token)
    assert parse_read_options({"hub": "a:1", "subscribe": "x"}, streaming=False).access.connect_kwargs() == {}


def test_patterns_offsets_and_ranges() -> None:
    assert pattern_matches("orders.*", "orders.eu") and not pattern_matches("orders.*", "orders.eu.x")
    assert pattern_matches("orders.>", "orders.eu.x") and not pattern_matches("orders.>", "orders")
    bounds = TopicBounds(10, 20)
    kw: dict[str, Any] = {"what": "startingOffsets", "fail_on_data_loss": True}
    assert resolve_position({"t": -2}, "t", bounds, missing=-1, **kw) == 10
    assert resolve_position({}, "t", bounds, missing=-1, **kw) == 20
    with pytest.raises(DataLossError, match="before the oldest retained offset 10"):
        resolve_position({"t": 3}, "t", bounds, missing=-1, **kw)
    assert resolve_position({"t": 3}, "t", bounds, missing=-1, what="x", fail_on_data_loss=False) == 10
    with pytest.raises(OptionError, match="past the end"):
        resolve_position({"t": 21}, "t", bounds, missing=-1, **kw)
    assert split_range(0, 10, 4) == [(0, 4), (4, 7), (7, 10)]
    assert plan_ranges({"b": (0, 2), "a": (5, 9)}, 100, min_partitions=3) == [
        ("a", 5, 7), ("a", 7, 9), ("b", 0, 2),
    ]  # fmt: skip
    limited = limit_offsets({"a": 0, "b": 0}, {"a": 100, "b": 300, "c": 0}, 40)
    assert limited == {"a": 10, "b": 30, "c": 0} and list(limited) == ["a", "b", "c"]
    assert sum(limit_offsets({"a": 0, "b": 0}, {"a": 1, "b": 1}, 1).values()) == 1  # progress, never stuck


# -- hubs -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hubs() -> Iterator[Callable[..., HubProcess]]:
    started: list[HubProcess] = []

    def start(*args: str) -> HubProcess:
        hub = HubProcess(*args)
        started.append(hub)
        return hub

    yield start
    for hub in started:
        hub.stop()


def publish_known(address: str, plan: dict[str, int], *, tag: str = "") -> list[tuple[Any, ...]]:
    """Publish ``plan[topic]`` messages per topic (varied keys and sizes); the expected rows."""
    expected = []
    with sdk.connect_blocking(address) as client:
        origin = f"{client.hub_id:016x}"
        messages = [
            (topic, f"{tag}{topic}-{i}-".encode() + b"x" * (i % 7), (b"k%d" % (i % 3)) if i % 4 else None)
            for topic, n in plan.items()
            for i in range(n)
        ]
        acks = client.publish_acked_many(messages)
        for (topic, value, key), ack in zip(messages, acks, strict=True):
            expected.append((topic, ack.offsets[topic], ack.timestamp, key, value, origin))
    return expected


def rows_of(df: Any) -> list[tuple[Any, ...]]:
    """Rows as tuples, the timestamp as µs since the epoch (as the SDK gives it), sorted by topic and offset."""
    out = [
        (r.topic, r.offset, r.ts, None if r.key is None else bytes(r.key), bytes(r.value), r.origin)
        for r in df.selectExpr("topic", "offset", "unix_micros(timestamp) AS ts", "key", "value", "origin").collect()
    ]
    return sorted(out, key=lambda row: (row[0], row[1]))


def reader(spark: Any, address: str, **options: str) -> Any:
    r = spark.read.format("pub0sub").option("hub", address)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


# -- batch read -----------------------------------------------------------------------------------


def test_batch_read_equals_published(spark: Any, hubs: Callable[..., HubProcess], tmp_path: Path) -> None:
    hub = hubs("--data-dir", str(tmp_path / "hub"))
    expected = publish_known(hub.address, {"orders.eu": 700, "orders.us": 300, "audit": 50})
    # A dead address first: the source tries the next one.
    everything = reader(spark, f"127.0.0.1:1,{hub.address}", subscribePattern="orders.*")
    assert rows_of(everything) == [r for r in expected if r[0].startswith("orders.")]

    df = reader(spark, hub.address, subscribe="audit,orders.eu,orders.us", maxRecordsPerPartition="250")
    assert df.rdd.getNumPartitions() == 1 + 3 + 2  # audit 50, orders.eu 700 in 3, orders.us 300 in 2
    assert rows_of(df) == sorted(expected, key=lambda row: (row[0], row[1]))

    ranged = reader(
        spark,
        hub.address,
        topics="orders.eu,orders.us",
        startingOffsets=json.dumps({"orders.eu": 100, "orders.us": -2}),
        endingOffsets=json.dumps({"orders.eu": 105}),
    )
    want = [r for r in expected if (r[0] == "orders.eu" and 100 <= r[1] < 105) or r[0] == "orders.us"]
    assert rows_of(ranged) == want
    assert reader(spark, hub.address, subscribe="nothing.here").count() == 0


def publish_headed(address: str, topic: str) -> None:
    """Messages without headers, with the same headers twice, with others."""
    with sdk.connect_blocking(address) as client:
        client.publish(topic, b"none")
        client.publish(topic, b"one", headers={"trace": "4bf9", "raw": b"\x00\xff"})
        client.publish(topic, b"two", headers={"trace": "4bf9", "raw": b"\x00\xff"})
        client.publish(topic, b"other", headers={"tenant": "eu"})
        client.publish_acked(topic, b"none again")


def test_batch_read_has_the_headers_column(spark: Any, hubs: Callable[..., HubProcess], tmp_path: Path) -> None:
    hub = hubs("--data-dir", str(tmp_path / "hub"))
    publish_headed(hub.address, "h")
    df = reader(spark, hub.address, subscribe="h")
    assert dict(df.dtypes)["headers"] == "map<string,binary>"
    rows = df.selectExpr("offset", "headers", "CAST(headers['trace'] AS STRING) AS trace").orderBy("offset").collect()
    assert [None if r.headers is None else {k: bytes(v) for k, v in r.headers.items()} for r in rows] == [
        None, {"trace": b"4bf9", "raw": b"\x00\xff"}, {"trace": b"4bf9", "raw": b"\x00\xff"}, {"tenant": b"eu"}, None,
    ]  # fmt: skip
    assert [r.trace for r in rows] == [None, "4bf9", "4bf9", None, None]


def test_columns_option_narrows_the_schema(spark: Any, hubs: Callable[..., HubProcess], tmp_path: Path) -> None:
    hub = hubs("--data-dir", str(tmp_path / "hub"))
    expected = publish_known(hub.address, {"narrow": 120})
    df = reader(spark, hub.address, subscribe="narrow", columns="value, Offset,key", minPartitions="2")
    assert df.columns == ["value", "offset", "key"]
    got = sorted((r.offset, bytes(r.value), None if r.key is None else bytes(r.key)) for r in df.collect())
    assert got == [(offset, value, key) for _, offset, _, key, value, _ in expected]
    stream = (spark.readStream.format("pub0sub").option("hub", hub.address).option("subscribe", "narrow")
              .option("startingOffsets", "earliest").option("columns", "timestamp,value").load())  # fmt: skip
    assert stream.columns == ["timestamp", "value"]
    other = spark.read.format("pub0sub").schema("value binary").option("hub", hub.address)
    with pytest.raises(Exception, match="fixed schema"):
        other.option("subscribe", "narrow").load().count()


def test_batch_read_data_loss_is_clear(spark: Any, hubs: Callable[..., HubProcess], tmp_path: Path) -> None:
    hub = hubs("--data-dir", str(tmp_path / "hub"), "--segment-bytes", "4096", "--retention-bytes", "8192",
               "--retention-check-seconds", "0.1")  # fmt: skip
    for _ in range(20):  # 20 publish batches: segments roll between them, and retention removes whole segments
        publish_known(hub.address, {"old": 100})

    def first_offset() -> int:
        with sdk.connect_blocking(hub.address) as client:
            return next(t["first_offset"] for t in client.status()["topic_list"] if t["topic"] == "old")

    def retained_bytes() -> int:
        segments = list((tmp_path / "hub").glob("topics/old-*/*.log"))
        try:
            return sum(p.stat().st_size for p in segments) if segments else 1 << 30  # none: a wrong path
        except FileNotFoundError:  # a segment removed while being looked at
            return 1 << 30

    # Retention runs every 0.1 s, and may lag behind under load: the first offset it leaves is
    # known once it has cut the log down to its limit (a first offset read before that moves on).
    wait_until(lambda: retained_bytes() <= 8192, timeout=20, what="retention to cut the log to 8192 bytes",
               interval=0.1)  # fmt: skip
    first = first_offset()
    assert first > 0  # offsets start at 0: retention removed the oldest segments
    with pytest.raises(Exception, match="before the oldest retained offset") as exc:
        reader(spark, hub.address, subscribe="old", startingOffsets='{"old": 0}').count()
    assert "failOnDataLoss=false" in str(exc.value)
    lenient = reader(spark, hub.address, subscribe="old", startingOffsets='{"old": 0}', failOnDataLoss="false")
    offsets = sorted(r.offset for r in lenient.select("offset").collect())
    # Retention may still be catching up (a check every 0.1 s on a loaded machine): the read starts
    # at the oldest offset retained when it was planned, at or past `first`, and misses nothing after it.
    assert offsets and offsets[0] >= first and offsets == list(range(offsets[0], 2000))


def test_option_errors_through_spark(spark: Any) -> None:
    with pytest.raises(Exception, match="give exactly one of 'subscribe'"):
        reader(spark, "127.0.0.1:1").count()
    with pytest.raises(Exception, match="no pub0sub hub reachable"):
        reader(spark, "127.0.0.1:1", subscribe="a", connectTimeout="2").count()
    df = spark.createDataFrame([("t", 1)], "topic string, value int")
    with pytest.raises(Exception, match="column 'value' must be BINARY or STRING"):
        df.write.format("pub0sub").option("hub", "127.0.0.1:1").mode("append").save()
    with pytest.raises(Exception, match="append-only"):
        df.write.format("pub0sub").option("hub", "127.0.0.1:1").mode("overwrite").save()


# -- streaming read: restart from the checkpoint across a hub restart -----------------------------


def test_stream_restart_exactly_once(spark: Any, hubs: Callable[..., HubProcess], tmp_path: Path) -> None:
    data_dir, out, checkpoint = tmp_path / "hub", tmp_path / "out", tmp_path / "checkpoint"
    hub = hubs("--data-dir", str(data_dir))
    expected = publish_known(hub.address, {"s.a": 250, "s.b": 120})

    def run(address: str) -> None:
        stream = (
            spark.readStream.format("pub0sub")
            .option("hub", address)
            .option("subscribePattern", "s.*")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "100")
            .load()
        )
        query = (
            stream.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120), "the availableNow query did not finish"
        assert query.exception() is None

    run(hub.address)
    first_batches = len(list((checkpoint / "commits").iterdir()))
    assert first_batches >= 4  # 370 messages at most 100 per trigger

    hub.stop()
    hub = hubs("--data-dir", str(data_dir))  # same log, new port
    expected += publish_known(hub.address, {"s.a": 30, "s.c": 40}, tag="after-")  # s.c: a topic found on restart
    run(hub.address)

    got = rows_of(spark.read.parquet(str(out)))
    assert len(got) == len({(r[0], r[1]) for r in got}), "a message was stored twice"
    assert got == sorted(expected, key=lambda row: (row[0], row[1]))


# -- writing --------------------------------------------------------------------------------------


def stored(address: str, topic: str) -> int:
    with sdk.connect_blocking(address) as client:
        return next((t["next_offset"] for t in client.status()["topic_list"] if t["topic"] == topic), 0)


def test_write_then_read_round_trip(spark: Any, hubs: Callable[..., HubProcess], tmp_path: Path) -> None:
    hub = hubs("--data-dir", str(tmp_path / "hub"))
    rows = [(f"w.{i % 2}", f"key-{i % 5}" if i % 3 else None, f"value {i}") for i in range(500)]
    df = spark.createDataFrame(rows, "topic string, key string, value string").repartition(3)
    df.write.format("pub0sub").option("hub", hub.address).mode("append").save()
    back = reader(spark, hub.address, subscribe="w.0,w.1")
    got = sorted(
        ((r.topic, None if r.key is None else bytes(r.key).decode(), bytes(r.value).decode()) for r in back.collect()),
        key=repr,
    )
    assert got == sorted(rows, key=repr)
    # the topic option wins over a column; BINARY values pass through unchanged
    binary = spark.createDataFrame([(b"\x00\xff", "ignored")], "value binary, topic string")
    binary.write.format("pub0sub").option("hub", hub.address).option("topic", "w.bin").mode("append").save()
    assert [bytes(r.value) for r in reader(spark, hub.address, subscribe="w.bin").collect()] == [b"\x00\xff"]


def test_write_and_read_a_hub_with_users_and_tls(
    spark: Any, hubs: Callable[..., HubProcess], tmp_path: Path, certs: Certs
) -> None:
    users = write_users(tmp_path / "users.toml",
                        user_entry("etl", "etl-secret", publish=["sec.>"]),
                        user_entry("report", "report-secret", subscribe=["sec.>"], status="topics"))  # fmt: skip
    hub = hubs("--data-dir", str(tmp_path / "hub"), "--auth-file", str(users),
               "--tls-cert", str(certs.hub_cert), "--tls-key", str(certs.hub_key))  # fmt: skip
    rows = [("sec.a", f"row {i}") for i in range(40)]
    df = spark.createDataFrame(rows, "topic string, value string").repartition(2)
    writer = df.write.format("pub0sub").option("hub", hub.address).option("caFile", str(certs.ca))
    writer.option("user", "etl").option("password", "etl-secret").mode("append").save()
    back = reader(spark, hub.address, subscribe="sec.a", token="report:report-secret", caFile=str(certs.ca))
    assert sorted(bytes(r.value).decode() for r in back.collect()) == sorted(v for _, v in rows)
    # The reader's grants do not include publishing, and nobody gets in without a secret or over plain TCP.
    with pytest.raises(Exception, match="NOT_AUTHORIZED"):
        writer.option("user", "report").option("password", "report-secret").mode("append").save()
    with pytest.raises(Exception, match="NOT_AUTHORIZED"):
        reader(spark, hub.address, subscribe="sec.a", caFile=str(certs.ca), connectTimeout="5").count()
    with pytest.raises(Exception, match="no pub0sub hub reachable"):
        reader(spark, hub.address, subscribe="sec.a", token="report:report-secret", connectTimeout="5").count()


def test_write_has_the_headers_column(spark: Any, hubs: Callable[..., HubProcess], tmp_path: Path) -> None:
    hub = hubs("--data-dir", str(tmp_path / "hub"))
    publish_headed(hub.address, "h.in")

    def read(topic: str) -> list[tuple[bytes, dict[str, bytes] | None]]:
        rows = (spark.read.format("pub0sub").option("hub", hub.address).option("subscribe", topic).load()
                .orderBy("offset").collect())  # fmt: skip
        return [(bytes(r.value), None if r.headers is None else {k: bytes(v) for k, v in r.headers.items()})
                for r in rows]  # fmt: skip

    # A DataFrame read from pub0sub, written back as it is (its topic column overridden).
    df = spark.read.format("pub0sub").option("hub", hub.address).option("subscribe", "h.in").load()
    df.write.format("pub0sub").option("hub", hub.address).option("topic", "h.out").mode("append").save()
    assert read("h.out") == read("h.in") == [
        (b"none", None), (b"one", {"trace": b"4bf9", "raw": b"\x00\xff"}),
        (b"two", {"trace": b"4bf9", "raw": b"\x00\xff"}), (b"other", {"tenant": b"eu"}), (b"none again", None),
    ]  # fmt: skip
    # MAP<STRING, STRING> works too: text values, which a subscriber gets back as str.
    text = spark.createDataFrame([("a", {"lang": "fr"}), ("b", None)], "value string, headers map<string,string>")
    text.coalesce(1).write.format("pub0sub").option("hub", hub.address).option("topic", "h.text").mode("append").save()
    with sdk.connect_blocking(hub.address) as client, client.subscribe("h.text", start="earliest") as sub:
        got: list[tuple[bytes, Any]] = []
        while len(got) < 2:
            got += [(m.data, m.headers) for m in sub.next_batch(timeout=10) or []]
    assert [(data, dict(headers)) for data, headers in got] == [(b"a", {"lang": "fr"}), (b"b", {})]
    wrong = spark.createDataFrame([("a", 1)], "value string, headers int")
    with pytest.raises(Exception, match="column 'headers' must be MAP<STRING, BINARY> or MAP<STRING, STRING>"):
        wrong.write.format("pub0sub").option("hub", hub.address).option("topic", "h.x").mode("append").save()


def test_rewrite_with_same_write_id_is_stored_once(spark: Any, hubs: Callable[..., HubProcess], tmp_path: Path) -> None:
    hub = hubs("--data-dir", str(tmp_path / "hub"))
    df = spark.range(3000).selectExpr("'idem' AS topic", "CAST(id AS STRING) AS value").repartition(2)

    def write(**options: str) -> None:
        w = df.write.format("pub0sub").option("hub", hub.address)
        for key, value in options.items():
            w = w.option(key, value)
        w.mode("append").save()

    write(writeId="nightly-2024-01-01", flushBytes="4096")
    write(writeId="nightly-2024-01-01", flushBytes="4096")  # the same job again: the hub drops every frame
    assert stored(hub.address, "idem") == 3000
    write()  # a new job id: a new producer, stored again (the guarantee is per write id)
    assert stored(hub.address, "idem") == 6000


@pytest.mark.filterwarnings("ignore:Cannot infer the eval type")
def test_spark_task_retry_is_exactly_once(spark: Any, hubs: Callable[..., HubProcess], tmp_path: Path) -> None:
    """A write task that fails on its first attempt is retried by Spark with the same producer id.

    (Spark's UDF stage fails before the writer has received rows here; the partial-publish case
    is the test above, without Spark.)"""
    if not spark.sparkContext.master.startswith("local[2,"):
        pytest.skip(
            f"needs a master that retries tasks (local[N,F]); this run's session is {spark.sparkContext.master}"
        )
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    @udf("binary")
    def fail_first_attempt(i: int) -> bytes:
        ctx = TaskContext.get()
        if i == 1500 and ctx is not None and ctx.attemptNumber() == 0:
            raise RuntimeError("the first attempt fails")
        return b"row-%05d" % i

    hub = hubs("--data-dir", str(tmp_path / "hub"))
    df = spark.range(0, 2000, numPartitions=2).select(fail_first_attempt("id").alias("value"))
    df.write.format("pub0sub").option("hub", hub.address).option("topic", "retry").mode("append").save()
    assert stored(hub.address, "retry") == 2000


def test_stream_write_replayed_batch_is_stored_once(
    spark: Any, hubs: Callable[..., HubProcess], tmp_path: Path
) -> None:
    """pub0sub -> pub0sub; the last micro-batch is replayed (its commit removed from the checkpoint)."""
    hub = hubs("--data-dir", str(tmp_path / "hub"))
    publish_known(hub.address, {"in": 300})
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        stream = (
            spark.readStream.format("pub0sub").option("hub", hub.address).option("subscribe", "in")
            .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100").load()
        )  # fmt: skip
        query = (
            stream.selectExpr("'out' AS topic", "key", "value").writeStream.format("pub0sub")
            .option("hub", hub.address).option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start()
        )  # fmt: skip
        assert query.awaitTermination(120)
        assert query.exception() is None

    run()
    assert stored(hub.address, "out") == 300
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    # As if the query died after writing its last batch, before committing it (the file and its checksum).
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    run()
    assert (checkpoint / "commits" / str(last)).exists(), "the batch was not run again"
    assert stored(hub.address, "out") == 300
