"""Mesh v1 against a seed-only peer (hand-rolled bytes): interest, acks, resends, heartbeats."""

from __future__ import annotations

import time

import trio

import wire
from hub.core.mesh.admission import AdmissionRules
from hub.mesh import CloseReason
from tests.support.mesh import SeedPeer, parse_seed_topics, seed_frame, seed_topics, start_mesh, status_of_peer
from tests.support.waiting import await_until

GOLDEN_SUBSCRIBE = bytes.fromhex("020000001007746f7069635f3107746f7069635f32")
GOLDEN_FORWARD = bytes.fromhex("060000001a0207746f7069635f3107746f7069635f320000000568656c6c6f")


async def _linked(nursery: trio.Nursery, peer: SeedPeer, **overrides: object):  # type: ignore[no-untyped-def]
    await nursery.start(peer.run)
    # The seed protocol is admitted only when allowed explicitly (hub/core/mesh/admission.py).
    overrides.setdefault("admission", AdmissionRules(allow_v1=True))
    mesh = await start_mesh(nursery, **overrides)
    with trio.fail_after(10):
        await mesh.connect(peer.address)
    return mesh


async def test_seed_peer_subscribes_and_receives_byte_exact_forwards() -> None:
    async with trio.open_nursery() as nursery:
        peer = SeedPeer(subscribe=("topic_1", "topic_2"))
        mesh = await _linked(nursery, peer)
        link = mesh.links[str(peer.host.get_id())]
        assert link.version is not None and link.version.label == "1.0.0"  # negotiated down from v2
        await await_until(lambda: peer.received(3), timeout=5, what="SUBSCRIBE_ACK to the seed peer")
        assert peer.received(3) == [b"\x01"]
        assert mesh.interest.patterns_of(link.key) == {"topic_1", "topic_2"}

        mesh.announce(["topic_2", "topic_1"])  # sorted on the wire: the seed's worked example
        await await_until(lambda: peer.received(2), timeout=5, what="SUBSCRIBE from the hub")
        assert GOLDEN_SUBSCRIBE in bytes(peer.raw[0])

        before = len(peer.raw[0])
        mesh.forward(1, 0, wire.MessageSet.build(["topic_1", "topic_2"], [(b"", b"hello")]))
        await await_until(lambda: peer.received(6), timeout=5, what="FORWARD")
        forwarded = bytes(peer.raw[0][before:])
        assert forwarded.startswith(GOLDEN_FORWARD)
        assert peer.received(6) == [GOLDEN_FORWARD[5:]]

        # A topic the seed peer never asked for crosses no link (lazy push).
        mesh.forward(2, 0, wire.MessageSet.build(["other"], [(b"", b"nope")]))
        status = status_of_peer(mesh, link.peer_id)
        assert status["messages_skipped_no_interest"] == 1 and status["messages_sent"] == 1

        # Withdraw: UNSUBSCRIBE, then forwards stop.
        await peer.send(seed_frame(4, seed_topics("topic_1", "topic_2")))
        await await_until(lambda: not mesh.interest.patterns_of(link.key), timeout=5, what="interest withdrawn")
        await await_until(lambda: peer.received(5), timeout=5, what="UNSUBSCRIBE_ACK")
        mesh.forward(3, 0, wire.MessageSet.build(["topic_1"], [(b"", b"late")]))
        assert status_of_peer(mesh, link.peer_id)["messages_sent"] == 1
        nursery.cancel_scope.cancel()


async def test_unwanted_forward_is_dropped_and_answered_with_unsubscribe() -> None:
    async with trio.open_nursery() as nursery:
        peer = SeedPeer()
        mesh = await _linked(nursery, peer)
        mesh.announce(["wanted"])
        got: list[tuple[int, list[wire.ForwardSet]]] = []
        mesh.core.inbound._on_forward = lambda origin, sets, p: got.append((origin, sets))  # type: ignore[assignment]
        body = bytes([1]) + seed_topics("unwanted") + (4).to_bytes(4, "big") + b"data"
        await peer.send(seed_frame(6, body))
        await await_until(lambda: peer.received(4), timeout=5, what="UNSUBSCRIBE answer")
        assert parse_seed_topics(peer.received(4)[0]) == ["unwanted"]
        assert status_of_peer(mesh, peer.host.get_id())["forwards_dropped_no_interest"] == 1
        assert got == []

        # A wanted one reaches the hub, as origin 0 (v1 has no origin or sequence).
        body = bytes([1]) + seed_topics("wanted") + (2).to_bytes(4, "big") + b"ok"
        await peer.send(seed_frame(6, body))
        await await_until(lambda: bool(got), timeout=5, what="delivery")
        origin, sets = got[0]
        assert origin == 0 and list(sets[0].messages.messages()) == [(b"", b"ok")]
        nursery.cancel_scope.cancel()


