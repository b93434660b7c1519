"""Log segment bytes -> Arrow record batches: the function the Spark job maps over files.

Every frame goes through :class:`wire.FrameDecoder`, the decoder the hub uses on disk and on the
network, so every LOG_BATCH checksum is verified and every record region is proven to tile
exactly before a row comes out of it.  What happens per *record* is then only arithmetic:
a batch's offsets, origin sequences and times follow from its header, so the columns are built
with numpy per batch (``np.repeat``/``arange``) rather than one Python object per record.

Problems never become message rows.  They, and one summary per file, travel as *meta rows*: rows
whose ``meta`` column holds a JSON object (``kind`` = ``file``, ``checksum``, ``bad_batch``,
``torn_tail`` or ``unreadable``) and whose other columns are null.  Message rows have
``meta`` = null; the job splits the two.

Pure Python + numpy + pyarrow + wire: unit-testable without Spark.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa

import wire
from wire.limits import DEFAULT_MAX_DECODE_BODY

from ..columns import HEADERS_TYPE, HeaderColumn, record_lengths, strings, u64_as_i64
from .inputs import hex_id, read_hub_id

#: Output columns of :func:`decode_segment` (and of the mapInArrow stage), in order.
SCHEMA = pa.schema(
    [
        ("hub_id", pa.string()),
        ("topic", pa.string()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("append_ts", pa.int64()),
        ("latency_us", pa.int64()),
        ("origin", pa.string()),
        ("origin_seq", pa.int64()),
        ("key_len", pa.int32()),
        ("data_len", pa.int64()),
        ("producer_id", pa.int64()),
        ("headers", HEADERS_TYPE),
        ("meta", pa.string()),
    ]
)
#: The same schema as a Spark DDL string.
SPARK_DDL = (
    "hub_id string, topic string, offset bigint, timestamp bigint, append_ts bigint, latency_us bigint, "
    "origin string, origin_seq bigint, key_len int, data_len bigint, producer_id bigint, "
    "headers map<string,binary>, meta string"
)
MESSAGE_COLUMNS = [name for name in SCHEMA.names if name != "meta"]

#: Rows per output batch: bounds the memory one file's columns take at once.
MAX_ROWS_PER_BATCH = 1 << 18

_LIMITS = wire.Limits(max_body=DEFAULT_MAX_DECODE_BODY)


class _Columns:
    """Per-batch facts gathered while decoding; expanded to per-record columns on :meth:`take`."""

    def __init__(self, hub_id: str) -> None:
        self.hub_id = hub_id
        self.rows = 0
        self._topics: dict[str, int] = {}
        self._origins: dict[int, int] = {}
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.headers = HeaderColumn()
        self.counts: list[int] = []
        self.base: list[int] = []
        self.ts: list[int] = []
        self.append_ts: list[int] = []
        self.origin: list[int] = []
        self.origin_seq: list[int] = []
        self.producer: list[int] = []
        self.topic: list[int] = []
        self.key_len: list[int] = []
        self.data_len: list[int] = []
        #: (batch index, key lengths, data lengths) of batches with varied record sizes
        self.varied: list[tuple[int, np.ndarray, np.ndarray]] = []

    def add(self, frame: wire.LogBatch | wire.LogBatchHeaders) -> None:
        batch = frame.batch
        index = len(self.counts)
        self.headers.add(frame.headers)
        self.counts.append(batch.count)
        self.base.append(batch.base_offset)
        self.ts.append(batch.timestamp)
        self.append_ts.append(frame.append_ts)
        self.origin.append(self._origins.setdefault(batch.origin, len(self._origins)))
        self.origin_seq.append(batch.origin_seq)
        self.producer.append(frame.producer_id)
        self.topic.append(self._topics.setdefault(batch.topic, len(self._topics)))
        lengths = record_lengths(batch.records, batch.count)
        if isinstance(lengths[0], np.ndarray):
            self.key_len.append(0)
            self.data_len.append(0)
            self.varied.append((index, lengths[0], lengths[1]))
        else:
            self.key_len.append(int(lengths[0]))
            self.data_len.append(int(lengths[1]))
        self.rows += batch.count

    def take(self) -> pa.RecordBatch | None:
        """The rows gathered so far as one Arrow batch (then start afresh)."""
        if not self.counts:
            return None
        counts = np.array(self.counts, dtype=np.int64)
        total = int(counts.sum())
        starts = np.cumsum(counts) - counts
        # Position of each record within its batch: 0, 1, ... count-1, 0, 1, ...
        within = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)

        def per_record(values: list[int]) -> np.ndarray:
            return np.repeat(u64_as_i64(values), counts)

        timestamp = per_record(self.ts)
        append_ts = per_record(self.append_ts)
        key_len = np.repeat(np.array(self.key_len, dtype=np.int32), counts)
        data_len = np.repeat(np.array(self.data_len, dtype=np.int64), counts)
        for index, keys, data in self.varied:
            start = int(starts[index])
            key_len[start : start + len(keys)] = keys
            data_len[start : start + len(data)] = data
        columns = [
            strings([self.hub_id], np.zeros(total, dtype=np.int32)),
            strings(list(self._topics), np.repeat(np.array(self.topic, dtype=np.int32), counts)),
            pa.array(per_record(self.base) + within),
            pa.array(timestamp),
            pa.array(append_ts),
            pa.array(append_ts - timestamp),
            strings([hex_id(o) for o in self._origins], np.repeat(np.array(self.origin, dtype=np.int32), counts)),
            pa.array(per_record(self.origin_seq) + within),
            pa.array(key_len),
            pa.array(data_len),
            pa.array(per_record(self.producer)),
            self.headers.take(counts, total),
            pa.nulls(total, pa.string()),
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def meta_batch(hub_id: str, metas: list[dict[str, Any]]) -> pa.RecordBatch:
    """Meta rows (problems, file summaries): JSON in ``meta``, the other columns null."""
    n = len(metas)
    columns = [pa.array([hub_id] * n, pa.string()), pa.array([m.get("topic") for m in metas], pa.string())]
    columns += [pa.nulls(n, field.type) for field in SCHEMA][2:-1]
    columns.append(pa.array([json.dumps(m, sort_keys=True) for m in metas], pa.string()))
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def decode_segment(
    data: bytes | memoryview, *, path: str, hub_id: str, max_rows: int = MAX_ROWS_PER_BATCH
) -> Iterator[pa.RecordBatch]:
    """Decode one segment file's bytes into message batches, then one batch of meta rows.

    Like hub recovery: a batch that fails its checksum (or its body check) while its frame
    boundary is intact is reported and skipped, and decoding resumes with a fresh decoder at the
    next frame; a partial last frame is a torn tail; a frame header that makes no sense ends the
    file (the rest is ``unreadable``).  Unlike recovery, nothing is ever modified.
    """
    view = memoryview(data)
    size = len(view)
    cols = _Columns(hub_id)
    metas: list[dict[str, Any]] = []
    summary: dict[str, Any] = {
        "kind": "file", "path": path, "bytes": size, "batches": 0, "records": 0, "topic": None, "base_offset": None,
    }
    decoder = wire.FrameDecoder(limits=_LIMITS, accept=wire.LOG_OPCODES)
    decoder.feed(bytes(view))
    while True:
        try:
            for frame in decoder:
                if isinstance(frame, wire.LogBatch | wire.LogBatchHeaders):
                    cols.add(frame)
                    summary["batches"] += 1
                    summary["records"] += frame.batch.count
                    if summary["topic"] is None:
                        summary["topic"] = frame.batch.topic
                    if cols.rows >= max_rows:
                        out = cols.take()
                        if out is not None:
                            yield out
                elif isinstance(frame, wire.SegmentHeader):
                    if decoder.frame_offset != 0:
                        metas.append(_problem("bad_batch", path, decoder.frame_offset, decoder.frame_length + 5,
                                              "a second SEGMENT_HEADER inside the file", "UNEXPECTED_FRAME"))
                    summary["topic"] = frame.topic
                    summary["base_offset"] = frame.base_offset
            decoder.close()
            break
        except wire.ProtocolError as exc:
            start = decoder.offset  # the failing frame's first byte: the decoder never consumed it
            if exc.code == wire.ErrorCode.TRUNCATED:
                metas.append(_problem("torn_tail", path, start, size - start, exc.reason, exc.code.name))
                break
            if exc.offset is not None and exc.offset >= start + wire.HEADER_SIZE:
                # The header passed its checks, so the frame's length (and the next frame) is known.
                end = start + wire.HEADER_SIZE + wire.HEADER.unpack_from(view, start)[1]
                kind = "checksum" if exc.code == wire.ErrorCode.CHECKSUM_MISMATCH else "bad_batch"
                metas.append(_problem(kind, path, start, end - start, exc.reason, exc.code.name))
                decoder = wire.FrameDecoder(limits=_LIMITS, accept=wire.LOG_OPCODES, start_offset=end)
                decoder.feed(bytes(view[end:]))
                continue
            metas.append(_problem("unreadable", path, start, size - start, exc.reason, exc.code.name))
            break
    if summary["base_offset"] is None and summary["batches"]:
        metas.append(_problem("bad_batch", path, 0, 0, "the file does not start with a SEGMENT_HEADER",
                              "UNEXPECTED_FRAME"))
    out = cols.take()
    if out is not None:
        yield out
    for meta in metas:
        meta.setdefault("topic", summary["topic"])
    summary["problems"] = len(metas)
    yield meta_batch(hub_id, [summary, *metas])


def _problem(kind: str, path: str, position: int, length: int, reason: str, code: str) -> dict[str, Any]:
    return {"kind": kind, "path": path, "position": position, "length": length, "reason": reason, "code": code}


# -- hub ids from paths -------------------------------------------------------------------------

def local_path(uri: str) -> str:
    """``file:/a/b`` (as Spark names files) -> ``/a/b``; other schemes are kept whole."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return uri


