"""Message headers end to end: the SDK, the hub's log, old clients and old mesh peers, the decoder.

Headers belong to a message set (docs/protocol.md §4): every message of a set carries the
set's block.  A client or peer that predates them (client protocol 1-2, mesh 2.0.0) gets
the messages without their headers; a version 1 segment still reads; a segment version
this hub does not know is refused whole.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
import trio

import sdk
import wire
from hub.core.mesh.protocols import MeshVersion
from tests.support.cluster import Cluster, publish_until_linked
from tests.support.corehub import CoreHub
from tests.support.hubprocess import HubProcess
from tests.support.mesh import start_mesh, status_of
from tests.support.waiting import await_until

TRACE = {"trace": "4bf92f35", "raw": b"\x00\xff"}
OTHER = {"tenant": "eu-1"}


def headered(topics: tuple[str, ...], data: list[bytes], headers: dict[str, str | bytes]) -> wire.MessageSet:
    return wire.MessageSet.build(topics, [(b"", d) for d in data], headers=wire.encode_headers(headers))


def publish(client: object, sets: list[wire.MessageSet], sequence: int = 1) -> None:
    flags = wire.PublishFlags.HEADERS if any(s.headers for s in sets) else wire.PublishFlags.NONE
    client.send(wire.Publish(sequence=sequence, flags=flags, sets=tuple(sets)))  # type: ignore[attr-defined]


# -- the SDK against a real hub ----------------------------------------------------------------


def test_sdk_round_trip_live_and_after_a_restart_from_the_segment_files(
    start_hub: Callable[..., HubProcess], tmp_path: Path
) -> None:
    data_dir = str(tmp_path / "data")
    hub = start_hub("--data-dir", data_dir)

    async def live() -> None:
        async with sdk.connect(hub.address) as client, client.subscribe("h.t") as sub:
            await client.publish("h.t", b"plain")
            await client.publish("h.t", b"one", headers=TRACE)
            await client.publish("h.t", b"two", headers=TRACE)  # joins the set before it
            await client.publish("h.t", b"three", headers=OTHER)
            await client.publish("h.t", b"plain again", key=b"k")
            got = [await sub.__anext__() for _ in range(5)]
        assert [(m.data, dict(m.headers)) for m in got] == [
            (b"plain", {}), (b"one", TRACE), (b"two", TRACE), (b"three", OTHER), (b"plain again", {}),
        ]  # fmt: skip
        with pytest.raises(TypeError):
            got[1].headers["trace"] = "changed"  # type: ignore[index]

    anyio.run(live, backend="trio")
    hub.stop()
    again = start_hub("--data-dir", data_dir)  # the tail cache is gone: the batches come from the files
    with sdk.connect_blocking(again.address) as client:
        client.publish("h.t", b"blocking", headers={"n": "5"})
        client.flush()
        with client.subscribe("h.t", start="earliest") as sub:
            got = [sub.next(timeout=10) for _ in range(6)]
    assert [dict(m.headers) for m in got] == [{}, TRACE, TRACE, OTHER, {}, {"n": "5"}]
    assert [m.offset for m in got] == list(range(6))


def test_sdk_refuses_bad_headers_before_sending_anything(hub_address: str) -> None:
    with sdk.connect_blocking(hub_address) as client:
        with pytest.raises(ValueError, match="header name"):
            client.publish("t", b"x", headers={"": "empty name"})
        with pytest.raises(ValueError, match="str or bytes"):
            client.publish("t", b"x", headers={"n": 5})  # type: ignore[dict-item]
        client.publish("t", b"still fine", headers={"n": "5"})
        client.flush()


# -- old clients, in the hub's core ---------------------------------------------------------------


def test_a_version_2_subscriber_gets_the_messages_without_headers(tmp_path: Path) -> None:
    hub = CoreHub(tmp_path)
    new = hub.connect()
    old = hub.connect(greet=False)
    old.send(wire.Hello(version=2, client_name="v2"))
    assert old.expect(wire.Welcome).version == 2
    for client in (new, old):
        client.send(wire.Sub(sub_id=1, patterns=("t",)))
        client.expect(wire.SubOk)
    publisher = hub.connect()
    publish(publisher, [headered(("t",), [b"a", b"b"], TRACE), wire.MessageSet.build(("t",), [(b"", b"c")])])
    with_headers, without = new.take()
    assert isinstance(with_headers, wire.DeliverHeaders) and isinstance(without, wire.Deliver)
    assert wire.decode_headers(with_headers.batch.headers) == TRACE
    assert [d for _, _, d in with_headers.batch.messages()] == [b"a", b"b"]
    assert without.batch.headers == b""
    # The old client: the same messages, plain DELIVERs, nothing it cannot read.
    assert all(type(f) is wire.Deliver for f in old.frames)
    assert old.delivered() == [("t", 0, b"a"), ("t", 1, b"b"), ("t", 2, b"c")]
    hub.close()


def test_a_version_2_publisher_cannot_set_the_headers_flag(tmp_path: Path) -> None:
    hub = CoreHub()
    old = hub.connect(greet=False)
    old.send(wire.Hello(version=2, client_name="v2"))
    old.expect(wire.Welcome)
    publish(old, [headered(("t",), [b"a"], TRACE)], sequence=7)
    error = old.expect(wire.Error)
    assert (error.code, error.ref) == (wire.ErrorCode.MALFORMED_FRAME, 7)
    assert "client protocol 3" in error.reason
    assert hub.store is None or "t" not in hub.store.logs


# -- the log: replay, recovery, the format version ------------------------------------------------


def test_headers_survive_a_reopened_log_and_split_deliveries(tmp_path: Path) -> None:
    hub = CoreHub(tmp_path)
    publish(hub.connect(), [headered(("t", "u"), [b"a", b"b", b"c"], TRACE)])
    hub.close()
    hub = CoreHub(tmp_path)  # a new store: recovery reads the segments, no tail cache
    reader = hub.connect()
    # credit 2: the stored batch of 3 goes out split in two, both halves with the set's headers
    reader.send(wire.Sub(sub_id=4, patterns=("u",), start=wire.StartPosition.EARLIEST, credit=2))
    reader.expect(wire.SubOk)
    hub.pump()
    first = reader.expect(wire.DeliverHeaders)
    reader.send(wire.Credit(sub_id=4, credit=5))
    hub.pump()
    second = reader.expect(wire.DeliverHeaders)
    assert [(b.base_offset, b.count) for b in (first.batch, second.batch)] == [(0, 2), (2, 1)]
    assert wire.decode_headers(first.batch.headers) == wire.decode_headers(second.batch.headers) == TRACE
    hub.close()


def _segments(root: Path) -> list[Path]:
    return sorted(root.glob("topics/*/*.log"))


def test_a_version_1_segment_still_reads_and_an_unknown_version_is_refused(tmp_path: Path) -> None:
    hub = CoreHub(tmp_path)
    publish(hub.connect(), [wire.MessageSet.build(("old",), [(b"", b"before headers")])])
    hub.close()
    (segment,) = _segments(tmp_path)
    raw = bytearray(segment.read_bytes())
    assert raw[:1] == b"\x40" and raw[9:11] == b"\x00\x02"  # SEGMENT_HEADER, version 2 written
    raw[9:11] = b"\x00\x01"  # what a hub before headers wrote: the same bytes with version 1
    segment.write_bytes(bytes(raw))
    hub = CoreHub(tmp_path)
    reader = hub.connect()
    reader.send(wire.Sub(sub_id=1, patterns=("old",), start=wire.StartPosition.EARLIEST))
    reader.expect(wire.SubOk)
    hub.pump()
    assert reader.delivered() == [("old", 0, b"before headers")]
    hub.close()

    raw[9:11] = b"\x00\x03"  # a format from the future: refused whole, never half read
    segment.write_bytes(bytes(raw))
    with pytest.raises(OSError, match="segment format version 3; this hub reads 1, 2"):
        CoreHub(tmp_path)


def test_the_decoder_shows_the_headers_of_a_segment(tmp_path: Path) -> None:
    hub = CoreHub(tmp_path)
    publish(hub.connect(), [headered(("t",), [b"x"], TRACE)])
    hub.close()
    (segment,) = _segments(tmp_path)

    def decode(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "wire", *args, str(segment)], capture_output=True, text=True,
                              timeout=60, check=True)  # fmt: skip
        return done.stdout

    line = decode().splitlines()[1]
    assert "LOG_BATCH_HEADERS" in line and 'headers={"trace": "4bf92f35", "raw": bytes "\\x00\\xff"}' in line
    frames = [json.loads(x) for x in decode("--json").splitlines()]
    assert frames[1]["name"] == "LOG_BATCH_HEADERS"
    assert frames[1]["headers"] == {"trace": "4bf92f35", "raw": {"bytes": "\\x00\\xff"}}
    assert "headers: {" in decode("-v")


# -- the mesh --------------------------------------------------------------------------------------


async def test_a_mesh_2_0_peer_gets_the_sets_without_headers_and_a_2_1_peer_with_them() -> None:
    async with trio.open_nursery() as nursery:
        a = await start_mesh(nursery)
        new = await start_mesh(nursery)
        old = await start_mesh(nursery, versions=(MeshVersion.V2,))  # a hub from before headers
        for peer in (new, old):
            await peer.connect(a.listen_addrs[0])
            peer.announce(["t"])
        await await_until(lambda: len(a.interest.peers_for(("t",))) == 2, timeout=5, what="interest at a")
        assert status_of(a, new)["protocol"] == "/pub0sub/mesh/2.1.0"
        assert status_of(a, old)["protocol"] == "/pub0sub/mesh/2.0.0"
        block = wire.encode_headers(TRACE)
        assert a.forward(1, 10, wire.MessageSet.build(["t"], [(b"", b"a"), (b"", b"b")], headers=block)) == 2
        assert a.forward(3, 11, wire.MessageSet.build(["t"], [(b"", b"c")])) == 2
        stores = new.store, old.store  # type: ignore[attr-defined]
        await await_until(lambda: all(s.messages == 3 for s in stores), timeout=5, what="both peers to store")
        assert [(s.origin_seq, s.messages.headers) for _, s in new.store.sets] == [(1, block), (3, b"")]  # type: ignore[attr-defined]
        assert [(s.origin_seq, s.messages.headers) for _, s in old.store.sets] == [(1, b""), (3, b"")]  # type: ignore[attr-defined]
        nursery.cancel_scope.cancel()


@pytest.mark.slow
def test_headers_cross_a_two_hub_mesh_and_stay_in_the_receiving_hubs_log(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        a, b = cluster.start(2)
        cluster.wait_converged(timeout=30)

        async def scenario() -> None:
            async with (
                sdk.connect(b.address) as sub_client,
                sub_client.subscribe("x.>") as sub,
                sdk.connect(a.address) as pub,
            ):
                first = await publish_until_linked(pub, sub, "x.probe")  # b's interest has reached a
                assert first.data.startswith(b"probe ")
                await pub.publish_acked("x.h", b"with", headers=TRACE)
                got = await sub.__anext__()
                while got.topic != "x.h":
                    got = await sub.__anext__()
            assert (got.data, dict(got.headers), got.origin) == (b"with", TRACE, pub.hub_id)
            async with sdk.connect(b.address) as again, again.subscribe("x.h", start="earliest") as replay:
                stored = await replay.__anext__()
            assert dict(stored.headers) == TRACE  # b stored the set with its headers

        trio.run(scenario)


def test_publishes_with_equal_headers_share_a_set_and_a_changed_mapping_is_seen() -> None:
    from sdk.batching import PublishBuffer

    buffer = PublishBuffer(producer_id=1)
    headers = {"trace": "a"}
    buffer.add("t", b"1", None, headers)
    buffer.add("t", b"2", None, dict(headers))  # equal: same set
    headers["trace"] = "b"  # the same object, changed: a new set with the new value
    buffer.add("t", b"3", None, headers)
    buffer.add("t", b"4")  # no headers: a new set
    buffer.add("t", b"5", None, {"trace": "b"})
    frame, _ = buffer.take_frame()
    decoder = wire.FrameDecoder(accept=wire.CLIENT_TO_HUB_OPCODES)
    decoder.feed(frame)
    (publish,) = list(decoder)
    assert [(s.count, wire.decode_headers(s.headers)) for s in publish.sets] == [
        (2, {"trace": "a"}), (1, {"trace": "b"}), (1, {}), (1, {"trace": "b"}),
    ]  # fmt: skip
