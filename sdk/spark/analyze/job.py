"""The Spark pipeline: segment files -> ``messages`` -> ``topics``, ``rates``, ``latency``.

One pass decodes: ``binaryFile`` hands each segment's bytes to :mod:`sdk.spark.analyze.decode` in the
executors (``mapInArrow``), and the decoded rows are written once as the ``messages`` table.  The
per-file summaries and the problems (checksum failures, torn tails) ride along in the same rows
and are gathered by an ``Observation`` on that same pass, so nothing is decoded twice.  The
aggregates are then read from the ``messages`` Parquet, which is columnar and cheap to scan.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..session import fit_shuffle_partitions
from .decode import MESSAGE_COLUMNS, SPARK_DDL, make_file_decoder
from .inputs import HubDir, Segments
from .progress import Progress

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

#: Percentiles of the ``latency`` table: (column name, fraction).
PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999))
#: Latency histogram resolution: bins per factor of 10 (log scale; latencies span µs to seconds).
BINS_PER_DECADE = 10


@dataclass
class Result:
    out: Path | None
    files: int
    bytes: int
    rows: int
    file_summaries: list[dict[str, Any]]
    problems: list[dict[str, Any]]
    timings: dict[str, float]
    master: str
    hubs: list[HubDir]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def decode_rate(self) -> float:
        seconds = self.timings.get("decode", 0.0)
        return self.rows / seconds if seconds > 0 else 0.0


def _split_bytes(total: int, parallelism: int) -> int:
    """Bytes per input partition: enough partitions to keep every core busy, none above 128 MiB.

    A segment file is never split (it is decoded from its first byte), so with the default
    128 MiB a few 64 MiB segments would pack two to a task and leave cores idle.
    """
    return max(8 << 20, min(128 << 20, total // max(1, 2 * parallelism)))


def decoded_frame(spark: SparkSession, hubs: Sequence[HubDir]) -> DataFrame:
    """All segment files of ``hubs`` decoded: :data:`~sdk.spark.analyze.decode.SCHEMA` rows, meta rows included."""
    files = (
        spark.read.format("binaryFile")
        .option("pathGlobFilter", "*.log")
        .option("recursiveFileLookup", "true")
        .load([str(hub.path / "topics") for hub in hubs])
        .select("path", "content")
    )
    table = {str(hub.path): hub.hub_id for hub in hubs}
    return files.mapInArrow(make_file_decoder(table), SPARK_DDL)


def run(
    spark: SparkSession,
    segments: Segments,
    out: Path | None,
    *,
    progress: Progress,
) -> Result:
    """Decode every segment, write the tables under ``out`` (``None``: verify only), return the findings."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    timings: dict[str, float] = {}
    started = time.perf_counter()
    parallelism = spark.sparkContext.defaultParallelism
    previous = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(_split_bytes(segments.bytes, parallelism)))
    try:
        observation = Observation("pub0sub-decode")
        decoded = decoded_frame(spark, segments.hubs).observe(
            observation,
            F.count(F.when(F.col("meta").isNull(), 1)).alias("rows"),
            F.collect_list("meta").alias("meta"),  # nulls (message rows) are skipped
        )
        messages = decoded.filter(F.col("meta").isNull()).select(*MESSAGE_COLUMNS)
        label = "decoding segments" + ("" if out is None else " and writing messages")
        with progress.spark_stage(spark, label):
            if out is None:
                messages.write.format("noop").mode("overwrite").save()
            else:
                messages.write.mode("overwrite").parquet(str(out / "messages"))
    finally:
        if previous is None:
            spark.conf.unset("spark.sql.files.maxPartitionBytes")
        else:
            spark.conf.set("spark.sql.files.maxPartitionBytes", previous)
    timings["decode"] = time.perf_counter() - started
    observed = observation.get
    rows = int(observed["rows"])
    metas = [json.loads(m) for m in observed["meta"]]
    summaries = sorted((m for m in metas if m["kind"] == "file"), key=lambda m: m["path"])
    problems = sorted((m for m in metas if m["kind"] != "file"), key=lambda m: (m["path"], m["position"]))
    result = Result(out, len(summaries), segments.bytes, rows, summaries, problems, timings,
                    spark.sparkContext.master or "", list(segments.hubs))
    progress.step(
        f"decoded {rows:,} records from {len(summaries)} files in {timings['decode']:.1f} s "
        f"({result.decode_rate:,.0f} records/s)"
    )
    if problems:
        progress.warn(_problem_summary(problems))
    if out is None:
        return result

    started = time.perf_counter()
    shuffle = fit_shuffle_partitions(spark)  # the decoding job above registered the executors: their cores count now
    with progress.spark_stage(spark, "aggregating topics, rates and latency"):
        result.tables = aggregate(spark, out)
    timings["aggregate"] = time.perf_counter() - started
    progress.step(f"aggregated in {timings['aggregate']:.1f} s ({shuffle} shuffle partitions)")
    return result


