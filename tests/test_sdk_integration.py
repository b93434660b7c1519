"""The SDK against a real hub subprocess on 127.0.0.1, under trio and asyncio."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import sdk
from tests.support.nothub import HTTP_400, answering_server, silent_server
from tests.support.ticker import Ticker
from tests.support.waiting import await_until
from wire import ErrorCode

BACKENDS = ["trio", "asyncio"]
FAST_RECONNECT = sdk.Reconnect(50, 0.01, 0.2, 2.0)


def run(backend: str, scenario: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """Run an async scenario to completion on ``backend`` (sync tests: the same code on both loops)."""
    return anyio.run(scenario, *args, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_publish_subscribe_round_trip(hub_address: str, backend: str) -> None:
    async def scenario() -> None:
        async with sdk.connect(hub_address, name="rt") as client:
            assert client.hub_id
            async with client.subscribe(["greet", "other"]) as sub:
                await client.publish("greet", b"hello", key=b"k1")
                await client.publish("greet", "text")  # type: ignore[arg-type]
                await client.publish("other", b"x")
                got = [await sub.__anext__() for _ in range(3)]
            assert [(m.topic, m.offset, m.key, m.data) for m in got] == [
                ("greet", 0, b"k1", b"hello"),
                ("greet", 1, None, b"text"),
                ("other", 0, None, b"x"),
            ]
            assert got[0].timestamp > 1_600_000_000_000_000 and got[0].datetime.year >= 2024
            assert got[0].subscription is sub and got[0].origin == client.hub_id

    run(backend, scenario)


@pytest.mark.parametrize("backend", BACKENDS)
def test_100k_messages_arrive_in_order_with_nothing_lost(hub_address: str, backend: str) -> None:
    total = 100_000

    async def scenario() -> None:
        async with sdk.connect(hub_address) as sub_client, sdk.connect(hub_address) as pub_client:
            async with sub_client.subscribe("bulk") as sub:

                async def produce() -> None:
                    for i in range(total):
                        await pub_client.publish("bulk", i.to_bytes(4, "big"))
                    await pub_client.flush()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(produce)
                    expected = 0
                    with anyio.fail_after(120):
                        async for batch in sub.batches():
                            for msg in batch:
                                assert msg.offset == expected
                                assert int.from_bytes(msg.data, "big") == expected
                                expected += 1
                            if expected == total:
                                break
            assert expected == total
            assert not sub.gaps

    run(backend, scenario)


async def test_multi_topic_publish_reaches_each_subscription_once(hub_address: str) -> None:
    async with (
        sdk.connect(hub_address) as client,
        client.subscribe(["a", "b"]) as both,
        client.subscribe("b") as only_b,
    ):
        await client.publish(["a", "b"], b"m1")
        await client.publish(["b", "a"], b"m2")
        with anyio.fail_after(10):  # a lost message fails here, not at pytest's hard timeout
            m1, m2 = await both.__anext__(), await both.__anext__()
            # once per subscription, named by the first of the message's topics it matches
            assert (m1.topic, m1.data) == ("a", b"m1") and (m2.topic, m2.data) == ("b", b"m2")
            assert [(m.topic, m.data) for m in [await only_b.__anext__(), await only_b.__anext__()]] == [
                ("b", b"m1"),
                ("b", b"m2"),
            ]
            await client.publish("b", b"marker")
            assert (await both.__anext__()).data == b"marker"  # nothing else was queued before it


@pytest.mark.parametrize("backend", BACKENDS)
def test_flush_yields_even_with_nothing_to_send(hub_address: str, backend: str) -> None:
    """flush() takes the send lock without a checkpoint when it is free; with nothing to send
    it must still let other tasks run, or a loop around it would hold the event loop."""

    async def scenario() -> int:
        ticker = Ticker()
        async with sdk.connect(hub_address) as client, anyio.create_task_group() as tg:
            tg.start_soon(ticker.run)
            await anyio.sleep(0.01)
            before = ticker.ticks
            for _ in range(20):
                await client.flush()
            tg.cancel_scope.cancel()
        return ticker.ticks - before

    assert run(backend, scenario) >= 15


async def test_patterns(hub_address: str) -> None:
    async with sdk.connect(hub_address) as client, client.subscribe("x.*") as star, client.subscribe("x.>") as rest:
        for topic in ("x", "x.a", "x.a.b", "y.a"):
            await client.publish(topic, topic.encode())
        await client.publish("x.end", b"end")
        assert [m.topic async for m in _until(star, b"end")] == ["x.a", "x.end"]
        assert [m.topic async for m in _until(rest, b"end")] == ["x.a", "x.a.b", "x.end"]


async def _until(sub: sdk.Subscription, last: bytes) -> Any:
    with anyio.fail_after(10):
        async for msg in sub:
            yield msg
            if msg.data == last:
                return


async def test_invalid_pattern_is_refused_with_its_code(hub_address: str) -> None:
    async with sdk.connect(hub_address) as client:
        with pytest.raises(sdk.InvalidTopicError) as info:  # by the SDK, before the hub is asked
            async with client.subscribe("a.>.b"):
                pass
        assert info.value.code == ErrorCode.INVALID_TOPIC
        await client.publish("still.works", b"x")  # the connection survives a refused subscription
        await client.flush()


async def test_add_and_remove_topics(hub_address: str) -> None:
    async with sdk.connect(hub_address) as client, client.subscribe("one") as sub:
        offsets = await sub.add(["two", "three.*"])
        assert offsets.get("two") == 0
        assert sub.topics == ("one", "two", "three.*")
        await client.publish("two", b"2")
        await client.publish("three.x", b"3")
        assert [(await sub.__anext__()).data for _ in range(2)] == [b"2", b"3"]
        await sub.remove(["one", "two"])
        assert sub.topics == ("three.*",)
        await client.publish("one", b"gone")
        await client.publish("three.y", b"kept")
        assert (await sub.__anext__()).data == b"kept"


@pytest.mark.parametrize("backend", BACKENDS)
def test_acked_publish_offsets(hub_address: str, backend: str) -> None:
    async def scenario() -> None:
        async with sdk.connect(hub_address) as client:
            await client.publish("acked", b"unacked first")
            first = await client.publish_acked("acked", b"a")
            second = await client.publish_acked(["acked", "mirror"], b"b")
            assert first.offsets == {"acked": 1} and not first.duplicate
            assert second.offsets == {"acked": 2, "mirror": 0}
            assert second.timestamp >= first.timestamp and second.sequence > first.sequence
            # concurrent acked publishes share frames and still get their own offsets
            results: dict[int, sdk.PublishAck] = {}

            async def one(i: int) -> None:
                results[i] = await client.publish_acked("acked", str(i).encode())

            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(one, i)
            assert sorted(r.offsets["acked"] for r in results.values()) == list(range(3, 53))

    run(backend, scenario)


async def test_status_document(hub_address: str) -> None:
    async with sdk.connect(hub_address, name="status-test") as client, client.subscribe("s"):
        status = await client.status()
    assert isinstance(status, dict)
    assert status.get("connections") == 1 and status.get("subscriptions") == 1


async def test_client_side_slow_consumer_cancel_and_drop_oldest(hub_address: str) -> None:
    payload = b"z" * 1000
    async with (
        sdk.connect(hub_address, max_pending_bytes=50_000) as client,
        client.subscribe("slow") as cancel,
        client.subscribe("slow", policy="drop-oldest") as drop,
    ):
        for _ in range(200):
            await client.publish("slow", payload)
        await client.publish("slow", b"last")
        await client.flush()
        # Consume nothing until the whole burst has reached the client: only then is
        # the client-side cap certain to have been exceeded (under load, consuming
        # while data trickles in could keep both subscriptions under it).
        await await_until(
            lambda: drop._state is not None and drop._state.next_offsets.get("slow", 0) >= 201,
            timeout=10,
            what="the whole burst to reach the client",
        )
        received = 0
        with pytest.raises(sdk.SlowConsumerError) as info, anyio.fail_after(10):
            async for _ in cancel:
                received += 1
        assert info.value.client_side and info.value.code == ErrorCode.OUT_OF_CAPACITY
        assert 0 < received < 201
        items = []
        with anyio.fail_after(10):
            async for item in drop.events():
                items.append(item)
                if isinstance(item, sdk.Message) and item.data == b"last":
                    break
        gaps = [i for i in items if isinstance(i, sdk.Gap)]
        assert gaps and drop.gaps == gaps
        delivered = sum(1 for i in items if isinstance(i, sdk.Message))
        assert delivered + sum(g.dropped for g in gaps) == 201  # every message delivered or reported


@pytest.mark.parametrize("backend", BACKENDS)
def test_reconnect_resubscribes_and_resends_acked(hub_address: str, backend: str) -> None:
    async def scenario() -> None:
        async with (
            sdk.connect(hub_address, reconnect=FAST_RECONNECT) as client,
            sdk.connect(hub_address) as pub,
            client.subscribe("rc") as sub,
        ):
            await pub.publish("rc", b"before")
            assert (await sub.__anext__()).data == b"before"
            await client._kill_connection()
            # an acked publish made while the connection is down waits for the reconnect, then is stored
            ack = await client.publish_acked("rc.acked", b"during")
            assert ack.offsets == {"rc.acked": 0}
            await await_until(lambda: client.connections == 2 and sub._s.open, timeout=10, what="resubscription")
            await pub.publish("rc", b"after")
            msg = await sub.__anext__()
            assert (msg.topic, msg.offset, msg.data) == ("rc", 1, b"after")

    run(backend, scenario)


def test_reconnect_after_hub_restart(start_hub: Callable[..., Any]) -> None:
    hub = start_hub()

    async def scenario() -> None:
        nonlocal hub
        async with (
            sdk.connect(hub.address, reconnect=FAST_RECONNECT) as client,
            client.subscribe("restart") as sub,
        ):
            hub.stop()
            hub = start_hub("--listen", hub.address)
            await await_until(
                lambda: client.connections == 2 and sub._s.open, timeout=10, what="reconnect to the new hub"
            )
            ack = await client.publish_acked("restart", b"new hub")
            assert ack.offsets == {"restart": 0}
            assert (await sub.__anext__()).data == b"new hub"

    run("trio", scenario)


async def test_without_reconnect_the_loss_is_raised(start_hub: Callable[..., Any]) -> None:
    hub = start_hub()
    async with sdk.connect(hub.address, reconnect=None) as client, client.subscribe("gone") as sub:
        hub.stop()
        with pytest.raises(sdk.ConnectionLostError), anyio.fail_after(10):
            async for _ in sub:
                pass
        with pytest.raises(sdk.ConnectionLostError):
            await client.publish("gone", b"x")


async def test_connect_to_nothing_raises_connection_lost() -> None:
    with _free_port() as port, pytest.raises(sdk.ConnectionLostError, match="cannot connect"):
        async with sdk.connect(f"127.0.0.1:{port}"):
            pass


class _free_port:
    """A port nobody listens on (bound, not listening, for the duration)."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


