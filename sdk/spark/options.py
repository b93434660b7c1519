"""Options of the ``pub0sub`` Spark data source: parsing, validation, offset ranges.

Pure Python (no pyspark import), so it runs and is tested anywhere.  Spark hands
options over lower-cased (SPARK_NOTES pitfall 2): every lookup here goes through
:func:`normalize`, so ``startingOffsets`` and ``startingoffsets`` are the same key.

Offsets are pub0sub topic offsets: dense per topic, ``next_offset`` is one past the
last stored message.  A range ``[start, end)`` of one topic is one unit of work.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import wire
import wire.topics

#: Kafka's sentinels in JSON offsets.
EARLIEST = -2
LATEST = -1

#: Big ranges: every partition costs a Spark task, a connection and a subscription (~80 ms on
#: local[2], measured), so a 1M-message read is faster in 2 partitions than in 8.
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
DEFAULT_READ_TIMEOUT = 60.0
DEFAULT_CONNECT_TIMEOUT = 10.0
#: Kafka's fetchOffset.numRetries / fetchOffset.retryIntervalMs: planning outlives a hub restart of a few seconds.
DEFAULT_FETCH_RETRIES = 3
DEFAULT_FETCH_RETRY_INTERVAL_MS = 1000

#: Every option the source understands (lower-cased), so a typo fails instead of being ignored.
READ_OPTIONS = frozenset(
    {
        "hub",
        "subscribe",
        "topics",
        "subscribepattern",
        "startingoffsets",
        "endingoffsets",
        "maxoffsetspertrigger",
        "maxrecordsperpartition",
        "minpartitions",
        "failondataloss",
        "readtimeout",
        "connecttimeout",
        "splittopics",
        "fetchoffset.numretries",
        "fetchoffset.retryintervalms",
        "columns",
    }
)
#: How to reach a hub with ``--auth-file`` or TLS (docs/security.md), for reads and writes alike.
ACCESS_OPTIONS = frozenset({"user", "password", "token", "tls", "cafile", "certfile", "keyfile"})
READ_OPTIONS = READ_OPTIONS | ACCESS_OPTIONS
WRITE_OPTIONS = frozenset({"hub", "topic", "writeid", "idempotent", "connecttimeout", "flushbytes"}) | ACCESS_OPTIONS
#: The source's columns in schema order (docs/spark.md, "Schema"); option ``columns`` picks some.
SOURCE_COLUMNS = ("topic", "offset", "timestamp", "key", "value", "origin", "headers")
#: Set by Spark itself on some paths (e.g. ``path`` for ``load(path)``); never an error.
_SPARK_OPTIONS = frozenset({"path", "checkpointlocation", "queryname"})


class OptionError(ValueError):
    """An invalid option of the pub0sub data source; the message names the option."""


def normalize(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def check_known(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(options) - known - _SPARK_OPTIONS)
    if unknown:
        raise OptionError(f"unknown pub0sub {what} option(s) {unknown}; known: {sorted(known)}")


def parse_hubs(options: Mapping[str, str]) -> tuple[str, ...]:
    raw = options.get("hub", "").strip()
    hubs = tuple(h.strip() for h in raw.split(",") if h.strip())
    if not hubs:
        raise OptionError("option 'hub' is required: one or more hub addresses, e.g. '127.0.0.1:7420'")
    for hub in hubs:
        host, sep, port = hub.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise OptionError(f"option 'hub': {hub!r} is not HOST:PORT")
    return hubs


def _positive_int(options: Mapping[str, str], key: str, default: int | None, name: str) -> int | None:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option '{name}' must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option '{name}' must be a positive integer, got {raw!r}")
    return value


def _non_negative_int(options: Mapping[str, str], key: str, default: int, name: str) -> int:
    raw = options.get(key)
    if raw is None:
        return default
    if not raw.strip().isdigit():
        raise OptionError(f"option '{name}' must be an integer >= 0, got {raw!r}")
    return int(raw)


def _positive_float(options: Mapping[str, str], key: str, default: float, name: str) -> float:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(f"option '{name}' must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise OptionError(f"option '{name}' must be > 0, got {raw!r}")
    return value


def parse_bool(options: Mapping[str, str], key: str, default: bool, name: str) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    low = raw.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise OptionError(f"option '{name}' must be true or false, got {raw!r}")


def check_name(option: str, name: str, *, pattern: bool = False) -> None:
    """The topic rule (``wire.topics``) for an option's topic or pattern, as an :class:`OptionError`."""
    try:
        wire.check_topic(name, pattern=pattern)
    except wire.InvalidTopicError as exc:
        raise OptionError(f"option '{option}': {exc}") from None


