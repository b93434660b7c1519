"""Mesh v2 between real hubs: interest, lazy push, batched forwarding, cumulative acks, resume."""

from __future__ import annotations

import trio

import wire
from hub.mesh import CloseReason, Mesh
from tests.support.mesh import interest_of, start_mesh, status_of
from tests.support.waiting import await_until

MSG = b"m" * 64


async def _pair(nursery: trio.Nursery, **overrides: object) -> tuple[Mesh, Mesh]:
    a = await start_mesh(nursery, **overrides)
    b = await start_mesh(nursery, **overrides)
    with trio.fail_after(10):
        await b.connect(a.listen_addrs[0])
    await await_until(lambda: b.peer_id in a.connected_peers(), timeout=5, what="the link at a")
    return a, b


async def test_announce_is_acked_and_forward_reaches_only_interested_peers() -> None:
    async with trio.open_nursery() as nursery:
        a, b = await _pair(nursery)
        c = await start_mesh(nursery)
        await c.connect(a.listen_addrs[0])
        assert status_of(a, b)["protocol"] == "/pub0sub/mesh/2.1.0"
        b.announce(["orders.*"])
        c.announce(["audit"])
        await await_until(
            lambda: interest_of(a, b) == {"orders.*"} and interest_of(a, c) == {"audit"},
            timeout=5,
            what="a to see b's and c's interest",
        )
        # SUBSCRIBE acked: nothing pending, nothing resent.
        await await_until(
            lambda: not b.links[str(a.peer_id)].protocol._pending_subs,  # type: ignore[union-attr]
            timeout=5,
            what="b's SUBSCRIBE acknowledged",
        )
        assert status_of(b, a)["subscribe_resends"] == 0

        assert a.forward(1, 10, wire.MessageSet.build(["orders.eu"], [(b"", MSG)] * 3)) == 1
        assert a.forward(4, 11, wire.MessageSet.build(["nobody"], [(b"", MSG)])) == 0
        assert a.forward(5, 12, wire.MessageSet.build(["audit", "orders.us"], [(b"", MSG)])) == 2
        await await_until(
            lambda: b.store.messages == 4 and c.store.messages == 1,  # type: ignore[attr-defined]
            timeout=5,
            what="b and c to store their messages",
        )
        assert b.store.seqs(a.hub_id) == [1, 2, 3, 5]  # type: ignore[attr-defined]
        assert c.store.seqs(a.hub_id) == [5]  # type: ignore[attr-defined]
        to_b, to_c = status_of(a, b), status_of(a, c)
        # Lazy push: the topic nobody wants crossed no link; c never saw "orders.eu".
        assert (to_b["messages_sent"], to_b["messages_skipped_no_interest"]) == (4, 1)
        assert (to_c["messages_sent"], to_c["messages_skipped_no_interest"]) == (1, 4)
        assert status_of(b, a)["forwards_dropped_no_interest"] == 0

        b.withdraw(["orders.*"])
        await await_until(lambda: not interest_of(a, b), timeout=5, what="withdraw")
        assert a.forward(6, 13, wire.MessageSet.build(["orders.eu"], [(b"", MSG)])) == 0
        await await_until(lambda: status_of(a, b)["acked_seq"] == 5, timeout=5, what="cumulative ack")
        nursery.cancel_scope.cancel()


async def test_50k_messages_are_coalesced_into_few_writes_with_cumulative_acks() -> None:
    async with trio.open_nursery() as nursery:
        a, b = await _pair(nursery)
        b.announce(["bulk"])
        await await_until(lambda: interest_of(a, b) == {"bulk"}, timeout=5, what="a to see b's interest")
        writes_before = status_of(a, b)["writes"]
        one = wire.MessageSet.build(["bulk"], [(b"", MSG)])
        total = 50_000
        for seq in range(1, total + 1):  # one message per publish: the worst case for batching
            a.forward(seq, seq, one)
        with trio.fail_after(30):
            await await_until(lambda: b.store.messages == total, timeout=30, what="b to store every message")  # type: ignore[attr-defined]
        await await_until(lambda: status_of(a, b)["acked_seq"] == total, timeout=5, what="the last ack")
        assert b.store.seqs(a.hub_id) == list(range(1, total + 1))  # type: ignore[attr-defined]
        sent = status_of(a, b)
        writes = sent["writes"] - writes_before
        # ~100-byte sets packed into 64 KiB writes (about 80 for 5 MB), not one write per message
        assert writes < 200, writes
        assert sent["window_sets"] == 0 and sent["acks_received"] < total
        received = status_of(b, a)
        assert received["messages_received"] == total and received["duplicates_dropped"] == 0
        nursery.cancel_scope.cancel()


