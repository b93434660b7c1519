"""The pipeline on a real Spark standalone cluster: ``pub0sub spark up``, ``analyze --master`` against
it, and ``pub0sub spark exactly-once`` with a worker SIGKILLed, queries restarted and a hub restarted.

One cluster for the module (a master and two 1-core workers, ~0.3 GB per daemon), started the
way the docs say (``pub0sub spark up``) and stopped with SIGTERM by the last test.  The drivers
run in subprocesses (``pub0sub analyze``, ``pub0sub spark exactly-once``): a process holds one
SparkContext, and the suite's own ``local[2,3]`` session may live in this one.

What the exactly-once run claims is checked here again without Spark and without the run's code:
the output topics are read back from hub-3's data directory by a fresh hub, and the Parquet sink
is read with pyarrow through the sink's own commit log (``_spark_metadata``).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pyarrow.parquet as pq

import sdk
from tests.support.command import Command, no_traceback, pub0sub
from tests.support.hubprocess import HubProcess
from tests.support.segments import make_test_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Command, Path, str]]:
    root = tmp_path_factory.mktemp("spark-up")
    cmd = Command("spark", "up", "--workers", "2", "--port", "0", "--webui-port", "0", "--root", str(root))
    try:
        line = cmd.wait_for("try: pub0sub analyze DATA_DIR --master ", timeout=180)
        cmd.wait_for("running until Ctrl-C", timeout=60)
        yield cmd, root, line.split()[-1]
    finally:
        if cmd.proc.poll() is None:  # the last test stops it; if it did not run, stop it here
            cmd.signal(signal.SIGTERM)
            try:
                cmd.finish(timeout=60)
            except AssertionError:
                cmd.kill()


def test_spark_up_prints_the_cluster(spark_up: tuple[Command, Path, str]) -> None:
    cmd, root, master = spark_up
    assert master.startswith("spark://127.0.0.1:")
    out = "".join(cmd.lines["stdout"])
    assert out.count("web UI http://127.0.0.1:") == 3  # master and both workers
    assert f"executors run {Path(sys.executable)} (PYSPARK_PYTHON)" in out
    state = json.loads((root / "spark-cluster.json").read_text())
    assert state["master"]["address"] == master and len(state["workers"]) == 2


def test_analyze_runs_on_the_cluster(spark_up: tuple[Command, Path, str], tmp_path: Path) -> None:
    _, _, master = spark_up
    expected = make_test_cluster(tmp_path / "data")
    done = pub0sub("analyze", str(tmp_path / "data"), "--master", master, "--out", str(tmp_path / "report"),
                   "--conf", "spark.executor.memory=512m", timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"starting Spark ({master})" in done.stderr
    # Not Spark's 200 (~1000 near-empty tasks on this data): one per core of the two 1-core workers.
    assert "(2 shuffle partitions)" in done.stderr
    assert pq.read_table(tmp_path / "report" / "messages").num_rows == expected.total
    assert (tmp_path / "report" / "report.md").exists()


def committed_parquet_rows(path: Path) -> list[dict[str, Any]]:
    """The Parquet sink's rows as Spark's file sink defines them: only files its commit log lists."""
    files: set[str] = set()
    # Batch logs are named N, every 10th one N.compact (it repeats the earlier ones); .N.crc are checksums.
    logs = [p for p in (path / "_spark_metadata").iterdir() if not p.name.startswith(".")]
    for log in sorted(logs, key=lambda p: int(p.name.split(".")[0])):
        for line in log.read_text().splitlines()[1:]:  # the first line is the log's version
            entry = json.loads(line)
            if entry["action"] == "add":
                files.add(entry["path"].removeprefix("file://"))
    rows: list[dict[str, Any]] = []
    for file in files:
        rows.extend(pq.read_table(file, columns=["topic", "offset", "key", "value"]).to_pylist())
    return rows


def topic_values(data_dir: Path, topics: list[str]) -> dict[str, list[tuple[bytes | None, bytes]]]:
    """``(key, value)`` of every message of ``topics``, in offset order, from a hub started on ``data_dir``."""
    hub = HubProcess("--data-dir", str(data_dir))
    try:
        out: dict[str, list[tuple[bytes | None, bytes]]] = {}
        with sdk.connect_blocking(hub.address) as client:
            ends = {t["topic"]: t["next_offset"] for t in client.status()["topic_list"]}
            for topic in topics:
                with client.subscribe(topic, start="earliest") as sub:
                    out[topic] = [(m.key, m.data) for m in (sub.next(timeout=30) for _ in range(ends[topic])) if m]
        return out
    finally:
        hub.stop()


def test_exactly_once_through_failures(spark_up: tuple[Command, Path, str], tmp_path: Path) -> None:
    _, cluster_root, _ = spark_up
    keys = 16
    started = time.monotonic()
    done = pub0sub("spark", "exactly-once", "--cluster", str(cluster_root), "--root", str(tmp_path / "run"),
                   "--seconds", "8", "--rate", "400", "--keys", str(keys), "--json", timeout=500)  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-5000:]
    figures = json.loads(done.stdout)
    events = " | ".join(e["event"] for e in figures["events"])
    for wanted in ("SIGKILL worker-1", "worker-1 started again", "queries started again from their checkpoints",
                   "restarting hub-2", "hub-2 back"):  # fmt: skip
        assert wanted in events
    published = figures["published"]
    assert published > 0 and figures["ok"], figures

    # The values the publisher sent: key k<seq % keys>, value "k:seq", seq 0 .. n-1, where n is what it
    # had published when a phase's queries caught up (the available-now phase reads from the start).
    phases = {"mb": figures["phases"]["micro-batch"], "an": figures["phases"]["available-now"]}
    assert phases["an"]["output"]["published"] == published
    outputs = topic_values(tmp_path / "run" / "hubs" / "hub-3", ["out.mb", "out.an"])
    for topic, rows in outputs.items():
        want = [b"k%03d:%d" % (seq % keys, seq) for seq in range(phases[topic[4:]]["output"]["published"])]
        values = [value.rpartition(b"@")[0] for _, value in rows]
        assert sorted(values) == sorted(want), topic  # every message once: nothing lost, nothing twice
        per_key: dict[bytes | None, list[int]] = {}
        for (key, _), value in zip(rows, values, strict=True):
            assert value.startswith(key + b":")
            per_key.setdefault(key, []).append(int(value.rsplit(b":", 1)[1]))
        assert all(seqs == sorted(seqs) for seqs in per_key.values()), f"{topic}: out of order for a key"

    for phase, figures_of in phases.items():
        n = figures_of["output"]["published"]
        rows = committed_parquet_rows(tmp_path / "run" / phase / "parquet")
        assert sorted(r["value"] for r in rows) == sorted(b"k%03d:%d" % (seq % keys, seq) for seq in range(n)), phase
        assert len({(r["topic"], r["offset"]) for r in rows}) == n
    print(f"exactly-once run: {published} messages, {took:.0f} s")  # the suite's time budget, measured


def test_spark_up_stops_every_daemon_on_sigterm(spark_up: tuple[Command, Path, str]) -> None:
    cmd, root, _ = spark_up
    state = json.loads((root / "spark-cluster.json").read_text())
    pids = [state["master"]["pid"], *(w["pid"] for w in state["workers"])]
    cmd.signal(signal.SIGTERM)
    code, out, err = cmd.finish(timeout=90)
    assert code == 0, err
    assert "stopped the master and 2 workers on SIGTERM" in out
    no_traceback(err)
    assert not (root / "spark-cluster.json").exists()
    for pid in pids:
        assert not _alive(pid), pid


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie, exited but not yet reaped by its parent, does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return not stat.split(") ", 1)[1].startswith("Z")
