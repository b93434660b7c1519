"""The ``pub0sub`` Spark data source: batch and streaming reads and writes of hub topics.

Register it once per session, then use it like Spark's Kafka source::

    from sdk.spark import Pub0subDataSource
    spark.dataSource.register(Pub0subDataSource)
    df = spark.read.format("pub0sub").option("hub", "127.0.0.1:7420").option("subscribe", "orders").load()

Where code runs (SPARK_NOTES): ``reader()``/``partitions()``/offsets/``commit`` on the driver
(the stream reader in one long-lived Python process per query), ``read()`` and ``write()`` in
executor Python workers on unpickled copies.  So readers and writers hold only plain data
(options, ids); every connection is opened and closed inside the call that needs it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .hubs import topic_bounds
from .options import (
    EARLIEST,
    LATEST,
    DataLossError,
    OptionError,
    ReadOptions,
    TopicBounds,
    WriteOptions,
    limit_offsets,
    parse_columns,
    parse_read_options,
    parse_write_options,
    plan_ranges,
    resolve_position,
)
from .reading import SPARK_DDL, read_range
from .writing import PublishResult, producer_id_for, publish_batches

log = logging.getLogger("pub0sub.spark")

_NO_BOUNDS = TopicBounds(0, 0)

#: SPARK_DDL as a StructType (``StructType.fromDDL`` needs a SparkContext, absent in Python workers).
SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("origin", StringType()),
        StructField("headers", MapType(StringType(), BinaryType())),
    ]
)


class RangePartition(InputPartition):
    """Offsets ``[start, end)`` of one topic, plus everything an executor needs to read them."""

    def __init__(self, topic: str, start: int, end: int, opts: ReadOptions) -> None:
        super().__init__((topic, start, end))
        self.topic = topic
        self.start = start
        self.end = end
        self.hubs = opts.hubs
        self.fail_on_data_loss = opts.fail_on_data_loss
        self.read_timeout = opts.read_timeout
        self.connect_timeout = opts.connect_timeout
        self.access = opts.access
        self.columns = opts.columns

    def __repr__(self) -> str:
        return f"RangePartition({self.topic!r}, [{self.start}, {self.end}))"


def _read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):
        return iter(())  # Spark's stand-in when there is nothing to read
    return read_range(
        partition.hubs,
        partition.topic,
        partition.start,
        partition.end,
        fail_on_data_loss=partition.fail_on_data_loss,
        read_timeout=partition.read_timeout,
        connect_timeout=partition.connect_timeout,
        access=partition.access,
        columns=partition.columns,
    )


def _partitions(opts: ReadOptions, ranges: dict[str, tuple[int, int]]) -> list[RangePartition]:
    planned = plan_ranges(ranges, opts.max_records_per_partition, opts.min_partitions, split=opts.split_topics)
    return [RangePartition(topic, start, end, opts) for topic, start, end in planned]


def schema_of(columns: tuple[str, ...]) -> StructType:
    """The Spark schema of the source's ``columns`` (option ``columns``), in that order."""
    fields = {f.name: f for f in SCHEMA.fields}
    return StructType([fields[c] for c in columns])


def _check_schema(schema: StructType | None, columns: tuple[str, ...]) -> None:
    if schema is None:
        return
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in schema_of(columns).fields]:
        raise OptionError(
            f"the pub0sub source has a fixed schema ({SPARK_DDL}, or the columns of option 'columns'); "
            "do not pass another one"
        )