async def test_heartbeats_keep_an_idle_connection_alive(start_hub: Callable[..., Any]) -> None:
    hub = start_hub("--heartbeat-interval", "0.1")
    async with sdk.connect(hub.address, reconnect=None) as client:
        assert client.protocol.heartbeat == pytest.approx(0.1)
        await anyio.sleep(1.0)  # ten intervals of application silence: pings and pongs carry on
        assert client.connected and client.connections == 1
        status = await client.status()
        assert status["counters"]["heartbeat_timeouts"] == 0


# -- blocking client -------------------------------------------------------------------------


def test_blocking_client(hub_address: str) -> None:
    with sdk.connect_blocking(hub_address, name="blocking") as client:
        with client.subscribe(["b1", "b2.*"]) as sub:
            client.publish("b1", b"one")
            ack = client.publish_acked("b2.x", b"two", key=b"k")
            assert ack.offsets == {"b2.x": 0}
            first, second = sub.next(timeout=5), sub.next(timeout=5)
            assert first is not None and second is not None
            assert (first.topic, first.data) == ("b1", b"one")
            assert (second.topic, second.key, second.data) == ("b2.x", b"k", b"two")
            assert sub.next(timeout=0.05) is None
            sub.add("b3")
            for i in range(1000):
                client.publish("b3", b"%d" % i)
            client.flush()
            got = [m.data for _, m in zip(range(1000), sub, strict=False)]  # range first: no 1001st wait
            assert got == [b"%d" % i for i in range(1000)]
        assert client.status()["subscriptions"] == 0
        acks = client.publish_acked_many([("many", b"%d" % i, None) for i in range(10)])
        assert [a.offsets["many"] for a in acks] == list(range(10))


