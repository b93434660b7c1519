"""docs/concepts.md's claims, through the real commands on two meshed hubs: history and offsets are per hub."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.command import pub0sub
from tests.support.hubprocess import HubProcess, hub_status, mesh_lines
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent


def sub_json(*args: str) -> list[dict[str, Any]]:
    result = pub0sub("sub", *args, "--json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_history_and_offsets_are_per_hub(start_hub: Callable[..., HubProcess], tmp_path: Path) -> None:
    mesh = ["--mesh-listen", "/ip4/127.0.0.1/tcp/0", "--no-discovery"]
    hub1 = start_hub(*mesh, "--name", "hub-1", "--data-dir", str(tmp_path / "hub-1"))
    hub1_id, hub1_addr = mesh_lines(hub1)
    hub3 = start_hub(*mesh, "--name", "hub-3", "--data-dir", str(tmp_path / "hub-3"), "--bootstrap", hub1_addr)
    wait_until(lambda: any(p["connected"] for p in hub_status(hub1.address)["mesh"]["peers"]), timeout=30,
               what="the link", interval=0.05)  # fmt: skip

    published = pub0sub("pub", "--hub", hub1.address, "--topic", "orders.eu", "--ack", "before-1", "before-2")
    assert published.stdout.splitlines() == ["orders.eu@0", "orders.eu@1"]
    # hub-3 did not want orders.eu when they were published: it never received them.
    assert sub_json("--hub", hub3.address, "--topic", "orders.eu", "--start", "earliest", "--timeout", "2") == []

    # A durable subscription makes the interest stand while nobody is attached.
    durable = pub0sub("sub", "--hub", hub3.address, "--topic", "orders.eu", "--durable", "archive", "--timeout", "1")
    assert durable.returncode == 0, durable.stderr
    wait_until(lambda: ["orders.eu"] in [p["interest"] for p in hub_status(hub1.address)["mesh"]["peers"]],
               timeout=30, what="hub-3's standing interest to reach hub-1", interval=0.05)  # fmt: skip
    assert pub0sub("pub", "--hub", hub1.address, "--topic", "orders.eu", "--ack", "after-1").stdout == "orders.eu@2\n"

    on_hub3 = wait_until(
        lambda: sub_json("--hub", hub3.address, "--topic", "orders.eu", "--start", "earliest", "--timeout", "1"),
        timeout=30,
        what="the forward to be stored on hub-3",
        interval=0.05,
    )
    on_hub1 = sub_json("--hub", hub1.address, "--topic", "orders.eu", "--start", "earliest", "--count", "3")
    assert [(m["offset"], m["data"]) for m in on_hub1] == [(0, "before-1"), (1, "before-2"), (2, "after-1")]
    (copy,) = on_hub3
    assert (copy["offset"], copy["data"]) == (0, "after-1")  # another offset on another hub...
    assert copy["origin"] == on_hub1[2]["origin"] == hub1_id  # ...the same origin and timestamp
    assert copy["timestamp"] == on_hub1[2]["timestamp"]


def test_the_readme_links_the_concepts_page() -> None:
    readme = (ROOT / "README.md").read_text()
    first_section = readme.split("\n## ", 1)[0]
    assert "History and offsets are per hub" in first_section and "docs/concepts.md" in first_section
    assert "| [docs/concepts.md](docs/concepts.md) |" in readme
