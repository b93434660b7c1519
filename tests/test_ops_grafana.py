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


def test_every_panel_queries_metrics_the_hub_serves(start_hub: Callable[..., HubProcess], tmp_path: Path) -> None:
    hub = start_hub("--data-dir", str(tmp_path / "d"), "--mesh-listen", "/ip4/127.0.0.1/tcp/0", "--no-discovery",
                    "--metrics-listen", "127.0.0.1:0")  # fmt: skip
    status, _kind, body = get(hub.metrics_address, "/metrics")
    assert status == 200
    served = set()
    for line in body.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            served |= {name.removesuffix("_total") + suffix for suffix in SUFFIXES.get(kind, ("",))}
    dashboard = json.loads(DASHBOARD.read_text())
    asked = {m for p in dashboard["panels"] for t in p["targets"] for m in METRIC.findall(t["expr"])}
    asked |= set(METRIC.findall(json.dumps(dashboard["templating"])))
    assert asked and asked <= served, f"not served by the hub: {sorted(asked - served)}"
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
