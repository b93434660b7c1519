"""Multi-hub behaviour with real ``python -m hub`` subprocesses meshed on 127.0.0.1.

Discovery and convergence, end-to-end delivery across hubs, lazy push and
withdrawal proven by per-peer counters, failure detection of a SIGKILLed hub
and its rejoin with the same identity, link faults through a userspace proxy,
and a seed-only peer written from PROTOCOL.md alone.  Every wait polls a hub's
STATUS with a deadline (tests/support/cluster.py); no test asserts a speed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import sdk
from sdk.tools.tcpproxy import TcpProxy
from tests.support.cluster import HUB_POLL, Cluster, Hub, collect
from tests.support.procstat import children, running
from tests.support.waiting import await_until, wait_until

#: Mesh heartbeats for these tests: a dead link is declared after 0.5 s x 3 = 1.5 s.
HEARTBEAT = 0.5
MISSES = 3
#: Status polling, process scheduling and the session timer's tick on a loaded 2-core machine.
SLACK = 1.5
#: A late joiner looks the cluster up every 2 s (MeshConfig.discovery_interval) and dials what it
#: finds (the others' lookups back off while nothing changes): a lookup or two plus a dial.
JOIN_BOUND = 20.0


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three hubs shared by the read-only tests of this module (booting hubs costs ~2 s each)."""
    with Cluster(tmp_path_factory.mktemp("cluster3"), heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES) as cl:
        cl.start(3)
        cl.wait_converged(timeout=30)
        yield cl


def mesh_counters(at: Hub, of: Hub) -> dict[str, Any]:
    entry = at.peer(of)
    assert entry is not None, f"{at.name} does not know {of.name}"
    return entry


# -- discovery ------------------------------------------------------------------------------


@pytest.mark.slow
def test_three_hubs_converge_and_a_late_joiner_is_linked_by_all(cluster3: Cluster) -> None:
    a, b, c = cluster3.hubs[:3]
    # Two overlay hubs link by v3 (a cluster of <= degree + 1 overlay hubs is a full mesh too).
    protocol = "/pub0sub/mesh/2.1.0" if a.overlay() is None else "/pub0sub/mesh/3.1.0"
    for hub in (a, b, c):
        assert hub.connected_peers() == {h.peer_id for h in (a, b, c) if h is not hub}
        for entry in hub.mesh()["peers"]:
            assert entry["protocol"] == protocol
    started = time.monotonic()
    d = cluster3.add(bootstrap=b)  # any one hub: b, not the first
    cluster3.wait_converged([a, b, c, d], timeout=JOIN_BOUND)
    # A link shows as connected from its stream's start; its hub id once d's MESH_HELLO is read.
    wait_until(lambda: all(mesh_counters(hub, d)["hub_id"] is not None for hub in (a, b, c)),
               timeout=JOIN_BOUND, what=f"{d.name}'s MESH_HELLO read by every hub", **HUB_POLL)  # fmt: skip
    joined = time.monotonic() - started
    assert joined < JOIN_BOUND
    # The same peer id everywhere, with the hub id it announced in MESH_HELLO.
    for hub in (a, b, c):
        entry = mesh_counters(hub, d)
        assert entry["connected"] and entry["hub_id"] == d.hub_id


# -- delivery, lazy push, withdrawal --------------------------------------------------------


@pytest.mark.slow
async def test_publish_on_a_reaches_c_in_order_and_crosses_no_uninterested_link(cluster3: Cluster) -> None:
    a, b, c = cluster3.hubs[:3]
    topic, total = "lazy.only-c", 20_000
    # Mesh v3 has no per-peer push counters (a set goes to the hubs the key's owners name,
    # source-routed): B's overlay counters show nothing was sent to it.
    before_b = b.overlay() or mesh_counters(a, b)
    async with sdk.connect(c.address) as c_client, c_client.subscribe(topic, start="earliest") as sub:
        await cluster3.await_interest(a, topic, c)
        async with sdk.connect(a.address) as pub:
            for i in range(total):
                await pub.publish(topic, b"%d" % i)
            await pub.flush()
            got = await collect(sub, total, timeout=60)
    assert len(got) == total, f"lost {total - len(got)}"
    assert got == [b"%d" % i for i in range(total)], "out of order or duplicated"
    # B stored none of it; C stored exactly the messages.
    assert topic not in {t["topic"] for t in b.status()["topic_list"]}
    c_topics = {t["topic"]: t for t in c.status()["topic_list"]}
    assert c_topics[topic]["messages"] == total
    after_b = b.overlay()
    if after_b is not None:
        # B got no set addressed to it (delivered or unwanted) and passed none on (as a relay would).
        for counter in ("delivered_sets", "unwanted_sets"):
            assert after_b["counters"][counter] == before_b["counters"][counter], counter
        assert after_b["sent_frames"].get("ROUTED_SETS", 0) == before_b["sent_frames"].get("ROUTED_SETS", 0)
        assert c.overlay()["counters"]["duplicate_sets"] == 0  # type: ignore[index]
        return

    # Lazy push: nobody on B wants the topic, so nothing crossed A->B, and A counted the skips.
    after_b = mesh_counters(a, b)
    assert after_b["connected"]
    assert after_b["messages_sent"] == before_b["messages_sent"]
    skipped = after_b["messages_skipped_no_interest"] - before_b["messages_skipped_no_interest"]
    assert skipped == total
    # B neither received nor stored any of it.
    assert mesh_counters(b, a)["forwards_dropped_no_interest"] == 0
    # ...while A->C carried exactly the messages, once (v2 batches, dedup counters clean).
    to_c = mesh_counters(a, c)
    assert to_c["messages_sent"] >= total
    assert mesh_counters(c, a)["duplicates_dropped"] == 0


