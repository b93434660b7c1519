"""``pub0sub testbed`` end to end at a small size (sdk/tools/testbed.py): real hub processes that
start on the v2 full mesh and switch to the overlay (``--mesh-overlay-from``), traffic, a crash
and a stall of relay hubs, a cut link (in the kernel where it can be, else through proxies: the
test bed's ``auto``), and the summary's verdict.

The 50-hub runs are a command (docs/scale.md); this keeps the command itself working.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.tools import testbed  # not TestBed itself: pytest would try to collect it
from sdk.tools.link_cuts import unavailable
from sdk.tools.testbed_report import Settings, render

pytestmark = pytest.mark.slow


def test_a_small_test_bed_switches_to_the_overlay_and_delivers_everything_through_faults(tmp_path: Path) -> None:
    settings = Settings(
        hubs=7, minutes=0.4, max_peers=5, degree=3, overlay_from=4, publishers=1, subscriber_hubs=3,
        few_topics=2, pair_topics=2, rate=40.0, fault_every=5.5, fault_length=2.0, idle_seconds=1.0,
        idle_settle=0.0, data_root=tmp_path / "bed",
    )  # fmt: skip
    lines: list[str] = []
    report = testbed.TestBed(settings, progress=lines.append).run()
    d = report["delivery"]
    assert d["acknowledged_publishes"] > 100, lines
    assert (d["delivered"], d["duplicates"], d["fifo_violations"]) == (d["expected"], 0, 0), render(report)
    assert [f["kind"] for f in report["faults"]][:3] == ["crash", "stall", "link"], lines
    # A stall goes to the relay that relayed the most sets since the last (detours): how many, said.
    assert all(f["relayed_frames_before"] >= 0 for f in report["faults"] if f["kind"] == "stall")
    assert "stalls hit a relay carrying sets" in render(report)
    # The link failed was one that carried traffic: cut in the kernel, which names both hubs,
    # else through the proxy its hub announced.
    link = next(f for f in report["faults"] if f["kind"] == "link")
    assert link["bytes_before"] > 0, lines
    if unavailable() is None:
        assert report["link_cuts"] == "kernel" and report["proxy_cpu_seconds"] is None
        assert link["from"].startswith("hub-") and link["from"] != link["hub"], lines
        assert "links cut by the kernel" in render(report)
    else:
        assert report["link_cuts"] == "proxy" and report["proxy_cpu_seconds"] > 0
        assert "links cut by the proxy (the proxies used" in render(report)
    # Slow seconds are each put down to the fault before them, if any.
    slow = report["slow_seconds"]
    assert slow["of"] >= 20 and sum(slow["after"].values()) == slow["slow"]
    # The machine's busy share is sampled each second of traffic (a fault's own second may miss it).
    busy = [p["machine_busy"] for p in report["timeline"] if p["machine_busy"] is not None]
    assert len(busy) >= len(report["timeline"]) - 3 and all(0.0 <= b <= 1.0 for b in busy), busy
    assert "machine busy (its cores, median): " in render(report)
    late = report["slow_deliveries"]  # and so is every delivery past 100 ms
    assert late["of"] == sum(p["count"] for p in report["timeline"]) and 0 <= late["slow"] <= late["of"]
    assert sum(v["count"] for v in late["after"].values()) == late["slow"]
    # Every hub switched (the overlay formed over all seven), and no full-mesh link was left.
    assert report["formed_seconds"] is not None and report["v2_links"] == 0, render(report)
    assert report["connections_max"] <= 5
    assert "--mesh-overlay-from 4" in lines[0]
