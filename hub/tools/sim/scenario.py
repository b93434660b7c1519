"""One simulated run: an overlay forms, traffic flows, hubs crash and links fail, then joins are measured.

Phases, on the simulated clock:

1. *form* -- hubs start one after another, each given two hubs already up (what the
   DHT would hand it); subscriptions are in place from the start.
2. *warm* -- traffic starts: publishers find, through the rendezvous, who wants
   their topics (counted in delivery, not in the steady figures).
   *steady* -- traffic, no faults: redundancy and latency of a settled overlay.
3. *faults* -- traffic, while hubs crash (and restart with their data after a
   while) and links fail (and stay cut for a while).
4. *drain* -- no traffic, no new faults: every hub is back; repairs finish.
5. *joins* -- one hub at a time subscribes to a topic that is being published:
   the interest frames each join costs and the time to its first delivery.

Topics, as the issue describes the mix: one topic every hub wants; tens of topics
wanted by a few hubs each; hundreds wanted by two hubs each; and a few wildcard
subscriptions across them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import wire
from wire.frames.mesh_v3 import link_state_head

from ...core.overlay.config import OverlayConfig
from ...core.overlay.membership import rendezvous_key
from .report import Report, summarize
from .run import Run, SimSettings, Topic
from .world import World

INTEREST_KINDS = ("INTEREST", "WATCH", "INTEREST_SET", "JOINED")


def build(settings: SimSettings) -> Run:
    config = OverlayConfig(degree=settings.degree, max_peers=settings.max_peers, shortcuts=settings.shortcuts,
                           link_trials=settings.link_trials)  # fmt: skip
    world = World(hubs=settings.hubs, seed=settings.seed, config=config, latency_model=settings.latency_model)
    run = Run(settings, world)
    rng = world.rng
    ids = world.order
    everyone = Topic("all.events", rng.sample(ids, min(10, len(ids))), settings.global_rate)
    run.topics.append(everyone)
    for hub in ids:
        world.hubs[hub].patterns.add(everyone.name)
    for i in range(settings.few_topics):
        topic = Topic(f"team{i}.updates", [rng.choice(ids)], settings.few_rate / max(1, settings.few_topics))
        run.topics.append(topic)
        for hub in rng.sample(ids, min(settings.few_size, len(ids))):
            world.hubs[hub].patterns.add(topic.name)
    for i in range(settings.pair_topics):
        topic = Topic(f"pair{i}.msgs", [rng.choice(ids)], settings.pair_rate / max(1, settings.pair_topics))
        run.topics.append(topic)
        for hub in rng.sample(ids, min(2, len(ids))):
            world.hubs[hub].patterns.add(topic.name)
    for i in range(settings.wildcards):
        hub = rng.choice(ids)
        world.hubs[hub].patterns.add(f"team{i}.*" if i % 2 == 0 else "*.updates")
    run.patterns = {h: frozenset(world.hubs[h].patterns) for h in ids}
    return run


def _poisson(run: Run, rate: float, start: float, end: float, fn: Callable[[], None]) -> None:
    """Schedule ``fn`` as a Poisson process of ``rate``/s over [start, end)."""
    if rate <= 0:
        return
    rng = run.world.rng
    t = start + rng.expovariate(rate)
    while t < end:
        run.world.loop.at(t, fn)
        t += rng.expovariate(rate)


def _publisher(run: Run, topic: Topic) -> Callable[[], None]:
    world = run.world
    rng = world.rng

    def publish() -> None:
        origin = rng.choice(topic.publishers)
        seq = world.publish(origin, topic.name, b"x" * 64)
        if seq is not None:
            run.published.append((origin, seq, topic.name, world.clock.now))

    return publish


def _crash(run: Run) -> None:
    world = run.world
    up = [h.hub_id for h in world.up_hubs()]
    if len(up) < 2:
        return
    victim = world.rng.choice(up)
    world.crash(victim)
    downtime = world.rng.uniform(*run.settings.downtime)
    world.loop.at(world.clock.now + downtime, _restart, run, victim)


def _restart(run: Run, hub_id: int) -> None:
    world = run.world
    up = [h.hub_id for h in world.up_hubs()]
    world.start(hub_id, world.rng.sample(up, min(2, len(up))))


def _cut(run: Run) -> None:
    world = run.world
    if not world.links:
        return
    a, b = world.rng.choice(sorted(world.links))
    world.cut(a, b, world.rng.uniform(*run.settings.cut_for))


def schedule_traffic(run: Run, start: float, end: float) -> None:
    """Every topic's publishes, each a Poisson process at its rate, over [start, end)."""
    for topic in run.topics:
        _poisson(run, topic.rate, start, end, _publisher(run, topic))


def schedule_starts(run: Run) -> None:
    """Phase 1, *form*: hubs start one after another over the first half of ``form``, each
    bootstrapped from two hubs already up."""
    world = run.world
    ids = world.order
    spread = run.settings.form / 2
    for index, hub in enumerate(ids):
        started = ids[:index]

        def start(hub: int = hub, started: list[int] = started) -> None:
            up = [h for h in started if world.hubs[h].up]
            world.start(hub, world.rng.sample(up, min(2, len(up))))

        world.loop.at(spread * index / max(1, len(ids)), start)


