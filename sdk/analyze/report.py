"""``report.md`` / ``report.html`` and their PNG plots, from the job's small tables.

The report is built once as a list of blocks (headings, text, tables, images) and rendered
twice, so the Markdown and the HTML never disagree.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .job import BINS_PER_DECADE

if TYPE_CHECKING:
    import pandas as pd

    from .job import Result

#: Above this many seconds the rate plot averages per minute: a week of per-second points is unreadable.
PER_SECOND_PLOT_LIMIT = 6 * 3600
#: Segment files listed in the report; the rest are counted.
MAX_FILES_LISTED = 50


@dataclass
class Block:
    kind: str  # "h2", "p", "table", "image", "code"
    text: str = ""
    header: Sequence[str] = ()
    rows: Sequence[Sequence[str]] = ()


# -- formatting ---------------------------------------------------------------------------------

def fmt_count(value: Any) -> str:
    return "" if _missing(value) else f"{int(value):,}"


def fmt_bytes(value: Any) -> str:
    if _missing(value):
        return ""
    size = float(value)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def fmt_us(value: Any) -> str:
    """A latency in µs, in the unit that keeps it readable."""
    if _missing(value):
        return ""
    us = float(value)
    if abs(us) < 1_000:
        return f"{us:.0f} µs"
    if abs(us) < 1_000_000:
        return f"{us / 1_000:.2f} ms"
    return f"{us / 1_000_000:.2f} s"


def fmt_rate(value: Any) -> str:
    return "" if _missing(value) else f"{float(value):,.0f}"


def fmt_time(us: Any) -> str:
    if _missing(us):
        return ""
    return datetime.fromtimestamp(int(us) / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _all(value: Any) -> str:
    return "all" if _missing(value) else str(value)


# -- plots --------------------------------------------------------------------------------------

def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    return plt


LINE_STYLES = ("-", "--", ":", "-.")


def _tick_us(value: float) -> str:
    if value < 1_000:
        return f"{value:g} µs"
    if value < 1_000_000:
        return f"{value / 1_000:g} ms"
    return f"{value / 1_000_000:g} s"


def _log_us_axis(axis: Any) -> None:
    """A log axis in µs labelled 1-2-5 in readable units (µs, ms, s), without crowded minor labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _pos: _tick_us(value)))
    axis.set_minor_formatter(NullFormatter())


def plot_rates(rates: pd.DataFrame, path: Path) -> bool:
    if rates.empty:
        return False
    import matplotlib.dates as mdates
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    plt = _pyplot()
    span = int(rates["second"].max() - rates["second"].min()) + 1
    step = 60 if span > PER_SECOND_PLOT_LIMIT else 1
    hubs = sorted(rates["hub_id"].unique())
    fig, ax = plt.subplots(figsize=(10, 4.8))
    for (hub, topic), group in rates.groupby(["hub_id", "topic"], sort=True):
        buckets = (group["second"] // step) * step
        counts = group.groupby(buckets)["count"].sum() / step
        # Seconds with no message are zeros, not a line drawn across the gap.
        full = range(int(counts.index.min()), int(counts.index.max()) + step, step)
        counts = counts.reindex(full, fill_value=0)
        edges = np.append(counts.index.to_numpy(), counts.index[-1] + step).astype("datetime64[s]")
        # Copies of one topic on several hubs often coincide: a line style per hub keeps both visible.
        ax.stairs(counts.to_numpy(), mdates.date2num(edges), label=f"{topic} @ hub {str(hub)[-6:]}",
                  linewidth=1.6, linestyle=LINE_STYLES[hubs.index(hub) % len(LINE_STYLES)], baseline=None)
    ax.xaxis.set_major_locator(mdates.AutoDateLocator())
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S" if span < 2 * 86400 else "%m-%d %H:%M"))
    ax.set_title("Messages per second by origin timestamp" + (" (per-minute average)" if step > 1 else ""))
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel("messages/s")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:,.0f}"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_bytes(topics: pd.DataFrame, path: Path) -> bool:
    if topics.empty:
        return False
    plt = _pyplot()
    table = topics.pivot_table(index="topic", columns="hub_id", values="bytes", aggfunc="sum", fill_value=0)
    table = table.loc[table.sum(axis=1).sort_values().index]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(table) + 1.6))
    left = [0.0] * len(table)
    for hub in table.columns:
        values = table[hub].to_numpy() / 1e6
        ax.barh(table.index, values, left=left, label=f"hub {str(hub)[-6:]}")
        left = [a + b for a, b in zip(left, values, strict=True)]
    for y, total in enumerate(left):
        ax.annotate(fmt_bytes(total * 1e6), (total, y), xytext=(4, 0), textcoords="offset points", va="center",
                    fontsize="small")
    ax.set_xlim(0, max(left) * 1.18 if max(left) > 0 else 1)
    ax.set_title("Payload bytes (key + data) per topic, stacked by hub")
    ax.set_xlabel("MB")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_latency(latency: pd.DataFrame, histogram: pd.DataFrame, path: Path) -> bool:
    if latency.empty:
        return False
    import numpy as np

    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for topic, group in histogram.groupby("topic", sort=True):
        bins = group.set_index("bin")["count"]
        # Empty bins between used ones are zeros: a step must not bridge them.
        bins = bins.reindex(range(int(bins.index.min()), int(bins.index.max()) + 1), fill_value=0)
        edges = 10.0 ** (np.arange(bins.index[0], bins.index[-1] + 2) / BINS_PER_DECADE)
        left.stairs(bins.to_numpy() / bins.sum() * 100, edges, label=str(topic), linewidth=1.6)
    left.set_xscale("log")
    _log_us_axis(left.xaxis)
    left.set_xlabel("publish-to-append latency (log scale)")
    left.set_ylabel("% of the topic's messages")
    left.set_title("Latency histogram (all hubs)")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize="small")

    per_topic = latency[latency["hub_id"].isna()].copy()
    per_topic["label"] = per_topic["topic"].map(_all)
    names = [("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9")]
    width = 0.8 / len(names)
    xs = range(len(per_topic))
    for i, (column, label) in enumerate(names):
        values = per_topic[column].clip(lower=1).to_numpy()
        right.bar([x + (i - 1.5) * width for x in xs], values, width=width, label=label)
    right.set_xticks(list(xs), per_topic["label"].tolist(), rotation=20, ha="right")
    right.set_yscale("log")
    _log_us_axis(right.yaxis)
    low = float(per_topic[[c for c, _ in names]].clip(lower=1).min().min())
    right.set_ylim(bottom=max(0.5, low / 2))
    right.set_ylabel("latency (log scale)")
    right.set_title("Latency percentiles per topic (all hubs)")
    right.grid(True, axis="y", which="both", alpha=0.3)
    right.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# -- the report ---------------------------------------------------------------------------------

