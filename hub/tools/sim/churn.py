"""How link changes die down after an overlay forms: trial links kept and LINK_STATE frames sent
per window, and the mean latency of a link, with the scenario's traffic running.

``python -m hub.tools.sim.churn --hubs 100 --seed 5 --seconds 420`` (``--link-trials 0``: the
same world without trials).  One row per window; docs/scale.md, "Trial links", has a run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .latency import MODELS
from .run import SimSettings
from .scenario import build, schedule_starts, schedule_traffic


def main(argv: Sequence[str] | None = None) -> int:
    d = SimSettings()
    p = argparse.ArgumentParser(prog="python -m hub.tools.sim.churn", description=__doc__.split("\n\n")[0])
    p.add_argument("--hubs", type=int, default=100)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--seconds", type=float, default=420.0, help="simulated seconds from the first hub's start")
    p.add_argument("--window", type=float, default=30.0)
    p.add_argument("--link-trials", type=float, default=d.link_trials, help="seconds between trials (0: none)")
    p.add_argument("--latency-model", choices=MODELS, default=d.latency_model)
    args = p.parse_args(argv)
    settings = SimSettings(hubs=args.hubs, seed=args.seed, link_trials=args.link_trials,
                           latency_model=args.latency_model)  # fmt: skip
    run = build(settings)
    world = run.world
    schedule_starts(run)
    schedule_traffic(run, settings.form, args.seconds)
    kept = sent = 0
    print("until_s  trials_kept  link_state_frames  mean_link_ms")
    t = 0.0
    while t < args.seconds:
        t = min(t + args.window, args.seconds)
        world.loop.run_until(t)
        overlays = [h.overlay for h in world.up_hubs() if h.overlay is not None]
        now_kept = sum(o.policy.trials_kept for o in overlays)
        now_sent = sum(o.outbox.sent_frames.get("LINK_STATE", 0) for o in overlays)
        costs = [o.policy.link_cost(hub) for o in overlays for hub in o.links]
        mean_ms = sum(costs) / len(costs) / 10 if costs else 0.0  # cost units are 100 µs
        print(f"{t:7.0f}  {now_kept - kept:11d}  {now_sent - sent:17d}  {mean_ms:12.1f}", flush=True)
        kept, sent = now_kept, now_sent
    return 0


if __name__ == "__main__":
    sys.exit(main())
