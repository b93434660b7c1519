"""Smoke runs of every ``pub0sub bench`` scenario: tiny counts, sane output, no time thresholds.

Benchmarks are not tests (BENCHMARKS.md): nothing here asserts a speed, only
that each scenario runs and reports positive, finite figures in the promised
JSON shape.  Redis and NATS parts are skipped when their binaries are missing.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from typing import Any

import pytest

from sdk.tools.bench.cli import main
from sdk.tools.bench.latency import TICK, _schedule
from sdk.tools.bench.peers import AnnouncedServer, Server
from sdk.tools.bench.registry import SCENARIOS, Method, Params, Scenario
from sdk.tools.bench.relay import whole_frames_end
from sdk.tools.bench.results import FigureSpec, Measurement, Summary, fill_ratios
from sdk.tools.bench.runner import run
from tests.support.procstat import running

HAVE_REDIS = shutil.which("redis-server") is not None and shutil.which("redis-benchmark") is not None
HAVE_NATS = shutil.which("nats-server") is not None
KEYS = {"scenario", "system", "tooling", "figure", "median", "spread", "samples", "figures", "params", "ratio_to"}

_runs: dict[str, list[dict[str, Any]]] = {}


def run_quick(scenario: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """``pub0sub bench SCENARIO --quick --repeat 1 --json``, once per test session."""
    if scenario not in _runs:
        assert main([scenario, "--quick", "--repeat", "1", "--json", "-q"]) == 0
        out = capsys.readouterr().out
        _runs[scenario] = [json.loads(line) for line in out.splitlines() if line.strip()]
    return _runs[scenario]


def assert_sane(line: dict[str, Any]) -> None:
    assert set(line) >= KEYS, f"missing {KEYS - set(line)}"
    figure = line["figure"]
    assert {"name", "value", "unit"} <= set(figure)
    for f in line["figures"]:
        assert isinstance(f["median"], float | int) and math.isfinite(f["median"]) and f["median"] > 0, (line, f)
        assert f["spread"] is not None and f["spread"] >= 0
    assert figure["value"] == line["median"]
    assert line["params"]["repeat"] == 1 and line["params"]["quick"] is True
    for other, ratio in line["ratio_to"].items():
        assert math.isfinite(ratio) and ratio > 0, (other, ratio)


def by_system(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {line["system"]: line for line in lines}


@pytest.mark.parametrize("scenario", ["T1", "T2", "L1"])
def test_relay_and_every_available_peer(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    lines = run_quick(scenario, capsys)
    systems = by_system(lines)
    assert "relay:raw" in systems
    for line in lines:
        assert line["scenario"] == scenario
        assert_sane(line)
    # every other system of the same run is a ratio peer
    assert set(systems["relay:raw"]["ratio_to"]) == set(systems) - {"relay:raw"}


@pytest.mark.skipif(not HAVE_REDIS, reason="redis-server / redis-benchmark not installed")
@pytest.mark.parametrize("scenario", ["T1", "T2", "L1"])
def test_redis_measured(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    systems = by_system(run_quick(scenario, capsys))
    assert any(name.startswith("redis:") for name in systems)
    if scenario == "T1":
        assert {"redis:fastest", "redis:hiredis", "redis:python"} <= set(systems)


@pytest.mark.skipif(not HAVE_NATS, reason="nats-server not installed")
@pytest.mark.parametrize("scenario", ["T1", "T2", "L1"])
def test_nats_measured(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    systems = by_system(run_quick(scenario, capsys))
    assert any(name.startswith("nats:") for name in systems)


def test_wire_codec_against_bare_struct(capsys: pytest.CaptureFixture[str]) -> None:
    lines = run_quick("wire", capsys)
    seen = {(line["system"], line["figure"]["name"]) for line in lines}
    for figure in ("encode", "decode", "decode-mixed"):
        assert {("pub0sub-wire:" + figure, figure), ("struct-loop:" + figure, figure)} <= seen
    for line in lines:
        assert_sane(line)
        assert line["figure"]["unit"] == "records/s"
        # ratios only between the same figure: encode is never compared with decode
        assert list(line["ratio_to"]) == [
            o["system"] for o in lines if o is not line and o["figure"]["name"] == line["figure"]["name"]
        ]


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["wire", "--quick", "--repeat", "1", "--messages", "2000", "-q"]) == 0
    out = capsys.readouterr().out
    assert "pub0sub-wire:encode" in out and "struct-loop" in out


def test_unknown_scenario_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nope"])
    assert exc.value.code == 2


def test_relay_forwards_only_whole_frames() -> None:
    frame = b"\x20\x00\x00\x00\x03abc"
    assert whole_frames_end(bytearray(frame * 2 + frame[:6])) == 2 * len(frame)
    assert whole_frames_end(bytearray(frame[:4])) == 0


def test_the_pacer_sleeps_a_tick_at_least_and_keeps_the_rate() -> None:
    # 10k msgs/s: the next message is always due within 100 µs, yet each sleep is a whole
    # tick, and each wake-up owes every message due since the start.
    due, wait = _schedule(10_000.0, 1_000_000)
    assert due() == 1
    assert all(wait(sent) >= TICK for sent in (0, 1, 2, 50))
    time.sleep(0.005)
    assert due() >= 50
    # Slow rates keep their own spacing: 10 msgs/s sleeps until the next one is due.
    due, wait = _schedule(10.0, 100)
    assert 0.05 < wait(1) <= 0.1
    assert due() == 1


def test_a_scenarios_servers_stop_before_the_next_scenario(monkeypatch: pytest.MonkeyPatch) -> None:
    # Idle servers still take CPU (a meshed cluster's heartbeats and discovery): a scenario
    # must not be measured beside the servers of the scenarios before it.
    pids: list[int] = []

    def measure(server: Server | None, p: Params) -> Measurement:
        assert isinstance(server, AnnouncedServer) and server._proc is not None
        pids.append(server._proc.pid)
        return Measurement(figures={"alive before": float(sum(running(pid) for pid in pids[:-1]))})

    spec = FigureSpec(name="alive before", unit="servers")
    for sid in ("TEST-A", "TEST-B"):
        method = Method(system="relay", method="raw", tooling="", server="relay", measure=measure)
        monkeypatch.setitem(SCENARIOS, sid, Scenario(id=sid, title=sid, figures=(spec,), defaults=lambda p: p,
                                                     methods=[method]))  # fmt: skip
    summaries = run(["TEST-A", "TEST-B"], Params(quick=True), repeat=1)
    assert len(set(pids)) == 2  # a fresh relay for each scenario
    assert [s.samples[0].figures["alive before"] for s in summaries] == [0.0, 0.0]
    assert not any(running(pid) for pid in pids)


def test_ratios_are_within_one_figure() -> None:
    spec = FigureSpec(name="x", unit="msgs/s")
    a, b = (
        Summary(scenario="S", system=n, method="m", tooling="", primary=spec, specs=(spec,),
                samples=[Measurement(figures={"x": v})], params={})
        for n, v in (("a", 2.0), ("b", 1.0))
    )  # fmt: skip
    fill_ratios([a, b])
    assert a.ratio_to == {"b:m": 2.0} and b.ratio_to == {"a:m": 0.5}


@pytest.mark.parametrize("scenario", ["T1", "T2", "L1"])
def test_pub0sub_is_measured_beside_the_peers(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    systems = by_system(run_quick(scenario, capsys))
    ours = {name for name in systems if name.startswith("pub0sub:")}
    assert ours, systems.keys()
    for name in ours:
        assert "relay:raw" in systems[name]["ratio_to"]
    if scenario == "T1":
        assert {"pub0sub:fastest", "pub0sub:python"} <= ours


@pytest.mark.parametrize(("scenario", "figure"), [("R1", "replayed"), ("D1", "acked")])
def test_replay_and_acked_publishing(scenario: str, figure: str, capsys: pytest.CaptureFixture[str]) -> None:
    [line] = run_quick(scenario, capsys)
    assert_sane(line)
    assert line["system"] == "pub0sub:fastest" and line["figure"]["name"] == figure


@pytest.mark.parametrize("scenario", ["T1", "T2", "L1"])
def test_zenoh_measured_on_one_router(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    systems = by_system(run_quick(scenario, capsys))
    zenoh = {name for name in systems if name.startswith("zenoh:")}
    assert zenoh == {"T1": {"zenoh:block", "zenoh:drop"}, "T2": {"zenoh:block"}, "L1": {"zenoh:python"}}[scenario]
    if scenario != "L1":
        block = systems["zenoh:block"]["details"][0]
        assert block["complete"] and block["lost"] == 0, block  # BLOCK drops nothing
    if scenario == "T1":
        drop = systems["zenoh:drop"]["details"][0]
        assert drop["lost"] == drop["expected"] - drop["received"] >= 0, drop


def test_k1_filtered_subscribers_get_exactly_their_key(capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.tools.bench import keyfilter

    assert keyfilter.main(["--messages", "30000", "--rounds", "1", "--subscribers", "2", "--json"]) == 0
    rounds = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["config"] for r in rounds] == ["none", "filtered"]
    filtered = rounds[1]
    assert filtered["received"] == [3, 3] and filtered["wrong_keys"] == 0 and filtered["msgs_per_s"] > 0


@pytest.mark.parametrize(
    ("scenario", "systems"),
    [("KV1", {"pub0sub:storage"}), ("KV2", {"pub0sub:async", "pub0sub:blocking"}),
     ("KV3", {"pub0sub:compacting", "pub0sub:plain"})],
)  # fmt: skip
def test_compaction_and_kv_scenarios(scenario: str, systems: set[str], capsys: pytest.CaptureFixture[str]) -> None:
    lines = run_quick(scenario, capsys)
    assert set(by_system(lines)) == systems
    for line in lines:
        assert_sane(line)
    if scenario == "KV1":
        details = lines[0]["details"][0]
        assert details["records_left"] <= 10_000 and details["bytes_after"] < details["bytes_before"]
