"""The streaming pipeline of the Spark runs: ``in.*`` topics -> the ``pub0sub`` sink and Parquet.

Used by ``pub0sub spark exactly-once`` (with failures, on a standalone cluster) and by
``bench S2`` (throughput and latency).  The input follows Kafka's partition model: a key
always goes to the same topic ``in.<n>`` (:func:`input_topic`), and the source reads each
topic's range of a micro-batch as one partition (``splitTopics=false``), so one write task
publishes a key's messages in their input order.  Each output value is the input value plus
``@`` and the input's timestamp (µs): the output topic alone then tells the publish-to-output
latency (its own append time minus that stamp) and whether every input arrived once.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...blocking import connect_blocking

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

INPUT_PATTERN = "in.*"
#: The source columns the topic query uses (it stamps the value with the input's timestamp and
#: keeps the key): option ``columns`` with these spares the JVM's copy of the other four.
QUERY_COLUMNS = "key,value,timestamp"
#: Failures of Spark's own machinery, not of the pipeline, that a query is started again from its
#: checkpoint for (at most MAX_SPARK_RESTARTS times per pipeline), as a job supervisor would: a
#: Python worker that does not connect back within Spark's fixed timeout on a loaded machine.
#: Anything else fails the run, and a restart is itself a checkpoint recovery the run then checks.
SPARK_FAILURES = ("Python worker failed to connect back",)
MAX_SPARK_RESTARTS = 2


def input_topic(key: bytes, topics: int) -> str:
    """The topic of a key: stable across processes (crc32, not Python's salted hash)."""
    return f"in.{zlib.crc32(key) % topics}"


class Publisher:
    """Publishes ``key:seq`` values at ``rate`` messages/s on a thread, each tick's messages
    acknowledged before the next tick: ``published`` is exactly what the hub stored."""

    def __init__(self, address: str, *, rate: float, keys: int, topics: int, tick: float = 0.05) -> None:
        self.address = address
        self.rate = rate
        self.keys = [b"k%03d" % i for i in range(keys)]
        self.topics = topics
        self.tick = tick
        self.published: list[tuple[str, bytes, bytes]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Publish from now on (again after :meth:`stop`, going on with the sequence numbers)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the current tick: everything in :attr:`published` is acknowledged."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"the publisher failed: {self.error}") from self.error

    def _run(self) -> None:
        seq = first = len(self.published)
        started = time.monotonic()
        try:
            with connect_blocking(self.address, name="spark-run-publisher") as client:
                while not self._stop.is_set():
                    due = first + int((time.monotonic() - started) * self.rate)
                    batch = []
                    while seq < due:
                        key = self.keys[seq % len(self.keys)]
                        batch.append((input_topic(key, self.topics), b"%s:%d" % (key, seq), key))
                        seq += 1
                    if batch:
                        client.publish_acked_many(batch, timeout=60)
                        self.published.extend(batch)
                    self._stop.wait(self.tick)
        except BaseException as exc:  # handed to stop()
            self.error = exc


@dataclass
class Streams:
    """The two queries of one pipeline, and how to start them again from their checkpoints."""

    spark: SparkSession
    source_hub: str
    sink_hub: str
    out_topic: str
    root: Path
    trigger: dict[str, Any]
    max_per_trigger: int | None = None
    #: the source's topic option: ``subscribePattern`` in.* (the exactly-once run) or ``subscribe``
    topics: tuple[str, str] = ("subscribePattern", INPUT_PATTERN)
    starting: str = "earliest"
    #: also write the input rows to Parquet (a second query)
    parquet_too: bool = True
    #: the source's option ``columns`` (None: all seven); the Parquet query writes only these
    columns: str | None = None
    queries: list[StreamingQuery] = field(default_factory=list)
    #: per query name: micro-batches run and their durations (ms), over every start
    batches: dict[str, list[int]] = field(default_factory=dict)
    #: queries started again after a failure of Spark's machinery (SPARK_FAILURES), and why
    spark_restarts: list[str] = field(default_factory=list)

    @property
    def parquet(self) -> Path:
        return self.root / "parquet"

    def start(self) -> None:
        spark = self.spark
        reader = (
            spark.readStream.format("pub0sub")
            .option("hub", self.source_hub)
            .option(*self.topics)
            .option("startingOffsets", self.starting)
            .option("splitTopics", "false")
            # A restarting source hub: plan again for up to a minute instead of failing the query.
            .option("fetchOffset.numRetries", "60")
        )
        if self.max_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(self.max_per_trigger))
        if self.columns:
            reader = reader.option("columns", self.columns)
        stream = reader.load()
        stamped = stream.selectExpr(
            "key", "concat(value, CAST(concat('@', CAST(unix_micros(timestamp) AS STRING)) AS BINARY)) AS value"
        )
        self.queries = [
            stamped.writeStream.format("pub0sub")
            .option("hub", self.sink_hub)
            .option("topic", self.out_topic)
            .option("checkpointLocation", str(self.root / "checkpoint-topic"))
            .queryName(f"{self.out_topic}-topic")
            .trigger(**self.trigger)
            .start()
        ]
        if self.parquet_too:
            self.queries.append(
                stream.writeStream.format("parquet")
                .option("path", str(self.parquet))
                .option("checkpointLocation", str(self.root / "checkpoint-parquet"))
                .queryName(f"{self.out_topic}-parquet")
                .trigger(**self.trigger)
                .start()
            )

    def stop(self) -> None:
        for query in self.queries:
            query.stop()
            self._note_progress(query)
        self.queries = []

    def _note_progress(self, query: StreamingQuery) -> None:
        durations = self.batches.setdefault(query.name or "", [])
        for progress in query.recentProgress:
            if progress.get("numInputRows"):
                durations.append(int(progress["durationMs"].get("triggerExecution", 0)))

    def has_written(self) -> bool:
        """The topic query has finished a batch with input rows (its executors are warm)."""
        query = self.queries[0] if self.queries else None
        return bool(query is not None and any(p.get("numInputRows") for p in query.recentProgress))

    def wait_busy(self, timeout: float) -> bool:
        """Wait until the topic query is processing data (tasks are running); False after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            query = self.queries[0] if self.queries else None
            if query is not None and query.status.get("message") == "Processing new data":
                return True
            time.sleep(0.05)
        return False

    def check_alive(self) -> bool:
        """Raise if a query failed; True if one failed in Spark's machinery and all were started again."""
        for query in self.queries:
            error = query.exception()
            if error is None:
                continue
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            if len(self.spark_restarts) < MAX_SPARK_RESTARTS and any(f in str(error) for f in SPARK_FAILURES):
                self.spark_restarts.append(f"{query.name}: {first_line}")
                self.stop()
                self.start()
                return True
            raise RuntimeError(f"query {query.name} failed: {error}")
        return False

    def await_all(self, timeout: float) -> bool:
        """For availableNow: wait until every query has ended (True) or ``timeout`` passed."""
        from pyspark.errors import StreamingQueryException

        deadline = time.monotonic() + timeout
        for query in self.queries:
            try:
                # Seconds; pyspark multiplies by 1000 and rounds, so a float is fine despite its annotation.
                if not query.awaitTermination(max(0.1, deadline - time.monotonic())):  # type: ignore[arg-type]
                    return False
            except StreamingQueryException:
                pass  # it ended with an error, which awaitTermination raises: check_alive judges it
            if self.check_alive():
                return False  # started again: this run is not over
        for query in self.queries:
            self._note_progress(query)
        self.queries = []
        return True


# -- what came out ------------------------------------------------------------------------------


def next_offsets(address: str, *, pattern: str | None = None) -> dict[str, int]:
    """``{topic: next offset}`` of a hub (topics matching ``pattern``, a pub0sub pattern)."""
    from ...spark.options import pattern_matches

    with connect_blocking(address, name="spark-run-check", reconnect=None) as client:
        topics = client.status()["topic_list"]
    wanted = (t for t in topics if pattern is None or pattern_matches(pattern, t["topic"]))
    return {t["topic"]: int(t["next_offset"]) for t in wanted}


def read_topic(address: str, topic: str) -> list[tuple[bytes, bytes, int]]:
    """Every ``(key, value, timestamp µs)`` of ``topic`` on one hub, in offset order."""
    from ...spark.reading import read_range

    end = next_offsets(address).get(topic, 0)
    rows: list[tuple[bytes, bytes, int]] = []
    for batch in read_range((address,), topic, 0, end):
        stamps = batch.column("timestamp").cast("int64").to_pylist()
        rows.extend(zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(), stamps, strict=True))
    return rows


