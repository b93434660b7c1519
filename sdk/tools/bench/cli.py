"""``pub0sub bench SCENARIO... [--json] [--messages N] [--seconds S] [--tick S] [--repeat K] [--size B] [--quick]``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ..stopping import run_until_stopped
from . import scenarios as _scenarios  # noqa: F401  (fills the registry)
from .procs import stop_spawned
from .registry import SCENARIOS, Params
from .results import Summary, fill_ratios
from .runner import run


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Measure pub0sub beside its peers (raw relay, Redis, NATS) in one run; report medians, "
        "spreads and ratios.",
        epilog="scenarios: " + "; ".join(f"{s.id}: {s.title}" for s in SCENARIOS.values()),
    )
    parser.add_argument("scenarios", nargs="+", metavar="SCENARIO", help=f"one of {', '.join(SCENARIOS)}, or all")
    parser.add_argument("--json", action="store_true", help="one JSON object per (scenario, system) line")
    parser.add_argument("--messages", type=int, help="messages per measurement (T1; per subscriber in T2; "
                        "records in wire)")  # fmt: skip
    parser.add_argument("--seconds", type=float, help="length of a paced L1 run (default 5)")
    parser.add_argument("--tick", type=float, default=0.001,
                        help="L1/L2 publishers' shortest sleep in seconds (default 0.001; 0: sleep exactly until "
                             "the next message is due, which spins at 10k msgs/s)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, help="repeats per system, alternating (default 3)")
    parser.add_argument("--size", type=int, default=64, help="payload bytes (default 64)")
    parser.add_argument("--timeout", type=float, default=60.0, help="time limit of one measurement (default 60)")
    parser.add_argument("--quick", action="store_true", help="tiny counts: a smoke run, not a benchmark")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub bench") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    ids = list(SCENARIOS) if "all" in args.scenarios else args.scenarios
    unknown = [s for s in ids if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)} (choose from {', '.join(SCENARIOS)})")
    if args.repeat < 1 or args.size < 8 or (args.messages is not None and args.messages < 1):
        parser.error("--repeat and --messages must be >= 1 and --size >= 8 (L1 stamps 8 bytes)")
    if not 0 <= args.tick <= 1:
        parser.error("--tick must be between 0 and 1 second")
    params = Params(messages=args.messages, seconds=args.seconds, size=args.size, timeout=args.timeout,
                    quick=args.quick, tick=args.tick)  # fmt: skip

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    summaries: list[Summary] = []
    left: list[int] = []
    outcome = run_until_stopped(lambda: run(ids, params, repeat=args.repeat, progress=progress, into=summaries),
                                cleanup=lambda: left.extend(stop_spawned()))  # fmt: skip
    if left:
        progress(f"bench: stopped {len(left)} process(es) left running: {' '.join(map(str, left))}")
    if outcome.stopped:
        # The summary of a stopped run: the figures measured until then (the servers are stopped).
        summaries[:] = [s for s in summaries if s.samples]
        fill_ratios(summaries)
        progress(f"bench: stopped on {outcome.signal}; "
                 f"{'the figures measured so far' if summaries else 'nothing was measured yet'}")  # fmt: skip
    try:
        if args.json:
            for s in summaries:
                print(json.dumps(s.to_json()), flush=True)
        else:
            print_table(summaries)
    except BrokenPipeError:
        sys.stderr.close()
    return 0


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit.endswith("/s"):
        return f"{value / 1e6:.3f}M" if value >= 1e5 else f"{value:,.0f}"
    return f"{value:,.1f}"


def print_table(summaries: list[Summary]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="pub0sub bench (medians; spread = (max-min)/median)")
    for col in ("scenario", "system", "figure", "median", "spread", "other figures", "ratio to"):
        table.add_column(col)
    for s in summaries:
        name, unit = s.primary.name, s.primary.unit
        spread = s.spread(name)
        others = ", ".join(f"{f.name} {_fmt(s.median(f.name), f.unit)}" for f in s.specs if f != s.primary)
        ratios = ", ".join(f"{k} {v:.2f}x" for k, v in s.ratio_to.items())
        table.add_row(s.scenario, s.label, f"{name} ({unit})", _fmt(s.median(name), unit),
                      "-" if spread is None else f"{spread:.0%}", others, ratios)  # fmt: skip
    console = Console()
    # Off a terminal rich assumes 80 columns, which wraps every cell of this wide table.
    Console(width=max(console.width, 160)).print(table) if not console.is_terminal else console.print(table)
