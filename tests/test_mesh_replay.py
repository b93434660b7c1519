"""Replay from the log: forwards the in-memory window could not keep reach the peer from the hub's logs.

In-process meshes (real libp2p hosts) drive the session's replay logic step by
step; ``MeshBridge.own_sets`` is tested on a real hub's topic logs; the
cluster tests at the end run real hub processes through a peer that stayed
away past ``--mesh-resume-linger`` and a sender killed with forwards unacked.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair

import sdk
import wire
from hub.app import HubServer
from hub.config import HubConfig
from hub.storage.batches import SharedBatch
from hub.storage.file_cache import FileCache
from hub.storage.topic_log import LogSettings, TopicLog
from sdk.tools.tcpproxy import TcpProxy
from tests.support.cluster import HUB_POLL, Cluster, Hub, collect
from tests.support.mesh import OwnLog, Store, interest_of, new_hub_id, start_mesh, status_of
from tests.support.waiting import await_until

MSG = b"m" * 64


def one(topic: str = "r") -> wire.MessageSet:
    return wire.MessageSet.build([topic], [(b"", MSG)])


# -- the session's replay logic ----------------------------------------------------------------


@pytest.mark.parametrize("with_log", [True, False], ids=["with-log", "memory-only"])
async def test_window_overflow_during_a_session_is_replayed_from_the_log(with_log: bool) -> None:
    own = OwnLog()
    async with trio.open_nursery() as nursery:
        # Heartbeats that outlast the burst below: it holds a's loop, and on a loaded machine
        # (the suite at 22:23 UTC) past FAST's 0.6 s, so b ended the session, the next one
        # replayed everything from its hello position, and the window's last 8 came by replay.
        a = await start_mesh(nursery, replay=own if with_log else None, window_max_sets=8, heartbeat_interval=30.0)
        b = await start_mesh(nursery, heartbeat_interval=30.0)
        await b.connect(a.listen_addrs[0])
        b.announce(["r"])
        await await_until(lambda: interest_of(a, b) == {"r"}, timeout=5, what="a to see b's interest")
        # One burst without a checkpoint: the writer cannot run, the 8-set window overflows.
        for i in range(1_000):
            own.publish(a, one("r" if i % 3 else "other"))
        wanted = [seq for seq, m in own.sets if m.topics == ("r",)]
        assert status_of(a, b)["window_evicted_unsent_messages"] == len(wanted) - 8
        if with_log:
            await await_until(lambda: b.store.messages == len(wanted), timeout=5, what="the replay")  # type: ignore[attr-defined]
            await trio.sleep(0.1)  # nothing more arrives (no duplicate, no stray topic)
            assert b.store.seqs(a.hub_id) == wanted  # type: ignore[attr-defined]
            to_b = status_of(a, b)
            assert to_b["sessions"] == 1  # one session: the replay is the overflow's, not a resume's
            assert to_b["replays"] == 1
            assert to_b["messages_replayed"] == len(wanted) - 8  # the last 8 left the window
        else:
            # Without a log the loss is what the counters said; the rest arrives in order.
            await await_until(lambda: b.store.messages > 0, timeout=5, what="b to store a first message")  # type: ignore[attr-defined]
            await trio.sleep(0.1)
            assert b.store.seqs(a.hub_id) == wanted[-8:]  # type: ignore[attr-defined]
            assert status_of(a, b)["replays"] == 0
        nursery.cancel_scope.cancel()


async def test_hub_back_after_its_interest_was_withdrawn_gets_the_gap_from_the_log() -> None:
    own = OwnLog()
    b_store = Store()
    b_id = new_hub_id()
    b_key = create_new_key_pair()  # b restarts as the same hub: same identity, same stored positions
    async with trio.open_nursery() as nursery:
        # resume_linger 0: a broken link withdraws the peer's interest at once, so nothing
        # published while it is away is queued for it -- only the log has it.
        # Heartbeats as slow as the defaults': under a busy suite FAST's 0.6 s of silence can end a
        # session, and its successor replays the rest -- two replays, none of them wrong.
        slow_beats = {"heartbeat_interval": 1.0}
        a = await start_mesh(nursery, replay=own, resume_linger=0.0, **slow_beats)
        async with trio.open_nursery() as b_nursery:
            b = await start_mesh(b_nursery, b_store, hub_id=b_id, key_pair=b_key, **slow_beats)
            await b.connect(a.listen_addrs[0])
            b.announce(["r", "s"])
            await await_until(lambda: interest_of(a, b) == {"r", "s"}, timeout=5, what="a to see b's interest")
            for _ in range(10):
                own.publish(a, one())
            await await_until(lambda: b_store.messages == 10, timeout=5, what="the 10 messages stored")
            b_nursery.cancel_scope.cancel()  # b stops; its store (positions) stays
        await await_until(lambda: not interest_of(a, b), timeout=5, what="b's interest withdrawn")
        # While b is away: one topic each, both, one nobody wants.
        for i in range(500):
            own.publish(a, one(("r", "s", "x")[i % 3]))
        own.publish(a, wire.MessageSet.build(["r", "s"], [(b"", MSG)] * 2))
        back = await start_mesh(nursery, b_store, hub_id=b_id, key_pair=b_key, **slow_beats)
        back.announce(["r", "s"])
        await back.connect(a.listen_addrs[0])
        await await_until(lambda: interest_of(a, back) == {"r", "s"}, timeout=5, what="b back")
        own.publish(a, one())  # live again: after the replay, never before it
        want = [seq + i for seq, m in own.sets if m.topics != ("x",) for i in range(m.count)]
        await await_until(lambda: b_store.messages == len(want), timeout=5, what="the gap")
        await trio.sleep(0.1)
        assert b_store.seqs(a.hub_id) == want
        to_back = status_of(a, back)
        assert (to_back["sessions"], to_back["replays"]) == (1, 1)
        nursery.cancel_scope.cancel()


# -- MeshBridge.own_sets on a real hub's logs -----------------------------------------------


def _hub(data_dir: Path, **settings: object) -> HubServer:
    return HubServer(HubConfig(listen="127.0.0.1:0", data_dir=data_dir, mesh_listen="/ip4/127.0.0.1/tcp/0",
                               **settings))  # type: ignore[arg-type]


def _publish(server: HubServer, topics: list[str], n: int = 1) -> int:
    seq = server.core.origin.take(n)
    count, records = wire.encode_records([(b"", MSG)] * n)
    server.core.publisher.store_set(tuple(topics), count, records, timestamp=seq, origin=server.hub_id, origin_seq=seq)
    return seq


def _replayed(server: HubServer, wants: set[str], after: int, before: int) -> tuple[list[int], list[str]]:
    assert server.mesh is not None
    holes: list[str] = []
    sets = server.core.mesh.own_sets(wants.__contains__, after, before, holes.append)
    return [e.first_seq for e in sets], holes


def test_own_sets_come_back_in_sequence_order_once_each_and_after_a_reopen(tmp_path: Path) -> None:
    server = _hub(tmp_path)
    seqs: dict[str, list[int]] = {"a": [], "b": [], "ab": []}
    for i in range(3_000):
        kind = ("a", "b", "ab")[i % 3]
        seqs[kind].append(_publish(server, list(kind)))
        if i % 100 == 0:  # forwards from another hub interleave in the same logs
            server.core.publisher.store_set(("a", "b"), 1, wire.encode_records([(b"", MSG)])[1], timestamp=1,
                                       origin=99, origin_seq=i + 1)
    everything = sorted(seqs["a"] + seqs["b"] + seqs["ab"])
    assert _replayed(server, {"a", "b"}, 0, 10**9) == (everything, [])
    only_a = sorted(seqs["a"] + seqs["ab"])
    assert _replayed(server, {"a"}, 0, 10**9)[0] == only_a
    # A window in the middle: strictly after, strictly before.
    after, before = everything[1000], everything[2000]
    assert _replayed(server, {"a", "b"}, after, before)[0] == everything[1001:2000]
    assert server.store is not None
    server.store.close()
    reopened = _hub(tmp_path)  # the index is rebuilt from the segments
    assert _replayed(reopened, {"a", "b"}, after, before)[0] == everything[1001:2000]
    assert reopened.store is not None
    reopened.store.close()


def test_a_set_stored_in_some_topics_only_is_replayed_for_those(tmp_path: Path) -> None:
    """A crash between a set's appends leaves it in some of its topics; the producer's retry
    stores the rest under a new sequence.  Replaying the old one for every listed topic would
    store those topics twice at the peer."""
    server = _hub(tmp_path)
    count, records = wire.encode_records([(b"", MSG)])
    crashed = server.core.origin.take(1)  # appended to "a", then the hub died before "b"
    server.core.publisher.store_set(("a", "b"), count, records, timestamp=1, origin=server.hub_id, origin_seq=crashed,
                               skip={"b"})  # fmt: skip
    retried = server.core.origin.take(1)  # the retry: "a" already has it, "b" gets it now
    server.core.publisher.store_set(("a", "b"), count, records, timestamp=2, origin=server.hub_id, origin_seq=retried,
                               skip={"a"})  # fmt: skip
    both = _publish(server, ["a", "b"])
    assert server.mesh is not None
    entries = list(server.core.mesh.own_sets({"a", "b"}.__contains__, 0, 10**9, [].append))
    topics = [wire.MessageSet.read(e.encoded, 16, len(e.encoded))[0].topics for e in entries]
    assert [e.first_seq for e in entries] == [crashed, retried, both]
    assert topics == [("a",), ("b",), ("a", "b")]
    assert server.store is not None
    server.store.close()


def test_offset_index_starts_reads_near_the_wanted_sequence(tmp_path: Path) -> None:
    log = TopicLog.create("t", tmp_path, LogSettings(), now=1, files=FileCache())
    records = wire.encode_records([(b"", b"x" * 1000)])[1]
    for i in range(1, 2001):
        log.append(SharedBatch("t", i - 1, 1, 7, i, 1, records), topics=("t",), producer_id=0, producer_seq=0,
                   append_ts=1)
    start = log.offset_for_origin_seq(7, 1500)
    assert start is not None and 1499 - 70 <= start <= 1499  # a mark every ~64 KiB of records
    assert log.offset_for_origin_seq(8, 1) is None
    log.close()


def test_replay_reports_what_retention_removed(tmp_path: Path) -> None:
    server = _hub(tmp_path, segment_bytes=4096, retention_bytes=8192)
    first = [_publish(server, ["t"]) for _ in range(300)]
    assert server.store is not None
    server.store.enforce_retention(int(time.time() * 1e6), lambda topic: 10**9)
    kept, holes = _replayed(server, {"t"}, 0, 10**9)
    assert kept and kept == first[-len(kept):] and len(kept) < len(first)
    assert len(holes) == 1 and "retention" in holes[0]
    # From a position inside what is kept: nothing is missing.
    assert _replayed(server, {"t"}, kept[0], 10**9) == (kept[1:], [])
    server.store.close()


# -- real hubs ---------------------------------------------------------------------------------

HEARTBEAT, MISSES, SLACK = 0.5, 3, 1.5


def stored(hub: Hub, topic: str) -> int:
    """How many messages ``hub``'s log holds on ``topic``."""
    return sum(t["messages"] for t in hub.status()["topic_list"] if t["topic"] == topic)


