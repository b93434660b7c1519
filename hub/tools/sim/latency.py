"""One-way latencies between simulated hubs, fixed by the seed.

``pairs``: each pair of hubs its own latency, drawn uniformly in the range -- no geometry at
all, so a path through a third hub can be faster than the direct one, and a hub's fastest
links are much faster than its average (which flatters any latency-aware choice of links).
``plane``: each hub a point in a unit square and the latency grows with the distance, from
the low end of the range for hubs at one place to the high end across the diagonal: the
triangle inequality holds, as it roughly does between real sites.
"""

from __future__ import annotations

import hashlib
import math

MODELS = ("pairs", "plane")


def unit(seed: int, *parts: object) -> float:
    """A number in [0, 1) fixed by ``seed`` and ``parts``."""
    digest = hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def pair_seed(seed: int, a: int, b: int) -> float:
    return unit(seed, min(a, b), max(a, b))


def plane_distance(seed: int, a: int, b: int) -> float:
    """The distance of two hubs' points over the square's diagonal (0..1)."""
    dx = unit(seed, "x", a) - unit(seed, "x", b)
    dy = unit(seed, "y", a) - unit(seed, "y", b)
    return math.hypot(dx, dy) / math.sqrt(2)


def fraction(model: str, seed: int, a: int, b: int) -> float:
    """Where in the latency range the pair ``a``, ``b`` lies."""
    return plane_distance(seed, a, b) if model == "plane" else pair_seed(seed, a, b)