def formation(settings: SimSettings) -> dict[str, float]:
    """Phase 1 alone (``form`` simulated seconds): what forming the overlay cost and left."""
    import time

    run = build(settings)
    world = run.world
    adverts: set[tuple[int, int]] = set()

    def count(frame: bytes) -> None:
        if frame[0] == wire.Opcode.LINK_STATE:
            adverts.add(link_state_head(frame[wire.HEADER_SIZE :]))

    world.taps.append(count)
    started = time.process_time()
    schedule_starts(run)
    world.loop.run_until(settings.form)
    degrees = world.degrees()
    hubs = len(world.hubs)
    return {
        "hubs": hubs,
        "hubs_up": len(degrees),
        "degree_mean": sum(degrees) / max(1, len(degrees)),
        "degree_max": max(degrees, default=0),
        "link_state_frames": world.counters().get("LINK_STATE", 0),
        "advertisements_per_hub": len(adverts) / hubs,
        "links_made_per_hub": world.links_made / hubs,
        "links_ended_per_hub": world.links_ended / hubs,
        "events": world.loop.events,
        "cpu_s": time.process_time() - started,
    }


def execute(settings: SimSettings, progress: Callable[[str, float, Run], None] | None = None) -> Report:
    run = build(settings)
    world = run.world
    loop = world.loop
    s = settings
    schedule_starts(run)
    t = 0.0

    def phase(name: str, length: float) -> float:
        nonlocal t
        run.phase_marks[name] = t
        end = t + length
        step = max(1.0, length / 10)
        while t < end:
            t = min(end, t + step)
            loop.run_until(t)
            if progress is not None:
                progress(name, t, run)
        run.snapshots[name] = world.counters()
        return t

    phase("form", s.form)
    traffic_end = s.form + s.warm + s.steady + s.faults
    schedule_traffic(run, t, traffic_end)
    phase("warm", s.warm)
    phase("steady", s.steady)
    _poisson(run, s.crash_per_minute * s.hubs / 60, t, t + s.faults, lambda: _crash(run))
    links = max(1, s.hubs * s.degree // 2)
    _poisson(run, s.link_fail_per_minute * links / 60, t, t + s.faults, lambda: _cut(run))
    phase("faults", s.faults)
    phase("drain", s.drain)
    _joins(run)
    return summarize(run)


def _count_keyed_control(world: World, key: str) -> list[int]:
    """Count, per hop, the routed INTEREST/WATCH/INTEREST_SET/JOINED frames about ``key`` from now
    on: what a join costs, apart from the control traffic of other keys that the same seconds
    carry (periodic rechecks, owners changing after restarts)."""
    count = [0]
    kinds = tuple(getattr(wire, name) for name in ("Interest", "Watch", "InterestSet", "Joined"))

    def tap(frame: bytes) -> None:
        if frame[0] == wire.Opcode.ROUTED:
            routed = wire.Routed.decode_body(frame[wire.HEADER_SIZE :])
            inner = routed.inner if isinstance(routed, wire.Routed) else None
            if isinstance(inner, kinds) and inner.key == key:
                count[0] += 1

    world.taps.append(tap)
    return count


def _joins(run: Run) -> None:
    """Hubs join published topics one at a time; each join's interest frames and first delivery."""
    world = run.world
    rng = world.rng
    run.phase_marks["joins"] = world.clock.now
    candidates = [tp for tp in run.topics if tp.name.startswith("team")]
    for _ in range(run.settings.joins if candidates else 0):
        topic = rng.choice(candidates)
        publisher = topic.publishers[0]
        hubs = [h.hub_id for h in world.up_hubs() if topic.name not in h.patterns and h.hub_id != publisher]
        if not hubs or not world.hubs[publisher].up:
            continue
        joiner = rng.choice(hubs)
        before = world.counters()
        begin = world.clock.now
        seen = len(world.deliveries)
        key = rendezvous_key(topic.name)
        keyed = _count_keyed_control(world, key)
        world.subscribe(joiner, topic.name)
        first: float | None = None
        for step in range(40):  # publish every 50 ms for 2 s
            world.loop.at(begin + 0.05 * step, lambda tp=topic: _publisher(run, tp)())
        world.loop.run_until(begin + 2.0)
        for d in world.deliveries[seen:]:
            if d.hub == joiner and d.topic == topic.name:
                first = d.at - begin
                break
        after = world.counters()
        del world.taps[:]
        frames = sum(after.get(k, 0) - before.get(k, 0) for k in INTEREST_KINDS)
        first_s = first if first is not None else math.nan
        run.join_results.append({"interest_frames": frames, "join_frames": keyed[0], "first_delivery_s": first_s})
        world.loop.run_until(world.clock.now + 1.0)