class Pub0subBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        bounds = topic_bounds(opts)
        ranges: dict[str, tuple[int, int]] = {}
        for topic in opts.subscription.resolve(bounds):
            b = bounds.get(topic, _NO_BOUNDS)
            start = resolve_position(
                opts.starting,
                topic,
                b,
                missing=EARLIEST,
                what="startingOffsets",
                fail_on_data_loss=opts.fail_on_data_loss,
            )
            end = resolve_position(opts.ending, topic, b, missing=LATEST, what="endingOffsets", fail_on_data_loss=False)
            if end < start:
                raise OptionError(f"topic {topic!r}: endingOffsets {end} is before startingOffsets {start}")
            ranges[topic] = (start, end)
        return _partitions(opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(partition)


class Pub0subStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{topic: next offset to read}``, keys sorted (Spark compares them as JSON strings).

    A topic missing from a start offset (found later by ``subscribePattern``) starts at 0: it is
    new, so everything it has is new; if retention already removed its beginning, that is data
    loss and ``failOnDataLoss`` decides, as in Kafka.
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        #: the end fixed by Trigger.AvailableNow
        self._target: dict[str, int] | None = None

    def _bounds(self) -> dict[str, TopicBounds]:
        return topic_bounds(self.opts)

    def _now(self) -> dict[str, int]:
        bounds = self._bounds()
        return {t: bounds.get(t, _NO_BOUNDS).next for t in self.opts.subscription.resolve(bounds)}

    def initialOffset(self) -> dict:
        opts = self.opts
        bounds = self._bounds()
        return {
            t: resolve_position(
                opts.starting,
                t,
                bounds.get(t, _NO_BOUNDS),
                missing=EARLIEST,
                what="startingOffsets",
                fail_on_data_loss=opts.fail_on_data_loss,
            )
            for t in opts.subscription.resolve(bounds)
        }

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._now()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = dict(self._target) if self._target is not None else self._now()
        for topic, offset in start.items():
            have = latest.get(topic)
            if have is None:
                latest[topic] = offset  # not listed by the hub right now (e.g. restarting): nothing new
            elif have < offset:
                message = (
                    f"pub0sub: topic {topic!r} ends at offset {have} on the hub, but this query already read up "
                    f"to {offset}: the hub's log was replaced or truncated (a new data directory?)"
                )
                if self.opts.fail_on_data_loss:
                    raise DataLossError(message + "; set failOnDataLoss=false to wait for new offsets instead")
                log.warning("%s; waiting until it passes %d", message, offset)
                latest[topic] = offset
        base = {t: int(start.get(t, 0)) for t in sorted(latest)}
        if isinstance(limit, ReadMaxRows):
            return limit_offsets(base, latest, limit.max_rows)
        return {t: latest[t] for t in sorted(latest)}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = {t: (int(start.get(t, 0)), int(e)) for t, e in end.items() if int(e) > int(start.get(t, 0))}
        return _partitions(self.opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(partition)

    def commit(self, end: dict) -> None:
        # Nothing to release: positions live in Spark's checkpoint, not in the hub.
        log.debug("pub0sub stream committed %s", end)


@dataclass
class Pub0subCommitMessage(WriterCommitMessage):
    """One write task's outcome, carried to ``commit`` on the driver."""

    result: PublishResult = field(default_factory=PublishResult)


@dataclass
class WriteSummary:
    """What the driver's ``commit`` saw last (rows published, frames, tasks whose last frame was a replay)."""

    rows: int = 0
    frames: int = 0
    tasks: int = 0
    replayed_tasks: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, messages: Sequence[WriterCommitMessage | None]) -> WriteSummary:
        summary = cls()
        for m in messages:
            if isinstance(m, Pub0subCommitMessage):
                r = m.result
                summary.tasks += 1
                summary.rows += r.rows
                summary.frames += r.frames
                summary.replayed_tasks += int(r.replayed)
                for topic, n in r.per_topic.items():
                    summary.per_topic[topic] = summary.per_topic.get(topic, 0) + n
        return summary


def _check_write_schema(schema: StructType, opts: WriteOptions) -> None:
    types = {f.name: f.dataType for f in schema.fields}
    allowed = (BinaryType(), StringType())
    if "value" not in types:
        raise OptionError(f"pub0sub write: the DataFrame needs a 'value' column (BINARY or STRING), got {list(types)}")
    for name in ("value", "key"):
        if name in types and types[name] not in allowed:
            raise OptionError(
                f"pub0sub write: column '{name}' must be BINARY or STRING, not {types[name].simpleString()} "
                f"(cast it, e.g. col('{name}').cast('string'))"
            )
    if "headers" in types and types["headers"] not in (MapType(StringType(), BinaryType()),
                                                      MapType(StringType(), StringType())):  # fmt: skip
        raise OptionError(
            f"pub0sub write: column 'headers' must be MAP<STRING, BINARY> or MAP<STRING, STRING>, "
            f"not {types['headers'].simpleString()}"
        )
    if opts.topic is None:
        if "topic" not in types:
            raise OptionError("pub0sub write: give option 'topic' or a 'topic' column (STRING)")
        if types["topic"] != StringType():
            raise OptionError(f"pub0sub write: column 'topic' must be STRING, not {types['topic'].simpleString()}")


class _Publisher:
    """Shared by the batch and the streaming writer: publish one task's rows under ``producer_parts``."""

    opts: WriteOptions

    def _publish(self, batches: Iterator[pa.RecordBatch], producer_parts: tuple[Any, ...]) -> Pub0subCommitMessage:
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        opts = self.opts
        pid = producer_id_for(*producer_parts, partition) if opts.idempotent else None
        result = publish_batches(
            batches,
            topic_option=opts.topic,
            hubs=opts.hubs,
            producer_id=pid,
            partition=partition,
            connect_timeout=opts.connect_timeout,
            flush_bytes=opts.flush_bytes,
            access=opts.access,
        )
        return Pub0subCommitMessage(result)


class Pub0subBatchWriter(_Publisher, DataSourceArrowWriter):
    """Created once on the driver and pickled to every task: ``write_id`` is shared by all
    tasks of the job and by their retries."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.write_id = opts.write_id or f"job-{uuid.uuid4().hex}"
        self.summary: WriteSummary | None = None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self._publish(iterator, ("batch", self.write_id))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.summary = WriteSummary.of(messages)
        log.info("pub0sub write %s committed: %s", self.write_id, self.summary)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Published frames cannot be taken back; a rerun with the same writeId completes them without duplicates.
        log.warning("pub0sub write %s aborted after %s", self.write_id, WriteSummary.of(messages))


class Pub0subStreamWriter(_Publisher, DataSourceStreamArrowWriter):
    """Producer ids from (query id, batch id, partition): the same after a restart from the
    checkpoint, so a replayed micro-batch is dropped by the hub instead of stored twice."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        ctx = TaskContext.get()
        query = self.opts.write_id or (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None)
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        if self.opts.idempotent and (query is None or batch is None):
            raise RuntimeError("pub0sub stream write: Spark gave no query id / batch id to derive producer ids from")
        return self._publish(iterator, ("stream", query, batch))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("pub0sub stream batch %d committed: %s", batchId, WriteSummary.of(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("pub0sub stream batch %d aborted after %s", batchId, WriteSummary.of(messages))


class Pub0subDataSource(DataSource):
    """``spark.dataSource.register(Pub0subDataSource)``, then ``format("pub0sub")``.

    Options (case-insensitive) and guarantees: docs/spark.md, "Data source".
    """

    @classmethod
    def name(cls) -> str:
        return "pub0sub"

    def schema(self) -> StructType:
        return schema_of(parse_columns(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(self.options, streaming=False)
        _check_schema(schema, opts.columns)
        return Pub0subBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = parse_read_options(self.options, streaming=True)
        _check_schema(schema, opts.columns)
        return Pub0subStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        opts = self._write_options(schema, overwrite)
        return Pub0subBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        opts = self._write_options(schema, overwrite)
        return Pub0subStreamWriter(opts)

    def _write_options(self, schema: StructType, overwrite: bool) -> WriteOptions:
        if overwrite:
            raise OptionError("pub0sub topics are append-only logs: use mode('append') (or outputMode('append'))")
        opts = parse_write_options(self.options)
        _check_write_schema(schema, opts)
        return opts
