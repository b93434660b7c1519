"""pub0sub load workers for ``python -m sdk.tools.bench.clients ROLE JSON`` (see :mod:`sdk.tools.bench.pub0sub`)."""

from __future__ import annotations

import json
import selectors
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import wire

from .latency import STAMP, TICK, _payload, _report, _schedule, collect_latencies
from .wireproto import CHANNEL

PUBLISH_BATCH = 1000
RECV_SIZE = 1 << 18
_HEADER = struct.Struct(">BI")
_COUNT = struct.Struct(">I")


# -- raw-socket workers ------------------------------------------------------------


def _connect(host: str, port: int) -> socket.socket:
    s = socket.create_connection((host, port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.sendall(wire.Hello(client_name="bench").encode())
    _read_frame(s, wire.Welcome)
    return s


def _read_frame(s: socket.socket, kind: type[wire.Frame]) -> tuple[wire.Frame, bytes]:
    """The next ``kind`` frame and any bytes that arrived after it in the same read."""
    decoder = wire.FrameDecoder(accept=wire.HUB_TO_CLIENT_OPCODES, limits=wire.Limits(max_body=16 << 20))
    while True:
        frame = decoder.next_frame()
        if frame is None:
            chunk = s.recv(4096)
            if not chunk:
                raise ConnectionError(f"hub closed before {kind.__name__}")
            decoder.feed(chunk)
        elif isinstance(frame, kind):
            return frame, decoder.take_buffered()
        elif not isinstance(frame, wire.Heartbeat):
            raise ConnectionError(f"expected {kind.__name__}, got {frame!r}")


def count_delivered(buf: bytearray) -> tuple[int, int]:
    """Messages in the whole DELIVER frames at the start of ``buf``; ``(messages, bytes used)``.

    Reads each frame's record count (body offset 4 + topic + 32) -- no per-message work.
    """
    pos = 0
    n = len(buf)
    messages = 0
    unpack_header = _HEADER.unpack_from
    unpack_count = _COUNT.unpack_from
    while n - pos >= 5:
        opcode, length = unpack_header(buf, pos)
        end = pos + 5 + length
        if end > n:
            break
        if opcode == wire.Opcode.DELIVER:
            topic_len = buf[pos + 9]
            messages += unpack_count(buf, pos + 10 + topic_len + 32)[0]
        pos = end
    return messages, pos


def sub_pub0sub_raw(*, host: str, port: int, messages: int, size: int, connections: int = 1,
                    start: str = "latest", timeout: float = 60.0) -> None:  # fmt: skip
    socks = []
    sel = selectors.DefaultSelector()
    counts: dict[int, int] = {}
    bufs: dict[int, bytearray] = {}
    sub = wire.Sub(sub_id=1, patterns=(CHANNEL,),
                   start=wire.StartPosition.EARLIEST if start == "earliest" else wire.StartPosition.LATEST)
    try:
        for _ in range(connections):
            s = _connect(host, port)
            s.sendall(sub.encode())
            _, early = _read_frame(s, wire.SubOk)  # a replay's first batches follow SUB_OK at once
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
            socks.append(s)
            counts[s.fileno()] = 0
            bufs[s.fileno()] = bytearray(early)
        by_fd = {s.fileno(): s for s in socks}
        print("ready", flush=True)
        first = last = 0
        at_first = 0
        if start == "earliest":
            # A replay starts when the subscription opens: time it from there, so that
            # a log replayed in a single read still gives an honest rate.
            first = time.monotonic_ns()
        open_fds = set(counts)
        for fd, buf in bufs.items():
            got, used = count_delivered(buf)
            del buf[:used]
            counts[fd] += got
            if counts[fd] >= messages:
                open_fds.discard(fd)
                sel.unregister(by_fd[fd])
        last = time.monotonic_ns()
        deadline = time.monotonic() + timeout
        while open_fds and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.5):
                fd = key.fd
                chunk = by_fd[fd].recv(RECV_SIZE)
                if not chunk:
                    open_fds.discard(fd)
                    sel.unregister(by_fd[fd])
                    continue
                last = time.monotonic_ns()
                buf = bufs[fd]
                buf += chunk
                got, used = count_delivered(buf)
                del buf[:used]
                counts[fd] += got
                if not first and got:
                    first = last
                    at_first = got
                if counts[fd] >= messages:
                    open_fds.discard(fd)
                    sel.unregister(by_fd[fd])
        print(json.dumps({"received": sum(counts.values()), "expected": messages * connections,
                          "first_ns": first, "last_ns": last, "at_first": at_first}), flush=True)  # fmt: skip
    finally:
        for s in socks:
            s.close()
        sel.close()


def _publish_frame(size: int, count: int) -> bytes:
    mset = wire.MessageSet.build((CHANNEL,), [(b"", b"x" * size)] * count)
    return wire.Publish(sets=(mset,)).encode()


def pub_pub0sub_raw(*, host: str, port: int, messages: int, size: int) -> None:
    with _connect(host, port) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        full, rest = divmod(messages, PUBLISH_BATCH)
        batch = _publish_frame(size, PUBLISH_BATCH)
        for _ in range(full):
            s.sendall(batch)
        if rest:
            s.sendall(_publish_frame(size, rest))
        # STATUS answered means the hub processed everything before it.
        s.sendall(wire.Status().encode())
        _read_frame(s, wire.StatusReply)


def pub_pub0sub_acked(*, host: str, port: int, messages: int, size: int, batch: int = 100,
                      window: int = 64) -> None:  # fmt: skip
    """Acknowledged publishing: ``window`` batches in flight, time until the last ack."""
    payload = [(b"", b"x" * size)] * batch
    mset = wire.MessageSet.build((CHANNEL,), payload)
    total = max(1, messages // batch)
    decoder = wire.FrameDecoder(accept=wire.HUB_TO_CLIENT_OPCODES)
    with _connect(host, port) as s:
        started = time.monotonic()
        sent = acked = 0
        while acked < total:
            burst = []
            while sent < total and sent - acked < window:
                sent += 1
                burst.append(wire.Publish(producer_id=7, sequence=sent, flags=wire.PublishFlags.ACK,
                                          sets=(mset,)).encode())  # fmt: skip
            if burst:
                s.sendall(b"".join(burst))
            decoder.feed(s.recv(1 << 16))
            for frame in decoder:
                if isinstance(frame, wire.PublishAck):
                    acked += 1
                elif isinstance(frame, wire.Error):
                    raise RuntimeError(f"hub error: {frame}")
        seconds = time.monotonic() - started
    print(json.dumps({"acked": total * batch, "seconds": seconds}), flush=True)


# -- SDK workers -------------------------------------------------------------------


def sub_pub0sub_sdk(*, host: str, port: int, messages: int, size: int, timeout: float = 60.0) -> None:
    import trio

    from sdk import connect

    async def main() -> None:
        async with connect(f"{host}:{port}", name="bench-sub") as client, client.subscribe(CHANNEL) as sub:
            print("ready", flush=True)
            got = 0
            first = last = 0
            at_first = 0
            with trio.move_on_after(timeout):
                async for batch in sub.batches():
                    last = time.monotonic_ns()
                    got += len(batch)
                    if not first:
                        first, at_first = last, len(batch)
                    if got >= messages:
                        break
            print(json.dumps({"received": got, "expected": messages, "first_ns": first, "last_ns": last,
                              "at_first": at_first}), flush=True)  # fmt: skip

    trio.run(main)


#: What "T1 with headers" publishes with every message: a trace id and a tenant, the same each time
#: (consecutive publishes with equal headers share one message set, as plain ones do).
BENCH_HEADERS = {"trace": "4bf92f3577b34da6", "tenant": "eu-1"}


def pub_pub0sub_sdk(*, host: str, port: int, messages: int, size: int, headers: bool = False) -> None:
    import trio

    from sdk import connect

    async def main() -> None:
        payload = b"x" * size
        async with connect(f"{host}:{port}", name="bench-pub") as client:
            publish = client.publish
            if headers:
                for _ in range(messages):
                    await publish(CHANNEL, payload, headers=BENCH_HEADERS)
            else:
                for _ in range(messages):
                    await publish(CHANNEL, payload)
            await client.flush()
            await client.status()  # a round trip: everything before it was processed

    trio.run(main)


def lat_sub_pub0sub(*, host: str, port: int, rate: float, seconds: float, size: int, timeout: float = 60.0) -> None:
    import trio

    from sdk import connect

    expected = int(rate * seconds)
    latencies: list[int] = []

    async def main() -> None:
        async with connect(f"{host}:{port}", name="lat-sub") as client, client.subscribe(CHANNEL) as sub:
            print("ready", flush=True)
            unpack = STAMP.unpack_from
            with trio.move_on_after(seconds + timeout):
                async for batch in sub.batches():
                    now = time.monotonic_ns()
                    latencies.extend(now - unpack(m.data)[0] for m in batch)
                    if len(latencies) >= expected:
                        break

    trio.run(main)
    _report(latencies, expected)


def lat_sub_pub0sub_callback(*, host: str, port: int, rate: float, seconds: float, size: int,
                             timeout: float = 60.0) -> None:  # fmt: skip
    """L1/L2 subscriber taking each batch in the SDK's reader task (``on_batch``), as nats-py's callback subscriber."""
    import trio

    from sdk import connect

    expected = int(rate * seconds)
    latencies: list[int] = []
    unpack = STAMP.unpack_from

    async def main() -> None:
        done = trio.Event()

        def handle(batch: list[Any]) -> None:
            now = time.monotonic_ns()
            latencies.extend(now - unpack(m.data)[0] for m in batch)
            if len(latencies) >= expected:
                done.set()

        async with connect(f"{host}:{port}", name="lat-sub") as client, client.subscribe(CHANNEL, on_batch=handle):
            print("ready", flush=True)
            with trio.move_on_after(seconds + timeout):
                await done.wait()

    trio.run(main)
    _report(latencies, expected)


def lat_pub_pub0sub(*, host: str, port: int, rate: float, seconds: float, size: int, tick: float = TICK) -> None:
    import trio

    from sdk import connect

    total = int(rate * seconds)
    payload = _payload(size)

    async def main() -> None:
        async with connect(f"{host}:{port}", name="lat-pub") as client:
            due, wait = _schedule(rate, total, tick)
            sent = 0
            while sent < total:
                for _ in range(due() - sent):
                    await client.publish(CHANNEL, payload())
                    sent += 1
                await client.flush()
                await trio.sleep(wait(sent))

    trio.run(main)


def lat_sub_pub0sub_raw(*, host: str, port: int, rate: float, seconds: float, size: int,
                        timeout: float = 60.0) -> None:  # fmt: skip
    """L1/L2 subscriber on a raw socket: the hub's own path, without the SDK's hand-offs."""
    expected = int(rate * seconds)
    unpack = STAMP.unpack_from
    decoder = wire.FrameDecoder(accept=wire.HUB_TO_CLIENT_OPCODES, limits=wire.Limits(max_body=16 << 20))

    def stamps(chunk: bytes) -> list[int]:
        decoder.feed(chunk)
        return [
            unpack(data)[0]
            for frame in decoder
            if isinstance(frame, wire.Deliver)
            for _, _, data in frame.batch.messages()
        ]

    with _connect(host, port) as s:
        s.sendall(wire.Sub(sub_id=1, patterns=(CHANNEL,)).encode())
        _, early = _read_frame(s, wire.SubOk)
        decoder.feed(early)
        print("ready", flush=True)
        latencies = collect_latencies(s, expected, time.monotonic() + seconds + timeout, stamps)
    _report(latencies, expected)


def lat_pub_pub0sub_raw(*, host: str, port: int, rate: float, seconds: float, size: int,
                        tick: float = TICK) -> None:  # fmt: skip
    """Paced raw publisher: every message due is sent at once, one PUBLISH frame per wake-up."""
    total = int(rate * seconds)
    payload = _payload(size)
    due, wait = _schedule(rate, total, tick)
    topic = (CHANNEL,)
    with _connect(host, port) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = 0
        while sent < total:
            n = due() - sent
            if n > 0:
                mset = wire.MessageSet.build(topic, [(b"", payload()) for _ in range(n)])
                s.sendall(wire.Publish(sets=(mset,)).encode())
                sent += n
            time.sleep(wait(sent))


ROLES: dict[str, Callable[..., None]] = {
    "lat-sub-pub0sub-raw": lat_sub_pub0sub_raw,
    "lat-pub-pub0sub-raw": lat_pub_pub0sub_raw,
    "sub-pub0sub-raw": sub_pub0sub_raw,
    "pub-pub0sub-raw": pub_pub0sub_raw,
    "pub-pub0sub-acked": pub_pub0sub_acked,
    "sub-pub0sub-sdk": sub_pub0sub_sdk,
    "pub-pub0sub-sdk": pub_pub0sub_sdk,
    "lat-sub-pub0sub": lat_sub_pub0sub,
    "lat-sub-pub0sub-callback": lat_sub_pub0sub_callback,
    "lat-pub-pub0sub": lat_pub_pub0sub,
}


