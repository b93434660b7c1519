"""Which topics are compacted, when a topic is due for a pass, and what compaction has done.

A topic is compacted when its name is one of the ``--compact`` names or matches one of
the ``--compact`` patterns (``*`` one token, ``>`` the rest, as in subscriptions).  A pass
is due when a segment was closed since the last pass began (the active segment is a newer
one) or when a tombstone the last pass kept has passed its retention.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wire.topics import pattern_matches, pattern_tokens

from .compaction import PassResult
from .topic_log import TopicLog


@dataclass(slots=True)
class _TopicState:
    #: base offset of the active segment when the last pass began: everything below was covered
    covered_end: int = -1
    #: µs when a tombstone the last pass kept may go (0: none)
    tombstone_due: int = 0


@dataclass
class CompactionPolicy:
    patterns: tuple[str, ...] = ()
    #: seconds a tombstone is kept after it was appended (Kafka's ``delete.retention.ms``)
    tombstone_seconds: float = 24 * 3600.0
    passes: int = 0
    failures: int = 0
    records_read: int = 0
    records_removed: int = 0
    bytes_removed: int = 0
    last_seconds: float = 0.0
    _states: dict[str, _TopicState] = field(default_factory=dict)
    _verdicts: dict[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._exact = {p for p in self.patterns if pattern_tokens(p) is None}
        self._wild = [t for t in map(pattern_tokens, self.patterns) if t is not None]

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def applies(self, topic: str) -> bool:
        verdict = self._verdicts.get(topic)
        if verdict is None:
            tokens = topic.split(".")
            verdict = topic in self._exact or any(pattern_matches(w, tokens) for w in self._wild)
            self._verdicts[topic] = verdict
        return verdict

    def due(self, topic_log: TopicLog, now_us: int) -> bool:
        if len(topic_log.segments) < 2:
            return False
        state = self._states.get(topic_log.topic)
        if state is None:
            return True
        rolled = topic_log.segments[-1].base_offset > state.covered_end
        return rolled or bool(state.tombstone_due and now_us >= state.tombstone_due)

    def done(self, topic: str, covered_end: int, result: PassResult | None) -> None:
        """A pass over the closed segments below ``covered_end`` ended (``result`` None: it failed,
        and is tried again once another segment closes)."""
        state = self._states.setdefault(topic, _TopicState())
        state.covered_end = covered_end
        if result is None:
            self.failures += 1
            state.tombstone_due = 0
            return
        state.tombstone_due = result.tombstone_due
        self.passes += 1
        self.records_read += result.records_read
        self.records_removed += result.records_removed
        self.bytes_removed += max(0, result.bytes_before - result.bytes_after)
        self.last_seconds = result.seconds

    def status(self, logs: dict[str, TopicLog], now_us: int) -> dict[str, Any]:
        due = [t for t, lg in logs.items() if self.applies(t) and self.due(lg, now_us)]
        return {"due": due[:20], "due_count": len(due), "patterns": list(self.patterns),
                "tombstone_seconds": self.tombstone_seconds, "passes": self.passes,
                "failures": self.failures, "records_read": self.records_read,
                "records_removed": self.records_removed, "bytes_removed": self.bytes_removed,
                "last_pass_seconds": round(self.last_seconds, 6)}  # fmt: skip