PROBLEM_NAMES = {
    "checksum": "corrupted batch (CRC mismatch): skipped",
    "bad_batch": "malformed batch: skipped",
    "torn_tail": "torn tail (incomplete last write)",
    "unreadable": "unreadable from here to the end of the file",
}


def _relative(path: str, hubs: Sequence[Any]) -> str:
    for hub in hubs:
        prefix = str(hub.path) + os.sep
        if path.startswith(prefix):
            return f"{hub.path.name}/{path[len(prefix):]}"
    return path


def build(result: Result, images: dict[str, str]) -> list[Block]:
    tables = result.tables
    topics, latency, rates = tables["topics"], tables["latency"], tables["rates"]
    blocks = [Block("h1", "pub0sub log analysis")]
    hubs = ", ".join(f"`{h.path}` (hub {h.hub_id})" for h in result.hubs)
    t = result.timings
    blocks.append(Block("table", header=("", ""), rows=[
        ("hub data directories", hubs),
        ("Spark master", f"`{result.master}`"),
        ("segment files", f"{result.files:,} ({fmt_bytes(result.bytes)})"),
        ("records decoded", f"{result.rows:,}"),
        ("problems", f"{len(result.problems)}" + (" (see below)" if result.problems else "")),
        ("decode + write messages", f"{t.get('decode', 0):.1f} s ({result.decode_rate:,.0f} records/s)"),
        ("aggregates", f"{t.get('aggregate', 0):.1f} s"),
        ("generated", datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")),
    ]))

    blocks.append(Block("h2", "Problems"))
    if result.problems:
        blocks.append(Block("p", "Corrupted batches were counted and skipped: none of their records is in any "
                                 "table. Decoding went on after each one at the next frame, as hub recovery does."))
        blocks.append(Block("table", header=("file", "position", "bytes", "what", "detail"), rows=[
            (_relative(p["path"], result.hubs), f"{p['position']:,}", f"{p['length']:,}",
             PROBLEM_NAMES.get(p["kind"], p["kind"]), f"{p['code']}: {p['reason']}")
            for p in result.problems
        ]))
    else:
        blocks.append(Block("p", "None: every LOG_BATCH checksum matched and no file ends in a torn write."))

    blocks.append(Block("h2", "Topics"))
    blocks.append(Block("p", "Per hub and topic. `bytes` counts payload (key + data); `rate` is messages per "
                             "second between the first and last origin timestamp; `forwarded` counts messages "
                             "whose origin is another hub."))
    blocks.append(Block("table", header=("hub", "topic", "messages", "bytes", "offsets", "first", "last", "rate/s",
                                         "bytes/s", "forwarded"), rows=[
        (r.hub_id, r.topic, fmt_count(r.count), fmt_bytes(r.bytes), f"{r.first_offset:,}..{r.last_offset:,}",
         fmt_time(r.first_timestamp), fmt_time(r.last_timestamp), fmt_rate(r.rate), fmt_bytes(r.bytes_per_s),
         fmt_count(r.forwarded))
        for r in topics.itertuples()
    ]))
    if "bytes" in images:
        blocks.append(Block("image", images["bytes"], header=("Payload bytes per topic",)))

    blocks.append(Block("h2", "Rates"))
    if not rates.empty:
        peaks = rates.groupby(["hub_id", "topic"])["count"].agg(["max", "mean", "size"]).reset_index()
        blocks.append(Block("p", "Messages per one-second bucket of origin timestamp (full table: `rates/`)."))
        blocks.append(Block("table", header=("hub", "topic", "seconds with traffic", "mean/s", "peak/s"), rows=[
            (r.hub_id, r.topic, fmt_count(r.size), fmt_rate(r.mean), fmt_count(r.max)) for r in peaks.itertuples()
        ]))
    if "rates" in images:
        blocks.append(Block("image", images["rates"], header=("Messages per second",)))

    blocks.append(Block("h2", "Latency"))
    blocks.append(Block("p", "Publish-to-append latency: the hub's `append_ts` minus the batch `timestamp` (the "
                             "origin hub's accept time). For a forwarded copy this includes the mesh hop and any "
                             "clock difference between the hubs; `negative` counts values below zero. `all` rows "
                             "combine hubs or topics."))
    blocks.append(Block("table", header=("topic", "hub", "messages", "min", "mean", "p50", "p90", "p99", "p99.9",
                                         "max", "negative"), rows=[
        (_all(r.topic), _all(r.hub_id), fmt_count(r.count), fmt_us(r.min), fmt_us(r.mean), fmt_us(r.p50),
         fmt_us(r.p90), fmt_us(r.p99), fmt_us(r.p999), fmt_us(r.max), fmt_count(r.negative))
        for r in latency.itertuples()
    ]))
    if "latency" in images:
        blocks.append(Block("image", images["latency"], header=("Latency",)))

    blocks.append(Block("h2", "Segment files"))
    listed = result.file_summaries[:MAX_FILES_LISTED]
    blocks.append(Block("table", header=("file", "topic", "base offset", "batches", "records", "size", "problems"),
                        rows=[(_relative(f["path"], result.hubs), str(f["topic"]), fmt_count(f["base_offset"]),
                               fmt_count(f["batches"]), fmt_count(f["records"]), fmt_bytes(f["bytes"]),
                               fmt_count(f["problems"])) for f in listed]))
    if len(result.file_summaries) > len(listed):
        blocks.append(Block("p", f"... and {len(result.file_summaries) - len(listed):,} more files."))

    blocks.append(Block("h2", "Tables"))
    blocks.append(Block("p", "Parquet, next to this report: `messages/` (one row per record), `topics/`, `rates/`, "
                             "`latency/`, `latency_histogram/`. Read them with Spark, pandas or DuckDB."))
    return blocks


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if b.kind == "h1":
            out.append(f"# {b.text}\n")
        elif b.kind == "h2":
            out.append(f"## {b.text}\n")
        elif b.kind == "p":
            out.append(b.text + "\n")
        elif b.kind == "image":
            out.append(f"![{b.header[0] if b.header else ''}]({b.text})\n")
        elif b.kind == "table":
            lines = ["| " + " | ".join(_md_cell(h) for h in b.header) + " |", "|" + "---|" * len(b.header)]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines) + "\n")
    return "\n".join(out)


