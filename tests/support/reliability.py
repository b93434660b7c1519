"""The long reliability run: RELIABILITY.md's scenarios at full length, with figures.

    python -m tests.support.reliability                 # everything (~25 minutes on 2 cores)
    python -m tests.support.reliability --only kill-loop --only attack
    python -m tests.support.reliability --all-plans     # every fault plan of the systematic search too

Steps (each prints one JSON line; the last line says how many held):

* ``kill-loop`` (scenario 1): 10 SIGKILLs of a hub under two idempotent producers.
* ``power-loss`` (2): 10 simulated power losses with ``--durability fsync``.
* ``client-pause`` (4): a durable consumer's process SIGSTOPped past the heartbeat bound.
* ``fault-plans`` (3, 4, 5): pause / kill / cut plans over a proxied 3-hub mesh (a sample of the
  systematic search, or all of it with ``--all-plans``) and the link plans (black hole, stall,
  delay, drop), judged by the history checker.
* ``attack`` (7, 8): 10,000 malformed connections, a flood past --max-connections, a slow drip
  and deaf subscribers against a live hub while a healthy producer's history is checked.
* ``healthy-throughput`` (7): a healthy client's acknowledged rate alone and under that attack
  from other source addresses (``hub.tools.bounds_bench attack --attacker-source 127.0.0.2``; run
  it under ``flock /tmp/pub0sub-bench.lock``).
* ``fuzz`` (8): the atheris target for ``--fuzz-seconds`` (600).

Every hub is a ``python -m hub`` subprocess on 127.0.0.1, stopped by its PID.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hub.tools.bounds_bench import bench_attack
from tests.support.faultplan import HARNESS_ORDER, LINK_PLANS, all_plans, run_plan
from tests.support.hubprocess import ROOT
from tests.support.scenarios import HubStarter, client_pause, kill_loop, power_loss_loop, survive_attack

#: The suite's sample of the systematic search (tests/test_mesh_faults.py) plus one order per fault kind alone.
PLAN_SAMPLE = [
    HARNESS_ORDER,
    ("cut h2-h3", "kill h2", "restart h2", "heal h2-h3"),
    ("kill h3", "pause h1", "restart h3", "resume h1"),
    ("pause h1", "cut h1-h3", "resume h1", "heal h1-h3"),
    ("pause h3", "resume h3"),
    ("kill h1", "restart h1"),
    ("cut h1-h2", "heal h1-h2"),
]


def step_kill_loop(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    starter = HubStarter()
    try:
        run = kill_loop(starter, tmp / "data", kills=args.kills, seed=int(time.time()))
    finally:
        starter.stop_all()
    row = run.row()
    row["held"] = run.verdict.valid and run.verdict.lost == 0 and row["restart_s_max"] < 5.0
    return row


def step_power_loss(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    starter = HubStarter()
    try:
        run = power_loss_loop(starter, tmp / "data", tmp / "journal", losses=args.kills)
    finally:
        starter.stop_all()
    row = run.row()
    row["held"] = run.verdict.valid and run.verdict.lost == 0
    return row


def step_client_pause(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    starter = HubStarter()
    try:
        figures = client_pause(starter, tmp / "data", heartbeat=0.5, messages=200)
    finally:
        starter.stop_all()
    offsets = figures.pop("offsets")
    dead = figures["declared_dead_after_s"]
    return {**figures, "offsets_read": len(set(offsets)), "skipped": 200 - len(set(offsets)),
            "held": dead is not None and dead <= figures["heartbeat_bound_s"] + 1.0 and len(set(offsets)) == 200}


def step_fault_plans(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    plans = (all_plans() if args.all_plans else PLAN_SAMPLE) + LINK_PLANS
    rows = []
    for n, plan in enumerate(plans):
        result = run_plan(plan, tmp / f"plan{n}")
        rows.append(result.row())
        print("   ", json.dumps(result.row()), flush=True)
    return {"plans": len(rows), "plans_held": sum(r["ok"] for r in rows),
            "acknowledged": sum(r["acknowledged"] for r in rows), "lost": sum(r["lost"] for r in rows),
            "duplicated": sum(r["duplicated"] for r in rows), "reordered": sum(r["reordered"] for r in rows),
            "unknown_ops": sum(r["unknown"] for r in rows), "held": all(r["ok"] for r in rows)}  # fmt: skip


def step_attack(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    starter = HubStarter()
    try:
        run = survive_attack(starter, tmp / "data", seconds=60, malformed=10_000)
    finally:
        starter.stop_all()
    row = run.row()
    row["held"] = (run.figures["hub_alive"] and run.figures["malformed_connections"] >= 10_000
                   and run.verdict.valid and run.verdict.lost == 0)  # fmt: skip
    return row


def step_healthy_throughput(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    # The attackers connect from 127.0.0.2.. and the healthy client from 127.0.0.1, so the hub's
    # per-address connection rate limit (on by default) tells them apart, as it would tell an
    # attacker's host from a client's.
    row = bench_attack(args.attack_seconds, ROOT, source="127.0.0.2")
    row["held"] = row["ratio"] >= 0.95
    return row


def step_fuzz(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    from tests.support.fuzz_decoders import seeds

    corpus = tmp / "corpus"
    corpus.mkdir()
    for seed in seeds():
        (corpus / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
    run = subprocess.run(
        [sys.executable, "-m", "tests.support.fuzz_decoders", f"-max_total_time={args.fuzz_seconds}", "-timeout=5",
         "-print_final_stats=1", f"-artifact_prefix={tmp}/", str(corpus)],
        capture_output=True, text=True, cwd=ROOT, timeout=args.fuzz_seconds + 300,
    )  # fmt: skip
    runs = re.search(r"stat::number_of_executed_units:\s*(\d+)", run.stderr)
    cov = re.findall(r"cov: (\d+)", run.stderr)
    crashes = [p.name for p in tmp.glob("crash-*")] + [p.name for p in tmp.glob("timeout-*")]
    return {"seconds": args.fuzz_seconds, "inputs": int(runs.group(1)) if runs else None,
            "coverage_edges": int(cov[-1]) if cov else None, "corpus": len(list(corpus.iterdir())),
            "crashes": crashes, "held": run.returncode == 0 and not crashes}  # fmt: skip


STEPS: dict[str, Callable[[Path, argparse.Namespace], dict[str, Any]]] = {
    "kill-loop": step_kill_loop,
    "power-loss": step_power_loss,
    "client-pause": step_client_pause,
    "fault-plans": step_fault_plans,
    "attack": step_attack,
    "healthy-throughput": step_healthy_throughput,
    "fuzz": step_fuzz,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.reliability", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(STEPS), help="run only this step (repeatable)")
    parser.add_argument("--all-plans", action="store_true", help="every plan of the systematic search (225 + link)")
    parser.add_argument("--kills", type=int, default=10, help="kills and power losses (default 10)")
    parser.add_argument("--fuzz-seconds", type=int, default=600)
    parser.add_argument("--attack-seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    failed = []
    for name in args.only or list(STEPS):
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"pub0sub-reliability-{name}-") as tmp:
            try:
                row = STEPS[name](Path(tmp), args)
            except Exception as exc:  # a step that could not finish has not held; say why
                row = {"held": False, "error": repr(exc)}
        row = {"step": name, **row, "seconds": round(time.monotonic() - started, 1),
               "load_average": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip
        print(json.dumps(row), flush=True)
        if not row["held"]:
            failed.append(name)
    ran = len(args.only or STEPS)
    print(f"{ran - len(failed)} of {ran} steps held" + (f"; failed: {', '.join(failed)}" if failed else ""),
          file=sys.stderr)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