async def test_resume_after_a_broken_link_loses_and_duplicates_nothing() -> None:
    async with trio.open_nursery() as nursery:
        # Heartbeats lenient enough that a loaded CI machine (both hubs and 18k resends in one
        # trio loop) never ends a session by timeout: only the test's own closes break the link.
        a, b = await _pair(nursery, heartbeat_interval=1.0, heartbeat_misses=5)
        b.announce(["r"])
        await await_until(lambda: interest_of(a, b) == {"r"}, timeout=5, what="a to see b's interest")
        one = wire.MessageSet.build(["r"], [(b"", MSG)])
        seq = 0
        for _ in range(3):
            for _ in range(5_000):
                seq += 1
                a.forward(seq, seq, one)
            await trio.sleep(0.005)  # let part of it go out, not all of it be acked
            # Break the link at a, in flight; b redials (it knows a's address).
            await await_until(lambda: a.links[str(b.peer_id)].live, timeout=5, what="the link up before the cut")
            protocol = a.links[str(b.peer_id)].protocol
            assert protocol is not None
            protocol.close(CloseReason.PEER_CLOSED)
            for _ in range(1_000):  # published while the link is down: kept in the window
                seq += 1
                a.forward(seq, seq, one)
            await await_until(lambda: a.links[str(b.peer_id)].live, timeout=5, what="the link to heal")
        with trio.fail_after(20):
            await await_until(lambda: b.store.messages >= seq, timeout=20, what="b to store the messages sent so far")  # type: ignore[attr-defined]
        await await_until(lambda: status_of(a, b)["acked_seq"] == seq, timeout=5, what="everything acked")
        assert b.store.seqs(a.hub_id) == list(range(1, seq + 1))  # type: ignore[attr-defined]
        assert status_of(a, b)["sessions"] >= 4
        nursery.cancel_scope.cancel()


async def test_resume_position_survives_a_receiver_restart() -> None:
    """The receiver's MESH_HELLO carries its stored positions: nothing it holds is sent again."""
    from tests.support.mesh import Store

    async with trio.open_nursery() as nursery:
        a = await start_mesh(nursery)
        store = Store()
        store.positions[a.hub_id] = 100  # "restarted" hub b already stored origin a up to 100
        b = await start_mesh(nursery, store)
        b.announce(["r"])
        one = wire.MessageSet.build(["r"], [(b"", MSG)])
        for seq in range(95, 106):
            a.forward(seq, seq, one)  # nobody is linked yet: queued nowhere
        await b.connect(a.listen_addrs[0])
        await await_until(lambda: interest_of(a, b) == {"r"}, timeout=5, what="a to see b's interest")
        for seq in range(95, 111):
            a.forward(seq, seq, one)  # a resend of old ones, then new ones
        await await_until(lambda: store.messages == 10, timeout=5, what="the 10 messages stored")
        assert store.seqs(a.hub_id) == list(range(101, 111))
        assert status_of(b, a)["duplicates_dropped"] == 6
        nursery.cancel_scope.cancel()


async def test_a_closed_session_says_why_at_once() -> None:
    """Status never shows a peer "not connected" without the reason (the stream's reset may take a second)."""
    async with trio.open_nursery() as nursery:
        a, b = await _pair(nursery)
        protocol = a.links[str(b.peer_id)].protocol
        assert protocol is not None
        protocol.close(CloseReason.HEARTBEAT_TIMEOUT)
        entry = status_of(a, b)
        assert (entry["connected"], entry["last_close"]) == (False, "heartbeat_timeout")
        nursery.cancel_scope.cancel()