def pattern_matches(pattern: str, topic: str) -> bool:
    """pub0sub pattern rules: ``*`` is exactly one token, a final ``>`` one or more."""
    tokens = wire.topics.pattern_tokens(pattern)
    if tokens is None:
        return pattern == topic
    return wire.topics.pattern_matches(tokens, topic.split("."))


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which topics to read: a fixed list, or a pattern resolved against the hub's topic list."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    def resolve(self, hub_topics: Iterable[str]) -> list[str]:
        """The concrete topics to read, sorted (offsets are JSON compared as strings: one order)."""
        if self.pattern is None:
            return sorted(self.topics)
        return sorted(t for t in set(hub_topics) if pattern_matches(self.pattern, t))


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "topics", "subscribepattern") if options.get(k, "").strip()]
    if len(given) != 1:
        raise OptionError(
            "give exactly one of 'subscribe' (or its alias 'topics', a comma list of topics) or "
            f"'subscribePattern' (e.g. 'orders.*'); got {given or 'none'}"
        )
    key = given[0]
    if key == "subscribepattern":
        pattern = options[key].strip()
        check_name("subscribePattern", pattern, pattern=True)
        return Subscription(pattern=pattern)
    topics = tuple(dict.fromkeys(t.strip() for t in options[key].split(",") if t.strip()))
    for topic in topics:
        check_name(key, topic)
    return Subscription(topics=topics)


def parse_offsets(options: Mapping[str, str], key: str, name: str, default: str) -> str | dict[str, int]:
    """``"earliest"``, ``"latest"``, or ``{topic: offset}`` (-2 earliest, -1 latest) like Kafka's JSON."""
    raw = options.get(key, default).strip()
    if raw.lower() in ("earliest", "latest"):
        return raw.lower()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise OptionError(
            f"option '{name}' must be 'earliest', 'latest' or a JSON object like "
            f'{{"topic": 5}} (-2 = earliest, -1 = latest), got {raw!r}'
        )
    result: dict[str, int] = {}
    for topic, offset in value.items():
        if isinstance(offset, dict) and set(offset) == {"0"}:
            offset = offset["0"]  # Kafka's {"topic": {"partition": offset}} with pub0sub's single "partition"
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
            raise OptionError(f"option '{name}': offset for {topic!r} must be an integer >= -2, got {offset!r}")
        check_name(name, topic)
        result[topic] = offset
    return result


