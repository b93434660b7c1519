"""``pub0sub analyze``: the segment decoder without Spark, then the whole job on ``local[2]``.

The data is written by ``tests/support/segments.py`` straight from ``wire`` encoders (no hub), so
every count, byte, timestamp and latency is known in advance.  The Spark tests share one
session-scoped ``local[2]`` session and one analyze run: the first session costs 8-14 s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from sdk.spark.analyze import cli  # noqa: E402
from sdk.spark.analyze.decode import (  # noqa: E402
    MESSAGE_COLUMNS,
    SCHEMA,
    SPARK_DDL,
    decode_segment,
    make_file_decoder,
)
from sdk.spark.analyze.inputs import find_hub_dirs, read_hub_id  # noqa: E402
from tests.support.segments import HUB_A, HUB_B, Expected, make_test_cluster  # noqa: E402

HUB_A_HEX, HUB_B_HEX = f"{HUB_A:016x}", f"{HUB_B:016x}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Expected]:
    root = tmp_path_factory.mktemp("cluster")
    return root, make_test_cluster(root)


def decode_dir(root: Path) -> pa.Table:
    batches = []
    for path in sorted(root.rglob("*.log")):
        hub = read_hub_id(path.parents[2])
        batches += decode_segment(path.read_bytes(), path=str(path), hub_id=hub)
    return pa.Table.from_batches(batches, schema=SCHEMA)


def messages_of(table: pa.Table) -> pa.Table:
    return table.filter(pa.compute.is_null(table["meta"]))


def metas_of(table: pa.Table) -> list[dict]:
    return [json.loads(m) for m in table.filter(pa.compute.is_valid(table["meta"]))["meta"].to_pylist()]


def percentile(values: list[int], q: float) -> float:
    """Exact, interpolated between the two nearest ranks: Spark's ``percentile`` and numpy's default."""
    return float(np.percentile(np.array(values), q * 100, method="linear"))


# -- the decoder, without Spark -----------------------------------------------------------------

def test_decode_gives_exact_rows(cluster: tuple[Path, Expected]) -> None:
    root, expected = cluster
    rows = messages_of(decode_dir(root)).to_pandas()
    assert len(rows) == expected.total == 6_000
    for (hub, topic), written in expected.written.items():
        got = rows[(rows.hub_id == hub) & (rows.topic == topic)].sort_values("offset")
        assert got["offset"].tolist() == written.offsets
        assert got["timestamp"].tolist() == written.timestamps
        assert got["latency_us"].tolist() == written.latencies
        assert (got["append_ts"] - got["timestamp"]).tolist() == written.latencies
        assert got["key_len"].tolist() == written.key_lens
        assert got["data_len"].tolist() == written.data_lens
    orders_b = rows[(rows.hub_id == HUB_B_HEX) & (rows.topic == "orders")]
    # The forwarded copy keeps the origin's id (above 2**63, so hex, never negative) and sequence.
    assert set(orders_b["origin"]) == {HUB_A_HEX}
    assert orders_b["origin_seq"].tolist() == list(range(1, 1_501))
    assert set(orders_b["producer_id"]) == {0}
    assert set(rows[(rows.hub_id == HUB_A_HEX) & (rows.topic == "orders")]["producer_id"]) == {77}


def test_decode_gives_the_headers_of_each_batch(tmp_path: Path) -> None:
    import wire
    from tests.support.corehub import CoreHub

    hub = CoreHub(tmp_path)
    block = wire.encode_headers({"trace": "4bf9", "raw": b"\x00"})
    sets = (
        wire.MessageSet.build(("t",), [(b"", b"a"), (b"", b"b")], headers=block),
        wire.MessageSet.build(("t",), [(b"", b"c")]),
    )
    hub.connect().send(wire.Publish(flags=wire.PublishFlags.HEADERS, sets=sets))
    hub.close()
    (path,) = tmp_path.glob("topics/*/*.log")
    rows = messages_of(pa.Table.from_batches(list(decode_segment(path.read_bytes(), path=str(path), hub_id="h")),
                                             schema=SCHEMA))  # fmt: skip
    assert rows["headers"].to_pylist() == [[("trace", b"4bf9"), ("raw", b"\x00")]] * 2 + [None]


def test_corrupted_batch_is_reported_and_never_decoded(cluster: tuple[Path, Expected]) -> None:
    root, expected = cluster
    table = decode_dir(root)
    (corruption,) = expected.corrupted
    checksum = [m for m in metas_of(table) if m["kind"] == "checksum"]
    assert checksum == [{
        "kind": "checksum", "code": "CHECKSUM_MISMATCH", "path": str(corruption.path), "topic": "clicks",
        "position": corruption.position, "length": corruption.length, "reason": checksum[0]["reason"],
    }]
    messages = messages_of(table)
    clicks = messages.filter(pa.compute.equal(messages["topic"], "clicks"))
    offsets = set(clicks["offset"].to_pylist())
    assert len(offsets) == 1_200
    assert not offsets & set(range(900, 1_000))  # the corrupted batch's offsets
    assert set(range(1_000, 1_300)) <= offsets  # decoding resumed after it


def test_torn_tail_is_reported(cluster: tuple[Path, Expected]) -> None:
    root, expected = cluster
    (torn_path, position, length), = expected.torn
    torn = [m for m in metas_of(decode_dir(root)) if m["kind"] == "torn_tail"]
    assert [(m["path"], m["position"], m["length"], m["code"]) for m in torn] == [
        (str(torn_path), position, length, "TRUNCATED")
    ]


def test_file_summaries(cluster: tuple[Path, Expected]) -> None:
    root, expected = cluster
    files = {m["path"]: m for m in metas_of(decode_dir(root)) if m["kind"] == "file"}
    assert len(files) == expected.files == 6
    assert sum(f["records"] for f in files.values()) == expected.total
    assert {f["topic"] for f in files.values()} == {"orders", "clicks", "metrics.eu"}


def test_garbage_after_the_last_frame_is_unreadable(tmp_path: Path, cluster: tuple[Path, Expected]) -> None:
    root, _ = cluster
    source = sorted(root.rglob("*.log"))[0]
    # Preallocated zeros read as opcode 0: the rest of the file is unreadable, not silently skipped.
    data = source.read_bytes() + bytes(64)
    table = pa.Table.from_batches(list(decode_segment(data, path="x.log", hub_id="h")), schema=SCHEMA)
    (problem,) = [m for m in metas_of(table) if m["kind"] != "file"]
    assert (problem["kind"], problem["code"], problem["position"], problem["length"]) == (
        "unreadable", "UNKNOWN_OPCODE", len(data) - 64, 64)
    assert messages_of(table).num_rows == 700


def test_row_batches_are_bounded(cluster: tuple[Path, Expected]) -> None:
    root, _ = cluster
    path = next(p for p in sorted(root.rglob("*.log")) if "orders" in str(p))
    batches = list(decode_segment(path.read_bytes(), path=str(path), hub_id="h", max_rows=250))
    sizes = [b.num_rows for b in batches[:-1]]
    assert sum(sizes) == 1_500 and max(sizes) <= 300  # flushed at the first batch boundary past 250


def test_file_decoder_maps_spark_paths_to_hub_ids(cluster: tuple[Path, Expected]) -> None:
    root, _ = cluster
    path = next(p for p in sorted(root.rglob("*.log")) if "hub-b" in str(p))
    content = path.read_bytes()
    batch = pa.RecordBatch.from_pydict({"path": [f"file:{path}"], "content": [content]})
    out = pa.Table.from_batches(list(make_file_decoder({str(path.parents[2]): "from-driver"})([batch])))
    assert set(out["hub_id"].to_pylist()) == {"from-driver"}
    # Without the driver's table, the hub-id file next to the segments is read.
    out = pa.Table.from_batches(list(make_file_decoder({})([batch])))
    assert set(out["hub_id"].to_pylist()) == {HUB_B_HEX}
    assert out.schema == SCHEMA
    assert [c.split()[0] for c in SPARK_DDL.split(", ")] == SCHEMA.names
    assert SCHEMA.names[:-1] == MESSAGE_COLUMNS


def test_find_hub_dirs_accepts_a_parent_directory(cluster: tuple[Path, Expected]) -> None:
    root, expected = cluster
    hubs = find_hub_dirs([root, root / "hub-a"])  # the duplicate hub-a is dropped
    assert {h.hub_id: h.path for h in hubs} == {k: v.resolve() for k, v in expected.hubs.items()}


# -- the command line, without Spark ------------------------------------------------------------

def test_missing_directory_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_not_a_hub_directory_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([str(tmp_path)]) == 2
    assert "not a hub data directory" in capsys.readouterr().err


def test_no_segments_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "topics").mkdir()
    assert cli.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 1
    assert "no log segments" in capsys.readouterr().err


def test_bad_conf_is_a_usage_error(cluster: tuple[Path, Expected], capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = cluster
    assert cli.main([str(root), "--conf", "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


@pytest.fixture
def shared_copy(cluster: tuple[Path, Expected]) -> Iterator[Path]:
    """A copy of the test data that an unprivileged user may read (pytest's tmp dirs are root's only)."""
    root = Path(tempfile.mkdtemp(prefix="p0s-analyze-"))
    root.chmod(0o755)
    shutil.copytree(cluster[0], root / "data")
    for path in (root / "data").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    (root / "data").chmod(0o755)
    yield root / "data"
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755)
    shutil.rmtree(root)


def run_unprivileged(*args: str) -> subprocess.CompletedProcess[str]:
    """``pub0sub analyze`` as a subprocess; as 'nobody' when the tests run as root, whom no
    permission bit stops (through setpriv: this machine's root-owned Python is not reachable
    after a setuid from Python itself)."""
    argv = [sys.executable, "-m", "sdk.cli", "analyze", *args]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: no user to whom a file can be unreadable")
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parent.parent)


@pytest.mark.parametrize("what", ["segment", "topic directory", "data directory"])
def test_unreadable_input_is_one_line_before_spark(shared_copy: Path, what: str) -> None:
    segment = sorted(shared_copy.rglob("*.log"))[0]
    target, named = {
        "segment": (segment, segment),
        "topic directory": (segment.parent, segment.parent),
        "data directory": (shared_copy / "hub-a", shared_copy / "hub-a" / "topics"),
    }[what]
    target.chmod(0)
    result = run_unprivileged(str(shared_copy), "--check")
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr == f"pub0sub analyze: error: cannot read {named}: Permission denied\n"


def test_pub0sub_dispatches_analyze(capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.cli.commands import main

    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--help"])
    assert exc.value.code == 0
    assert "pub0sub analyze" in capsys.readouterr().out


# -- the whole job on local[2] ------------------------------------------------------------------

@pytest.fixture(scope="module")
def analyzed(spark: object, cluster: tuple[Path, Expected], tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Path, Expected, int]:
    root, expected = cluster
    out = tmp_path_factory.mktemp("report")
    status = cli.main([str(root / "hub-a"), str(root / "hub-b"), "--master", "local[2]", "--out", str(out)])
    return out, expected, status


def read_table(path: Path):  # -> pandas.DataFrame
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pandas()


def test_analyze_counts_and_bytes(analyzed: tuple[Path, Expected, int]) -> None:
    out, expected, status = analyzed
    assert status == 0
    messages = read_table(out / "messages")
    assert len(messages) == expected.total
    assert list(messages.columns) == MESSAGE_COLUMNS
    topics = read_table(out / "topics").set_index(["hub_id", "topic"])
    assert set(topics.index) == set(expected.written)
    for key, written in expected.written.items():
        row = topics.loc[key]
        assert row["count"] == written.count
        assert row["bytes"] == written.bytes
        assert row["first_timestamp"] == min(written.timestamps)
        assert row["last_timestamp"] == max(written.timestamps)
        assert row["rate"] == pytest.approx(written.count / ((max(written.timestamps) - min(written.timestamps)) / 1e6))
    assert topics.loc[(HUB_B_HEX, "orders"), "forwarded"] == 1_500
    assert topics.loc[(HUB_A_HEX, "orders"), "forwarded"] == 0


def test_analyze_rates(analyzed: tuple[Path, Expected, int]) -> None:
    out, expected, _ = analyzed
    rates = read_table(out / "rates")
    for (hub, topic), written in expected.written.items():
        got = rates[(rates.hub_id == hub) & (rates.topic == topic)].set_index("second")["count"].to_dict()
        seconds, counts = np.unique(np.array(written.timestamps) // 1_000_000, return_counts=True)
        assert got == dict(zip(seconds.tolist(), counts.tolist(), strict=True))


def test_analyze_latency_percentiles(analyzed: tuple[Path, Expected, int]) -> None:
    """Only forwarded copies are timed: hub A's own copies are left out although the generator
    gave them latencies (a real hub appends them with their own timestamp: 0 µs)."""
    out, expected, _ = analyzed
    latency = read_table(out / "latency")
    groups: dict[tuple[str | None, str | None], list[int]] = {}
    forwarded = expected.written[(HUB_B_HEX, "orders")]  # the one (hub, topic) whose origin is another hub
    for key in (("orders", HUB_B_HEX), ("orders", None), (None, None)):
        groups[key] = forwarded.latencies
    assert len(latency) == len(groups) == 3  # (orders, hub B) + orders + overall
    for row in latency.itertuples():
        key = (None if row.topic is None else row.topic, None if row.hub_id is None else row.hub_id)
        values = groups[key]
        assert row.count == len(values)
        assert (row.min, row.max) == (min(values), max(values))
        assert row.mean == pytest.approx(np.mean(values))
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)):
            assert getattr(row, name) == pytest.approx(percentile(values, q)), (key, name)
    overall = latency[latency.topic.isna() & latency.hub_id.isna()].iloc[0]
    assert (overall.p50, overall.p90, overall.p99) == pytest.approx((2_200, 3_000, 7_000))
    histogram = read_table(out / "latency_histogram")
    assert histogram["count"].sum() == forwarded.count == 1_500
    topics = read_table(out / "topics").set_index(["hub_id", "topic"])
    assert topics.loc[(HUB_B_HEX, "orders"), "mean_latency_us"] == pytest.approx(np.mean(forwarded.latencies))
    assert topics.loc[(HUB_A_HEX, "orders"), "mean_latency_us"] is None or np.isnan(
        topics.loc[(HUB_A_HEX, "orders"), "mean_latency_us"])


def test_analyze_reports_problems_and_writes_report(analyzed: tuple[Path, Expected, int]) -> None:
    out, expected, _ = analyzed
    report = (out / "report.md").read_text()
    (corruption,) = expected.corrupted
    assert "CHECKSUM_MISMATCH" in report and f"{corruption.position:,}" in report
    assert "TRUNCATED" in report and "torn tail" in report
    assert "| records decoded | 6,000 |" in report
    for image in ("rates.png", "bytes.png", "latency.png"):
        assert f"]({image})" in report
        assert (out / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<table>" in (out / "report.html").read_text()


def test_check_mode(analyzed: tuple[Path, Expected, int], capsys: pytest.CaptureFixture[str],
                    cluster: tuple[Path, Expected], tmp_path: Path) -> None:
    root, _ = cluster
    capsys.readouterr()
    assert cli.main([str(root), "--check", "--quiet"]) == 1
    printed = capsys.readouterr().out
    assert "checksum at byte" in printed and "torn_tail at byte" in printed
    clean = tmp_path / "clean"
    shutil.copytree(root / "hub-a", clean, ignore=shutil.ignore_patterns("clicks-*"))
    assert cli.main([str(clean), "--check", "-q"]) == 0
    assert "ok: 1,500 records in 1 files" in capsys.readouterr().out


# -- the report's plots and tables ----------------------------------------------------------------

def _tables(out: Path) -> dict:
    return {name: read_table(out / name) for name in ("topics", "rates", "latency", "latency_histogram")}


def _hub_names(cluster: tuple[Path, Expected]) -> dict[str, str]:
    from sdk.spark.analyze.report import hub_names

    root, _ = cluster
    return hub_names(find_hub_dirs([root / "hub-a", root / "hub-b"]))


def _check_layout(fig) -> None:  # type: ignore[no-untyped-def]
    """Every legend right of its plot area, and no two tick labels of one axis touching."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        assert legend is not None
        assert legend.get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1
        for axis in (ax.xaxis, ax.yaxis):
            boxes = [t.get_window_extent(renderer) for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
            for i, a in enumerate(boxes):
                assert not any(a.overlaps(b) for b in boxes[i + 1:]), [t.get_text() for t in axis.get_ticklabels()]


def test_plots_name_hubs_and_keep_legends_outside(analyzed: tuple[Path, Expected, int],
                                                  cluster: tuple[Path, Expected]) -> None:
    from sdk.spark.analyze.report import bytes_figure, latency_figure, rates_figure

    out, _, _ = analyzed
    tables, names = _tables(out), _hub_names(cluster)
    assert names == {HUB_A_HEX: "hub-a", HUB_B_HEX: "hub-b"}
    rates = rates_figure(tables["rates"], names)
    by_bytes = bytes_figure(tables["topics"], names)
    latency = latency_figure(tables["latency"], tables["latency_histogram"])
    labels = [[t.get_text() for t in ax.get_legend().get_texts()] for fig in (rates, by_bytes, latency)
              for ax in fig.axes]  # fmt: skip
    assert labels == [
        ["clicks @ hub-a", "orders @ hub-a", "metrics.eu @ hub-b", "orders @ hub-b"],
        ["hub-a", "hub-b"],
        ["orders"],  # the only topic with forwarded copies: hub A's own copies are not timed
        ["p50", "p90", "p99", "p99.9"],
    ]
    for fig in (rates, by_bytes, latency):
        _check_layout(fig)


def test_latency_axis_labels_stay_apart_over_many_decades() -> None:
    import pandas as pd

    from sdk.spark.analyze.job import BINS_PER_DECADE
    from sdk.spark.analyze.report import latency_figure

    # 1 µs to ~5 ms, as a mesh on one machine gives it: 1-2-5 labels over that range used to collide.
    bins = range(0, int(3.7 * BINS_PER_DECADE))
    histogram = pd.DataFrame({"topic": ["t"] * len(bins), "bin": list(bins), "count": [10] * len(bins)})
    row = {"count": 370, "min": 1, "mean": 800, "p50": 300, "p90": 2_000, "p99": 4_000, "p999": 5_000, "max": 5_000}
    latency = pd.DataFrame([{"topic": "t", "hub_id": None, **row}, {"topic": None, "hub_id": None, **row}])
    fig = latency_figure(latency, histogram)
    _check_layout(fig)
    shown = [t.get_text() for t in fig.axes[0].xaxis.get_ticklabels() if t.get_text()]
    assert {"1 µs", "1 ms"} <= set(shown)


def test_report_tables_use_hub_names(analyzed: tuple[Path, Expected, int]) -> None:
    out, _, _ = analyzed
    report = (out / "report.md").read_text()
    assert "hub-a (`" in report and f"id {HUB_A_HEX})" in report
    assert "| hub-a | clicks |" in report and "| hub-b | metrics.eu |" in report
    assert "| orders | hub-b | 1,500 |" in report  # latency: forwarded copies only
    assert "| orders | hub-a |" not in report.split("## Latency")[1].split("## Segment files")[0]
    assert not re.search(r"hub [0-9a-f]{6}\b", report)