async def _collect(client: sdk.Client, topic: str, count: int) -> list[bytes]:
    """Everything in ``topic`` from the start, up to ``count`` payloads (what arrived within 20 s)."""
    async with client.subscribe(topic, start="earliest") as sub:
        return await collect(sub, count, 20.0)


@pytest.mark.slow
@pytest.mark.overlay_too
async def test_hub_away_past_resume_linger_gets_what_it_missed(tmp_path: Path) -> None:
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES,
                 extra=["--mesh-resume-linger", "0"]) as cl:  # fmt: skip
        a, c = cl.start(2)
        await cl.await_converged(timeout=30)
        topic = "away.replay"
        async with sdk.connect(c.address) as c_client, c_client.subscribe(topic, durable="d", ack="auto") as sub:
            await cl.await_interest(a, topic, c)
            async with sdk.connect(a.address) as pub:
                for i in range(100):
                    await pub.publish(topic, b"%d" % i)
                await pub.flush()
            got = []
            with trio.move_on_after(20):
                async for batch in sub.batches():
                    got.extend(batch)
                    if len(got) >= 100:
                        break
            assert len(got) == 100
        c.kill()
        await cl.await_interest(a, topic, c, present=False, timeout=cl.heartbeat_bound + SLACK)
        async with sdk.connect(a.address) as pub:  # C is away and wants nothing, as far as A knows
            for i in range(100, 600):
                await pub.publish(topic, b"%d" % i)
            await pub.flush()
            await pub.status()
        await trio.to_thread.run_sync(cl.restart, c)
        await cl.await_converged(timeout=30)
        async with sdk.connect(c.address) as reader:
            got_all = await _collect(reader, topic, 600)
        assert got_all == [b"%d" % i for i in range(600)]
        restarted = c.overlay()
        if restarted is None:
            assert (a.peer(c) or {})["messages_replayed"] >= 500
        else:  # mesh v3 has no replay window: A's HEADS showed C the gap, C repaired it from A's log
            assert restarted["counters"]["repairs_asked"] >= 1 and restarted["counters"]["messages_lost"] == 0