def test_blocking_reconnect(hub_address: str) -> None:
    with (
        sdk.connect_blocking(hub_address, reconnect=FAST_RECONNECT) as client,
        sdk.connect_blocking(hub_address) as pub,
        client.subscribe("brc") as sub,
    ):
        assert client._sock is not None
        client._sock.shutdown(2)  # the connection drops under the client
        assert client.publish_acked("brc", b"after").offsets == {"brc": 0}
        assert client.connections == 2
        msg = sub.next(timeout=5)
        assert msg is not None and msg.data == b"after"
        pub.publish("brc", b"from other")
        pub.flush()
        msg = sub.next(timeout=5)
        assert msg is not None and msg.data == b"from other"


@pytest.mark.parametrize("producer_id", [None, 0], ids=["idempotent", "anonymous"])
async def test_interleaved_topics_in_one_frame_are_all_stored(hub_address: str, producer_id: int | None) -> None:
    """Publishes alternating between topics share one PUBLISH frame (several sets per topic): none may be lost."""
    async with sdk.connect(hub_address, producer_id=producer_id) as client, client.subscribe(["i.a", "i.b"]) as sub:
        for i in range(6):
            await client.publish("i.a" if i % 2 == 0 else "i.b", b"%d" % i)
        ack = await client.publish_acked("i.a", b"end")  # same frame as the six above
        assert ack.offsets == {"i.a": 3}
        got = []
        with anyio.fail_after(10):
            async for msg in sub:
                got.append((msg.topic, msg.offset, msg.data))
                if msg.data == b"end":
                    break
        assert got == [
            ("i.a", 0, b"0"),
            ("i.b", 0, b"1"),
            ("i.a", 1, b"2"),
            ("i.b", 1, b"3"),
            ("i.a", 2, b"4"),
            ("i.b", 2, b"5"),
            ("i.a", 3, b"end"),
        ]


