"""Turn ``pub0sub bench ... --json`` output into the Markdown tables of docs/benchmarks.md.

    .venv/bin/pub0sub bench T1 T2 L1 R1 D1 --json --repeat 3 > bench.jsonl
    .venv/bin/python docs/tools/bench_tables.py bench.jsonl

Every row of one table comes from the same run, so the ratios compare systems
measured side by side.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def human(value: float, unit: str) -> str:
    if unit == "us":
        return f"{value:,.0f}"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e3:
        return f"{value / 1e3:.0f}k"
    return f"{value:.0f}"


def main(path: str) -> None:
    by_scenario: dict[str, list[dict]] = defaultdict(list)  # type: ignore[type-arg]
    with open(path) as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                by_scenario[row["scenario"]].append(row)
    for scenario, rows in by_scenario.items():
        figure_names = [f["name"] for f in rows[0]["figures"]]
        unit = rows[0]["figures"][0]["unit"]
        print(f"### {scenario}\n")
        head = " | ".join(f"{n} ({unit}) (spread)" for n in figure_names)
        print(f"| system | tooling | {head} | ratio of {figure_names[0]} to |")
        print("|---|---|" + "---|" * len(figure_names) + "---|")
        for row in rows:
            cells = " | ".join(
                f"{human(f['median'], f['unit'])} ({f['spread'] * 100:.0f}%)" for f in row["figures"]
            )
            ratios = ", ".join(f"{k} {v:.2f}x" for k, v in sorted(row["ratio_to"].items()))
            print(f"| `{row['system']}` | {row['tooling']} | {cells} | {ratios or '-'} |")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
