"""The raw trio relay: the "physical limit" a Python hub is measured against.

It forwards pre-framed batches (5-byte header ``[u8 opcode][u32 length]``
frames) from a publisher connection to every subscriber connection, with no
routing and no decoding beyond walking the frame headers so that only whole
frames are forwarded.  A connection says what it is with one byte:
``P`` publisher or ``S`` subscriber; a subscriber gets ``K`` back once
registered, so a benchmark knows it will see everything published afterwards.

Run: ``python -m sdk.tools.bench.relay --listen 127.0.0.1:0``; the first stdout line
is the bound ``host:port``.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Sequence

import trio

FRAME_HEADER = struct.Struct(">BI")
READ_SIZE = 1 << 16
ROLE_PUBLISHER = b"P"
ROLE_SUBSCRIBER = b"S"
SUBSCRIBED = b"K"


def whole_frames_end(buf: bytearray) -> int:
    """Length of the prefix of ``buf`` made of whole frames."""
    unpack = FRAME_HEADER.unpack_from
    pos = 0
    end = len(buf)
    while end - pos >= 5:
        _, length = unpack(buf, pos)
        stop = pos + 5 + length
        if stop > end:
            break
        pos = stop
    return pos


class Relay:
    def __init__(self) -> None:
        # subscriber stream -> lock, so two publishers never interleave writes on it
        self.subscribers: dict[trio.SocketStream, trio.Lock] = {}

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            role = await stream.receive_some(1)
            if role == ROLE_SUBSCRIBER:
                await self._subscriber(stream)
            elif role == ROLE_PUBLISHER:
                await self._publisher(stream)

    async def _subscriber(self, stream: trio.SocketStream) -> None:
        self.subscribers[stream] = trio.Lock()
        try:
            await stream.send_all(SUBSCRIBED)
            while await stream.receive_some(READ_SIZE):
                pass  # subscribers send nothing; this only waits for them to close
        except trio.BrokenResourceError:
            pass
        finally:
            self.subscribers.pop(stream, None)

    async def _publisher(self, stream: trio.SocketStream) -> None:
        buf = bytearray()
        while data := await stream.receive_some(READ_SIZE):
            buf += data
            cut = whole_frames_end(buf)
            if not cut:
                continue
            chunk = bytes(buf[:cut])
            del buf[:cut]
            for sub, lock in list(self.subscribers.items()):
                try:
                    async with lock:
                        await sub.send_all(chunk)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self.subscribers.pop(sub, None)


async def serve(host: str, port: int) -> None:
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()
    print(f"{bound[0]}:{bound[1]}", flush=True)
    await trio.serve_listeners(Relay().handle, listeners)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdk.tools.bench.relay", description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:0", help="host:port to bind (port 0: any free port)")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    try:
        trio.run(serve, host or "127.0.0.1", int(port))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