@pytest.mark.slow
async def test_withdrawal_stops_forwarding(cluster3: Cluster) -> None:
    a, _, c = cluster3.hubs[:3]
    topic = "withdraw.me"
    async with sdk.connect(c.address) as c_client:
        async with c_client.subscribe(topic) as sub:
            await cluster3.await_interest(a, topic, c)
            async with sdk.connect(a.address) as pub:
                await pub.publish(topic, b"while wanted")
                await pub.flush()
                assert await collect(sub, 1, timeout=10) == [b"while wanted"]
        # The last subscriber on C left: C withdraws, A stops pushing.
        await cluster3.await_interest(a, topic, c, present=False, timeout=10)
        assert topic not in c.mesh()["local_interest"]
        before = mesh_counters(a, c)
        c_before = c.overlay()
        async with sdk.connect(a.address) as pub:
            for i in range(100):
                await pub.publish(topic, b"%d" % i)
            await pub.flush()
            await pub.status()  # a round trip: A has routed all 100
    c_topics = {t["topic"]: t for t in c.status()["topic_list"]}
    assert c_topics[topic]["messages"] == 1  # only "while wanted" was stored at C
    if c_before is not None:
        # Mesh v3 keeps no per-peer push counters: C's overlay got no set of A's.
        c_after = c.overlay()
        assert c_after["counters"]["delivered_sets"] == c_before["counters"]["delivered_sets"]  # type: ignore[index]
        assert c_after["counters"]["unwanted_sets"] == c_before["counters"]["unwanted_sets"]  # type: ignore[index]
        return
    after = mesh_counters(a, c)
    assert after["messages_sent"] == before["messages_sent"]
    assert after["messages_skipped_no_interest"] - before["messages_skipped_no_interest"] == 100
    assert mesh_counters(c, a)["forwards_dropped_no_interest"] == 0


async def test_durable_keeps_interest_while_its_consumer_is_away(cluster3: Cluster) -> None:
    """A durable subscription on C still wants its topic with nobody attached: what A publishes
    meanwhile is forwarded to C and stored there, and the consumer finds it when it returns."""
    a, _, c = cluster3.hubs[:3]
    topic = "keep.while.away"
    async with (
        sdk.connect(c.address) as c_client,
        c_client.subscribe(topic, durable="away", start="earliest", ack="auto") as sub,
    ):
        await cluster3.await_interest(a, topic, c)
        async with sdk.connect(a.address) as pub:
            await pub.publish(topic, b"before")
            await pub.flush()
            assert await collect(sub, 1, timeout=10) == [b"before"]
    # Nobody is attached on C now, yet C must keep its interest in the topic (its own view
    # changes at once; A's follows through the mesh).
    assert topic in c.mesh()["local_interest"]
    await cluster3.await_interest(a, topic, c)
    async with sdk.connect(a.address) as pub:
        for i in range(20):
            await pub.publish(topic, b"away %d" % i)
        await pub.flush()
        await pub.status()
    async with sdk.connect(c.address) as c_client, c_client.subscribe(topic, durable="away", ack="auto") as sub:
        assert await collect(sub, 20, timeout=10) == [b"away %d" % i for i in range(20)]


# -- failure detection and rejoin ----------------------------------------------------------


