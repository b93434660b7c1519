"""How often a hub recomputes its routes and advertises its links: waits that grow in a storm.

Both follow OSPF's throttles (the SPF hold-down, MinLSInterval): the first event after a quiet
spell is acted on quickly, and while events keep coming the wait doubles up to a ceiling.  A
storm of changes (an overlay forming, a crash every hub hears of) then costs each hub a few route
searches and advertisements a second, however many frames it brings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Link-state changes are folded into one route search: SETTLE after the first change that
#: follows a quiet spell, doubling up to SETTLE_MAX while other hubs' changes keep coming.
#: A hub's own link changes always settle after SETTLE.
SETTLE = 0.05
SETTLE_MAX = 1.0
#: A hub advertises its links at most once per ADVERTISE_INTERVAL, and while its links keep
#: changing (an overlay forming, surplus links pruned) the wait doubles up to ADVERTISE_MAX
#: (OSPF's MinLSInterval is 5 s); a lost link is still advertised within ADVERTISE_INTERVAL.
ADVERTISE_INTERVAL = 1.0
ADVERTISE_MAX = 4.0


@dataclass
class Backoff:
    """A wait of ``low`` after a quiet spell of ``quiet`` seconds, doubling up to ``high`` while busy."""

    low: float
    high: float
    quiet: float
    #: when the paced thing last happened
    last: float = -1e18
    _wait: float = field(init=False)

    def __post_init__(self) -> None:
        self._wait = self.low

    def wait(self, now: float) -> float:
        """How long to wait, from ``last``, before it happens again."""
        return self.low if now - self.last > self.quiet else self._wait

    def fired(self, now: float) -> None:
        """It happened now: the next wait doubles, unless this came after a quiet spell."""
        self._wait = self.low if now - self.last > self.quiet else min(2 * self._wait, self.high)
        self.last = now
