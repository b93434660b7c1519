"""Turn ``pub0sub bench ... --json`` output into the Markdown tables of docs/benchmarks.md.

    .venv/bin/pub0sub bench T1 T2 L1 R1 D1 --json --repeat 3 > bench.jsonl
    .venv/bin/python docs/tools/bench_tables.py bench.jsonl [--plot docs/benchmarks.png]

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


def plot(path: str, out: str) -> None:
    """Throughput of every system per scenario, log scale: one bar chart per scenario."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(path) as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    wanted = [s for s in ("T1", "T2", "M1", "R1", "D1", "S1") if any(r["scenario"] == s for r in rows)]
    fig, axes = plt.subplots(1, len(wanted), figsize=(3.2 * len(wanted), 4.2), squeeze=False)
    for ax, scenario in zip(axes[0], wanted, strict=True):
        mine = [r for r in rows if r["scenario"] == scenario and r["median"]]
        names = [r["system"] for r in mine]
        values = [r["median"] for r in mine]
        colours = ["tab:blue" if n.startswith("pub0sub") else "tab:gray" for n in names]
        ax.bar(range(len(values)), values, color=colours)
        ax.set_yscale("log")
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
        ax.set_title(f"{scenario} ({mine[0]['figure']['unit']})", fontsize=9)
    fig.suptitle("pub0sub (blue) beside its peers, medians of 3, one run", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1])
    if "--plot" in sys.argv:
        plot(sys.argv[1], sys.argv[sys.argv.index("--plot") + 1])
