"""Compacted topics in tests: a hub that compacts often, a known publish history, and the checks
every compacted read must pass (docs/compaction.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sdk
import wire
from tests.support.hubprocess import HubProcess

StartHub = Callable[..., HubProcess]
TOPIC = "kv.cfg"
#: Small segments: a round of publishes fills a few, so a pass has closed segments to merge.
SEGMENT_BYTES = 2048


def compacting_hub(start_hub: StartHub, data: Path, *extra: str, env: dict[str, str] | None = None) -> HubProcess:
    return start_hub("--data-dir", str(data), "--segment-bytes", str(SEGMENT_BYTES), "--compact", "kv.>",
                     "--compact-check-seconds", "0.1", *extra, env=env)  # fmt: skip


class History:
    """Every record published to :data:`TOPIC` by one publisher: record ``i`` has offset ``i``."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes, bool]] = []  # (key, data, tombstone)

    def publish_rounds(self, client: sdk.BlockingClient, rounds: int, keys: int, *, tag: str = "") -> None:
        """``rounds`` batches, each setting every one of ``keys`` keys once."""
        for r in range(rounds):
            for k in range(keys):
                key, data = f"k{k:03d}".encode(), f"{tag}r{r}-k{k}-{'x' * (k % 7)}".encode()
                client.publish(TOPIC, data, key=key)
                self.records.append((key, data, False))
            client.flush()
        client.publish_acked(TOPIC, b"sync", key=b"sync")
        self.records.append((b"sync", b"sync", False))

    def delete(self, client: sdk.BlockingClient, key: bytes) -> int:
        ack = client.publish_acked(TOPIC, b"", key=key, headers={wire.TOMBSTONE_HEADER: "1"})
        self.records.append((key, b"", True))
        offset: int = ack.offsets[TOPIC]
        assert offset == len(self.records) - 1
        return offset

    def latest(self) -> dict[bytes, tuple[int, bytes, bool]]:
        out: dict[bytes, tuple[int, bytes, bool]] = {}
        for offset, (key, data, tomb) in enumerate(self.records):
            out[key] = (offset, data, tomb)
        return out


def read_all(address: str, topic: str = TOPIC, *, quiet: float = 1.0) -> list[sdk.Message]:
    """Everything a subscription from ``earliest`` delivers until it has been quiet ``quiet`` s."""
    with sdk.connect_blocking(address, reconnect=None) as client, client.subscribe(topic, start="earliest") as sub:
        out = []
        while (batch := sub.next_batch(timeout=quiet)) is not None:
            out.extend(batch)
        assert not sub.gaps, sub.gaps
        return out


def check_read(messages: list[sdk.Message], history: History) -> None:
    """What a compacted topic must give: records at their original offsets, each once, and the
    latest record of every key (tombstones included unless a pass removed them)."""
    offsets = [m.offset for m in messages]
    assert offsets == sorted(set(offsets)), "offsets repeated or out of order"
    for m in messages:
        key, data, tomb = history.records[m.offset]
        assert ((m.key or b""), m.data) == (key, data), (m.offset, m.key, m.data)
        assert (wire.TOMBSTONE_HEADER in m.headers) == tomb
    present = {m.offset for m in messages}
    for key, (offset, _, tomb) in history.latest().items():
        if not tomb:
            assert offset in present, f"latest value of {key!r} (offset {offset}) lost"


def compaction_status(address: str) -> dict[str, Any]:
    with sdk.connect_blocking(address, reconnect=None) as client:
        status: dict[str, Any] = client.status()
    return dict(status["storage"]["compaction"])


def wait_compacted(address: str, *, at_least: int = 1, within: float = 30.0) -> dict[str, Any]:
    """Wait until ``at_least`` passes ran and no topic is due: every closed segment went through a pass."""
    deadline = time.monotonic() + within
    while True:
        status = compaction_status(address)
        if status["passes"] >= at_least and not status["due_count"]:
            return status
        assert time.monotonic() < deadline, f"compaction not done within {within} s: {status}"
        time.sleep(0.05)


def topic_dir(data: Path) -> Path:
    (directory,) = (data / "topics").iterdir()
    return directory


def active_base(data: Path) -> int:
    return max(int(p.name.removesuffix(".log")) for p in topic_dir(data).glob("*.log"))