@dataclass(frozen=True, slots=True)
class HubAccess:
    """Credentials and TLS for every connection of a read or write (driver and executors).

    Pickled to the executors with the options: the secrets are left out of ``repr`` so they
    never show in Spark's plans or logs.  Files are opened where the connection is made, so
    every executor must see the same paths.
    """

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def connect_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``sdk.connect``/``connect_blocking`` these stand for."""
        kwargs: dict[str, Any] = {}
        if self.user is not None:
            kwargs.update(user=self.user, password=self.password)
        if self.token is not None:
            kwargs["token"] = self.token
        if self.tls or self.ca_file or self.cert_file:
            kwargs.update(tls=True, ca_file=self.ca_file, cert_file=self.cert_file, key_file=self.key_file)
        return kwargs


#: An open hub over plain TCP.
NO_ACCESS = HubAccess()


def parse_access(options: Mapping[str, str]) -> HubAccess:
    """``user``+``password`` or ``token``; ``tls``, ``caFile``, ``certFile``+``keyFile``."""

    def text(key: str) -> str | None:
        raw = options.get(key)
        return raw if raw else None

    user, password, token = text("user"), text("password"), text("token")
    if (user is None) != (password is None):
        raise OptionError("options 'user' and 'password' go together")
    if token is not None and user is not None:
        raise OptionError("give either option 'token' or 'user' and 'password', not both")
    cert_file, key_file = text("certfile"), text("keyfile")
    if key_file is not None and cert_file is None:
        raise OptionError("option 'keyFile' needs 'certFile' (a client certificate for mutual TLS)")
    tls = parse_bool(options, "tls", False, "tls")
    ca_file = text("cafile")
    if "tls" in options and not tls and (ca_file or cert_file):
        raise OptionError("option 'tls' is false but 'caFile' or 'certFile' is given: the files need TLS")
    return HubAccess(user=user, password=password, token=token, tls=tls, ca_file=ca_file, cert_file=cert_file,
                     key_file=key_file)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReadOptions:
    hubs: tuple[str, ...]
    subscription: Subscription
    starting: str | dict[str, int]
    ending: str | dict[str, int]
    max_offsets_per_trigger: int | None
    max_records_per_partition: int
    min_partitions: int
    fail_on_data_loss: bool
    read_timeout: float
    connect_timeout: float
    access: HubAccess = NO_ACCESS
    #: false: one partition per topic range, so its rows reach the next stage (a write) in offset order
    split_topics: bool = True
    fetch_retries: int = DEFAULT_FETCH_RETRIES
    fetch_retry_interval: float = DEFAULT_FETCH_RETRY_INTERVAL_MS / 1000
    #: the columns the source returns, in this order (option ``columns``)
    columns: tuple[str, ...] = SOURCE_COLUMNS

    def check_offset_topics(self) -> None:
        """JSON offsets for fixed topics must name subscribed topics (a typo would read nothing)."""
        if self.subscription.pattern is not None:
            return
        for name, offsets in (("startingOffsets", self.starting), ("endingOffsets", self.ending)):
            if isinstance(offsets, dict):
                extra = sorted(set(offsets) - set(self.subscription.topics))
                if extra:
                    raise OptionError(f"option '{name}' names topics that are not subscribed: {extra}")


def parse_columns(raw: Mapping[str, str]) -> tuple[str, ...]:
    """Option ``columns``: the source's columns to return, in the order given (default: all).

    Python data sources get no column pruning from Spark (PySpark 4.3), and the JVM copies every
    column of every row out of Arrow: a query that needs only ``value`` saves that copy this way.
    """
    text = normalize(raw).get("columns", "").strip()
    if not text:
        return SOURCE_COLUMNS
    names = tuple(name.strip().lower() for name in text.split(","))
    unknown = [name for name in names if name not in SOURCE_COLUMNS]
    if unknown or len(set(names)) != len(names):
        raise OptionError(
            f"option 'columns': {text!r} must name each column at most once, from {', '.join(SOURCE_COLUMNS)}"
        )
    return names


def parse_read_options(raw: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    options = normalize(raw)
    check_known(options, READ_OPTIONS, "read")
    if streaming and "endingoffsets" in options:
        raise OptionError("option 'endingOffsets' is for batch reads only; a stream has no end")
    if not streaming and "maxoffsetspertrigger" in options:
        raise OptionError("option 'maxOffsetsPerTrigger' is for streaming reads only")
    ending = parse_offsets(options, "endingoffsets", "endingOffsets", "latest")
    if ending == "earliest" or (isinstance(ending, dict) and EARLIEST in ending.values()):
        raise OptionError("option 'endingOffsets': 'earliest' (-2) is not allowed as an end, as in Kafka")
    starting = parse_offsets(options, "startingoffsets", "startingOffsets", "latest" if streaming else "earliest")
    if starting == "latest" and not streaming:
        # Kafka refuses it too: a batch from latest to latest is always empty.
        raise OptionError("option 'startingOffsets': 'latest' is not allowed for a batch read (it reads nothing)")
    result = ReadOptions(
        hubs=parse_hubs(options),
        subscription=parse_subscription(options),
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(options, "maxoffsetspertrigger", None, "maxOffsetsPerTrigger"),
        max_records_per_partition=_positive_int(
            options, "maxrecordsperpartition", DEFAULT_MAX_RECORDS_PER_PARTITION, "maxRecordsPerPartition"
        )
        or DEFAULT_MAX_RECORDS_PER_PARTITION,
        min_partitions=_positive_int(options, "minpartitions", 1, "minPartitions") or 1,
        fail_on_data_loss=parse_bool(options, "failondataloss", True, "failOnDataLoss"),
        read_timeout=_positive_float(options, "readtimeout", DEFAULT_READ_TIMEOUT, "readTimeout"),
        connect_timeout=_positive_float(options, "connecttimeout", DEFAULT_CONNECT_TIMEOUT, "connectTimeout"),
        access=parse_access(options),
        split_topics=parse_bool(options, "splittopics", True, "splitTopics"),
        fetch_retries=_non_negative_int(options, "fetchoffset.numretries", DEFAULT_FETCH_RETRIES,
                                        "fetchOffset.numRetries"),
        fetch_retry_interval=(_positive_int(options, "fetchoffset.retryintervalms", DEFAULT_FETCH_RETRY_INTERVAL_MS,
                                            "fetchOffset.retryIntervalMs") or DEFAULT_FETCH_RETRY_INTERVAL_MS) / 1000,
        columns=parse_columns(options),
    )  # fmt: skip
    result.check_offset_topics()
    return result


@dataclass(frozen=True, slots=True)
class WriteOptions:
    hubs: tuple[str, ...]
    topic: str | None
    write_id: str | None
    idempotent: bool
    connect_timeout: float
    flush_bytes: int | None
    access: HubAccess = NO_ACCESS


def parse_write_options(raw: Mapping[str, str]) -> WriteOptions:
    options = normalize(raw)
    check_known(options, WRITE_OPTIONS, "write")
    topic = options.get("topic", "").strip() or None
    if topic is not None:
        check_name("topic", topic)
    return WriteOptions(
        hubs=parse_hubs(options),
        topic=topic,
        write_id=options.get("writeid", "").strip() or None,
        idempotent=parse_bool(options, "idempotent", True, "idempotent"),
        connect_timeout=_positive_float(options, "connecttimeout", DEFAULT_CONNECT_TIMEOUT, "connectTimeout"),
        flush_bytes=_positive_int(options, "flushbytes", None, "flushBytes"),
        access=parse_access(options),
    )


# -- offsets --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicBounds:
    """What the hub reports for one topic: the oldest retained offset and one past the newest."""

    first: int
    next: int


def bounds_from_status(status: Mapping[str, Any]) -> dict[str, TopicBounds]:
    """``topic_list`` of a hub status document -> ``{topic: TopicBounds}``."""
    result: dict[str, TopicBounds] = {}
    for entry in status.get("topic_list") or ():
        result[str(entry["topic"])] = TopicBounds(int(entry.get("first_offset", 0)), int(entry["next_offset"]))
    return result


def resolve_position(
    spec: str | dict[str, int], topic: str, bounds: TopicBounds, *, missing: int, what: str, fail_on_data_loss: bool
) -> int:
    """One topic's concrete offset for a start/end spec; ``missing`` (EARLIEST/LATEST) if the JSON omits it."""
    value = (EARLIEST if spec == "earliest" else LATEST) if isinstance(spec, str) else spec.get(topic, missing)
    if value == EARLIEST:
        return bounds.first
    if value == LATEST:
        return bounds.next
    if value > bounds.next:
        raise OptionError(f"{what} {value} for topic {topic!r} is past the end of its log (next offset {bounds.next})")
    if value < bounds.first:
        if fail_on_data_loss:
            raise DataLossError(
                f"{what} {value} for topic {topic!r} is before the oldest retained offset {bounds.first} "
                "(removed by retention); set failOnDataLoss=false to start at the oldest retained offset"
            )
        return bounds.first
    return value