def data_dir_of(path: str) -> str:
    """``DATA`` of ``DATA/topics/<dir>/<segment>.log`` (or the file's grandparent otherwise)."""
    p = Path(path)
    if len(p.parents) >= 3 and p.parents[1].name == "topics":
        return str(p.parents[2])
    return str(p.parent.parent)


def hub_id_for(path: str, hub_ids: Mapping[str, str]) -> str:
    """The hub id of the data dir holding ``path``: from the driver's table, else from the path itself."""
    directory = data_dir_of(local_path(path))  # idempotent on a path that is already local
    known = hub_ids.get(directory)
    return known if known is not None else read_hub_id(Path(directory))


# -- the mapInArrow function --------------------------------------------------------------------

def make_file_decoder(
    hub_ids: Mapping[str, str], max_rows: int = MAX_ROWS_PER_BATCH
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function for ``binaryFile`` rows (``path``, ``content``) -> :data:`SCHEMA` batches.

    ``hub_ids`` maps each data directory (absolute local path) to its hub id; the driver reads the
    ``hub-id`` files once, so executors need no access to anything but the segment bytes.
    """
    table = dict(hub_ids)

    def decode_files(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            paths = batch.column("path")
            contents = batch.column("content")
            for i in range(batch.num_rows):
                path = local_path(paths[i].as_py())
                content = contents[i]
                # as_buffer() is zero-copy over the Arrow memory; as_py() would copy every file.
                data = memoryview(content.as_buffer()) if content.is_valid else b""
                yield from decode_segment(data, path=path, hub_id=hub_id_for(path, table), max_rows=max_rows)

    return decode_files
