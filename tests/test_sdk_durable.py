"""Ack modes, durable subscriptions and consumer groups in the SDK: the sans-IO core, then real hubs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import sdk
import wire
from sdk.protocol import ClientProtocol, State
from sdk.subscriptions import SubState
from tests.support.client_protocol import FakeClock, batch, deliver, frames_of, ready, welcome
from tests.support.waiting import await_until, wait_until
from wire import StartPosition

BACKENDS = ["trio", "asyncio"]
FAST_RECONNECT = sdk.Reconnect(50, 0.01, 0.2, 2.0)
StartHub = Callable[..., Any]


def run(backend: str, scenario: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    return anyio.run(scenario, *args, backend=backend)


def sub_ok(state: SubState, **offsets: int) -> bytes:
    return wire.SubOk(
        sub_id=state.sub_id, offsets=tuple(wire.TopicOffset(topic=t, offset=o) for t, o in offsets.items())
    ).encode()


def acks_of(data: bytes) -> list[tuple[int, list[tuple[str, int, int]]]]:
    return [
        (f.sub_id, [(r.topic, r.first_offset, r.last_offset) for r in f.ranges])
        for f in frames_of(data)
        if isinstance(f, wire.Ack)
    ]


def reconnect(proto: ClientProtocol) -> list[Any]:
    """Lose the connection, get a new WELCOME; the frames the core sends first."""
    proto.connection_lost(sdk.ConnectionLostError("boom"))
    proto.connection_made()
    proto.data_to_send()  # HELLO
    proto.receive_data(welcome())
    return frames_of(proto.data_to_send())


# -- the sans-IO core ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "mode", "wire_mode"),
    [
        ({}, "none", wire.AckMode.NONE),
        ({"ack": "auto"}, "auto", wire.AckMode.EXPLICIT),
        ({"ack": "manual"}, "manual", wire.AckMode.EXPLICIT),
        ({"ack": "explicit"}, "manual", wire.AckMode.EXPLICIT),  # the older name
        ({"durable": "d"}, "auto", wire.AckMode.EXPLICIT),  # durable and groups default to auto
        ({"durable": "d", "ack": "none"}, "none", wire.AckMode.NONE),
        ({"group": "g"}, "auto", wire.AckMode.EXPLICIT),
    ],
)
def test_ack_modes_on_the_wire(options: dict[str, str], mode: str, wire_mode: wire.AckMode) -> None:
    proto = ready()
    state, _ = proto.subscribe("t", **options)  # type: ignore[arg-type]
    (frame,) = frames_of(proto.data_to_send())
    assert state.ack == mode and frame.ack_mode == wire_mode
    assert frame.durable == options.get("durable", "") and frame.group == options.get("group", "")


def test_ack_option_errors_and_ack_wait() -> None:
    proto = ready()
    with pytest.raises(ValueError, match="ack must be one of"):
        proto.subscribe("t", ack="sometimes")
    with pytest.raises(ValueError, match="consumer group needs"):
        proto.subscribe("t", group="g", ack="none")  # every delivery would come back after ack_wait
    with pytest.raises(ValueError, match="ack_wait"):
        proto.subscribe("t", group="g", ack_wait=0)
    assert not proto.subs and proto.data_to_send() == b""
    proto.subscribe("t", group="g", ack_wait=1.5)
    (frame,) = frames_of(proto.data_to_send())
    assert frame.ack_wait_ms == 1500


def test_acks_are_merged_into_ranges_and_sent_in_one_frame_before_unsub() -> None:
    proto = ready()
    state, _ = proto.subscribe(["a", "b"], durable="d", ack="manual")
    proto.receive_data(sub_ok(state, a=0, b=0))
    proto.data_to_send()
    proto.receive_data(deliver(state.sub_id, batch("a", 0, *[b"x"] * 100)))
    proto.receive_data(deliver(state.sub_id, batch("b", 0, b"y", b"y", b"y")))
    a = state.messages(proto.take(state))  # type: ignore[arg-type]
    b = state.messages(proto.take(state))  # type: ignore[arg-type]
    for msg in a[50:] + a[:40]:  # one by one, out of order: still merged
        proto.ack(state, [msg])
    proto.ack(state, [b[2], b[0]])
    assert proto.has_output
    assert acks_of(proto.data_to_send()) == [(state.sub_id, [("a", 0, 39), ("a", 50, 99), ("b", 0, 0), ("b", 2, 2)])]
    assert not proto.has_output
    proto.ack(state, a[40:50])
    proto.unsubscribe(state)
    frames = frames_of(proto.data_to_send())
    assert [f.OPCODE for f in frames] == [wire.Opcode.ACK, wire.Opcode.UNSUB]  # acks first, or the hub ignores them
    assert frames[0].ranges == (wire.AckRange(topic="a", first_offset=40, last_offset=49),)


def test_acks_for_a_subscription_without_a_hub_position_are_not_sent() -> None:
    proto = ready()
    state, _ = proto.subscribe("a", start="earliest", ack="manual")  # no durable name, no group
    proto.receive_data(sub_ok(state, a=0) + deliver(state.sub_id, batch("a", 0, b"1")))
    proto.data_to_send()
    proto.ack(state, state.messages(proto.take(state)))  # type: ignore[arg-type]
    assert not proto.has_output and proto.data_to_send() == b""


def test_durable_resume_drops_redelivered_offsets_and_resends_acks() -> None:
    proto = ready()
    state, _ = proto.subscribe("a", durable="d", ack="manual")
    proto.receive_data(sub_ok(state, a=0))
    proto.data_to_send()
    proto.receive_data(deliver(state.sub_id, batch("a", 0, b"0", b"1", b"2")))
    proto.receive_data(deliver(state.sub_id, batch("a", 3, b"3", b"4")))
    first = state.messages(proto.take(state))  # type: ignore[arg-type]
    proto.ack(state, first[:2])
    assert acks_of(proto.data_to_send()) == [(state.sub_id, [("a", 0, 1)])]
    proto.ack(state, first[2:])  # recorded while the connection dies: must not be lost either

    frames = reconnect(proto)
    # re-SUB with the same name, from the offset after the last one received -- and no ACK yet:
    # the hub refuses an ACK for offsets it has not delivered on this connection (INVALID_ACK)
    assert isinstance(frames[0], wire.Sub) and frames[0].durable == "d"
    assert frames[0].start == StartPosition.OFFSET and frames[0].offsets == (wire.TopicOffset(topic="a", offset=5),)
    assert len(frames) == 1

    # the hub restarts at its floor (say 2: the second ACK was lost): 2..4 were received already
    proto.receive_data(sub_ok(state, a=2))
    proto.receive_data(deliver(state.sub_id, batch("a", 2, b"2", b"3")))
    # the redelivery passed 0..2: every ack made before goes again now, and only what was redelivered
    assert acks_of(proto.data_to_send()) == [(state.sub_id, [("a", 0, 2)])]
    proto.receive_data(deliver(state.sub_id, batch("a", 4, b"4", b"5", b"6")))
    assert not proto.has_output
    rest = [m for item in iter(lambda: proto.take(state), None) for m in state.messages(item)]  # type: ignore[arg-type]
    assert [m.offset for m in rest] == [3, 4, 5, 6] and [m.data for m in rest] == [b"3", b"4", b"5", b"6"]
    assert state.duplicates == 3 and not state.gaps


def test_an_ack_made_before_a_reconnect_waits_for_its_redelivery() -> None:
    """Acks for offsets past what the new connection delivered are held, then split where it stands."""
    proto = ready()
    state, _ = proto.subscribe("a", durable="d", ack="manual")
    proto.receive_data(sub_ok(state, a=0) + deliver(state.sub_id, batch("a", 0, *[b"%d" % i for i in range(10)])))
    proto.data_to_send()
    received = state.messages(proto.take(state))  # type: ignore[arg-type]
    reconnect(proto)
    proto.receive_data(sub_ok(state, a=0))
    proto.ack(state, received[2:8])  # the application acks after the reconnect
    assert not acks_of(proto.data_to_send())
    proto.receive_data(deliver(state.sub_id, batch("a", 0, b"0", b"1", b"2", b"3", b"4")))
    assert acks_of(proto.data_to_send()) == [(state.sub_id, [("a", 2, 4)])]
    proto.receive_data(deliver(state.sub_id, batch("a", 5, b"5", b"6", b"7", b"8", b"9")))
    assert acks_of(proto.data_to_send()) == [(state.sub_id, [("a", 5, 7)])]
    assert not proto.has_output


def test_durable_without_acks_reports_what_the_lost_connection_swallowed() -> None:
    proto = ready()
    state, _ = proto.subscribe("a", durable="d", ack="none")
    proto.receive_data(sub_ok(state, a=0) + deliver(state.sub_id, batch("a", 0, b"0")))
    frames = reconnect(proto)
    assert frames[0].start == StartPosition.OFFSET and not acks_of(proto.data_to_send())
    proto.receive_data(sub_ok(state, a=4))  # the hub counted 1..3 as delivered: they were in flight
    assert state.gaps == [sdk.Gap("a", 1, 3, "reconnect")]


def test_durable_earliest_resumes_as_earliest() -> None:
    """The hub's floor covers topics with a position; "earliest" stays right for topics without one."""
    proto = ready()
    state, _ = proto.subscribe("a.>", durable="d", start="earliest")
    proto.receive_data(sub_ok(state) + deliver(state.sub_id, batch("a.x", 0, b"0")))
    (frame,) = reconnect(proto)
    assert frame.durable == "d" and frame.start == StartPosition.EARLIEST and frame.offsets == ()


