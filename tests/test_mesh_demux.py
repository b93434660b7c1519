"""MeshDemux under a real Noise/yamux connection: plain DATA frames are taken by the demux,
everything else by py-libp2p's own loop, and every stream gets exactly its bytes in order.

(The FastStreamReader tests in test_mesh_fastread.py run with the demux installed too: EOF
after the last byte and resets are FIN and RST frames handed to libp2p.)"""

from __future__ import annotations

import os
from typing import Any

import trio

from hub.mesh.demux import MeshDemux
from hub.mesh.fastread import FastStreamReader
from hub.mesh.fastwrite import FastStreamWriter
from tests.support.libp2p_pair import PROTO, connected_hosts, connection_quiet, read_exactly, stream_pair


def demux_of(stream: Any) -> MeshDemux:
    demux = stream.muxed_stream.conn.secured_conn.mesh_demux
    assert isinstance(demux, MeshDemux)
    return demux


async def read_all(reader: FastStreamReader, size: int) -> bytes:
    got = bytearray()
    with trio.fail_after(15):
        while len(got) < size:
            data, _ = await reader.read(1 << 20)
            got += data
    return bytes(got)


async def test_data_frames_go_through_the_demux_intact_from_both_write_paths() -> None:
    async with stream_pair() as (stream, incoming):
        peer = await incoming.receive()
        reader = FastStreamReader(peer)
        demux = demux_of(peer)
        writer = FastStreamWriter(stream)
        await connection_quiet(stream)
        pieces = [os.urandom(n) for n in (1, 65_000, 7, 200_000, 30_000, 65_507, 1_000_000)]

        async def send() -> None:
            for i, piece in enumerate(pieces):
                if i % 2:
                    await stream.write(piece)  # libp2p's own path: frames of its own sizes
                else:
                    await writer.write(piece)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            got = await read_all(reader, sum(map(len, pieces)))
        assert got == b"".join(pieces)
        assert demux.frames_fast >= 20  # ~1.4 MB in frames of at most ~64 KiB


async def test_a_stream_opened_later_is_set_up_by_libp2p_and_then_fed_by_the_demux() -> None:
    async with connected_hosts() as (client, peer_id, incoming):
        with trio.fail_after(15):
            stream = await client.new_stream(peer_id, [PROTO])
        peer = await incoming.receive()
        reader = FastStreamReader(peer)
        demux = demux_of(peer)
        await connection_quiet(stream)
        await stream.write(b"first stream")
        assert await read_all(reader, 12) == b"first stream"
        delegated = demux.frames_delegated
        # A second stream on the same connection: its SYN and the protocol negotiation are
        # frames with flags, for libp2p's loop.
        with trio.fail_after(15):
            second = await client.new_stream(peer_id, [PROTO])
            await second.write(b"hello")
            accepted = await incoming.receive()
        assert second.muxed_stream.conn is stream.muxed_stream.conn  # one connection, two streams
        assert await read_exactly(accepted, 5) == b"hello"
        assert demux.frames_delegated > delegated
        # Then both streams' plain DATA frames are the demux's, each stream getting its own.
        a, b = os.urandom(300_000), os.urandom(300_000)
        fast = demux.frames_fast
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.write, a)
            nursery.start_soon(second.write, b)
            got_a = await read_all(reader, len(a))
            got_b = await read_exactly(accepted, len(b))
        assert (got_a, got_b) == (a, b)
        assert demux.frames_fast > fast


async def test_the_demux_is_installed_once_per_connection() -> None:
    async with stream_pair() as (_stream, incoming):
        peer = await incoming.receive()
        first = demux_of(FastStreamReader(peer).stream)
        assert demux_of(FastStreamReader(peer).stream) is first
        assert peer.muxed_stream.conn.secured_conn.read == first.read
