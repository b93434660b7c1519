"""Two real libp2p hosts (Noise + yamux over loopback TCP) and one stream between them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import multiaddr
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.peerinfo import info_from_p2p_addr

from hub.mesh.host import make_host, quiet_libp2p_logs
from tests.support.waiting import await_until

PROTO = TProtocol("/pub0sub/test-stream-pair/1.0.0")
LISTEN = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")


@contextlib.asynccontextmanager
async def connected_hosts() -> AsyncIterator[tuple[Any, Any, trio.MemoryReceiveChannel[Any]]]:
    """(the dialer host, the listener's peer id, a channel that yields each stream the listener
    accepts on ``PROTO``), connected."""
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
            yield client, info.peer_id, receive
    finally:
        await client.close()
        await server.close()


@contextlib.asynccontextmanager
async def stream_pair() -> AsyncIterator[tuple[Any, trio.MemoryReceiveChannel[Any]]]:
    """(the dialer's stream, a channel that yields the listener's stream)."""
    async with connected_hosts() as (client, peer_id, receive):
        with trio.fail_after(15):
            stream = await client.new_stream(peer_id, [PROTO])
        yield stream, receive


async def connection_quiet(stream: Any) -> None:
    """Wait out the connection's start-up traffic (identify, pings), which holds its write lock."""
    lock = stream.muxed_stream.conn._write_lock
    await await_until(lambda: not lock.locked(), timeout=10, what="the connection's write lock to be free")
    await trio.sleep(0.2)


async def read_exactly(stream: Any, size: int) -> bytes:
    got = bytearray()
    with trio.fail_after(15):
        while len(got) < size:
            got += await stream.read(1 << 20)
    return bytes(got)
