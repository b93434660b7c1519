"""FastStreamWriter on two real libp2p hosts (Noise + yamux over loopback TCP).

The fast path must be byte-for-byte what libp2p's own reader expects, keep
yamux's send window honest, interleave safely with libp2p's own writes, and
step aside whenever it cannot be sure.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import multiaddr
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.peerinfo import info_from_p2p_addr

from hub.mesh.fastwrite import FastStreamWriter
from hub.mesh.host import make_host, quiet_libp2p_logs

PROTO = TProtocol("/pub0sub/test-fastwrite/1.0.0")
LISTEN = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")


@contextlib.asynccontextmanager
async def stream_pair() -> AsyncIterator[tuple[Any, trio.MemoryReceiveChannel[Any]]]:
    """(the dialer's stream, a channel that yields the listener's stream)."""
    quiet_libp2p_logs()
    server, client = make_host(create_new_key_pair()), make_host(create_new_key_pair())
    send, receive = trio.open_memory_channel[Any](1)

    async def handler(stream: Any) -> None:
        await send.send(stream)
        await trio.sleep_forever()  # keep the stream open while the test reads it

    try:
        async with server.run(listen_addrs=[LISTEN]), client.run(listen_addrs=[LISTEN]):
            server.set_stream_handler(PROTO, handler)
            info = info_from_p2p_addr(server.get_addrs()[0])
            with trio.fail_after(15):
                await client.connect(info)
                stream = await client.new_stream(info.peer_id, [PROTO])
            yield stream, receive
    finally:
        await client.close()
        await server.close()


async def connection_quiet(stream: Any) -> None:
    """Wait out the connection's start-up traffic (identify, pings), which holds its write lock."""
    lock = stream.muxed_stream.conn._write_lock
    with trio.fail_after(10):
        while lock.locked():
            await trio.sleep(0.01)
    await trio.sleep(0.2)


async def read_exactly(stream: Any, size: int) -> bytes:
    got = bytearray()
    with trio.fail_after(15):
        while len(got) < size:
            got += await stream.read(1 << 20)
    return bytes(got)


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
        peer_stream = await incoming.receive()
        assert await read_exactly(peer_stream, len(expected)) == expected
        assert fast == [True, True, True]
        # The fast path spent window like yamux's own path (the reader's window updates
        # may have refilled it since, but never by more than was sent).
        assert stream.muxed_stream.send_window <= window_before + len(expected)


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