def test_groups_keep_redeliveries() -> None:
    proto = ready()
    state, _ = proto.subscribe("a", group="g")
    proto.receive_data(sub_ok(state, a=0) + deliver(state.sub_id, batch("a", 5, b"5")))
    proto.receive_data(deliver(state.sub_id, batch("a", 5, b"5 again")))  # after ack_wait: on purpose
    assert [proto.take(state).base_offset, proto.take(state).base_offset] == [5, 5]  # type: ignore[union-attr]
    (frame,) = reconnect(proto)
    assert frame.group == "g" and frame.start == StartPosition.LATEST and frame.offsets == ()


def test_blocking_auto_ack_per_batch_without_a_hub() -> None:
    """Auto-ack acknowledges a batch when the application asks past it; a clean close acks what was taken."""
    client = sdk.BlockingClient(
        "127.0.0.1:1",
        name="t",
        token=b"",
        reconnect=None,
        heartbeat=0,
        max_pending_bytes=1 << 20,
        flush_bytes=1 << 16,
        producer_id=1,
        connect_timeout=1,
    )
    proto = client._proto = ready(FakeClock())
    sent: list[bytes] = []
    client._send = lambda: sent.append(proto.data_to_send())  # type: ignore[method-assign]
    client._sock = object()  # type: ignore[assignment]
    sub = sdk.BlockingSubscription(client)
    state, _ = proto.subscribe("a", durable="d", owner=sub)
    sub._state, sub._auto = state, True
    proto.receive_data(sub_ok(state, a=0))
    proto.receive_data(deliver(state.sub_id, batch("a", 0, b"0", b"1")) + deliver(state.sub_id, batch("a", 2, b"2")))
    assert [sub.next(0).offset, sub.next(0).offset] == [0, 1]  # type: ignore[union-attr]
    assert not proto._ack_dirty  # the application still holds offset 1
    assert sub.next(0).offset == 2  # type: ignore[union-attr]
    assert [a for chunk in sent for a in acks_of(chunk)] == [(state.sub_id, [("a", 0, 1)])]
    sent.clear()
    sub.close()
    assert [f.OPCODE for f in frames_of(b"".join(sent))] == [wire.Opcode.ACK, wire.Opcode.UNSUB]
    assert acks_of(b"".join(sent)) == [(state.sub_id, [("a", 2, 2)])]
    assert proto.state == State.READY


