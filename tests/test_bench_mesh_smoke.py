"""Smoke runs of the mesh scenarios (M1, L2; GossipSub and NATS beside them): tiny counts, no speed asserted."""

from __future__ import annotations

import json
import math
import shutil
from typing import Any

import pytest
import trio

from sdk.tools.bench.cli import main

_runs: dict[str, dict[str, dict[str, Any]]] = {}


def run_quick(scenario: str, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    """``pub0sub bench SCENARIO --quick --repeat 1 --json``, once per test session, by system."""
    if scenario not in _runs:
        assert main([scenario, "--quick", "--repeat", "1", "--json", "-q"]) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
        _runs[scenario] = {line["system"]: line for line in lines}
    return _runs[scenario]


def assert_latency_line(line: dict[str, Any]) -> None:
    names = {f["name"]: f for f in line["figures"]}
    assert names["p50"]["median"] > 0 and names["p99"]["median"] >= names["p50"]["median"], line
    detail = line["details"][0]
    assert detail["received"] == detail["expected"] > 0, detail  # nothing lost across the link


@pytest.mark.slow
def test_m1_runs_pub0sub_and_gossipsub(capsys: pytest.CaptureFixture[str]) -> None:
    systems = run_quick("M1", capsys)
    assert {"pub0sub:fastest", "pub0sub:python", "gossipsub:default", "gossipsub:nospam"} <= set(systems)
    for name in ("pub0sub:fastest", "pub0sub:python"):
        line = systems[name]
        assert math.isfinite(line["median"]) and line["median"] > 0, line
        assert line["details"][0]["complete"], line["details"]  # nothing lost across the mesh
        assert "gossipsub:default" in line["ratio_to"]
    for name in ("gossipsub:default", "gossipsub:nospam"):
        detail = systems[name]["details"][0]
        assert detail["published"] > 0 and 0 <= detail["loss"] <= 1


@pytest.mark.slow
def test_l2_reports_latency_across_two_hubs(capsys: pytest.CaptureFixture[str]) -> None:
    assert_latency_line(run_quick("L2", capsys)["pub0sub:python"])


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server not installed (L2's NATS peer)")
def test_l2_runs_nats_across_a_route(capsys: pytest.CaptureFixture[str]) -> None:
    """The peer beside pub0sub in L2: nats-py publisher on one nats-server, subscriber on the other."""
    systems = run_quick("L2", capsys)
    assert_latency_line(systems["nats:python"])
    assert "nats:python" in systems["pub0sub:python"]["ratio_to"]


@pytest.mark.parametrize("replay", [False, True], ids=["forward", "replay"])
def test_in_process_mesh_bench_delivers_everything(replay: bool) -> None:
    """``python -m hub.tools.mesh_bench [--replay]`` (docs/benchmarks.md): every message arrives."""
    from hub.tools.mesh_bench import bench, bench_replay

    result = trio.run(bench_replay if replay else bench, 5_000, 100, 64)
    # The replay's receiver already holds the first set of 100.
    assert result["messages"] == (4_900 if replay else 5_000)
    assert result["msgs_per_s"] > 0
    if replay:
        assert result["messages_replayed"] == 4_900


@pytest.mark.slow
def test_zenoh_beside_the_mesh_on_routers_in_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    """M1: three Zenoh routers in a line, BLOCK delivers everything; L2: two routers."""
    m1 = run_quick("M1", capsys)
    assert m1["zenoh:block"]["details"][0]["complete"], m1["zenoh:block"]["details"]
    assert m1["zenoh:drop"]["details"][0]["lost"] >= 0
    assert "zenoh:block" in m1["pub0sub:python"]["ratio_to"]
    l2 = run_quick("L2", capsys)
    assert_latency_line(l2["zenoh:python"])
    assert "zenoh:python" in l2["pub0sub:python"]["ratio_to"]
