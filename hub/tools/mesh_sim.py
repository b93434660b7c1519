"""Simulate many hubs running the real overlay core (mesh v3) and print what happened.

    python -m hub.tools.mesh_sim --hubs 1000 --seed 7
    python -m hub.tools.mesh_sim --hubs 50 --faults 60 --json sim.json --plot sim.png
    python -m hub.tools.mesh_sim --hubs 300 --form 10 --formation

Deterministic by seed: the same seed and settings print the same figures (except the
CPU time).  See ``hub/tools/sim/scenario.py`` for the phases and the topic mix, and
``docs/scale.md`` for what the figures mean.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from .sim.latency import MODELS
from .sim.scenario import Run, SimSettings, execute, formation


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hub.tools.mesh_sim", description=__doc__.split("\n\n")[0])
    d = SimSettings()
    p.add_argument("--hubs", type=int, default=d.hubs)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--degree", type=int, default=d.degree)
    p.add_argument("--max-peers", type=int, default=d.max_peers)
    p.add_argument("--shortcuts", type=int, default=d.shortcuts, help="shortcuts per hub (0: none)")
    p.add_argument("--link-trials", type=float, default=d.link_trials,
                   help="seconds between a hub's trial links for faster ones (0: none)")
    p.add_argument("--latency-model", choices=MODELS, default=d.latency_model,
                   help="latencies drawn per pair of hubs, or from hubs' places in a plane (hub/tools/sim/latency.py)")
    p.add_argument("--form", type=float, default=d.form, help="seconds for the overlay to form")
    p.add_argument("--warm", type=float, default=d.warm, help="seconds of traffic before the steady figures")
    p.add_argument("--steady", type=float, default=d.steady, help="seconds of traffic without faults")
    p.add_argument("--faults", type=float, default=d.faults, help="seconds of traffic with faults")
    p.add_argument("--drain", type=float, default=d.drain, help="seconds after the faults, no traffic")
    p.add_argument("--joins", type=int, default=d.joins)
    p.add_argument("--crash-per-minute", type=float, default=d.crash_per_minute)
    p.add_argument("--link-fail-per-minute", type=float, default=d.link_fail_per_minute)
    p.add_argument("--global-rate", type=float, default=d.global_rate)
    p.add_argument("--few-rate", type=float, default=d.few_rate)
    p.add_argument("--pair-rate", type=float, default=d.pair_rate)
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--plot", type=Path, help="draw latency and delivery over time here (needs matplotlib)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--formation", action="store_true", help="only the overlay forming (--form seconds): its "
                   "degree, advertisements and link changes, as JSON")  # fmt: skip
    return p


def _plain(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = SimSettings(
        hubs=args.hubs,
        seed=args.seed,
        degree=args.degree,
        max_peers=args.max_peers,
        shortcuts=args.shortcuts,
        link_trials=args.link_trials,
        latency_model=args.latency_model,
        form=args.form,
        warm=args.warm,
        steady=args.steady,
        faults=args.faults,
        drain=args.drain,
        joins=args.joins,
        crash_per_minute=args.crash_per_minute,
        link_fail_per_minute=args.link_fail_per_minute,
        global_rate=args.global_rate,
        few_rate=args.few_rate,
        pair_rate=args.pair_rate,
    )
    if args.formation:
        print(json.dumps(formation(settings)))
        return 0
    started = time.monotonic()

    def progress(phase: str, t: float, run: Run) -> None:
        if args.quiet:
            return
        world = run.world
        degrees = world.degrees()
        print(f"  {phase:<7} t={t:6.1f}s  hubs up {len(degrees):>4}/{settings.hubs}  "
              f"mean degree {sum(degrees) / max(1, len(degrees)):5.2f}  published {len(run.published):>7,}  "
              f"delivered {len(world.deliveries):>9,}  events {world.loop.events:>10,}  "
              f"wall {time.monotonic() - started:6.1f}s", file=sys.stderr, flush=True)  # fmt: skip

    report = execute(settings, progress)
    report.figures["wall_s"] = time.monotonic() - started
    for line in report.lines():
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps(_plain(report.figures), indent=2) + "\n")
    if args.plot is not None:
        from .sim.plot import draw

        draw(report, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