def _inline_code(text: str) -> str:
    # `x` -> <code>x</code>; everything else escaped
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:14px}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#f3f3f3}"
    "img{max-width:100%;border:1px solid #eee}code{background:#f5f5f5;padding:0 3px}"
)


def render_html(blocks: Sequence[Block]) -> str:
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>pub0sub log analysis</title>",
           f"<style>{STYLE}</style></head><body>"]
    for b in blocks:
        if b.kind in ("h1", "h2"):
            out.append(f"<{b.kind}>{html.escape(b.text)}</{b.kind}>")
        elif b.kind == "p":
            out.append(f"<p>{_inline_code(b.text)}</p>")
        elif b.kind == "image":
            out.append(f"<p><img src='{html.escape(b.text)}' alt='{html.escape(b.header[0] if b.header else '')}'></p>")
        elif b.kind == "table":
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b.header)
            body = "".join("<tr>" + "".join(f"<td>{_inline_code(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            out.append(f"<table><tr>{head}</tr>{body}</table>")
    out.append("</body></html>")
    return "\n".join(out)


def write_report(result: Result, out: Path) -> dict[str, Path]:
    """Plots and both report files under ``out``; returns what was written."""
    tables = result.tables
    images: dict[str, str] = {}
    if plot_rates(tables["rates"], out / "rates.png"):
        images["rates"] = "rates.png"
    if plot_bytes(tables["topics"], out / "bytes.png"):
        images["bytes"] = "bytes.png"
    if plot_latency(tables["latency"], tables["latency_histogram"], out / "latency.png"):
        images["latency"] = "latency.png"
    blocks = build(result, images)
    (out / "report.md").write_text(render_markdown(blocks))
    (out / "report.html").write_text(render_html(blocks))
    written = {name: out / file for name, file in images.items()}
    written["report.md"] = out / "report.md"
    written["report.html"] = out / "report.html"
    return written
