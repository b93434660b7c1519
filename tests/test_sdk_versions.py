"""The SDK against an older hub: it steps down to the hub's client protocol version, and the
features that version lacks are refused at the call (docs/sdk.md, "Older hubs").

Two kinds of older hub, both real processes: this tree's hub started with
``--max-client-version`` (the operator's pin for a rolling upgrade), which refuses a newer HELLO
with the reason hubs of versions 1 and 2 gave and serves an older connection through the
version checks; and the hub of the last commit before client protocol 3, unpacked from git
(``git archive``), for the bytes a hub of that time really sent.  The decision itself
(sdk.versions, ClientProtocol.step_down) is also driven sans-IO, for the reasons a hub might give
and for a client whose state the older version cannot carry.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import sdk
import wire
from sdk.protocol import ClientProtocol, State
from sdk.versions import next_version
from tests.support.client_protocol import FakeClock, frames_of, welcome
from tests.support.hubprocess import ROOT, HubProcess

StartHub = Callable[..., HubProcess]


def opened_connections(client: Any) -> int:
    """Connections the hub has accepted since it started (the client's own included)."""
    return int(client.status()["counters"]["connections_total"])


# -- the decision, sans-IO ------------------------------------------------------------------------


def refusal(reason: str) -> sdk.HubError:
    return sdk.HubError(wire.ErrorCode.UNSUPPORTED_VERSION, reason)


@pytest.mark.parametrize(
    ("refused", "reason", "offered"),
    [
        (3, "client protocol version 3 not supported (hub speaks 1..2)", 2),  # hubs since version 2
        (3, "client protocol version 3 not supported (hub speaks 1)", 1),  # a version 1 hub: straight to 1
        (3, "client protocol version 3 not supported (hub speaks 1..1)", 1),  # a hub pinned to 1
        (3, "unsupported", 2),  # a reason that names nothing: one version at a time
        (2, "unsupported", 1),
        (1, "client protocol version 1 not supported (hub speaks 1..2)", None),  # nothing lower
        (3, "client protocol version 3 not supported (hub speaks 4..5)", None),  # only newer ones
    ],
)
def test_next_version_reads_the_reason_or_steps_one_down(refused: int, reason: str, offered: int | None) -> None:
    assert next_version(refused, refusal(reason)) == offered


def test_only_unsupported_version_steps_down() -> None:
    assert next_version(3, sdk.HubError(wire.ErrorCode.NOT_AUTHORIZED, "hub speaks 1..2)")) is None
    assert next_version(3, sdk.ConnectionLostError("gone")) is None


def handshake(proto: ClientProtocol) -> wire.Hello:
    proto.connection_made()
    (hello,) = frames_of(proto.data_to_send())
    assert isinstance(hello, wire.Hello)
    return hello


def test_step_down_offers_the_older_version_on_the_next_hello_and_the_newest_after_welcome() -> None:
    proto = ClientProtocol(name="t", producer_id=9, clock=FakeClock())
    assert handshake(proto).version == wire.CLIENT_PROTOCOL_VERSION == 3
    with pytest.raises(sdk.HubError) as refused:
        proto.receive_data(wire.Error(code=wire.ErrorCode.UNSUPPORTED_VERSION, reason="who knows").encode())
    proto.connection_lost(refused.value)
    assert proto.step_down(refused.value)
    assert handshake(proto).version == 2
    proto.receive_data(welcome(version=2))
    assert proto.state == State.READY and proto.version == 2
    # The next connection (a reconnect) offers the newest first again: the hub may have been upgraded.
    proto.connection_lost()
    assert handshake(proto).version == 3


def test_a_client_whose_filters_an_older_hub_cannot_carry_fails_naming_them() -> None:
    """A hub downgraded under a client with a key-filtered subscription: stepping down would
    resubscribe without the filter (every key delivered), so the client fails instead."""
    proto = ClientProtocol(name="t", producer_id=9, clock=FakeClock())
    handshake(proto)
    proto.receive_data(welcome())
    state, _ = proto.subscribe("actors", keys=[b"actor-7"])
    proto.connection_lost()
    handshake(proto)
    error = refusal("client protocol version 3 not supported (hub speaks 1..2)")
    with pytest.raises(sdk.HubError) as failed:
        proto.step_down(error)
    assert failed.value.code == wire.ErrorCode.UNSUPPORTED_VERSION
    assert "key filters" in str(failed.value) and "hub speaks 1..2" in str(failed.value)
    assert proto.hello_version == 3
    # Without the filter there is nothing the older version cannot carry: it steps down.
    proto.unsubscribe(state)
    proto.subs.clear()
    assert proto.step_down(error) and proto.hello_version == 2


def test_unacknowledged_publishes_with_headers_are_held_state_too() -> None:
    proto = ClientProtocol(name="t", producer_id=9, clock=FakeClock())
    handshake(proto)
    proto.receive_data(welcome())
    proto.publish_acked("t", b"x", None, {"trace": "1"})
    proto.flush()
    proto.data_to_send()
    proto.connection_lost()
    handshake(proto)
    with pytest.raises(sdk.HubError, match="headers on publish"):
        proto.step_down(refusal("client protocol version 3 not supported (hub speaks 1..2)"))


# -- real hubs ------------------------------------------------------------------------------------


def test_a_current_hub_negotiates_the_newest_version_in_one_connection(start_hub: StartHub) -> None:
    hub = start_hub()

    async def scenario() -> None:
        async with sdk.connect(hub.address) as client:
            assert client.protocol_version == wire.CLIENT_PROTOCOL_VERSION
            assert client.connections == 1
            assert (await client.status())["counters"]["connections_total"] == 1

    anyio.run(scenario, backend="trio")
    with sdk.connect_blocking(hub.address) as client:
        assert client.protocol_version == wire.CLIENT_PROTOCOL_VERSION
        assert client.connections == 1
        assert opened_connections(client) == 2  # the async client's one, and this one


@pytest.mark.parametrize("pinned", [1, 2])
def test_both_clients_step_down_to_a_hub_pinned_to_an_older_version(
    start_hub: StartHub, tmp_path: Path, pinned: int
) -> None:
    hub = start_hub("--max-client-version", str(pinned), "--data-dir", str(tmp_path / "data"))

    async def scenario() -> None:
        async with sdk.connect(hub.address) as client, client.subscribe("orders") as sub:
            assert client.protocol_version == pinned
            # One refused HELLO, then the version the hub named: two connections, never three.
            assert (await client.status())["counters"]["connections_total"] == 2
            await client.publish("orders", b"one", key=b"k")
            ack = await client.publish_acked("orders", b"two")
            assert ack.offsets == {"orders": 1}
            got = [await sub.__anext__() for _ in range(2)]
            assert [(m.key, m.data, m.headers) for m in got] == [(b"k", b"one", {}), (None, b"two", {})]

    anyio.run(scenario, backend="trio")
    with sdk.connect_blocking(hub.address) as client, client.subscribe("orders", start="earliest") as sub:
        assert client.protocol_version == pinned
        assert opened_connections(client) == 4
        assert [sub.next(timeout=10).data for _ in range(2)] == [b"one", b"two"]


def expect_refused(call: Callable[[], Any], feature: str, version: int) -> None:
    with pytest.raises(sdk.UnsupportedFeatureError) as refused:
        call()
    assert refused.value.feature.startswith(feature)
    assert refused.value.version == version and refused.value.needs > version
    assert f"speaks {version}" in str(refused.value)


def test_features_the_older_version_lacks_are_refused_at_the_call_and_nothing_is_sent(
    start_hub: StartHub, tmp_path: Path
) -> None:
    hub = start_hub("--max-client-version", "2", "--data-dir", str(tmp_path / "data"))
    with sdk.connect_blocking(hub.address) as client, client.subscribe("t") as plain:
        assert client.protocol_version == 2
        expect_refused(lambda: client.publish("t", b"x", headers={"a": "1"}), "headers", 2)
        expect_refused(lambda: client.publish_acked("t", b"x", headers={"a": "1"}), "headers", 2)
        expect_refused(lambda: client.publish_acked_many([("t", b"x", None, {"a": "1"})]), "headers", 2)
        _, region = wire.encode_records([(b"", b"x")])
        expect_refused(lambda: client.publish_encoded("t", region, [0, len(region)], headers={"a": "1"}), "headers", 2)
        expect_refused(lambda: client.subscribe("t", keys=[b"k"]), "key filters", 2)
        expect_refused(lambda: client.subscribe("t", key_prefixes=[b"k"]), "key filters", 2)
        expect_refused(lambda: client.subscribe("t", query="a = 'b'"), "tag queries", 2)
        expect_refused(lambda: client.kv("t"), "kv views", 2)
        expect_refused(lambda: plain.add_keys(b"k"), "key filters", 2)
        # Nothing of that reached the hub: the connection is the first one welcomed, and the
        # messages without headers after it are the only ones stored.
        client.publish("t", b"plain")
        assert client.publish_acked("t", b"acked").offsets == {"t": 1}
        assert [plain.next(timeout=10).data for _ in range(2)] == [b"plain", b"acked"]
        assert client.connections == 1
        assert opened_connections(client) == 2
        # Version 2 has COMMIT: a durable subscription commits.
        with client.subscribe("t", durable="d", start="earliest", ack="manual") as durable:
            durable.ack(durable.next(timeout=10))
            assert durable.commit() == {"t": 1}

    async def scenario() -> None:
        async with sdk.connect(hub.address) as client, client.subscribe("t") as sub:
            assert client.protocol_version == 2
            with pytest.raises(sdk.UnsupportedFeatureError, match="headers on publish"):
                await client.publish("t", b"x", headers={"a": "1"})
            with pytest.raises(sdk.UnsupportedFeatureError, match="headers on publish"):
                await client.publish_acked("t", b"x", headers={"a": "1"})
            with pytest.raises(sdk.UnsupportedFeatureError, match="key filters"):
                await sub.set_keys(b"k")
            with pytest.raises(sdk.UnsupportedFeatureError, match="tag queries"):
                async with client.subscribe("t", query="a EXISTS"):
                    pass
            with pytest.raises(sdk.UnsupportedFeatureError, match="kv views"):
                client.kv("t")
            await client.publish_acked("t", b"still fine")
            assert (await sub.__anext__()).data == b"still fine"
            assert client.connections == 1

    anyio.run(scenario, backend="trio")


def test_commit_is_refused_on_a_version_1_connection(start_hub: StartHub, tmp_path: Path) -> None:
    hub = start_hub("--max-client-version", "1", "--data-dir", str(tmp_path / "data"))
    with sdk.connect_blocking(hub.address) as client, client.subscribe("t", durable="d") as durable:
        assert client.protocol_version == 1
        client.publish_acked("t", b"x")
        assert durable.next(timeout=10).data == b"x"
        expect_refused(durable.commit, "commit", 1)
        client.publish_acked("t", b"y")  # the connection is still up: COMMIT was never sent
        assert durable.next(timeout=10).data == b"y"


def test_a_pin_outside_the_versions_the_hub_speaks_is_refused_at_start(tmp_path: Path) -> None:
    for bad in ("0", str(wire.CLIENT_PROTOCOL_VERSION + 1)):
        with pytest.raises(RuntimeError, match=r"max_client_version must be 1\.\.3"):
            HubProcess("--max-client-version", bad)


def test_after_the_hub_is_upgraded_a_reconnect_negotiates_the_newest_version(
    start_hub: StartHub, tmp_path: Path
) -> None:
    """The rolling upgrade: a client that stepped down gets the newer version on its next connection."""
    data = tmp_path / "data"
    old = start_hub("--max-client-version", "2", "--data-dir", str(data))
    client = sdk.connect_blocking(old.address, reconnect=sdk.Reconnect(200, 0.05, 0.2))
    with client, client.subscribe("t", durable="d", start="earliest") as sub:
        assert client.protocol_version == 2
        client.publish_acked("t", b"before")
        assert sub.next(timeout=10).data == b"before"
        old.stop()
        start_hub("--listen", old.address, "--data-dir", str(data))  # the same port, no pin
        client.publish_acked("t", b"after", timeout=30)  # reconnects; the durable subscription resumes
        assert sub.next(timeout=10).data == b"after"
        assert client.protocol_version == 3 and client.connections == 2
        client.publish_acked("t", b"with headers", headers={"v": "3"})
        msg = sub.next(timeout=10)
        assert (msg.data, msg.headers) == (b"with headers", {"v": "3"})


# -- a hub from before client protocol 3 ---------------------------------------------------------


def _before_version_3() -> str | None:
    """The last commit before HEADERS_CLIENT_VERSION (client protocol 3) came in; None without history."""
    try:
        found = subprocess.run(
            ["git", "log", "--reverse", "--format=%H", "-S", "HEADERS_CLIENT_VERSION", "--", "wire/frames"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{found[0]}^" if found else None


@pytest.fixture(scope="module")
def version_2_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    commit = _before_version_3()
    if commit is None:
        pytest.skip("no git history here (a shallow clone?): the hub from before client protocol 3 is unavailable")
    tree = tmp_path_factory.mktemp("hub-v2")
    archive = subprocess.run(["git", "archive", commit, "hub", "wire"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    hub = HubProcess("--data-dir", str(tree / "data"), root=tree)
    yield hub
    hub.stop()


def test_both_clients_step_down_to_a_hub_from_before_version_3(version_2_hub: HubProcess) -> None:
    hub = version_2_hub

    async def scenario() -> None:
        async with sdk.connect(hub.address) as client, client.subscribe("old", start="earliest") as sub:
            assert client.protocol_version == 2
            assert (await client.status())["counters"]["connections_total"] == 2
            with pytest.raises(sdk.UnsupportedFeatureError, match="headers on publish"):
                await client.publish("old", b"x", headers={"a": "1"})
            await client.publish("old", b"one", key=b"k")
            assert (await client.publish_acked("old", b"two")).offsets == {"old": 1}
            assert [(m.key, m.data) for m in [await sub.__anext__() for _ in range(2)]] == [
                (b"k", b"one"),
                (None, b"two"),
            ]

    anyio.run(scenario, backend="trio")
    with sdk.connect_blocking(hub.address) as client:
        assert client.protocol_version == 2
        with client.subscribe("old", durable="d", start="earliest", ack="manual") as durable:
            durable.ack(durable.next(timeout=10))
            assert durable.commit() == {"old": 1}
        expect_refused(lambda: client.subscribe("old", keys=[b"k"]), "key filters", 2)
        expect_refused(lambda: client.kv("old"), "kv views", 2)
        assert client.connections == 1
        assert opened_connections(client) == 4


def test_headers_encoded_on_a_newer_connection_are_refused_on_an_older_one() -> None:
    """The buffer reuses the last headers block it encoded: after a step down that block must
    not slip through (the refusal is checked where a block is encoded)."""
    proto = ClientProtocol(name="t", producer_id=9, clock=FakeClock())
    handshake(proto)
    proto.receive_data(welcome())
    proto.publish_acked("t", b"x", None, {"trace": "1"})
    proto.flush()
    proto.receive_data(wire.PublishAck(producer_id=9, sequence=1, timestamp=1, ranges=()).encode())
    proto.connection_lost()
    handshake(proto)
    proto.receive_data(welcome(version=2))
    with pytest.raises(sdk.UnsupportedFeatureError, match="headers on publish"):
        proto.publish("t", b"y", None, {"trace": "1"})
    assert proto.buffer.empty
