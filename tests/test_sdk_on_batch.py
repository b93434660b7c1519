"""Subscriptions with ``on_batch``: batches handed to a plain function in the reader task (a real hub)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

import sdk
from sdk import Message
from tests.support.hubprocess import HubProcess, hub_status
from tests.support.waiting import await_until

BACKENDS = ["trio", "asyncio"]
StartHub = Callable[..., HubProcess]


class Boom(Exception):
    """What a failing handler raises."""


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_message_reaches_the_handler_in_order_with_credit_granted(hub_address: str, backend: str) -> None:
    # credit=500: the hub stops after 500 unless the handler's consumption is granted back,
    # so 50,000 arriving shows the grants leave with the reader's writes.
    total = 50_000
    seen: list[int] = []
    batches = 0

    async def scenario() -> None:
        nonlocal batches
        async with sdk.connect(hub_address) as sub_client, sdk.connect(hub_address) as pub_client:
            done = anyio.Event()

            def handle(batch: list[Message]) -> None:
                nonlocal batches
                batches += 1
                seen.extend(int.from_bytes(m.data, "big") for m in batch)
                if len(seen) >= total:
                    done.set()

            async with sub_client.subscribe("bulk", credit=500, on_batch=handle) as sub:
                for i in range(total):
                    await pub_client.publish("bulk", i.to_bytes(4, "big"))
                await pub_client.flush()
                with anyio.fail_after(60):
                    await done.wait()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(sub.close)
                    with anyio.fail_after(10):
                        await sub.wait()  # closed by the application: returns
            assert not sub.gaps

    anyio.run(scenario, backend=backend)
    assert seen == list(range(total))
    assert batches < total  # whole batches, not one call per message


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_handler_that_raises_ends_the_subscription_and_wait_raises_it(hub_address: str, backend: str) -> None:
    async def scenario() -> None:
        async with sdk.connect(hub_address) as client:
            calls = 0

            def handle(batch: list[Message]) -> None:
                nonlocal calls
                calls += 1
                raise Boom(batch[0].data)

            async with client.subscribe("t", on_batch=handle) as sub:
                await client.publish("t", b"first")
                with anyio.fail_after(10), pytest.raises(Boom, match="first"):
                    await sub.wait()
                # The hub was told (UNSUB): what is published now is not delivered to this client.
                await await_until(lambda: hub_status(hub_address)["subscriptions"] == 0, timeout=10,
                                  what="the hub dropping the subscription", in_thread=True)  # fmt: skip
                await client.publish("t", b"second")
                await client.flush()
                await client.status()  # a round trip: a delivery of "second" would have come before
                assert calls == 1
                await sub.wait()  # raised once; now it just says the subscription is over

    anyio.run(scenario, backend=backend)


def test_an_error_nobody_waited_for_is_raised_at_the_end_of_the_block(hub_address: str) -> None:
    async def scenario() -> None:
        async with sdk.connect(hub_address) as client:

            def handle(batch: list[Message]) -> None:
                raise Boom("unseen")

            with pytest.raises(Boom, match="unseen"):
                async with client.subscribe("t", on_batch=handle):
                    await client.publish("t", b"x")
                    await client.flush()
                    await client.status()
                    await anyio.sleep(0.2)  # the delivery follows the status reply on the same connection
            # The client is fine: another subscription works.
            async with client.subscribe("u") as sub:
                await client.publish("u", b"y")
                msg = await sub.next(timeout=10)
                assert msg is not None and msg.data == b"y"

    anyio.run(scenario, backend="trio")


def test_a_failed_batch_is_not_acknowledged_and_comes_again_to_the_durable_name(
    start_hub: StartHub, tmp_path: Path
) -> None:
    hub = start_hub("--data-dir", str(tmp_path / "data"))
    failed_batch: list[int] = []
    handled: list[int] = []

    async def scenario() -> list[int]:
        async with sdk.connect(hub.address) as client:
            for i in range(20):
                await client.publish_acked("d.t", bytes([i]))

            def handle(batch: list[Message]) -> None:
                offsets = [m.offset for m in batch]
                if 10 in offsets:
                    failed_batch.extend(offsets)
                    raise Boom("offset 10")
                handled.extend(offsets)

            async with client.subscribe("d.t", durable="dn", start="earliest", ack="auto", on_batch=handle) as sub:
                with anyio.fail_after(10), pytest.raises(Boom):
                    await sub.wait()
            async with client.subscribe("d.t", durable="dn", ack="auto") as again:
                first = await again.next(timeout=10)
                assert first is not None
                rest = [first.offset]
                while rest[-1] < 19:
                    msg = await again.next(timeout=10)
                    assert msg is not None
                    rest.append(msg.offset)
                return rest

    redelivered = anyio.run(scenario, backend="trio")
    assert failed_batch and handled == list(range(failed_batch[0]))
    assert redelivered == list(range(failed_batch[0], 20))


def test_a_callback_subscription_is_not_iterated_and_takes_no_coroutine(hub_address: str) -> None:
    async def scenario() -> None:
        async with sdk.connect(hub_address) as client:

            async def handler(batch: list[Message]) -> None:
                pass

            with pytest.raises(TypeError, match="plain function"):
                client.subscribe("t", on_batch=handler)  # type: ignore[arg-type]
            async with client.subscribe("t", on_batch=lambda batch: None) as sub:
                with pytest.raises(RuntimeError, match="on_batch"):
                    await sub.next(timeout=1)
            async with client.subscribe("t") as plain:
                with pytest.raises(RuntimeError, match="on_batch"):
                    await plain.wait()

    anyio.run(scenario, backend="trio")


def test_a_lost_connection_ends_a_callback_subscription_with_its_error(start_hub: StartHub) -> None:
    hub = start_hub()

    async def scenario() -> None:
        async with (
            sdk.connect(hub.address, reconnect=None) as client,
            client.subscribe("t", on_batch=lambda batch: None) as sub,
        ):
            hub.stop()
            with anyio.fail_after(10), pytest.raises(sdk.ConnectionLostError):
                await sub.wait()

    anyio.run(scenario, backend="trio")


def test_auto_acks_reach_the_hub_while_the_subscription_runs(start_hub: StartHub, tmp_path: Path) -> None:
    """Handled batches are acknowledged by the reader's own writes, not only when the subscription closes."""
    hub = start_hub("--data-dir", str(tmp_path / "data"))
    seen: list[int] = []

    def position() -> dict[str, int]:
        (durable,) = [d for d in hub_status(hub.address)["durables"] if d["name"] == "live"]
        return durable["positions"]  # type: ignore[no-any-return]

    async def scenario() -> None:
        async with sdk.connect(hub.address) as client:
            for i in range(10):
                await client.publish_acked("a.t", bytes([i]))
            async with client.subscribe("a.t", durable="live", start="earliest", ack="auto",
                                        on_batch=lambda batch: seen.extend(m.offset for m in batch)):  # fmt: skip
                await await_until(lambda: position() == {"a.t": 10}, timeout=10, what="the acks at the hub",
                                  in_thread=True)  # fmt: skip

    anyio.run(scenario, backend="trio")
    assert seen == list(range(10))