@pytest.mark.slow
async def test_killed_hub_is_detected_and_rejoins_with_the_same_identity(tmp_path: Path) -> None:
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES) as cl:
        a, b, c = cl.start(3)
        await cl.await_converged(timeout=30)
        topic = "survive.kill"
        async with sdk.connect(c.address) as c_client, c_client.subscribe(topic) as sub:
            await cl.await_interest(a, topic, c)
            await cl.await_interest(b, topic, c)
            sessions_before = mesh_counters(a, c)["sessions"]
        # (C's subscriber is gone with the block above; interest is re-announced below.)
        await cl.await_interest(a, topic, c, present=False)
        async with sdk.connect(c.address) as c_client, c_client.subscribe(topic, start="earliest") as sub:
            await cl.await_interest(a, topic, c)
            killed = time.monotonic()
            c.kill()

            def c_down() -> bool:
                return all(not (h.peer(c) or {"connected": False})["connected"] for h in (a, b))

            await await_until(
                c_down, timeout=cl.heartbeat_bound + SLACK, what="A and B to see C down", in_thread=True, **HUB_POLL
            )
            detected = time.monotonic() - killed
            assert detected <= cl.heartbeat_bound + SLACK

        old_peer = c.peer_id
        await trio.to_thread.run_sync(cl.restart, c)
        assert c.peer_id == old_peer
        await cl.await_converged(timeout=JOIN_BOUND)
        assert mesh_counters(a, c)["sessions"] > sessions_before
        # It works again: a subscriber on the restarted C gets what A publishes.
        async with sdk.connect(c.address) as c_client, c_client.subscribe(topic) as sub:
            await cl.await_interest(a, topic, c)
            async with sdk.connect(a.address) as pub:
                await pub.publish(topic, b"after restart")
                await pub.flush()
                assert await collect(sub, 1, timeout=10) == [b"after restart"]


@pytest.mark.slow
async def test_killed_hub_interest_withdrawn_within_heartbeat_bound(tmp_path: Path) -> None:
    # By default a dead v2 peer's interest lingers (--mesh-resume-linger, 30 s) so a healed
    # link loses nothing; with 0 it is withdrawn as soon as the peer is declared dead.
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES,
                 extra=["--mesh-resume-linger", "0"]) as cl:
        a, c = cl.start(2)
        await cl.await_converged(timeout=30)
        async with sdk.connect(c.address) as c_client, c_client.subscribe("gone.soon"):
            await cl.await_interest(a, "gone.soon", c)
            c.kill()
            await cl.await_interest(a, "gone.soon", c, present=False, timeout=cl.heartbeat_bound + SLACK)


# -- link faults through the proxy ------------------------------------------------------------

def proxied_pair(cl: Cluster) -> tuple[Hub, Hub, TcpProxy]:
    """A alone; C linked to A only through a proxy (no discovery, so no direct address is learnt)."""
    [a] = cl.start(1)
    proxy = TcpProxy(("127.0.0.1", a.mesh_port)).start()
    c = cl.add(f"/ip4/127.0.0.1/tcp/{proxy.port}/p2p/{a.peer_id}", args=["--no-discovery"])
    return a, c, proxy


@pytest.mark.slow
async def test_link_cut_and_healed_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES) as cl:
        a, c, proxy = proxied_pair(cl)
        try:
            def linked() -> bool:
                return bool((c.peer(a) or {}).get("connected"))

            await await_until(linked, timeout=10, what="C linked to A via proxy", in_thread=True, **HUB_POLL)
            topic, total = "cut.heal", 3_000
            async with sdk.connect(c.address) as c_client, c_client.subscribe(topic, start="earliest") as live:
                await cl.await_interest(a, topic, c)
                async with sdk.connect(a.address) as pub:
                    cut_at, heal_at = total // 4, total // 2
                    for i in range(total):
                        if i == cut_at:
                            proxy.cut()
                            await await_until(lambda: not linked(), timeout=cl.heartbeat_bound + SLACK,
                                              what="C to see the cut", in_thread=True, **HUB_POLL)  # fmt: skip
                        if i == heal_at:
                            await trio.sleep(cl.heartbeat_bound + 1.0)  # keep it cut past the heartbeat bound
                            proxy.heal()
                        await pub.publish(topic, b"%d" % i)
                        if i % 50 == 0:
                            await pub.flush()
                            await trio.sleep(0.005)  # continuous, not one burst
                    await pub.flush()
                await collect(live, total, timeout=30)
            # C's log, read from earliest: every message exactly once, in order.
            async with sdk.connect(c.address) as reader, reader.subscribe(topic, start="earliest") as sub:
                got = await collect(sub, total, timeout=30)
            assert got == [b"%d" % i for i in range(total)]
        finally:
            proxy.stop()