class DataLossError(RuntimeError):
    """Offsets that should be read are gone (retention, corruption): Kafka's failOnDataLoss case."""


def limit_offsets(start: Mapping[str, int], latest: Mapping[str, int], max_rows: int) -> dict[str, int]:
    """End offsets at most ``max_rows`` past ``start`` in total, shared in proportion to what each topic has.

    Deterministic (the same inputs give the same dict), keys sorted; every topic with
    data advances when ``max_rows`` allows, so no topic starves.
    """
    topics = sorted(latest)
    avail = {t: max(0, latest[t] - start.get(t, latest[t])) for t in topics}
    total = sum(avail.values())
    if total <= max_rows:
        return {t: latest[t] for t in topics}
    take = {t: max_rows * avail[t] // total for t in topics}
    left = max_rows - sum(take.values())
    for t in topics:
        if left <= 0:
            break
        if take[t] < avail[t]:
            take[t] += 1
            left -= 1
    return {t: start.get(t, latest[t]) + take[t] for t in topics}


def split_range(start: int, end: int, max_records: int) -> list[tuple[int, int]]:
    """``[start, end)`` in pieces of at most ``max_records``, evenly sized."""
    n = end - start
    if n <= 0:
        return []
    pieces = -(-n // max_records)
    size, extra = divmod(n, pieces)
    out = []
    pos = start
    for i in range(pieces):
        step = size + (1 if i < extra else 0)
        out.append((pos, pos + step))
        pos += step
    return out


def plan_ranges(
    ranges: Mapping[str, tuple[int, int]], max_records: int, min_partitions: int = 1, *, split: bool = True
) -> list[tuple[str, int, int]]:
    """One ``(topic, start, end)`` per partition, topics in sorted order; splits so there are at
    least ``min_partitions`` pieces when there are that many records.  ``split`` false: one
    partition per topic, whatever its size."""
    if not split:
        return [(t, s, e) for t in sorted(ranges) for s, e in [ranges[t]] if e > s]
    total = sum(max(0, e - s) for s, e in ranges.values())
    if min_partitions > 1 and total:
        max_records = min(max_records, max(1, -(-total // min_partitions)))
    return [(t, s, e) for t in sorted(ranges) for s, e in split_range(*ranges[t], max_records)]