def _problem_summary(problems: Sequence[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for p in problems:
        counts[p["kind"]] = counts.get(p["kind"], 0) + 1
    names = {"checksum": "corrupted batch (checksum)", "bad_batch": "malformed batch", "torn_tail": "torn tail",
             "unreadable": "unreadable file tail"}
    parts = [f"{n} {names.get(kind, kind)}{'' if n == 1 else 's'}" for kind, n in sorted(counts.items())]
    return "found " + ", ".join(parts) + ": listed in the report, never decoded into rows"


def aggregate(spark: SparkSession, out: Path) -> dict[str, pd.DataFrame]:
    """Write ``topics``, ``rates``, ``latency`` and ``latency_histogram`` from ``out/messages``.

    Every record of a LOG_BATCH shares its batch's timestamp and append time, hence its latency.
    So one pass groups the messages by (hub, topic, second, latency, forwarded or not): at most
    one row per batch, usually ~1000x fewer rows than messages.  All four tables come from that
    small cached table, and the latency percentiles are exact (``percentile`` weighted by the
    row counts).

    Latency is only measured on forwarded copies (origin is another hub): on its origin hub a
    batch is appended with its own timestamp, so its latency there is 0 by construction, and
    counting those zeros would put half a cluster's "latencies" at 0 µs.
    """
    from pyspark.sql import functions as F

    msgs = spark.read.parquet(str(out / "messages"))
    base = (
        msgs.groupBy(
            "hub_id",
            "topic",
            F.floor(F.col("timestamp") / 1_000_000).alias("second"),
            "latency_us",
            (F.col("origin") != F.col("hub_id")).alias("forwarded_copy"),
        )
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.count("headers").alias("with_headers"),
            F.sum(F.col("key_len") + F.col("data_len")).alias("bytes"),
            F.min("timestamp").alias("first_timestamp"),
            F.max("timestamp").alias("last_timestamp"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
        )
        .cache()
    )
    try:
        return _write_aggregates(base, out)
    finally:
        base.unpersist()


def _write_aggregates(base: DataFrame, out: Path) -> dict[str, pd.DataFrame]:
    from pyspark.sql import functions as F

    n = F.col("n")
    latency_sum = F.sum(F.col("latency_us") * n)
    forwarded_n = F.when(F.col("forwarded_copy"), n).otherwise(0)
    duration = (F.col("last_timestamp") - F.col("first_timestamp")) / 1e6
    topics = (
        base.groupBy("hub_id", "topic")
        .agg(
            F.sum(n).alias("count"),
            F.sum("bytes").alias("bytes"),
            F.min("first_offset").alias("first_offset"),
            F.max("last_offset").alias("last_offset"),
            F.min("first_timestamp").alias("first_timestamp"),
            F.max("last_timestamp").alias("last_timestamp"),
            F.sum(forwarded_n).alias("forwarded"),
            F.sum("with_headers").alias("with_headers"),
            # Over forwarded copies only (null without any): see aggregate().
            F.try_divide(F.sum(F.col("latency_us") * forwarded_n), F.sum(forwarded_n)).alias("mean_latency_us"),
        )
        .withColumn("duration_s", duration)
        # One instant (a single batch) has no rate: null rather than infinity.
        .withColumn("rate", F.when(duration > 0, F.col("count") / duration))
        .withColumn("bytes_per_s", F.when(duration > 0, F.col("bytes") / duration))
        .withColumn("first_time", F.timestamp_micros("first_timestamp"))
        .withColumn("last_time", F.timestamp_micros("last_timestamp"))
    )
    rates = (
        base.groupBy("hub_id", "topic", "second")
        .agg(F.sum(n).alias("count"), F.sum("bytes").alias("bytes"))
        .withColumn("time", F.timestamp_seconds("second"))
    )
    fractions = [q for _, q in PERCENTILES]
    copies = base.filter(F.col("forwarded_copy"))
    latency = (
        # rollup: per (topic, hub), per topic over all hubs (hub_id null), overall (both null)
        copies.rollup("topic", "hub_id")
        .agg(
            F.sum(n).alias("count"),
            F.min("latency_us").alias("min"),
            (latency_sum / F.sum(n)).alias("mean"),
            F.percentile("latency_us", fractions, n).alias("q"),
            F.max("latency_us").alias("max"),
            F.sum(F.when(F.col("latency_us") < 0, n).otherwise(0)).alias("negative"),
        )
        .select("topic", "hub_id", "count", "min", "mean",
                *(F.col("q")[i].alias(name) for i, (name, _) in enumerate(PERCENTILES)), "max", "negative")
    )
    # Bin k holds latencies in [10**(k/B), 10**((k+1)/B)) µs; bin 0 also holds anything below 1 µs
    # (clock skew between hubs can make a forwarded message's latency negative).
    bin_index = F.floor(F.log10(F.greatest(F.col("latency_us"), F.lit(1)).cast("double")) * BINS_PER_DECADE)
    histogram = (
        copies.groupBy("topic", bin_index.cast("int").alias("bin"))
        .agg(F.sum(n).alias("count"))
        .withColumn("lower_us", F.pow(F.lit(10.0), F.col("bin") / BINS_PER_DECADE))
        .withColumn("upper_us", F.pow(F.lit(10.0), (F.col("bin") + 1) / BINS_PER_DECADE))
    )
    orders = {
        "topics": [F.col("hub_id"), F.col("topic")],
        "rates": [F.col("hub_id"), F.col("topic"), F.col("second")],
        "latency": [F.col("topic").asc_nulls_last(), F.col("hub_id").asc_nulls_first()],
        "latency_histogram": [F.col("topic"), F.col("bin")],
    }
    tables: dict[str, pd.DataFrame] = {}
    for name, frame in (("topics", topics), ("rates", rates), ("latency", latency), ("latency_histogram", histogram)):
        # Small results: one sorted file each (sorting within the one partition needs no extra
        # sampling job, unlike orderBy), read back locally for the report instead of recomputed.
        frame.coalesce(1).sortWithinPartitions(*orders[name]).write.mode("overwrite").parquet(str(out / name))
        tables[name] = _read_local(out / name)
    return tables


def _read_local(path: Path) -> pd.DataFrame:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pandas()
