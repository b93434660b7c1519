"""What one simulated run is given (its settings) and what it keeps (publishes, marks, snapshots)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .world import World


@dataclass(frozen=True, kw_only=True)
class SimSettings:
    hubs: int = 100
    seed: int = 1
    degree: int = 8
    max_peers: int = 16
    #: shortcuts per hub (hub/core/overlay/shortcuts.py; 0: none)
    shortcuts: int = 7
    #: seconds between a hub's trial links (hub/core/overlay/links.py; 0: none)
    link_trials: float = 10.0
    #: how latencies between hubs are drawn (hub/tools/sim/latency.py): "pairs" or "plane"
    latency_model: str = "pairs"
    form: float = 30.0
    warm: float = 30.0
    steady: float = 30.0
    faults: float = 120.0
    drain: float = 90.0
    joins: int = 20
    #: Fraction of hubs that crash per minute, and of links that fail per minute.
    crash_per_minute: float = 0.05
    link_fail_per_minute: float = 0.01
    downtime: tuple[float, float] = (5.0, 30.0)
    cut_for: tuple[float, float] = (10.0, 60.0)
    #: Publishes per second, cluster-wide, of each kind of topic.
    global_rate: float = 5.0
    few_rate: float = 20.0
    pair_rate: float = 20.0
    few_topics: int = 40
    few_size: int = 5
    pair_topics: int = 300
    wildcards: int = 5


@dataclass
class Topic:
    name: str
    publishers: list[int]
    rate: float


@dataclass
class Run:
    settings: SimSettings
    world: World
    topics: list[Topic] = field(default_factory=list)
    #: (origin, seq, topic, time)
    published: list[tuple[int, int, str, float]] = field(default_factory=list)
    phase_marks: dict[str, float] = field(default_factory=dict)
    join_results: list[dict[str, float]] = field(default_factory=list)
    snapshots: dict[str, dict[str, float]] = field(default_factory=dict)
    #: every hub's subscriptions during the traffic phases (the joins add to them later)
    patterns: dict[int, frozenset[str]] = field(default_factory=dict)