async def test_subscribe_without_ack_is_resent_then_the_peer_is_dropped() -> None:
    async with trio.open_nursery() as nursery:
        peer = SeedPeer(ack_subscribe=False)
        mesh = await _linked(nursery, peer, subscribe_ack_timeout=0.2, subscribe_resends=2, heartbeat_interval=5.0)
        link = mesh.links[str(peer.host.get_id())]
        start = time.monotonic()
        mesh.announce(["topic_1"])
        await await_until(lambda: link.last_close is not None, timeout=5, what="the peer to be dropped")
        assert link.last_close is CloseReason.SUBSCRIBE_UNACKED
        await await_until(lambda: bool(peer.closed), timeout=5, what="the stream to close at the peer")
        subscribes = peer.received(2, stream=0)
        assert subscribes == [seed_topics("topic_1")] * 3  # the first send + 2 resends
        assert status_of_peer(mesh, link.peer_id)["subscribe_resends"] == 2
        # 3 windows of 0.2 s (plus a timer tick), not much more.
        assert 0.55 <= peer.closed[0] - start < 1.5
        nursery.cancel_scope.cancel()


async def test_silent_peer_is_declared_dead_within_the_heartbeat_bound() -> None:
    async with trio.open_nursery() as nursery:
        peer = SeedPeer(answer_ping=False, subscribe=("topic_1",))
        mesh = await _linked(nursery, peer, heartbeat_interval=0.2, heartbeat_misses=3)
        link = mesh.links[str(peer.host.get_id())]
        await await_until(lambda: mesh.interest.patterns_of(link.key) == {"topic_1"}, timeout=5, what="interest")
        await await_until(lambda: link.last_close is not None, timeout=5, what="heartbeat timeout")
        assert link.last_close is CloseReason.HEARTBEAT_TIMEOUT
        await await_until(lambda: bool(peer.closed), timeout=5, what="the stream to close at the peer")
        # Silent since its SUBSCRIBE_ACK-less start: dead after 3 beats of 0.2 s plus a timer tick.
        silent_for = peer.closed[0] - peer.last_sent
        assert 0.55 <= silent_for < 1.0, silent_for
        assert not mesh.interest.patterns_of(link.key)  # a dead v1 peer's interest goes at once
        pings = [b for b in peer.received(1, stream=0) if b == b"ping"]
        assert 2 <= len(pings) <= 4
        nursery.cancel_scope.cancel()


async def test_a_seed_peer_may_name_any_topic_the_seed_allows() -> None:
    """The seed's rule on the mesh wire is 1..255 bytes: names clients may not use are still interest."""
    names = ("has space", "a..b", "a.>.b")
    async with trio.open_nursery() as nursery:
        peer = SeedPeer(subscribe=names)
        mesh = await _linked(nursery, peer)
        link = mesh.links[str(peer.host.get_id())]
        await await_until(lambda: peer.received(3), timeout=5, what="SUBSCRIBE_ACK to the seed peer")
        assert peer.received(3) == [b"\x01"]
        assert mesh.interest.patterns_of(link.key) == set(names)
        mesh.forward(1, 0, wire.MessageSet.build(["has space"], [(b"", b"literal")]))
        mesh.forward(2, 0, wire.MessageSet.build(["a.x.b"], [(b"", b"not a pattern")]))
        await await_until(lambda: peer.received(6), timeout=5, what="FORWARD")
        assert peer.received(6) == [bytes([1]) + seed_topics("has space") + (7).to_bytes(4, "big") + b"literal"]
        assert status_of_peer(mesh, link.peer_id)["messages_skipped_no_interest"] == 1
        nursery.cancel_scope.cancel()