# -- against real hubs -----------------------------------------------------------------------------


@pytest.fixture
def durable_hub(start_hub: StartHub, tmp_path: Path) -> Any:
    return start_hub("--data-dir", str(tmp_path / "d"))


async def publish_each(client: sdk.Client, topic: str, values: range) -> None:
    """One acked frame per message, so the hub stores (and delivers) each as its own batch."""
    for i in values:
        await client.publish_acked(topic, b"%d" % i)


async def take(sub: sdk.Subscription, n: int) -> list[sdk.Message]:
    with anyio.fail_after(10):
        return [await sub.__anext__() for _ in range(n)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_application_exception_propagates_as_itself(durable_hub: Any, backend: str) -> None:
    """A ValueError raised inside ``async with connect()`` (even before any await) is not an AssertionError
    or an ExceptionGroup."""

    async def bad_option() -> None:
        async with sdk.connect(durable_hub.address, reconnect=None) as client, client.subscribe("x", ack="sometimes"):
            pass

    async def at_once() -> None:
        async with sdk.connect(durable_hub.address, reconnect=None):
            raise KeyError("mine")

    with pytest.raises(ValueError, match="ack must be one of"):
        run(backend, bad_option)
    with pytest.raises(KeyError, match="mine"):
        run(backend, at_once)


@pytest.mark.parametrize("backend", BACKENDS)
def test_durable_auto_ack_resumes_on_a_new_connection(durable_hub: Any, backend: str) -> None:
    address = durable_hub.address

    async def scenario() -> None:
        async with sdk.connect(address) as pub:
            await publish_each(pub, "orders", range(10))
        async with (
            sdk.connect(address) as client,
            client.subscribe("orders", durable=f"w-{backend}", start="earliest", ack="auto") as sub,
        ):
            got = await take(sub, 4)  # a clean exit acknowledges all four
        async with sdk.connect(address) as client:
            async with client.subscribe("orders", durable=f"w-{backend}", start="earliest") as sub:
                assert sub.start_offsets == {"orders": 4}
                got += await take(sub, 3)
            with pytest.raises(RuntimeError):
                async with client.subscribe("orders", durable=f"w-{backend}") as sub:
                    got += await take(sub, 2)
                    raise RuntimeError("processing offset 8 failed")  # 7 is done, 8 is not
        async with sdk.connect(address) as client, client.subscribe("orders", durable=f"w-{backend}") as sub:
            assert sub.start_offsets == {"orders": 8}
            assert [m.offset for m in await take(sub, 2)] == [8, 9]
        assert [m.offset for m in got] == list(range(9))

    run(backend, scenario)


@pytest.mark.parametrize("backend", BACKENDS)
def test_durable_manual_ack_and_batches(durable_hub: Any, backend: str) -> None:
    address = durable_hub.address

    async def scenario() -> None:
        async with sdk.connect(address) as client:
            async with client.subscribe("m", durable="m", ack="manual") as sub:
                await publish_each(client, "m", range(6))
                msgs = await take(sub, 6)
                await msgs[0].ack()
                await sub.ack(msgs[1:3])
                await msgs[4].ack()  # 3 is never acknowledged: the floor stays there
            async with client.subscribe("m", durable="m", ack="manual") as sub:
                assert sub.start_offsets == {"m": 3}
                again = await take(sub, 3)
                assert [m.offset for m in again] == [3, 4, 5]  # redelivered from the floor
                await sub.ack(again)
            # batches() with auto: a batch is acknowledged when the next one is asked for or on a clean exit
            await client.publish("m", b"6")
            await client.publish("m", b"7")
            async with client.subscribe("m", durable="m", ack="auto") as sub:
                with anyio.fail_after(10):
                    async for batch in sub.batches():
                        assert [m.data for m in batch] == [b"6", b"7"]
                        break
            async with client.subscribe("m", durable="m") as sub:
                assert sub.start_offsets == {"m": 8}

    run(backend, scenario)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sdk_reconnect_resumes_a_durable_without_gap_or_duplicate(durable_hub: Any, backend: str) -> None:
    address = durable_hub.address

    async def scenario() -> None:
        async with (
            sdk.connect(address) as pub,
            sdk.connect(address, reconnect=FAST_RECONNECT) as client,
            client.subscribe("r", durable="r", ack="manual") as sub,
        ):
            await publish_each(pub, "r", range(5))
            got = await take(sub, 3)
            await sub.ack(got[:1])  # hub floor: 1; 1..4 were received, 1..2 handed to the application
            await client.flush()
            await await_until(lambda: sub.positions.get("r") == 5, timeout=10, what="everything published so far")
            await client._kill_connection()
            await publish_each(pub, "r", range(5, 10))  # stored while the subscriber is away
            got += await take(sub, 7)
            assert [int(m.data) for m in got] == list(range(10))
            assert client.connections == 2 and not sub.gaps
            assert sub.duplicates == 4  # the hub restarted at 1; 1..4 were dropped here
            await sub.ack(got)
        # every ack, also those made before the loss, reached the hub
        async with sdk.connect(address) as client, client.subscribe("r", durable="r") as sub:
            assert sub.start_offsets == {"r": 10}

    run(backend, scenario)


@pytest.mark.parametrize("backend", BACKENDS)
def test_acks_made_as_the_connection_comes_back_wait_for_the_redelivery(durable_hub: Any, backend: str) -> None:
    """The hub refuses an ACK for offsets it has not delivered on the connection (INVALID_ACK): acks
    for messages received before a reconnect go out once the hub has delivered them again."""
    address = durable_hub.address

    async def scenario() -> None:
        async with (
            sdk.connect(address) as pub,
            sdk.connect(address, reconnect=FAST_RECONNECT) as client,
            client.subscribe("w", durable="w", ack="manual") as sub,
        ):
            await publish_each(pub, "w", range(5))
            got = await take(sub, 5)
            await client._kill_connection()
            await sub.ack(got[:3])  # before the new connection has redelivered anything
            await client.flush()
            await publish_each(pub, "w", range(5, 8))
            got += await take(sub, 3)
            await sub.ack(got[3:])
            await client.flush()
            assert client.connections == 2 and sub.duplicates == 5
        async with sdk.connect(address) as client, client.subscribe("w", durable="w") as sub:
            assert sub.start_offsets == {"w": 8}

    run(backend, scenario)


def test_sdk_reconnect_with_auto_ack_and_latest_durable(durable_hub: Any) -> None:
    """A durable that had received nothing before the loss still gets what was published meanwhile."""

    async def scenario() -> None:
        async with (
            sdk.connect(durable_hub.address) as pub,
            sdk.connect(durable_hub.address, reconnect=FAST_RECONNECT) as client,
        ):
            await pub.publish_acked("late", b"old")
            async with client.subscribe("late", durable="late") as sub:
                await client._kill_connection()
                await publish_each(pub, "late", range(3))
                got = await take(sub, 3)
                assert [m.data for m in got] == [b"0", b"1", b"2"] and client.connections == 2

    run("trio", scenario)


def test_durable_survives_a_hub_restart(start_hub: StartHub, tmp_path: Path) -> None:
    data = str(tmp_path / "d")
    hub = start_hub("--data-dir", data)

    async def first() -> None:
        async with sdk.connect(hub.address) as client:
            await publish_each(client, "keep", range(8))
            async with client.subscribe("keep", durable="k", start="earliest") as sub:
                await take(sub, 5)
            await anyio.sleep(0.5)  # positions are saved at most every 0.2 s

    run("trio", first)
    hub.stop()
    hub = start_hub("--data-dir", data)  # a new port: connect anew

    async def second() -> None:
        async with sdk.connect(hub.address) as client, client.subscribe("keep", durable="k") as sub:
            assert sub.start_offsets == {"keep": 5}
            assert [m.data for m in await take(sub, 3)] == [b"5", b"6", b"7"]

    run("asyncio", second)


@pytest.mark.parametrize("backend", BACKENDS)
def test_group_members_share_and_unacked_messages_move_on(durable_hub: Any, backend: str) -> None:
    address = durable_hub.address

    async def scenario() -> None:
        # the first member creates the group: its ack_wait applies
        async with (
            sdk.connect(address) as pub,
            sdk.connect(address) as ca,
            sdk.connect(address) as cb,
            ca.subscribe("jobs", group="g", ack="manual", ack_wait=1.5) as a,
            cb.subscribe("jobs", group="g", ack="manual") as b,
        ):
            await publish_each(pub, "jobs", range(20))
            seen_a: list[int] = []
            seen_b: list[int] = []

            async def drain(sub: sdk.Subscription, into: list[int], ack: bool) -> None:
                while len(seen_a) + len(seen_b) < 20:
                    msg = await sub.next(timeout=0.05)
                    if msg is not None:
                        into.append(msg.offset)
                        if ack:
                            await msg.ack()

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(drain, a, seen_a, False)
                    tg.start_soon(drain, b, seen_b, True)
            # shared, no overlap
            assert seen_a and seen_b and not set(seen_a) & set(seen_b)
            assert sorted(seen_a + seen_b) == list(range(20))
            # a never acknowledged: after ack_wait its messages go to b
            first_b = len(seen_b)
            with anyio.fail_after(10):
                while not set(seen_a) <= set(seen_b):
                    msg = await b.next(timeout=1)
                    if msg is not None:
                        seen_b.append(msg.offset)
                        await msg.ack()
            assert set(seen_b[first_b:]) >= set(seen_a)

    run(backend, scenario)


def test_group_auto_ack_nothing_redelivered(durable_hub: Any) -> None:
    async def scenario() -> None:
        async with sdk.connect(durable_hub.address) as client:
            async with client.subscribe("q", group="auto", ack_wait=0.3) as sub:
                await publish_each(client, "q", range(5))
                assert [m.offset for m in await take(sub, 5)] == list(range(5))
                assert await sub.next(timeout=1.0) is None  # taken and passed: acknowledged, not back
                status = await client.status()
            (group,) = status["groups"]
            assert sum(group["pending"].values()) == 0

    run("trio", scenario)


# -- the blocking client -----------------------------------------------------------------------------


def test_blocking_durable_group_and_acks(durable_hub: Any) -> None:
    address = durable_hub.address
    with sdk.connect_blocking(address) as pub:
        pub.publish_acked_many([("bd", b"%d" % i, None) for i in range(6)])
    with sdk.connect_blocking(address) as client:
        with client.subscribe("bd", durable="bd", start="earliest") as sub:  # auto by default
            got = [sub.next(timeout=5) for _ in range(3)]
        assert [m.offset for m in got if m] == [0, 1, 2]
        with client.subscribe("bd", durable="bd", ack="manual") as sub:
            assert sub.start_offsets == {"bd": 3}
            msg = sub.next(timeout=5)
            assert msg is not None and msg.offset == 3
            msg.ack()
        with client.subscribe("bd", durable="bd") as sub:
            assert sub.start_offsets == {"bd": 4}
        with client.subscribe("bq", group="bg", ack="manual", ack_wait=0.3) as member:
            client.publish_acked("bq", b"job")
            first = member.next(timeout=5)
            assert first is not None
            again = member.next(timeout=5)  # not acked within ack_wait: delivered again (only member)
            assert again is not None and again.offset == first.offset
            again.ack()
            assert member.next(timeout=1.0) is None


def test_blocking_reconnect_resumes_a_durable(durable_hub: Any) -> None:
    with (
        sdk.connect_blocking(durable_hub.address) as pub,
        sdk.connect_blocking(durable_hub.address, reconnect=FAST_RECONNECT) as client,
        client.subscribe("br", durable="br", ack="manual") as sub,
    ):
        pub.publish_acked_many([("br", b"%d" % i, None) for i in range(4)])
        got = [sub.next(timeout=5) for _ in range(2)]

        def arrived() -> bool:
            if sub.positions.get("br") != 4:
                client._service(0.05)  # a blocking client reads only when asked to
            return sub.positions.get("br") == 4

        wait_until(arrived, timeout=10, what="everything published so far", interval=0)  # arrived() itself waits
        assert client._sock is not None
        client._sock.shutdown(2)  # the connection drops under the client
        pub.publish_acked_many([("br", b"%d" % i, None) for i in range(4, 6)])
        while len(got) < 6:
            msg = sub.next(timeout=5)
            assert msg is not None
            got.append(msg)
        assert [int(m.data) for m in got if m] == list(range(6))
        assert client.connections == 2 and sub.duplicates == 4 and not sub.gaps
        sub.ack([m for m in got if m])