@dataclass
class OutputCheck:
    """The output topic against what was published: exactly once, in order per key."""

    published: int
    received: int
    missing: int
    duplicates: int
    order_violations: int
    unexpected: int
    latencies_us: list[int]

    @property
    def exactly_once(self) -> bool:
        return self.received == self.published and not (self.missing or self.duplicates or self.unexpected)

    @property
    def ok(self) -> bool:
        return self.exactly_once and not self.order_violations

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "latencies_us"}
        data.update(latency_percentiles(self.latencies_us))
        return data


def check_output(
    published: Sequence[tuple[str, bytes, bytes]], rows: Sequence[tuple[bytes, bytes, int]]
) -> OutputCheck:
    expected = {value for _, value, _ in published}
    seen: dict[bytes, int] = {}
    last_seq: dict[bytes, int] = {}
    order_violations = unexpected = 0
    latencies: list[int] = []
    for key, value, stamp in rows:
        original, _, published_at = value.rpartition(b"@")
        seen[original] = seen.get(original, 0) + 1
        if original not in expected:
            unexpected += 1
            continue
        seq = int(original.rsplit(b":", 1)[1])
        if seq < last_seq.get(key, -1):
            order_violations += 1
        last_seq[key] = seq
        latencies.append(stamp - int(published_at))
    return OutputCheck(
        published=len(published),
        received=len(rows),
        missing=len(expected - set(seen)),
        duplicates=sum(n - 1 for n in seen.values() if n > 1),
        order_violations=order_violations,
        unexpected=unexpected,
        latencies_us=latencies,
    )


