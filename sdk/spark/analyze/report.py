"""``report.md`` / ``report.html`` and their PNG plots, from the job's small tables.

The report is built once as a list of blocks (headings, text, tables, images) and rendered
twice, so the Markdown and the HTML never disagree.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .job import BINS_PER_DECADE

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from .inputs import HubDir
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


def hub_names(hubs: Sequence[HubDir]) -> dict[str, str]:
    """Hub id -> the name people use: its data directory's name (``hub-1``, as ``pub0sub cluster up``
    and the demo name them), with as many parent directories as it takes to tell two apart."""
    names: dict[str, str] = {}
    for depth in range(1, max((len(h.path.parts) for h in hubs), default=1) + 1):
        names = {h.hub_id: "/".join(h.path.parts[-depth:]) for h in hubs}
        if len(set(names.values())) == len(names):
            break
    return names


def _hub(names: Mapping[str, str], hub_id: Any) -> str:
    """A hub's name; ``all`` for a rollup row; the id itself for a hub whose directory is not read."""
    return "all" if _missing(hub_id) else names.get(str(hub_id), str(hub_id))


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


def _log_us_axis(axis: Any, low: float, high: float) -> None:
    """A log axis in µs labelled in readable units (µs, ms, s), never so densely that labels touch.

    1-2-3-5-7 within a decade, 1-2-5 over up to three, one label per decade beyond (``numticks``
    then thins those too): a histogram from 1 µs to 5 ms labelled 1-2-5 had its labels run into
    each other.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    decades = math.log10(max(high, 1.0) / max(low, 1.0))
    subs = (1.0, 2.0, 3.0, 5.0, 7.0) if decades <= 1 else (1.0, 2.0, 5.0) if decades <= 3 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=10))
    axis.set_major_formatter(FuncFormatter(lambda value, _pos: _tick_us(value)))
    axis.set_minor_formatter(NullFormatter())


def _legend_outside(ax: Any, title: str, entries: int) -> None:
    """The legend right of the plot area, never over the data (the figure is saved with a tight box)."""
    ax.legend(title=title, fontsize="small", title_fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0.0, ncol=1 if entries <= 18 else 2)  # fmt: skip


def save_figure(fig: Figure | None, path: Path) -> bool:
    """Write ``fig`` as a PNG (False: no figure, nothing written)."""
    if fig is None:
        return False
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the box includes the legends outside the axes
    _pyplot().close(fig)
    return True


def rates_figure(rates: pd.DataFrame, names: Mapping[str, str]) -> Figure | None:
    """Messages per second, one line per (topic, hub); None without data."""
    if rates.empty:
        return None
    import matplotlib.dates as mdates
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    plt = _pyplot()
    span = int(rates["second"].max() - rates["second"].min()) + 1
    step = 60 if span > PER_SECOND_PLOT_LIMIT else 1
    hubs = sorted(rates["hub_id"].unique(), key=lambda hub: _hub(names, hub))  # hub-1, hub-2, ... in the legend
    fig, ax = plt.subplots(figsize=(10, 4.8))
    series = sorted(rates.groupby(["hub_id", "topic"]), key=lambda item: (hubs.index(item[0][0]), item[0][1]))
    for (hub, topic), group in series:
        buckets = (group["second"] // step) * step
        counts = group.groupby(buckets)["count"].sum() / step
        # Seconds with no message are zeros, not a line drawn across the gap.
        full = range(int(counts.index.min()), int(counts.index.max()) + step, step)
        counts = counts.reindex(full, fill_value=0)
        edges = np.append(counts.index.to_numpy(), counts.index[-1] + step).astype("datetime64[s]")
        # Copies of one topic on several hubs often coincide: a line style per hub keeps both visible.
        ax.stairs(counts.to_numpy(), mdates.date2num(edges), label=f"{topic} @ {_hub(names, hub)}",
                  linewidth=1.6, linestyle=LINE_STYLES[hubs.index(hub) % len(LINE_STYLES)], baseline=None)
    ax.xaxis.set_major_locator(mdates.AutoDateLocator())
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S" if span < 2 * 86400 else "%m-%d %H:%M"))
    ax.set_title("Messages per second by origin timestamp" + (" (per-minute average)" if step > 1 else ""))
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel("messages/s")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:,.0f}"))
    ax.grid(True, alpha=0.3)
    _legend_outside(ax, "topic @ hub", rates.groupby(["hub_id", "topic"]).ngroups)
    fig.autofmt_xdate()
    return fig


def bytes_figure(topics: pd.DataFrame, names: Mapping[str, str]) -> Figure | None:
    """Payload bytes per topic, stacked by hub; None without data."""
    if topics.empty:
        return None
    plt = _pyplot()
    table = topics.pivot_table(index="topic", columns="hub_id", values="bytes", aggfunc="sum", fill_value=0)
    table = table.loc[table.sum(axis=1).sort_values().index]
    table = table[sorted(table.columns, key=lambda hub: _hub(names, hub))]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(table) + 1.6))
    left = [0.0] * len(table)
    for hub in table.columns:
        values = table[hub].to_numpy() / 1e6
        ax.barh(table.index, values, left=left, label=_hub(names, hub))
        left = [a + b for a, b in zip(left, values, strict=True)]
    for y, total in enumerate(left):
        ax.annotate(fmt_bytes(total * 1e6), (total, y), xytext=(4, 0), textcoords="offset points", va="center",
                    fontsize="small")
    ax.set_xlim(0, max(left) * 1.18 if max(left) > 0 else 1)
    ax.set_title("Payload bytes (key + data) per topic, stacked by hub")
    ax.set_xlabel("MB")
    ax.grid(True, axis="x", alpha=0.3)
    _legend_outside(ax, "hub", len(table.columns))
    return fig


def latency_figure(latency: pd.DataFrame, histogram: pd.DataFrame) -> Figure | None:
    """Forwarded copies only (the job leaves out each origin's own 0 µs copies): histogram on top,
    percentiles per topic below as horizontal bars, so long topic names stay readable."""
    latency = latency[latency["count"] > 0]
    if latency.empty or histogram.empty:
        return None
    import numpy as np

    plt = _pyplot()
    per_topic = latency[latency["hub_id"].isna()].copy()
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(11, 4.2 + 0.45 * len(per_topic) + 1.4), height_ratios=(4.2, 0.45 * len(per_topic) + 1.4)
    )
    low, high = float("inf"), 1.0
    for topic, group in histogram.groupby("topic", sort=True):
        bins = group.set_index("bin")["count"]
        # Empty bins between used ones are zeros: a step must not bridge them.
        bins = bins.reindex(range(int(bins.index.min()), int(bins.index.max()) + 1), fill_value=0)
        edges = 10.0 ** (np.arange(bins.index[0], bins.index[-1] + 2) / BINS_PER_DECADE)
        low, high = min(low, float(edges[0])), max(high, float(edges[-1]))
        top.stairs(bins.to_numpy() / bins.sum() * 100, edges, label=str(topic), linewidth=1.6)
    top.set_xscale("log")
    _log_us_axis(top.xaxis, low, high)
    top.set_xlabel("publish-to-append latency (log scale)")
    top.set_ylabel("% of the topic's copies")
    top.set_title("Forwarded copies: from the origin hub's accept to the append on another hub")
    top.grid(True, which="both", alpha=0.3)
    _legend_outside(top, "topic", histogram["topic"].nunique())

    names = [("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9")]
    height = 0.8 / len(names)
    ys = np.arange(len(per_topic))
    values = per_topic[[c for c, _ in names]].clip(lower=1)
    for i, (column, label) in enumerate(names):
        bottom.barh(ys + (i - 1.5) * height, values[column].to_numpy(), height=height, label=label)
    bottom.set_yticks(ys, ["all topics" if _missing(t) else str(t) for t in per_topic["topic"]])
    bottom.invert_yaxis()  # first topic on top, as in the tables
    bottom.set_xscale("log")
    _log_us_axis(bottom.xaxis, float(values.min().min()), float(values.max().max()))
    bottom.set_xlim(left=max(0.5, float(values.min().min()) / 2))
    bottom.set_xlabel("latency (log scale)")
    bottom.set_title("Latency percentiles per topic, forwarded copies on all hubs")
    bottom.grid(True, axis="x", which="both", alpha=0.3)
    _legend_outside(bottom, "percentile", len(names))
    fig.tight_layout()
    return fig


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


def _by_hub_name(frame: pd.DataFrame, names: Mapping[str, str]) -> pd.DataFrame:
    """Rows in the order people count hubs (hub-1, hub-2, ...), then by topic."""
    return frame.assign(_hub=[_hub(names, h) for h in frame["hub_id"]]).sort_values(["_hub", "topic"], kind="stable")


def build(result: Result, images: dict[str, str]) -> list[Block]:
    tables = result.tables
    topics, latency, rates = tables["topics"], tables["latency"], tables["rates"]
    names = hub_names(result.hubs)
    blocks = [Block("h1", "pub0sub log analysis")]
    hubs = ", ".join(f"{names[h.hub_id]} (`{h.path}`, id {h.hub_id})" for h in result.hubs)
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
                             "whose origin is another hub; `headers` counts messages published with headers "
                             "(the `headers` column of the `messages` table holds them)."))
    blocks.append(Block("table", header=("hub", "topic", "messages", "bytes", "offsets", "first", "last", "rate/s",
                                         "bytes/s", "forwarded", "headers"), rows=[
        (_hub(names, r.hub_id), r.topic, fmt_count(r.count), fmt_bytes(r.bytes),
         f"{r.first_offset:,}..{r.last_offset:,}", fmt_time(r.first_timestamp), fmt_time(r.last_timestamp),
         fmt_rate(r.rate), fmt_bytes(r.bytes_per_s), fmt_count(r.forwarded), fmt_count(r.with_headers))
        for r in _by_hub_name(topics, names).itertuples()
    ]))
    if "bytes" in images:
        blocks.append(Block("image", images["bytes"], header=("Payload bytes per topic",)))

    blocks.append(Block("h2", "Rates"))
    if not rates.empty:
        peaks = rates.groupby(["hub_id", "topic"])["count"].agg(["max", "mean", "size"]).reset_index()
        blocks.append(Block("p", "Messages per one-second bucket of origin timestamp (full table: `rates/`)."))
        blocks.append(Block("table", header=("hub", "topic", "seconds with traffic", "mean/s", "peak/s"), rows=[
            (_hub(names, r.hub_id), r.topic, fmt_count(r.size), fmt_rate(r.mean), fmt_count(r.max))
            for r in _by_hub_name(peaks, names).itertuples()
        ]))
    if "rates" in images:
        blocks.append(Block("image", images["rates"], header=("Messages per second",)))

    blocks.append(Block("h2", "Latency"))
    blocks.append(Block("p", "Publish-to-append latency of forwarded copies: the receiving hub's `append_ts` minus "
                             "the batch `timestamp` (the origin hub's accept time), so the mesh hop plus any clock "
                             "difference between the hubs; `negative` counts values below zero. A message's copy "
                             "on its own origin hub is left out: it is appended with its own timestamp, 0 µs by "
                             "construction (`topics` counts every copy). `all` rows combine hubs or topics."))
    timed = latency[latency["count"] > 0]
    if timed.empty:
        blocks.append(Block("p", "No forwarded copies in these directories: nothing to time. Analyze the data "
                                 "directories of the hubs the messages were forwarded to as well."))
    else:
        blocks.append(Block("table", header=("topic", "hub", "copies", "min", "mean", "p50", "p90", "p99",
                                             "p99.9", "max", "negative"), rows=[
            (_all(r.topic), _hub(names, r.hub_id), fmt_count(r.count), fmt_us(r.min), fmt_us(r.mean),
             fmt_us(r.p50), fmt_us(r.p90), fmt_us(r.p99), fmt_us(r.p999), fmt_us(r.max), fmt_count(r.negative))
            for r in timed.itertuples()
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
    names = hub_names(result.hubs)
    figures = {
        "rates": rates_figure(tables["rates"], names),
        "bytes": bytes_figure(tables["topics"], names),
        "latency": latency_figure(tables["latency"], tables["latency_histogram"]),
    }
    for name, fig in figures.items():
        if save_figure(fig, out / f"{name}.png"):
            images[name] = f"{name}.png"
    blocks = build(result, images)
    (out / "report.md").write_text(render_markdown(blocks))
    (out / "report.html").write_text(render_html(blocks))
    written = {name: out / file for name, file in images.items()}
    written["report.md"] = out / "report.md"
    written["report.html"] = out / "report.html"
    return written
