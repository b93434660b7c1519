"""Which topics are compacted, with which tombstone retention, when a topic is due for a pass,
and what compaction has done.

A topic is compacted when its name is one of the ``--compact`` names or matches one of the
``--compact`` patterns (``*`` one token, ``>`` the rest, as in subscriptions).  An entry may
carry its own tombstone retention after whitespace (which no topic name holds):
``--compact "audit.> tombstone-seconds=600"``.  A topic's retention is that of the first
entry matching it that gives one, else the hub's ``--compact-tombstone-seconds``.

A pass is due when the topic has a dirty part (closed records past its checkpoint: a segment
closed, or the last pass's map filled before the end) or when a tombstone the last pass kept
has passed its retention.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wire.topics import check_topic, pattern_matches, pattern_tokens

from .compaction import DEFAULT_MAP_BYTES, PassResult
from .offset_map import MIN_MAP_BYTES
from .topic_log import TopicLog

TOMBSTONE_OPTION = "tombstone-seconds"
#: topics listed by name in the status (the rest counted)
LISTED = 20


@dataclass(frozen=True, slots=True)
class CompactRule:
    pattern: str
    #: None: the hub's ``--compact-tombstone-seconds``
    tombstone_seconds: float | None = None


def parse_compact(entry: str) -> CompactRule:
    """One ``--compact`` entry: ``TOPIC|PATTERN [tombstone-seconds=SECONDS]`` (ValueError if not)."""
    pattern, *options = entry.split() or [""]
    check_topic(pattern, pattern=True)
    seconds = None
    for option in options:
        name, eq, value = option.partition("=")
        if name != TOMBSTONE_OPTION or not eq:
            raise ValueError(f"compact entry {entry!r}: unknown option {option!r} (the one option is "
                             f"{TOMBSTONE_OPTION}=SECONDS)")  # fmt: skip
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not seconds >= 0:  # also NaN
            raise ValueError(f"compact entry {entry!r}: {TOMBSTONE_OPTION} must be a number >= 0, got {value!r}")
    return CompactRule(pattern, seconds)


@dataclass(slots=True)
class _TopicState:
    #: the checkpoint's clean end after the last pass (-1: no pass yet)
    clean_end: int = -1
    #: a pass failed with the active segment at this base: tried again once a newer one is (-1: none failed)
    failed_below: int = -1
    #: µs when a tombstone the last pass kept may go (0: none)
    tombstone_due: int = 0
    #: where the last pass's dirty part began, and the keys its map held
    dirty_start: int = 0
    map_entries: int = 0
    #: the last pass's map filled before the end of the dirty part: the next round is due now
    unfinished: bool = False


@dataclass
class CompactionPolicy:
    #: the ``--compact`` entries, as given
    entries: tuple[str, ...] = ()
    #: seconds a tombstone is kept after it was appended (Kafka's ``delete.retention.ms``), unless an entry says
    tombstone_seconds: float = 24 * 3600.0
    #: the most bytes a pass's offset map takes (``--compaction-map-bytes``)
    map_bytes: int = DEFAULT_MAP_BYTES
    passes: int = 0
    failures: int = 0
    records_read: int = 0
    records_removed: int = 0
    bytes_removed: int = 0
    bytes_read: int = 0
    last_seconds: float = 0.0
    last_bytes_read: int = 0
    last_map_entries: int = 0
    last_map_capacity: int = 0
    _states: dict[str, _TopicState] = field(default_factory=dict)
    _verdicts: dict[str, tuple[bool, float | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.map_bytes < MIN_MAP_BYTES:
            raise ValueError(f"compaction_map_bytes must be >= {MIN_MAP_BYTES}, got {self.map_bytes}")
        self.rules = tuple(map(parse_compact, self.entries))
        self.patterns = tuple(r.pattern for r in self.rules)
        self._matchers = [(rule, pattern_tokens(rule.pattern)) for rule in self.rules]

    def __bool__(self) -> bool:
        return bool(self.rules)

    def _verdict(self, topic: str) -> tuple[bool, float | None]:
        """Is ``topic`` compacted, and the tombstone retention of the first matching entry that gives one."""
        verdict = self._verdicts.get(topic)
        if verdict is None:
            tokens = topic.split(".")
            matching = [rule for rule, wild in self._matchers
                        if (rule.pattern == topic if wild is None else pattern_matches(wild, tokens))]  # fmt: skip
            own = next((r.tombstone_seconds for r in matching if r.tombstone_seconds is not None), None)
            verdict = self._verdicts[topic] = (bool(matching), own)
        return verdict

    def applies(self, topic: str) -> bool:
        return self._verdict(topic)[0]

    def tombstone_seconds_for(self, topic: str) -> float:
        own = self._verdict(topic)[1]
        return self.tombstone_seconds if own is None else own

    def due(self, topic_log: TopicLog, now_us: int) -> bool:
        if len(topic_log.segments) < 2:
            return False
        state = self._states.get(topic_log.topic)
        if state is None:
            return True
        active = topic_log.segments[-1].base_offset
        if state.failed_below >= 0:
            return active > state.failed_below
        return active > state.clean_end or bool(state.tombstone_due and now_us >= state.tombstone_due)

    def failed(self, topic: str, active: int) -> None:
        """A pass failed (or was refused) with the active segment at base ``active``: tried again
        once another segment closes."""
        state = self._states.setdefault(topic, _TopicState())
        state.failed_below = active
        state.tombstone_due = 0
        state.unfinished = False
        self.failures += 1

    def done(self, topic: str, result: PassResult, *, checkpointed: bool) -> None:
        """A pass ended; ``checkpointed``: every output went in place and its checkpoint was
        written (else the next pass cleans the same dirty part again)."""
        state = self._states.setdefault(topic, _TopicState())
        state.failed_below = -1
        state.clean_end = result.checkpoint.clean_end if checkpointed else result.dirty_start
        state.tombstone_due = result.tombstone_due
        state.dirty_start, state.map_entries = result.dirty_start, result.map_entries
        state.unfinished = checkpointed and result.checkpoint.clean_end < result.dirty_end
        self.passes += 1
        self.records_read += result.records_read
        self.records_removed += result.records_removed
        self.bytes_removed += max(0, result.bytes_before - result.bytes_after)
        self.bytes_read += result.bytes_read
        self.last_seconds = result.seconds
        self.last_bytes_read = result.bytes_read
        self.last_map_entries, self.last_map_capacity = result.map_entries, result.map_capacity

    def unfinished(self, topic: str) -> bool:
        """Did the last pass over ``topic`` stop where its map filled, short of the active segment?"""
        state = self._states.get(topic)
        return state is not None and state.unfinished

    def checkpoints(self) -> dict[str, int]:
        """Each compacted topic's clean end, as the last pass left it."""
        return {t: s.clean_end for t, s in self._states.items() if s.clean_end >= 0}

    def status(self, logs: dict[str, TopicLog], now_us: int) -> dict[str, Any]:
        due = [t for t, lg in logs.items() if self.applies(t) and self.due(lg, now_us)]
        topics = {t: {"clean_end": s.clean_end, "dirty_from": s.dirty_start, "map_entries": s.map_entries,
                      "active_base": logs[t].segments[-1].base_offset if t in logs else None}
                  for t, s in list(self._states.items())[:LISTED] if s.clean_end >= 0}  # fmt: skip
        return {"due": due[:LISTED], "due_count": len(due), "patterns": list(self.patterns),
                "tombstone_seconds": self.tombstone_seconds,
                "rules": [{"pattern": r.pattern, "tombstone_seconds": self.tombstone_seconds
                           if r.tombstone_seconds is None else r.tombstone_seconds} for r in self.rules],
                "map_bytes": self.map_bytes, "passes": self.passes,
                "failures": self.failures, "records_read": self.records_read,
                "records_removed": self.records_removed, "bytes_removed": self.bytes_removed,
                "bytes_read": self.bytes_read, "last_pass_seconds": round(self.last_seconds, 6),
                "last_pass_bytes_read": self.last_bytes_read, "last_map_entries": self.last_map_entries,
                "last_map_capacity": self.last_map_capacity, "topics": topics,
                "topics_count": len(self.checkpoints())}  # fmt: skip
