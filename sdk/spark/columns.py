"""Record regions -> Arrow columns with numpy: no Python object per record.

Shared by the data source's executors (:mod:`sdk.spark.reading`, DELIVERed batches) and the
analytics job (:mod:`sdk.spark.analyze.decode`, LOG_BATCHes on disk).  A record region is
``[u16 key_len][u32 data_len][key][data]`` repeated; every region here was already proven by
``wire``'s decoder to hold exactly ``count`` records, so the arithmetic below needs no checks.

The common case, every record of a batch the same size, is one reshape: keys and values are
column slices of an ``(count, size)`` byte matrix.  Batches of varied sizes need the record
lengths first (one walk through the region by :func:`wire.iter_records`), then one gather.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

import wire

_RECORD_HEADER = struct.Struct(">HI")


def u64_as_i64(values: list[int]) -> np.ndarray:
    """Spark has no unsigned long: a u64 above 2**63 keeps its 64 bits as a negative number."""
    return np.array(values, dtype=np.uint64).view(np.int64)


def strings(values: list[str], indices: np.ndarray) -> pa.Array:
    """``values[indices]`` as a plain string array.

    Decoding a dictionary array is ~30x faster than ``pc.take`` on strings for a million rows,
    and Spark wants plain strings, not dictionaries.
    """
    return pa.DictionaryArray.from_arrays(pa.array(indices), pa.array(values, pa.string())).cast(pa.string())


#: A set's headers as a column: names to values (a text value as its UTF-8 bytes), null for none.
HEADERS_TYPE = pa.map_(pa.string(), pa.binary())


class HeaderColumn:
    """One headers value per batch, remembered by its block; expanded per record on :meth:`take`.

    A publish's headers repeat across its batches: each distinct block becomes one map value,
    and the column is a ``take`` of those, not a Python object per record.
    """

    def __init__(self) -> None:
        self._blocks: dict[bytes, int] = {}
        self.per_batch: list[int] = []

    def add(self, block: bytes) -> None:
        self.per_batch.append(self._blocks.setdefault(block, len(self._blocks)) if block else -1)

    def take(self, counts: np.ndarray, total: int) -> pa.Array:
        """The column for batches of ``counts`` records (then start afresh)."""
        per_batch, self.per_batch = self.per_batch, []
        if not self._blocks:
            return pa.nulls(total, HEADERS_TYPE)
        maps = pa.array(
            [[(k, v.encode() if isinstance(v, str) else v) for k, v in wire.decode_headers(b).items()]
             for b in self._blocks],
            HEADERS_TYPE,
        )  # fmt: skip
        self._blocks = {}
        index = np.repeat(np.array(per_batch, dtype=np.int64), counts)
        return maps.take(pa.array(index, mask=index < 0))


def record_lengths(records: bytes, count: int) -> tuple[int, int] | tuple[np.ndarray, np.ndarray]:
    """``(key_len, data_len)`` when every record has the same lengths, else one array of each.

    The uniform case is confirmed by comparing every record's 6 header bytes with the first.
    """
    key_len, data_len = _RECORD_HEADER.unpack_from(records, 0)
    size = 6 + key_len + data_len
    if size * count == len(records):
        headers = np.frombuffer(records, dtype=np.uint8).reshape(count, size)[:, :6]
        if count == 1 or bool((headers == headers[0]).all()):
            return key_len, data_len
    keys: list[int] = []
    data: list[int] = []
    for key, value in wire.iter_records(records):
        keys.append(len(key))
        data.append(len(value))
    return np.array(keys, dtype=np.int64), np.array(data, dtype=np.int64)


def _binary(count: int, lengths: np.ndarray, data: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), count, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)])


def key_value_arrays(records: bytes, count: int) -> tuple[pa.Array, pa.Array]:
    """The keys (null where a record has none) and the values of one region, as binary arrays."""
    raw = np.frombuffer(records, dtype=np.uint8)
    lengths = record_lengths(records, count)
    if not isinstance(lengths[0], np.ndarray):
        key_len, data_len = int(lengths[0]), int(lengths[1])
        matrix = raw.reshape(count, 6 + key_len + data_len)
        values = _binary(count, np.full(count, data_len), np.ascontiguousarray(matrix[:, 6 + key_len :]).ravel(), None)
        if key_len == 0:
            return pa.nulls(count, pa.binary()), values
        keys = np.ascontiguousarray(matrix[:, 6 : 6 + key_len]).ravel()
        return _binary(count, np.full(count, key_len), keys, None), values
    key_lens, data_lens = lengths[0], np.asarray(lengths[1])
    sizes = 6 + key_lens + data_lens
    starts = np.cumsum(sizes) - sizes  # first byte of each record
    values = _binary(count, data_lens, _gather(raw, starts + 6 + key_lens, data_lens), None)
    has_key = key_lens > 0
    keys = _binary(count, key_lens, _gather(raw, starts + 6, key_lens), None if has_key.all() else has_key)
    return keys, values


def _gather(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The bytes ``raw[starts[i] : starts[i] + lengths[i]]`` of every ``i``, back to back."""
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.uint8)
    # For output byte j of piece i: starts[i] + (j - where piece i begins in the output).
    index = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)
    return raw[index]