def duplicate_frames(address: str) -> int:
    """PUBLISH frames a hub dropped whole as already stored (idempotent producers' replays)."""
    with connect_blocking(address, name="spark-run-check", reconnect=None) as client:
        return int(client.status().get("counters", {}).get("duplicate_batches", 0))


def check_parquet(spark: SparkSession, path: Path, published: Sequence[tuple[str, bytes, bytes]]) -> dict[str, Any]:
    """Count the Parquet sink with Spark itself (its ``_spark_metadata`` log decides which files count)."""
    found = spark.read.parquet(str(path)).select("topic", "offset", "value").collect()  # one job
    rows = len(found)
    distinct = len({(r.topic, r.offset) for r in found})
    values = {bytes(r.value) for r in found}
    expected = {value for _, value, _ in published}
    return {"rows": rows, "distinct_offsets": distinct, "missing": len(expected - values),
            "unexpected": len(values - expected),
            "exactly_once": rows == distinct == len(expected) and values == expected}  # fmt: skip


def latency_percentiles(latencies_us: Sequence[int]) -> dict[str, float | None]:
    if not latencies_us:
        return {"latency_p50_ms": None, "latency_p99_ms": None, "latency_max_ms": None}
    ordered = sorted(latencies_us)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000

    return {"latency_p50_ms": at(0.5), "latency_p99_ms": at(0.99), "latency_max_ms": ordered[-1] / 1000}
