"""The simulator's report as a picture: delivery and p99 latency over the run, phases marked."""

from __future__ import annotations

from pathlib import Path

from .report import TIMELINE_STEP, Report


def draw(report: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    f = report.figures
    points = f["timeline"]
    t = [p["t"] + TIMELINE_STEP / 2 for p in points]
    ratio = [p["delivered"] / p["expected"] if p["expected"] else 1.0 for p in points]
    p99 = [p["p99_ms"] for p in points]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    top.plot(t, ratio, marker=".", color="tab:green")
    top.set_ylabel("delivered / expected")
    top.set_ylim(min(0.99, *ratio) - 0.001, 1.0005)
    bottom.plot(t, p99, marker=".", color="tab:blue", label="publish -> deliver p99")
    bottom.axhline(f["latency_ms"]["direct_p99"], color="grey", linestyle="--", label="direct send p99")
    bottom.set_ylabel("ms (log)")
    bottom.set_yscale("log")
    bottom.set_xlabel("publish time (simulated s)")
    bottom.legend(loc="upper left")
    for axis in (top, bottom):
        for name, at in f["phases"].items():
            axis.axvline(at, color="black", linewidth=0.5, alpha=0.4)
            if axis is top:
                axis.annotate(name, (at, 1.0), fontsize=8, rotation=90, va="top")
    d = f["delivery"]
    fig.suptitle(
        f"{f['hubs']} hubs, seed {f['seed']}: delivery {d['ratio']:.5f}, duplicates {d['duplicates']}, "
        f"FIFO violations {d['fifo_violations']}, redundancy {f['redundancy_steady']:.3f}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
