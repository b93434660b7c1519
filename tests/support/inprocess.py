"""In-process hubs on a temporary data dir, and the raw-frame helpers their tests share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import wire
from hub.app import HubServer
from hub.config import HubConfig
from hub.core.clock import Clock
from hub.shell.clock import TrioClock
from tests.support.rawclient import RawClient

StartHub = Callable[..., Awaitable[HubServer]]


@pytest.fixture
def start_server(nursery: trio.Nursery, tmp_path: Path) -> StartHub:
    async def start(*, clock: Clock | None = None, **settings: Any) -> HubServer:
        settings.setdefault("data_dir", tmp_path / "data")
        server = HubServer(HubConfig(listen="127.0.0.1:0", **settings), clock=clock)
        await nursery.start(server.serve)
        return server

    return start


def publish(topics: tuple[str, ...] | str, datas: list[bytes], *, seq: int = 0, ack: bool = False,
            producer: int = 0) -> wire.Publish:
    if isinstance(topics, str):
        topics = (topics,)
    flags = wire.PublishFlags.ACK if ack else wire.PublishFlags.NONE
    mset = wire.MessageSet.build(topics, [(b"", d) for d in datas])
    return wire.Publish(producer_id=producer, sequence=seq, flags=flags, sets=(mset,))


# Each frame bounded by default: a silent hub fails the test in seconds, not at pytest's timeout.
async def collect(client: RawClient, count: int, *, timeout: float = 10.0) -> list[tuple[str, int, bytes]]:  # noqa: ASYNC109
    got: list[tuple[str, int, bytes]] = []
    while len(got) < count:
        frame = await client.expect(wire.Deliver, timeout, skip=(wire.Heartbeat,))
        got.extend((frame.batch.topic, off, data) for off, _key, data in frame.batch.messages())
    return got


async def quiet(client: RawClient, seconds: float = 0.2) -> None:
    with trio.move_on_after(seconds):
        frame = await client.recv()
        raise AssertionError(f"expected nothing, got {frame!r}")


async def fill(server: HubServer, topic: str, batches: int, per_batch: int) -> None:
    pub = await RawClient.connect(server.address)
    for b in range(batches):
        await pub.send(publish(topic, [b"%d" % (b * per_batch + i) for i in range(per_batch)], seq=b + 1, ack=True))
    for _ in range(batches):
        await pub.expect(wire.PublishAck)
    await pub.aclose()


class WallClockAt(TrioClock):
    """The event loop's monotonic time, and a wall clock (message timestamps) the test sets."""

    def __init__(self, us: int) -> None:
        self.us = us

    def wall_us(self) -> int:
        return self.us