@pytest.mark.slow
def test_blackholed_link_detected_within_three_heartbeats(tmp_path: Path) -> None:
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES) as cl:
        a, c, proxy = proxied_pair(cl)
        try:
            wait_until(lambda: (c.peer(a) or {}).get("connected"), timeout=10, what="C linked to A via proxy",
                       **HUB_POLL)  # fmt: skip
            proxy.blackhole()
            holed = time.monotonic()
            wait_until(lambda: not c.peer(a)["connected"], timeout=3 * HEARTBEAT + SLACK, what="C to see the hole",
                       **HUB_POLL)  # fmt: skip
            assert time.monotonic() - holed <= 3 * HEARTBEAT + SLACK
            assert c.peer(a)["last_close"] == "heartbeat_timeout"
            proxy.heal()
            wait_until(lambda: c.peer(a)["connected"], timeout=JOIN_BOUND, what="C relinked after heal", **HUB_POLL)
        finally:
            proxy.stop()


def test_proxy_forwards_cuts_blackholes_stalls_delays_drops_and_heals() -> None:
    """The proxy itself, against a plain echo server (the hub tests above rely on these modes)."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def echo() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=_echo_conn, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    try:
        with TcpProxy(server.getsockname()[:2]) as proxy:
            with socket.create_connection(proxy.address, timeout=2) as s:
                s.sendall(b"ping")
                assert s.recv(4) == b"ping"
                proxy.blackhole()
                s.sendall(b"lost")
                s.settimeout(0.3)
                with pytest.raises(TimeoutError):
                    s.recv(4)
                wait_until(lambda: proxy.stats.bytes_swallowed >= 4, timeout=2, what="bytes swallowed")
                proxy.heal()  # black-holed connections are closed on heal
                s.settimeout(2)
                assert _closed(s)
            proxy.cut()
            try:
                with socket.create_connection(proxy.address, timeout=2) as s:
                    assert _closed(s)  # accepted and dropped at once
            except ConnectionResetError:
                pass  # the reset can already reach connect() itself: dropped at once all the same
            wait_until(lambda: proxy.stats.refused == 1, timeout=2, what="the refused connection counted")
            proxy.heal()
            with socket.create_connection(proxy.address, timeout=2) as s:
                s.sendall(b"back")
                assert s.recv(4) == b"back"
                proxy.stall()
                s.sendall(b"held")
                s.settimeout(0.3)
                with pytest.raises(TimeoutError):
                    s.recv(4)
                proxy.heal()  # a stall loses nothing: the bytes carry on
                s.settimeout(2)
                assert s.recv(4) == b"held"
                proxy.delay(0.2)  # late, but whole and in order
                s.sendall(b"slow")
                s.settimeout(0.1)
                with pytest.raises(TimeoutError):
                    s.recv(4)
                s.settimeout(2)
                assert s.recv(4) == b"slow"
                proxy.heal()
                proxy.drop(1.0)  # every chunk swallowed: the stream is damaged...
                s.sendall(b"gone")
                wait_until(lambda: proxy.stats.bytes_dropped >= 4, timeout=2, what="bytes dropped")
                proxy.heal()  # ...so heal closes it
                assert _closed(s)
            with socket.create_connection(proxy.address, timeout=2) as s:
                proxy.cut()
                assert _closed(s)
    finally:
        stop.set()
        thread.join(2)
        server.close()


def _echo_conn(conn: Any) -> None:
    with conn:
        try:
            while data := conn.recv(4096):
                conn.sendall(data)
        except OSError:
            pass


def _closed(s: Any) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


# -- a seed-only peer, from PROTOCOL.md alone ---------------------------------------------

#: PROTOCOL.md golden vector 1: SUBSCRIBE topic_1, topic_2 (21 bytes).
GOLDEN_SUBSCRIBE = bytes.fromhex("020000001007746f7069635f3107746f7069635f32")
#: PROTOCOL.md golden vector 2: FORWARD of "hello" to topic_1, topic_2 (31 bytes).
GOLDEN_FORWARD = bytes.fromhex("060000001a0207746f7069635f3107746f7069635f320000000568656c6c6f")
SUBSCRIBE_ACK_OK = bytes.fromhex("030000000101")


def _frame(opcode: int, body: bytes) -> bytes:
    """PROTOCOL.md: 1-byte opcode, 4-byte big-endian body length, body."""
    return bytes([opcode]) + len(body).to_bytes(4, "big") + body


@pytest.mark.slow
async def test_seed_only_peer_gets_byte_exact_forwards(start_hub: Any) -> None:
    import multiaddr
    from libp2p import new_host
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
    from libp2p.custom_types import TProtocol
    from libp2p.network.config import ConnectionConfig
    from libp2p.peer.peerinfo import info_from_p2p_addr
    from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
    from libp2p.security.noise.transport import Transport as NoiseTransport

    hub = start_hub("--mesh-listen", "/ip4/127.0.0.1/tcp/0", "--no-discovery", "--allow-mesh-v1",
                    "--mesh-heartbeat-interval", str(HEARTBEAT))  # fmt: skip
    # conftest's HubProcess stops reading after "listening on"; the next two lines are hub id and mesh address.
    assert hub.proc.stdout is not None
    lines = [hub.proc.stdout.readline().strip() for _ in range(2)]
    hub_maddr = lines[1].split()[-1]
    assert lines[1].startswith("mesh listening on /ip4/127.0.0.1/")

    kp = create_new_key_pair()
    # Noise only: the hub refuses anything else, and a seed peer needs nothing more.
    host = new_host(
        key_pair=kp,
        sec_opt={NOISE_PROTOCOL_ID: NoiseTransport(kp, noise_privkey=create_x25519_key_pair().private_key)},
        connection_config=ConnectionConfig(max_connections_per_peer=1),
        listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")],
    )
    raw = bytearray()
    frames: list[tuple[int, bytes]] = []
    subscribe_acked = trio.Event()
    forwarded = trio.Event()
    try:
        async with host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]), trio.open_nursery() as n:
            info = info_from_p2p_addr(multiaddr.Multiaddr(hub_maddr))
            with trio.fail_after(10):
                await host.connect(info)
                stream = await host.new_stream(info.peer_id, [TProtocol("/pub0sub/mesh/1.0.0")])
            assert str(stream.get_protocol()) == "/pub0sub/mesh/1.0.0"

            async def reader() -> None:
                buf = b""
                while True:
                    data = await stream.read(65536)
                    if not data:
                        return
                    raw.extend(data)
                    buf += data
                    while len(buf) >= 5 and len(buf) >= 5 + int.from_bytes(buf[1:5], "big"):
                        size = int.from_bytes(buf[1:5], "big")
                        opcode, body, whole, buf = buf[0], buf[5 : 5 + size], buf[: 5 + size], buf[5 + size :]
                        frames.append((opcode, whole))
                        if opcode == 1 and body == b"ping":
                            await stream.write(_frame(1, b"pong"))  # stay alive past the heartbeat bound
                        elif opcode == 2:
                            await stream.write(_frame(3, b"\x01"))  # the hub's own interest, acknowledged
                        elif opcode == 4:
                            await stream.write(_frame(5, b"\x01"))
                        elif opcode == 3:
                            subscribe_acked.set()
                        elif opcode == 6:
                            forwarded.set()

            n.start_soon(reader)
            await stream.write(GOLDEN_SUBSCRIBE)
            with trio.fail_after(10):
                await subscribe_acked.wait()
            assert (3, SUBSCRIBE_ACK_OK) in frames

            async with sdk.connect(hub.address) as client:
                await client.publish(["topic_1", "topic_2"], b"hello")
                await client.flush()
                with trio.fail_after(10):
                    await forwarded.wait()
            forwards = [whole for op, whole in frames if op == 6]
            assert forwards == [GOLDEN_FORWARD]
            assert GOLDEN_FORWARD in bytes(raw)
            # Only seed opcodes on a v1 stream: no MESH_HELLO, no FORWARD_BATCH.
            assert {op for op, _ in frames} <= {1, 2, 3, 4, 5, 6}
            n.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await host.close()


# -- the `pub0sub cluster up` command --------------------------------------------------------


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_to_cluster_up_stops_its_hubs(tmp_path: Path, sigint: str) -> None:
    # A supervisor stops `pub0sub cluster up` with SIGTERM: its hubs must go with it, not stay
    # behind as orphans still holding their ports and data directories.  Also when it was
    # started as a shell's background job, which ignores SIGINT.
    argv = [sys.executable, "-c", "import sys; from sdk.cli.commands import main; sys.exit(main())",
            "cluster", "up", "--hubs", "2", "--base-port", "0", "--data-root", str(tmp_path)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ignore_sigint if sigint == "ignored" else None)  # fmt: skip
    hubs: list[int] = []
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(2)]
        assert all(line.startswith("hub-") and "clients" in line for line in lines), lines
        hubs = children(proc.pid)
        assert len(hubs) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert [pid for pid in hubs if running(pid)] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in hubs:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