@pytest.mark.slow
@pytest.mark.overlay_too
async def test_sender_killed_with_forwards_unacknowledged_replays_them_after_restart(tmp_path: Path) -> None:
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES) as cl:
        [a] = cl.start(1)
        proxy = TcpProxy(("127.0.0.1", a.mesh_port)).start()
        try:
            c = cl.add(f"/ip4/127.0.0.1/tcp/{proxy.port}/p2p/{a.peer_id}", args=["--no-discovery"])
            await await_until(
                lambda: (c.peer(a) or {}).get("connected"),
                timeout=10,
                what="C linked to A via proxy",
                in_thread=True,
                **HUB_POLL,
            )
            topic = "unacked.replay"
            async with sdk.connect(c.address) as c_client, c_client.subscribe(topic, durable="d"):
                await cl.await_interest(a, topic, c)
            async with sdk.connect(a.address) as pub:
                for i in range(50):
                    await pub.publish(topic, b"%d" % i)
                await pub.flush()
            # Mesh v2 acknowledges forwards (FORWARD_ACK); mesh v3 does not: C has stored them.
            v3 = c.overlay() is not None
            await await_until(
                lambda: stored(c, topic) >= 50 if v3 else (a.peer(c) or {}).get("acked_seq", 0) >= 50,
                timeout=10,
                what="C acks 50",
                in_thread=True,
                **HUB_POLL,
            )
            proxy.blackhole()  # C stores nothing more, acknowledges nothing more
            async with sdk.connect(a.address) as pub:
                for i in range(50, 350):
                    await pub.publish(topic, b"%d" % i)
                await pub.flush()
                await pub.status()  # a round trip: A has stored them; the forwards sit in its window
            a.kill()  # the window is gone with the process
            await trio.to_thread.run_sync(cl.restart, a)
            proxy.heal()
            async with sdk.connect(c.address) as reader:
                got = await _collect(reader, topic, 350)
            assert got == [b"%d" % i for i in range(350)]
            if v3:  # no window to replay: C repaired the gap from A's log once A was back
                counters = c.overlay()["counters"]  # type: ignore[index]
                assert counters["repairs_asked"] >= 1 and counters["messages_lost"] == 0
            else:
                assert (a.peer(c) or {})["messages_replayed"] >= 300
        finally:
            proxy.stop()
