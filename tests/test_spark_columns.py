"""Record regions -> Arrow key/value columns (sdk.spark.columns), against wire's own record iteration."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from hypothesis import given
from hypothesis import strategies as st

import wire
from sdk.spark.columns import key_value_arrays, record_lengths
from wire.records import iter_records

records_strategy = st.lists(st.tuples(st.binary(max_size=12), st.binary(max_size=40)), min_size=1, max_size=60)


def region(records: list[tuple[bytes, bytes]]) -> bytes:
    return wire.MessageSet.build(("t",), records).records


@given(records_strategy)
def test_columns_equal_wire_records(records: list[tuple[bytes, bytes]]) -> None:
    raw = region(records)
    keys, values = key_value_arrays(raw, len(records))
    want = list(iter_records(raw))
    assert values.to_pylist() == [d for _, d in want]
    assert keys.to_pylist() == [k or None for k, _ in want]  # no key: NULL, as the SDK gives it


@pytest.mark.parametrize("key", [b"", b"k1"])
def test_uniform_records_take_the_reshape_path(key: bytes) -> None:
    records = [(key, b"%06d" % i) for i in range(1000)]
    raw = region(records)
    assert record_lengths(raw, 1000) == (len(key), 6)
    keys, values = key_value_arrays(raw, 1000)
    assert values.to_pylist() == [d for _, d in records]
    assert keys.null_count == (1000 if not key else 0)
    # The same record size with another split between key and data: the header check sees it.
    other = (key + b"x", b"12345")
    mixed = [*records[:-1], other]
    raw = region(mixed)
    assert record_lengths(raw, 1000)[0] is not None and not isinstance(record_lengths(raw, 1000)[0], int)
    keys, values = key_value_arrays(raw, 1000)
    assert values.to_pylist()[-2:] == [records[-2][1], b"12345"]
    assert keys.to_pylist()[-1] == key + b"x"