async def test_paced_writes_follow_the_forward_that_ends_the_interval() -> None:
    """An idle link writes at once; forwards within the pacing interval wait; the first one
    after it is written at once, carrying them; the last of a burst goes by the fallback."""
    interval = 1.0  # long, so "at once" and "after the interval" cannot be confused
    async with trio.open_nursery() as nursery:
        # Control frames (pings) are not paced: no heartbeat may fall inside the test.
        a, b = await _pair(nursery, write_interval=interval, heartbeat_interval=30.0)
        b.announce(["paced"])
        await await_until(lambda: interest_of(a, b) == {"paced"}, timeout=5, what="a to see b's interest")
        await trio.sleep(2 * interval)  # the announce's SUBSCRIBE_ACK write is paced too
        store = b.store  # type: ignore[attr-defined]
        one = wire.MessageSet.build(["paced"], [(b"", MSG)])

        def writes() -> int:
            return int(status_of(a, b)["writes"])

        first = writes()
        start = trio.current_time()
        a.forward(1, 1, one)  # the link is idle: written at once
        await await_until(lambda: store.messages == 1, timeout=interval / 2, what="the idle link's write")
        assert writes() == first + 1
        for seq in (2, 3, 4):  # within the interval: queued, not written
            a.forward(seq, seq, one)
        await trio.sleep(interval / 4)
        assert (writes(), store.messages) == (first + 1, 1)
        await trio.sleep_until(start + interval * 1.1)
        a.forward(5, 5, one)  # after the interval: this forward wakes the writer
        await await_until(lambda: store.messages == 5, timeout=interval / 2, what="the write after the interval")
        assert writes() == first + 2  # one write carried 2..5
        a.forward(6, 6, one)  # the last of the burst: only the fallback timer writes it
        await trio.sleep(interval / 2)
        assert store.messages == 5
        await await_until(lambda: store.messages == 6, timeout=3 * interval, what="the fallback write")
        assert store.seqs(a.hub_id) == [1, 2, 3, 4, 5, 6]
        nursery.cancel_scope.cancel()


class _WriterWakeups(trio.abc.Instrument):
    """Counts how often the writer task of one peer session resumes from waiting on its event
    (a wake-up), as opposed to steps inside a write that went libp2p's slower way."""

    def __init__(self, protocol: object) -> None:
        self.protocol = protocol
        self.wakeups = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        frame = getattr(task.coro, "cr_frame", None)
        if frame is None or frame.f_code.co_name != "_writer":
            return
        if getattr(frame.f_locals.get("self"), "protocol", None) is not self.protocol:
            return
        awaited: object = task.coro.cr_await
        while getattr(awaited, "cr_frame", None) is not None and awaited.cr_frame.f_code.co_name == "_hold":  # type: ignore[attr-defined]
            awaited = awaited.cr_await  # type: ignore[attr-defined]
        waiting = getattr(awaited, "cr_frame", None)
        if waiting is not None and waiting.f_code.co_name == "wait" and waiting.f_code.co_filename.endswith("_sync.py"):
            self.wakeups += 1


async def test_a_write_that_empties_the_queue_sets_no_timer() -> None:
    """Forwards further apart than the fallback cost the writer one wake-up each: the timer is
    set only while forwards are held (it used to fire after every write, waking the hub).
    Steps inside a write that took libp2p's slower way (a busy machine) are not wake-ups."""
    interval = 0.05
    async with trio.open_nursery() as nursery:
        a, b = await _pair(nursery, write_interval=interval, heartbeat_interval=30.0)
        b.announce(["spaced"])
        await await_until(lambda: interest_of(a, b) == {"spaced"}, timeout=5, what="a to see b's interest")
        await trio.sleep(3 * interval)
        store = b.store  # type: ignore[attr-defined]
        one = wire.MessageSet.build(["spaced"], [(b"", MSG)])
        counter = _WriterWakeups(a.links[str(b.peer_id)].protocol)
        trio.lowlevel.add_instrument(counter)
        try:
            for seq in range(1, 11):
                a.forward(seq, seq, one)
                await await_until(lambda n=seq: store.messages == n, timeout=2.0, what="the forward's write")
                await trio.sleep(3 * interval)
        finally:
            trio.lowlevel.remove_instrument(counter)
        assert store.seqs(a.hub_id) == list(range(1, 11))
        # One wake-up per write (its forward), plus a little slack; with a timer after every
        # write it is two per write.
        assert 10 <= counter.wakeups <= 13, counter.wakeups
        nursery.cancel_scope.cancel()
