"""FastStreamWriter on two real libp2p hosts (Noise + yamux over loopback TCP).

The fast path must be byte-for-byte what libp2p's own reader expects, keep
yamux's send window honest, interleave safely with libp2p's own writes, and
step aside whenever it cannot be sure.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

import multiaddr
import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr

from hub.mesh import fastwrite
from hub.mesh.fastwrite import FastStreamWriter
from hub.mesh.host import make_host, quiet_libp2p_logs
from sdk.tools.tcpproxy import TcpProxy
from tests.support.libp2p_pair import LISTEN, PROTO, connection_quiet, read_exactly, stream_pair
from tests.support.ticker import Ticker


async def test_fast_writes_arrive_intact_and_in_order_between_libp2p_writes() -> None:
    async with stream_pair() as (stream, incoming):
        writer = FastStreamWriter(stream)
        await connection_quiet(stream)
        window_before = stream.muxed_stream.send_window
        pieces = [os.urandom(n) for n in (1, 100, 65_507, 65_508, 50_000, 3)]
        expected = b""
        fast = []
        for i, piece in enumerate(pieces):
            if i % 2:
                await stream.write(piece)  # libp2p's own path, interleaved
            else:
                fast.append(await writer.write(piece))
            expected += piece
        # The fast path spent window like yamux's own path.  Checked before the peer reads: its
        # window updates come as it reads, and may then grow its window past what was sent
        # (yamux's auto-tuning doubles it when reads keep up; a suite run saw 2 MiB -> 4 MiB).
        assert stream.muxed_stream.send_window == window_before - len(expected)
        peer_stream = await incoming.receive()
        assert await read_exactly(peer_stream, len(expected)) == expected
        assert fast == [True, True, True]


async def test_a_fast_write_is_one_send_and_does_not_yield() -> None:
    """The session writer yields once per write itself (in its pacing wait); a checkpoint in
    the write too would cost every forward one more trip around a busy run loop."""
    async with stream_pair() as (stream, incoming):
        writer = FastStreamWriter(stream)
        await connection_quiet(stream)
        ticker = Ticker()
        data = os.urandom(500)  # 10 KB in all: the socket takes it whole, no send waits
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker.run)
            await trio.sleep(0.01)
            before = ticker.ticks
            for _ in range(20):
                assert await writer.write(data)
            ran = ticker.ticks - before
            nursery.cancel_scope.cancel()
        assert ran == 0
        peer_stream = await incoming.receive()
        assert await read_exactly(peer_stream, 20 * len(data)) == data * 20


async def test_a_write_larger_than_the_send_window_takes_libp2p_path() -> None:
    async with stream_pair() as (stream, incoming):
        writer = FastStreamWriter(stream)
        big = os.urandom(stream.muxed_stream.send_window + 1)
        peer_stream = await incoming.receive()
        fast = []

        async def write() -> None:
            fast.append(await writer.write(big))

        async with trio.open_nursery() as nursery:
            # libp2p's path waits for window updates, which need the peer to read.
            nursery.start_soon(write)
            assert await read_exactly(peer_stream, len(big)) == big
        assert fast == [False]


async def test_a_held_connection_lock_sends_the_write_down_libp2p_path() -> None:
    async with stream_pair() as (stream, incoming):
        writer = FastStreamWriter(stream)
        peer_stream = await incoming.receive()
        lock = stream.muxed_stream.conn._write_lock
        fast = []

        async def write() -> None:
            fast.append(await writer.write(b"waits its turn"))

        async with trio.open_nursery() as nursery:
            await lock.acquire()  # as if a window update were being written right now
            nursery.start_soon(write)
            await trio.sleep(0.05)
            assert not fast  # waiting for the lock, not writing around it
            lock.release()
        assert await read_exactly(peer_stream, 14) == b"waits its turn"
        assert fast == [False]


async def test_a_closed_stream_fails_the_write_like_libp2p() -> None:
    async with stream_pair() as (stream, _incoming):
        writer = FastStreamWriter(stream)
        await stream.close()
        failed = False
        try:
            await writer.write(b"too late")
        except Exception:  # libp2p's own error for a closed stream
            failed = True
        assert failed


async def test_an_unknown_stream_type_is_never_fast() -> None:
    class NotLibp2p:
        def __init__(self) -> None:
            self.written = b""

        async def write(self, data: bytes) -> None:
            self.written += data

    stream = NotLibp2p()
    assert await FastStreamWriter(stream).write(b"plain") is False
    assert stream.written == b"plain"


@contextlib.asynccontextmanager
async def stream_to_a_stalled_peer() -> AsyncIterator[tuple[FastStreamWriter, Any]]:
    """(a writer, its TCP stream) on a connection through the test proxy, stalled: the peer
    reads nothing from here on, and the buffers on the way are a few KiB."""
    quiet_libp2p_logs()
    server, client = make_host(create_new_key_pair()), make_host(create_new_key_pair())

    async def handler(stream: Any) -> None:
        await trio.sleep_forever()

    async with server.run(listen_addrs=[LISTEN]), client.run(listen_addrs=[LISTEN]):
        server.set_stream_handler(PROTO, handler)
        port = int(server.get_addrs()[0].value_for_protocol("tcp"))
        with TcpProxy(("127.0.0.1", port), rcvbuf=4096) as proxy:
            via_proxy = multiaddr.Multiaddr(f"/ip4/127.0.0.1/tcp/{proxy.port}/p2p/{server.get_id()}")
            with trio.fail_after(15):
                await client.connect(info_from_p2p_addr(via_proxy))
                stream = await client.new_stream(server.get_id(), [PROTO])
            await connection_quiet(stream)
            writer = FastStreamWriter(stream)
            assert writer._parts is not None
            tcp = writer._parts[3]
            tcp.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            proxy.stall()
            yield writer, tcp
        await client.close()
        await server.close()


@pytest.mark.parametrize("path", ["fast", "libp2p"])
async def test_a_peer_that_takes_nothing_for_the_send_bound_loses_the_connection(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes are shielded (cancelled half-way, one would leave part of a Noise message on the
    wire), so they must not hang on a peer that stopped reading: after SEND_BOUND the
    connection is closed and the write raises -- on the fast path and on libp2p's, which a
    write larger than the send window takes."""
    monkeypatch.setattr(fastwrite, "SEND_BOUND", 0.5)
    async with stream_to_a_stalled_peer() as (writer, tcp):
        window = writer.stream.muxed_stream.send_window
        # Fast: a quarter of the window, four times, all within it.  libp2p: more than the window.
        size = window // 4 if path == "fast" else window + 1
        started = trio.current_time()
        fast: list[bool] = []
        with trio.fail_after(10), pytest.raises(trio.BrokenResourceError):
            for _ in range(4):
                fast.append(await writer.write(os.urandom(size)))
        assert fast == []  # the first write already blocked
        assert 0.5 <= trio.current_time() - started < 5
        assert tcp.stream.socket.fileno() == -1  # closed, not left mid-message
