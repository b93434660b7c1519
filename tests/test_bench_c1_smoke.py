"""Smoke runs of C1 and C1M (connections at scale) with tiny counts: every connection held and
reached by every publish, figures in the promised shape; no speed asserted (BENCHMARKS.md)."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from sdk.tools.bench import scenarios as _scenarios  # noqa: F401  (the registry first: c1 joins it)
from sdk.tools.bench.c1 import MESH_SIZE, QUICK_MESH, QUICK_ONE_HUB, QUICK_PUBLISHES
from sdk.tools.bench.cli import main
from tests.test_bench_smoke import assert_sane

HAVE_NATS = shutil.which("nats-server") is not None


def run_quick(scenario: str, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    assert main([scenario, "--quick", "--repeat", "1", "--json", "-q"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    return {line["system"]: line for line in lines}


def assert_held(line: dict[str, Any], connections: int, servers: int) -> None:
    assert_sane(line)
    [details] = line["details"]
    assert details["connections"] == connections and details["servers"] == servers
    # Every publish was timed: each reached every one of the connections (c1_load reports a
    # publish only then), and the RSS of the servers grew while they held them.
    assert len(details["publish_ms"]) == QUICK_PUBLISHES
    assert details["rss_held"] > details["rss_before"]
    # A healthy client's L1 was measured on the idle server and beside the connections, and
    # the steady phase's publishes reached every connection too.
    assert details["l1_idle_us"]["p99"] > 0 and details["l1_held_us"]["p99"] > 0
    steady = details["steady"]
    assert steady["delivered"] == steady["expected"] == steady["publishes"] * connections > 0


@pytest.mark.slow
def test_c1_one_hub_beside_one_nats_server(capsys: pytest.CaptureFixture[str]) -> None:
    systems = run_quick("C1", capsys)
    assert_held(systems["pub0sub:hub"], QUICK_ONE_HUB, 1)
    if HAVE_NATS:
        assert_held(systems["nats:server"], QUICK_ONE_HUB, 1)
        assert set(systems["pub0sub:hub"]["ratio_to"]) == {"nats:server"}


@pytest.mark.slow
def test_c1m_spread_over_a_mesh_of_hubs(capsys: pytest.CaptureFixture[str]) -> None:
    systems = run_quick("C1M", capsys)
    assert_held(systems["pub0sub:mesh6"], QUICK_MESH, MESH_SIZE)
    if HAVE_NATS:
        assert_held(systems["nats:cluster6"], QUICK_MESH, MESH_SIZE)
