"""Jepsen-style operation history and the checker that judges it.

Clients log every publish as ``invoke``, then exactly one completion:
``ok`` (acknowledged), ``fail`` (known not to have happened) or ``unknown``
(a timeout or a lost connection: it may or may not have happened -- never
``fail``).  A retry is a new operation carrying the same values.  After the
faults heal, a reader reads every topic from ``earliest``; :func:`check`
compares what was read with the history and counts:

* ``lost``: values of an ``ok`` operation that were never read;
* ``duplicated``: extra copies of a value in a topic (each value is unique);
* ``reordered``: values read out of publish order, per (publisher, topic);
* ``offset_skips`` / ``offset_backwards``: reads whose offsets are not dense
  and increasing from the first expected offset (0 unless told otherwise);
* ``unexpected``: values never published, or only by operations that ``fail``-ed;
* ``unknown_read`` / ``unknown_missing``: values of ``unknown``-only operations
  that were / were not read (information, not errors).

Values are opaque hashables (bytes in the tests); they must be unique per
history, and each publisher's values on a topic are logged in publish order.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

INVOKE, OK, FAIL, UNKNOWN = "invoke", "ok", "fail", "unknown"
COMPLETIONS = (OK, FAIL, UNKNOWN)


@dataclass
class Op:
    op_id: int
    process: str
    topic: str
    values: tuple[Hashable, ...]
    invoked_at: float
    status: str = INVOKE
    completed_at: float | None = None
    note: str = ""


class History:
    """A thread-safe operation log."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._lock = threading.Lock()
        #: (process, topic) -> values in the order they were first invoked
        self.publish_order: dict[tuple[str, str], list[Hashable]] = {}
        self._seen: set[Hashable] = set()

    def invoke(self, process: str, topic: str, values: Iterable[Hashable]) -> Op:
        values = tuple(values)
        with self._lock:
            op = Op(len(self.ops), process, topic, values, time.monotonic())
            self.ops.append(op)
            order = self.publish_order.setdefault((process, topic), [])
            for v in values:
                if v not in self._seen:  # a retry keeps the value's original place
                    self._seen.add(v)
                    order.append(v)
        return op

    def complete(self, op: Op, status: str, note: str = "") -> None:
        if status not in COMPLETIONS:
            raise ValueError(f"completion must be one of {COMPLETIONS}, got {status!r}")
        with self._lock:
            if op.status != INVOKE:
                raise ValueError(f"operation {op.op_id} completed twice ({op.status}, then {status})")
            op.status = status
            op.completed_at = time.monotonic()
            op.note = note

    def counts(self) -> Counter[str]:
        return Counter(op.status for op in self.ops)


@dataclass
class CheckResult:
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    offset_skips: int = 0
    offset_backwards: int = 0
    unexpected: int = 0
    unknown_read: int = 0
    unknown_missing: int = 0
    acknowledged: int = 0
    read: int = 0
    details: list[str] = field(default_factory=list)

    @property
    def anomalies(self) -> dict[str, int]:
        return {
            "lost": self.lost,
            "duplicated": self.duplicated,
            "reordered": self.reordered,
            "offset_skips": self.offset_skips,
            "offset_backwards": self.offset_backwards,
            "unexpected": self.unexpected,
        }

    @property
    def valid(self) -> bool:
        return not any(self.anomalies.values())

    def summary(self) -> str:
        parts = [f"{k}={v}" for k, v in self.anomalies.items()]
        parts += [
            f"acknowledged={self.acknowledged}",
            f"read={self.read}",
            f"unknown_read={self.unknown_read}",
            f"unknown_missing={self.unknown_missing}",
        ]
        shown = "; ".join(self.details[:10])
        return " ".join(parts) + (f" | {shown}" if shown else "")


def check(
    history: History,
    reads: Mapping[str, Sequence[tuple[int, Hashable]]],
    *,
    first_offsets: Mapping[str, int] | None = None,
    holes: Mapping[str, Iterable[tuple[int, int]]] | None = None,
) -> CheckResult:
    """Judge ``reads`` (per topic: ``(offset, value)`` in delivery order) against ``history``.

    ``holes`` lists per topic ``(first, count)`` offset ranges a reader was told
    are missing (GAP notices): the offsets may be skipped there, nothing else.
    """
    result = CheckResult()
    first_offsets = first_offsets or {}
    status_of: dict[Hashable, set[str]] = {}
    topic_of: dict[Hashable, str] = {}
    for op in history.ops:
        for v in op.values:
            status_of.setdefault(v, set()).add(op.status)
            topic_of[v] = op.topic

    # Offsets: dense, increasing, except across announced holes.
    allowed: dict[str, set[int]] = {}
    for topic, ranges in (holes or {}).items():
        allowed[topic] = {o for first, count in ranges for o in range(first, first + count)}
    for topic, items in reads.items():
        expected = first_offsets.get(topic, 0)
        skip = allowed.get(topic, set())
        for offset, _value in items:
            while expected in skip and offset > expected:
                expected += 1
            if offset > expected:
                result.offset_skips += 1
                result.details.append(f"{topic}: offset {offset} read, expected {expected}")
            elif offset < expected:
                result.offset_backwards += 1
                result.details.append(f"{topic}: offset {offset} read after {expected - 1}")
            expected = max(expected, offset + 1)

    # Duplicates and unexpected values.
    read_count: Counter[tuple[str, Hashable]] = Counter()
    for topic, items in reads.items():
        for _offset, value in items:
            read_count[(topic, value)] += 1
            result.read += 1
    for (topic, value), n in read_count.items():
        if n > 1:
            result.duplicated += n - 1
            result.details.append(f"{topic}: value {value!r} read {n} times")
        statuses = status_of.get(value)
        if statuses is None or topic_of.get(value) != topic:
            result.unexpected += 1
            result.details.append(f"{topic}: value {value!r} was never published there")
        elif statuses == {FAIL}:
            result.unexpected += 1
            result.details.append(f"{topic}: value {value!r} read but its publish failed")
        elif OK not in statuses:
            result.unknown_read += 1

    # Lost: acknowledged but never read.
    acked: set[Hashable] = set()
    for op in history.ops:
        if op.status == OK:
            acked.update(op.values)
    result.acknowledged = len(acked)
    for value in acked:
        if read_count[(topic_of[value], value)] == 0:
            result.lost += 1
            if result.lost <= 10:
                result.details.append(f"{topic_of[value]}: acknowledged value {value!r} lost")
    for value, statuses in status_of.items():
        if OK not in statuses and FAIL not in statuses and read_count[(topic_of[value], value)] == 0:
            result.unknown_missing += 1

    # Order: per (publisher, topic), the first reads of its values follow publish order.
    for (process, topic), order in history.publish_order.items():
        rank = {v: i for i, v in enumerate(order)}
        last = -1
        seen: set[Hashable] = set()
        for _offset, value in reads.get(topic, ()):
            i = rank.get(value)
            if i is None or value in seen:
                continue
            seen.add(value)
            if i < last:
                result.reordered += 1
                result.details.append(f"{topic}: {process}'s value {value!r} read after a later one")
            last = max(last, i)
    return result
