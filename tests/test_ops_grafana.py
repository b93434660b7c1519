"""The Grafana dashboard (deploy/grafana/pub0sub-hubs.json) asks only for metrics a real hub serves."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from tests.support.hubprocess import HubProcess
from tests.support.scrape import get

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "pub0sub-hubs.json"
METRIC = re.compile(r"\b(pub0sub_[a-z_]+)\b")
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}


def served_metrics(hub: HubProcess) -> set[str]:
    """Every series name ``hub``'s /metrics declares (a histogram's _bucket, _count and _sum)."""
    status, _kind, body = get(hub.metrics_address, "/metrics")
    assert status == 200
    served = set()
    for line in body.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            served |= {name.removesuffix("_total") + suffix for suffix in SUFFIXES.get(kind, ("",))}
    return served


def test_every_panel_queries_metrics_the_hub_serves(start_hub: Callable[..., HubProcess], tmp_path: Path) -> None:
    """Each panel's metrics are all served by a full-mesh hub, or all by a hub on the overlay (mesh
    v3, whose delivering side has series of its own); the overlay's panels say they are v3 only."""
    common = ("--mesh-listen", "/ip4/127.0.0.1/tcp/0", "--no-discovery", "--metrics-listen", "127.0.0.1:0")
    full_mesh = served_metrics(start_hub("--data-dir", str(tmp_path / "d"), *common))
    overlay = served_metrics(start_hub("--data-dir", str(tmp_path / "o"), "--mesh-overlay", *common))
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        asked = {m for t in panel["targets"] for m in METRIC.findall(t["expr"])}
        assert asked, panel["title"]
        assert asked <= full_mesh or asked <= overlay, f"{panel['title']}: not served: {sorted(asked - overlay)}"
        if not asked <= full_mesh:
            assert panel["description"].startswith("Mesh v3 only"), panel["title"]
    assert any(not m.startswith("pub0sub_overlay_") for m in full_mesh)
    assert set(METRIC.findall(json.dumps(dashboard["templating"]))) <= full_mesh
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
