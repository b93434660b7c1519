"""Ctrl-C and SIGTERM on the long-running commands (sdk/tools/stopping.py), through the real commands.

Each command runs as a subprocess in its own process group; Ctrl-C is SIGINT to that group, as
a terminal sends it, SIGTERM goes to the process alone, as a supervisor or ``kill`` sends it.
Every one must finish its cleanup, print its summary and exit 0, with no traceback, also when
a second Ctrl-C arrives while it shuts down.  ``pub0sub cluster up`` is in test_cluster_cli.py.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

import sdk
from tests.support.command import Command, no_traceback
from tests.support.hubprocess import HubProcess
from tests.support.procstat import children, running
from tests.support.segments import make_test_cluster

StartCommand = Callable[..., Command]
HOW = ["ctrl-c", "sigterm", "ctrl-c twice"]


def stop(cmd: Command, how: str) -> str:
    """Stop ``cmd`` the way ``how`` says; the name of the signal it should report."""
    if how == "sigterm":
        cmd.signal(signal.SIGTERM)
        return "SIGTERM"
    cmd.ctrl_c()
    if how == "ctrl-c twice":
        cmd.ctrl_c()  # at once: it lands while the first one's cleanup runs
    return "SIGINT"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm", "ctrl-c twice"])
def test_demo_prints_its_summary_and_stops_its_hubs(command: StartCommand, tmp_path: Path, how: str) -> None:
    demo = command("demo", "--data-dir", str(tmp_path / "demo"), "--rate", "50")
    demo.wait_for("published=", timeout=90)  # the plain summary line, once a second off a terminal
    hubs = children(demo.pid)
    assert len(hubs) == 3
    name = stop(demo, how)
    code, out, err = demo.finish()
    assert code == 0, (out, err)
    summary = out[out.rindex("published="):]  # the last plain line (wrapped at 80 columns off a terminal)
    assert summary.rstrip().endswith(f"(stopped on {name})"), out
    no_traceback(err)
    assert [pid for pid in hubs if running(pid)] == []


@pytest.mark.parametrize("how", HOW)
def test_sub_stops_with_a_count(command: StartCommand, start_hub: Callable[..., HubProcess], tmp_path: Path,
                                how: str) -> None:  # fmt: skip
    hub_address = start_hub("--data-dir", str(tmp_path / "data")).address
    with sdk.connect_blocking(hub_address) as client:
        for i in range(3):
            client.publish_acked("t", f"m{i}".encode())
    sub = command("sub", "--hub", hub_address, "--topic", "t", "--start", "earliest")
    sub.wait_for("t 2 m2")
    name = stop(sub, how)
    code, out, err = sub.finish()
    assert code == 0
    assert out == "t 0 m0\nt 1 m1\nt 2 m2\n"
    assert re.fullmatch(rf"pub0sub sub: stopped on {name}: \d messages?\n", err), err


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c twice", "sigterm"])
def test_bench_prints_what_it_measured_and_stops_its_servers(command: StartCommand, how: str) -> None:
    bench = command("bench", "T1", "--quick", "--repeat", "5")
    bench.wait_for("T1 round 1/5", stream="stderr", timeout=120)
    # Servers and workers run in their own sessions: the terminal's Ctrl-C reaches only the
    # bench, whose cleanup must stop them.
    helpers = children(bench.pid)
    name = stop(bench, how)
    code, out, err = bench.finish(timeout=120)
    assert code == 0, err
    assert f"bench: stopped on {name}; the figures measured so far" in err
    assert "T1" in out and "delivered" in out  # the table of the rounds done
    no_traceback(err)
    assert [pid for pid in helpers if running(pid)] == []


@pytest.mark.slow
@pytest.mark.parametrize(("when", "how"), [("decoding segments", "ctrl-c twice"), ("starting Spark", "sigterm")])
def test_analyze_stops_spark_cleanly(command: StartCommand, tmp_path: Path, when: str, how: str) -> None:
    # During a Spark job, and while the JVM starts: neither py4j nor the JVM may print a stack
    # trace about the call the stop cut short.
    make_test_cluster(tmp_path / "data")
    analyze = command("analyze", str(tmp_path / "data"), "--out", str(tmp_path / "report"))
    analyze.wait_for(when, stream="stderr", timeout=180)
    name = stop(analyze, how)
    code, _, err = analyze.finish(timeout=180)
    assert code == 0, err
    # A JVM cut short while starting may still print its start-up notice after our last line.
    ours = "\n".join(line for line in err.splitlines() if not line.startswith("WARNING: Using incubator modules"))
    assert ours.rstrip().endswith(f"pub0sub analyze: stopped on {name}; no report in {tmp_path / 'report'}")
    no_traceback(err)
    assert "ERROR" not in err, err
