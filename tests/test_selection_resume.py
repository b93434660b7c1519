"""A durable subscription's and a group member's key filter and tag query across a lost
connection and a hub restart, on real hub processes (docs/protocol.md, key filters, "Across
reconnects and restarts").

The hub keeps a durable name's or a group's positions, not its filter or query: those belong to
the subscription, and the SDK gives them in every SUB it sends, the SUB that re-opens the
subscription after a reconnect included (with the filter as the last KEY_FILTER left it).  What
a user must never see is the other side of that: a resumed subscription delivering unfiltered
messages.  Each phase publishes records of every key and header value and reads each
subscription up to the last record it selects: delivery is in offset order, so anything it
does not select would have arrived before that record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import anyio

import sdk
from tests.support.hubprocess import HubProcess

StartHub = Callable[..., HubProcess]
RECONNECT = sdk.Reconnect(400, 0.05, 0.2)
PHASE = 30


def key_of(i: int) -> bytes:
    return b"k%d" % (i % 3)


def headers_of(i: int) -> dict[str, str]:
    return {"n": str(i), "odd": "yes" if i % 2 else "no"}


#: What each subscription selects, as a plain predicate over the record number.
SELECTS: dict[str, Callable[[int], bool]] = {
    "durable-keys": lambda i: key_of(i) == b"k1",
    "durable-query": lambda i: i % 2 == 1 and i >= 10,
    "group-both": lambda i: key_of(i) == b"k2" and i % 2 == 1,
    "durable-changed": lambda i: key_of(i) == b"k0" if i < PHASE else key_of(i) in (b"k0", b"k1"),
}


async def publish(client: sdk.Client, numbers: Iterable[int]) -> None:
    for i in numbers:
        await client.publish_acked("events", b"%d" % i, key=key_of(i), headers=headers_of(i), timeout=60)


async def read_phase(sub: sdk.Subscription, name: str, phase: range, seen: set[int]) -> None:
    """Read ``sub`` up to the last record of ``phase`` it selects; every message must be selected."""
    wanted = [i for i in phase if SELECTS[name](i)]
    with anyio.fail_after(60):
        while not seen.issuperset(wanted):
            msg = await sub.__anext__()
            i = int(msg.data)
            assert SELECTS[name](i), f"{name} delivered {i} ({msg.key!r}, {msg.headers}): not selected"
            assert msg.key == key_of(i) and msg.headers == headers_of(i)
            seen.add(i)
            if name != "group-both":  # a durable subscription: exactly once within the process
                await msg.ack()


def test_filters_and_queries_survive_a_lost_connection_and_a_hub_restart(start_hub: StartHub, tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    hub = start_hub("--data-dir", data)
    address = hub.address
    phases = [range(0, PHASE), range(PHASE, 2 * PHASE), range(2 * PHASE, 3 * PHASE)]
    seen: dict[str, set[int]] = {name: set() for name in SELECTS}

    async def scenario() -> None:
        nonlocal hub
        async with (
            sdk.connect(address, reconnect=RECONNECT) as pub,
            sdk.connect(address, reconnect=RECONNECT) as client,
            client.subscribe("events", durable="dk", start="earliest", keys=[b"k1"], ack="manual") as dk,
            client.subscribe("events", durable="dq", start="earliest", query="odd = 'yes' AND n >= 10",
                             ack="manual") as dq,  # fmt: skip
            client.subscribe("events", group="g", keys=[b"k2"], query="odd = 'yes'", start="earliest") as g,
            client.subscribe("events", durable="dc", start="earliest", keys=[b"k0"], ack="manual") as dc,
        ):
            subs: dict[str, Any] = {"durable-keys": dk, "durable-query": dq, "group-both": g, "durable-changed": dc}

            async def read_all(phase: range) -> None:
                for name, sub in subs.items():
                    await read_phase(sub, name, phase, seen[name])

            await publish(pub, phases[0])
            await read_all(phases[0])
            # Changed live (KEY_FILTER): the resumed subscription must carry the filter as it is now.
            await dc.add_keys(b"k1")

            # 1. The subscriber's connection drops; the SDK reconnects and re-opens all four.
            await client._kill_connection()
            await publish(pub, phases[1])
            await read_all(phases[1])
            assert client.connections == 2

            # 2. The hub restarts on the same port and data directory: both clients reconnect.
            hub.stop()
            hub = start_hub("--listen", address, "--data-dir", data)
            await publish(pub, phases[2])
            await read_all(phases[2])
            assert client.connections == 3

    anyio.run(scenario, backend="trio")
    everything = range(3 * PHASE)
    for name, got in seen.items():
        assert got == {i for i in everything if SELECTS[name](i)}, name

    # 3. Another process reattaches the durable name with its filter: it resumes after what was
    # acknowledged, and what it gets next is still filtered.
    async def later() -> None:
        async with (
            sdk.connect(address) as client,
            client.subscribe("events", durable="dk", keys=[b"k1"], ack="manual") as dk,
        ):
            await publish(client, range(3 * PHASE, 4 * PHASE))
            got: set[int] = set()
            await read_phase(dk, "durable-keys", range(3 * PHASE, 4 * PHASE), got)
            assert got == {i for i in range(3 * PHASE, 4 * PHASE) if key_of(i) == b"k1"}

    anyio.run(later, backend="trio")