def test_reconnect_resumes_from_the_last_offset_without_gap_or_duplicate(
    start_hub: Callable[..., Any], tmp_path: Any
) -> None:
    """A non-latest subscription re-subscribes with start=OFFSET after a drop: nothing missed, nothing twice."""
    hub = start_hub("--data-dir", str(tmp_path))

    async def scenario() -> None:
        async with sdk.connect(hub.address) as pub, sdk.connect(hub.address, reconnect=FAST_RECONNECT) as client:
            for i in range(5):
                await pub.publish("resume", b"%d" % i)
            await pub.flush()
            try:
                sub_cm = client.subscribe("resume", start="earliest")
                sub = await sub_cm.__aenter__()
            except sdk.SubscriptionClosedError as exc:
                if exc.code == ErrorCode.POSITION_UNAVAILABLE:
                    pytest.skip("this hub does not serve start=earliest/OFFSET yet")
                raise
            try:
                with anyio.fail_after(10):
                    got = [int((await sub.__anext__()).data) for _ in range(3)]
                    await client._kill_connection()
                    for i in range(5, 10):
                        await pub.publish_acked("resume", b"%d" % i)  # stored while the subscriber is away
                    while len(got) < 10:
                        got.append(int((await sub.__anext__()).data))
                assert got == list(range(10))
                assert client.connections == 2 and not sub.gaps
            finally:
                await sub_cm.__aexit__(None, None, None)

    run("trio", scenario)


# -- a port that is not a hub ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_not_a_hub_is_a_typed_connection_error_under_both_loops(backend: str) -> None:
    async def scenario(address: str) -> sdk.NotAHubError:
        with pytest.raises(sdk.NotAHubError) as caught:
            async with sdk.connect(address, reconnect=None, handshake_timeout=0.5):
                pass
        return caught.value

    with answering_server(HTTP_400) as address:
        error = run(backend, scenario, address)
        assert error.address == address and error.received.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    with silent_server() as address:
        error = run(backend, scenario, address)
        assert error.received == b"" and "no answer to HELLO within 0.5s" in str(error)
    assert isinstance(error, sdk.ConnectionLostError) and isinstance(error, ConnectionError)


@pytest.mark.parametrize(
    ("reply", "detail"),
    [(b"-ERR unknown command\r\n", 'it sent "-ERR unknown command"'),
     (bytes.fromhex("15030300020228"), "it sent bytes 15 03 03 00 02 02 28; that is a TLS alert: the port speaks "
                                       "TLS, connect with tls=True (--tls)"),
     (b"", "it closed the connection without answering")],
    ids=["text", "binary", "closed"],
)  # fmt: skip
def test_not_a_hub_blocking_says_what_it_got(reply: bytes, detail: str) -> None:
    with answering_server(reply) as address, pytest.raises(sdk.NotAHubError) as caught:
        sdk.connect_blocking(address, reconnect=None)
    assert str(caught.value) == f"{address} did not answer like a pub0sub hub ({detail})"
    with silent_server() as address, pytest.raises(sdk.NotAHubError, match=r"no answer to HELLO within 0\.5s"):
        sdk.connect_blocking(address, reconnect=None, handshake_timeout=0.5)
