"""What each of this hub's links costs, as it advertises them (mesh v3.1 LINK_STATE costs).

The shell times heartbeat round trips on the links it dialled (a PING as soon as the link is
greeted, then one per heartbeat interval, and probes) and hands each to
:meth:`LinkCosts.observe`.  A link's figure is half the *smallest* round trip of its last
``WINDOW`` samples: the path's own latency, not the time the two hubs' event loops took to get
to the frames.  A smoothed mean (TCP's SRTT, used before) follows queueing and CPU contention:
with 50 test-bed hubs on one loaded machine the smoothed one-way figures of loopback links read
4.9 ms (median), 8.9 ms (p90) and up to 23 ms, and the hubs kept "faster" trial links against
that noise (81 kept 100 s into the traffic), each one a link swap flooded to all.  The minimum
is what TCP Vegas (BaseRTT) and BBR (min_rtt) take for the same reason.

A link is advertised with its first figure at once (routes then leave the 100 ms every
unmeasured link is taken for), and again only when its figure moved by a quarter and by at
least 1 ms, and no change went out in the last ``READVERTISE_EVERY`` seconds: every
advertisement floods the whole overlay and moves every hub's routes.  A link whose window is
not full yet re-advertises a figure that fell without waiting: the first round trips of links
made while a cluster starts are slow, and figures held at them for 30 s still set hubs trying
links (with the minimum but that hold-down, a 50-hub test bed had kept 69 trial links a minute
into its traffic, 93 after four).  A link that gets slower for good shows once ``WINDOW``
samples have passed.  The side that accepted a link does not time it: a link's cost is the
larger of its two ends' figures (``routes.py``), so one end's figure suffices.
"""

from __future__ import annotations

from collections import deque

from wire.frames.mesh_v3 import COST_UNIT_US

#: Round trips a link's figure is the minimum of (about one per heartbeat interval: 16 s).
WINDOW = 16
#: A change smaller than this many cost units (1 ms) is never re-advertised.
MIN_CHANGE = 10
#: ... nor one smaller than this share of the advertised figure.
MIN_SHARE = 0.25
#: Seconds after any cost went out before a changed one may (a first figure is never held back).
READVERTISE_EVERY = 30.0


def cost_units(seconds: float) -> int:
    """A one-way latency as a LINK_STATE cost: 1..65535 units of ``COST_UNIT_US`` µs (0 is "unmeasured")."""
    return max(1, min(0xFFFF, round(seconds * 1e6 / COST_UNIT_US)))


class LinkCosts:
    def __init__(self) -> None:
        self._samples: dict[int, deque[float]] = {}
        self._advertised: dict[int, int] = {}
        self._changed_at = float("-inf")

    def observe(self, hub: int, round_trip: float, now: float) -> bool:
        """A round trip timed on the link to ``hub``; True when the advertised cost changes."""
        samples = self._samples.get(hub)
        if samples is None:
            samples = self._samples[hub] = deque(maxlen=WINDOW)
        samples.append(round_trip / 2)
        cost = cost_units(min(samples))
        advertised = self._advertised.get(hub)
        if advertised is None:
            self._advertised[hub] = cost
            self._changed_at = now
            return True
        moved = abs(cost - advertised)
        if moved < MIN_CHANGE or moved < MIN_SHARE * advertised:
            return False
        # A young link's figure only falls while its window fills (its first round trips met a
        # busy start): convergence, not jitter, so no hold-down.  Otherwise one change per while.
        young = len(samples) < WINDOW and cost < advertised
        if not young and now - self._changed_at < READVERTISE_EVERY:
            return False
        self._advertised[hub] = cost
        if not young:
            self._changed_at = now
        return True

    def figure(self, hub: int) -> int:
        """The cost this hub advertises (or would) for its link to ``hub`` (0: not timed)."""
        return self._advertised.get(hub, 0)

    def forget(self, hub: int) -> None:
        """The link is gone: a new one is timed afresh."""
        self._samples.pop(hub, None)
        self._advertised.pop(hub, None)

    def of(self, neighbors: tuple[int, ...]) -> tuple[int, ...]:
        """The costs to advertise with ``neighbors`` (0 where not timed)."""
        return tuple(self._advertised.get(hub, 0) for hub in neighbors)

    def status(self) -> dict[str, float]:
        """Each timed link's one-way latency (the minimum of its window), in ms (for STATUS)."""
        return {f"{hub:016x}": round(min(s) * 1e3, 3) for hub, s in sorted(self._samples.items())}
