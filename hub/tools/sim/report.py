"""What a simulated run measured: the same figures as the 50-hub test bed.

Delivery is judged against what should have arrived: every set published during
the traffic phases, at every hub whose subscriptions match its topic (the origin
itself excepted: it stores its own publishes).  Faults stop before the drain, so
by the end every hub is back and every set must be there, once, in order per
origin and topic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wire.frames.mesh_v3 import ROUTED_SETS_KINDS

from ...core.mesh.interest import InterestTable

if TYPE_CHECKING:
    from .run import Run
    from .world import World


#: Seconds of publish time per point of the report's timeline.
TIMELINE_STEP = 5.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


@dataclass
class Report:
    figures: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> list[str]:
        f = self.figures
        d, lat, j = f["delivery"], f["latency_ms"], f["joins"]
        return [
            f"hubs {f['hubs']}  seed {f['seed']}  simulated {f['simulated_s']:.0f} s  "
            f"events {f['events']:,}  cpu {f['cpu_s']:.1f} s",
            f"delivery {d['ratio']:.5f} ({d['delivered']:,}/{d['expected']:,})  duplicates {d['duplicates']}  "
            f"FIFO violations {d['fifo_violations']}  gaps given up {d['gaps_given_up']}  "
            f"messages their origins lacked {d['messages_lost']}",
            f"publish->deliver p50 {lat['p50']:.1f} ms  p99 {lat['p99']:.1f} ms  "
            f"(direct send p50 {lat['direct_p50']:.1f}  p99 {lat['direct_p99']:.1f}; p99 ratio {lat['p99_ratio']:.2f})",
            f"redundancy (steady) {f['redundancy_steady']:.4f}  control/payload bytes {f['control_over_payload']:.3f} "
            f"(steady {f['control_over_payload_steady']:.3f})",
            f"interest frames per join: of its key mean {j['join_frames_mean']:.1f} max {j['join_frames_max']}, "
            f"of any key in its 2 s mean {j['frames_mean']:.1f} max {j['frames_max']}  "
            f"first delivery p50 {j['first_p50_ms']:.0f} ms p99 {j['first_p99_ms']:.0f} ms",
            f"degree mean {f['degree_mean']:.2f} max {f['degree_max']}  shortcuts {f['shortcuts']} "
            f"(made {f['shortcuts_made']})  trial links kept {f['link_trials']['kept']} closed "
            f"{f['link_trials']['closed']}  connections max {f['connections_max']}  "
            f"state per hub: streams max {f['streams_max']}  held max {f['held_max']}  open gaps {f['open_gaps']}",
        ]


def _delta(run: Run, start: str, end: str) -> dict[str, float]:
    a, b = run.snapshots.get(start, {}), run.snapshots.get(end, {})
    return {k: b.get(k, 0) - a.get(k, 0) for k in b}


def _control_over_payload(counters: dict[str, float]) -> float:
    data = tuple(f"bytes:{kind}" for kind in ROUTED_SETS_KINDS)
    payload = sum(counters.get(k, 0) for k in data)
    control = sum(v for k, v in counters.items() if k.startswith("bytes:") and k not in data)
    return control / payload if payload else math.inf


def summarize(run: Run) -> Report:
    import time

    world = run.world
    marks = run.phase_marks
    interest: InterestTable[int] = InterestTable()
    for hub, patterns in run.patterns.items():
        interest.add(hub, patterns)
    traffic_start, traffic_end = marks["warm"], marks["drain"]
    steady_start, steady_end = marks["steady"], marks["faults"]
    expected: dict[tuple[int, int, str, int], float] = {}
    steady_expected = 0
    for origin, seq, topic, at in run.published:
        if not traffic_start <= at < traffic_end:
            continue
        for hub in interest.peers_for((topic,)):
            if hub != origin:
                expected[(hub, origin, topic, seq)] = at
                if steady_start <= at < steady_end:
                    steady_expected += 1
    #: bucket of publish time -> [expected, delivered, latencies in ms]
    timeline: dict[int, list[Any]] = {}
    seen: set[tuple[int, int, str, int]] = set()
    last: dict[tuple[int, int, str], int] = {}
    duplicates = fifo = 0
    latencies: list[float] = []
    direct: list[float] = []
    for d in world.deliveries:
        key = (d.hub, d.origin, d.topic, d.origin_seq)
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        stream = (d.hub, d.origin, d.topic)
        if last.get(stream, 0) > d.origin_seq:
            fifo += 1
        last[stream] = max(last.get(stream, 0), d.origin_seq)
        published_at = expected.get(key)
        if published_at is not None:
            bucket = timeline.setdefault(int(published_at // TIMELINE_STEP), [0, 0, []])
            bucket[1] += 1
            bucket[2].append((d.at - published_at) * 1000)
        if published_at is not None and steady_start <= published_at < steady_end:
            latencies.append((d.at - published_at) * 1000)
            direct.append(world.latency(d.origin, d.hub) * 1000)
    for published_at in expected.values():
        timeline.setdefault(int(published_at // TIMELINE_STEP), [0, 0, []])[0] += 1
    delivered = sum(1 for k in expected if k in seen)
    overall = world.counters()
    steady = _delta(run, "warm", "steady")
    degrees = world.degrees()
    sizes = [h.overlay.streams.state_size() for h in world.up_hubs() if h.overlay is not None]
    frames = [r["interest_frames"] for r in run.join_results]
    keyed = [r["join_frames"] for r in run.join_results]
    firsts = [r["first_delivery_s"] * 1000 for r in run.join_results if not math.isnan(r["first_delivery_s"])]
    p99, d99 = percentile(latencies, 99), percentile(direct, 99)
    figures: dict[str, Any] = {
        "hubs": run.settings.hubs,
        "seed": run.settings.seed,
        "latency_model": run.settings.latency_model,
        "link_trials_s": run.settings.link_trials,
        "simulated_s": world.clock.now,
        "events": world.loop.events,
        "cpu_s": time.process_time(),
        "delivery": {
            "expected": len(expected),
            "delivered": delivered,
            "ratio": delivered / len(expected) if expected else 1.0,
            "duplicates": duplicates,
            "fifo_violations": fifo,
            "gaps_given_up": int(overall.get("streams:gaps_lost", 0)),
            # what origins said they no longer had when asked to resend (hub/core/overlay/streams.py)
            "messages_lost": int(overall.get("streams:messages_lost", 0)),
        },
        "latency_ms": {
            "p50": percentile(latencies, 50),
            "p99": p99,
            "direct_p50": percentile(direct, 50),
            "direct_p99": d99,
            "p99_ratio": p99 / d99 if d99 else math.nan,
        },
        "redundancy_steady": (steady.get("payload_copies", 0) / steady_expected - 1) if steady_expected else math.nan,
        "control_over_payload": _control_over_payload(overall),
        "control_over_payload_steady": _control_over_payload(steady),
        "joins": {
            "count": len(frames),
            "frames_mean": sum(frames) / len(frames) if frames else math.nan,
            "frames_max": max(frames, default=0),
            "join_frames_mean": sum(keyed) / len(keyed) if keyed else math.nan,
            "join_frames_max": max(keyed, default=0),
            "first_p50_ms": percentile(firsts, 50),
            "first_p99_ms": percentile(firsts, 99),
        },
        "degree_mean": sum(degrees) / len(degrees) if degrees else 0.0,
        "degree_max": max(degrees, default=0),
        # links and shortcuts together: what max_peers bounds
        "connections_max": max(connections(world), default=0),
        "shortcuts": sum(len(h.overlay.shortcuts.live) for h in world.up_hubs() if h.overlay is not None) // 2,
        "shortcuts_made": world.shortcuts_made,
        # trial links (links.py) of the hubs up at the end: kept in place of a slower one, closed
        "link_trials": {k: sum(getattr(h.overlay.policy, f"trials_{k}") for h in world.up_hubs() if h.overlay)
                        for k in ("kept", "closed")},
        "streams_max": max((s for s, _ in sizes), default=0),
        "held_max": max((h for _, h in sizes), default=0),
        "open_gaps": sum(h.overlay.streams.open_gaps() for h in world.up_hubs() if h.overlay is not None),
        "frames_by_kind": {k: v for k, v in sorted(overall.items()) if k.isupper()},
        "bytes_by_kind": {k[6:]: v for k, v in sorted(overall.items()) if k.startswith("bytes:")},
        "dropped": {k[8:]: v for k, v in sorted(overall.items()) if k.startswith("dropped:")},
        "steady_redundancy_inputs": {"copies": steady.get("payload_copies", 0), "expected": steady_expected},
        "phases": dict(marks),
        "timeline": [
            {"t": b * TIMELINE_STEP, "expected": e, "delivered": n, "p99_ms": percentile(lat, 99)}
            for b, (e, n, lat) in sorted(timeline.items())
        ],
    }
    return Report(figures)


def connections(world: World) -> list[int]:
    """Links and shortcuts of each hub: what ``max_peers`` bounds."""
    return [len(h.overlay.links) + len(h.overlay.shortcuts.live) for h in world.up_hubs() if h.overlay is not None]
