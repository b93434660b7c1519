"""L1 workers: a paced publisher stamps each payload, a subscriber records publish->deliver.

The stamp is ``time.monotonic_ns()`` in the first 8 payload bytes; publisher
and subscriber are separate processes on the same machine, and
CLOCK_MONOTONIC is system-wide, so the difference is the latency.
Pacing: at each wake-up the publisher sends every message due by then
(each stamped as it is published), then sleeps until the next one is due, but
at least :data:`TICK` (1 ms): at 10k msgs/s each wake-up sends about ten.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .wireproto import CHANNEL, RELAY_HEADER, RELAY_OPCODE, Framing

STAMP = struct.Struct(">Q")
#: A paced publisher's shortest sleep.  At 10k msgs/s the next message is always due in
#: under 100 µs, and a wake-up costs more than that here (60-200 µs of CPU on these VMs),
#: so a publisher that slept "until the next one is due" never slept: it spun, sending one
#: or two messages per frame and taking most of one of the two cores from the servers it
#: measured.  1 ms is also the shortest wait an asyncio or trio timer gets (epoll counts
#: whole milliseconds).  The rate is unchanged: each wake-up sends every message due.
TICK = 0.001
PERCENTILES = (50.0, 99.0, 99.9)


def percentile(sorted_values: list[int], p: float) -> int:
    """Nearest-rank percentile of an already sorted list."""
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def _report(latencies_ns: list[int], expected: int) -> None:
    values = sorted(latencies_ns)
    result: dict[str, Any] = {"received": len(values), "expected": expected}
    for p in PERCENTILES:
        result[f"p{p:g}_us"] = percentile(values, p) / 1000.0 if values else None
    print(json.dumps(result), flush=True)


def collect_latencies(
    sock: socket.socket, expected: int, deadline: float, stamps: Callable[[bytes], Iterable[int]]
) -> list[int]:
    """Receive until ``expected`` latencies or ``deadline``; ``stamps(chunk)`` yields the
    publish stamps of the messages the chunk completes (each protocol frames them its way)."""
    latencies: list[int] = []
    sock.settimeout(1.0)
    while len(latencies) < expected and time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            continue
        if not chunk:
            break
        now = time.monotonic_ns()
        latencies.extend(now - stamp for stamp in stamps(chunk))
    return latencies


def _payload(size: int) -> Callable[[], bytes]:
    pad = b"x" * (size - STAMP.size)
    now = time.monotonic_ns
    pack = STAMP.pack
    return lambda: pack(now()) + pad


def _schedule(rate: float, total: int, tick: float = TICK) -> tuple[Callable[[], int], Callable[[int], float]]:
    """(how many are due now, seconds to sleep before the next wake-up: until message
    ``sent`` is due, and never less than ``tick``; ``tick=0`` sleeps exactly until then)."""
    start = time.monotonic()

    def due() -> int:
        return min(total, int((time.monotonic() - start) * rate) + 1)

    def wait(sent: int) -> float:
        return max(tick, start + sent / rate - time.monotonic())

    return due, wait


# -- raw relay ---------------------------------------------------------------------


def lat_sub_relay(*, host: str, port: int, rate: float, seconds: float, size: int, timeout: float = 60.0) -> None:
    expected = int(rate * seconds)
    frame = RELAY_HEADER.size + size
    unpack = STAMP.unpack_from
    pending = b""

    def stamps(chunk: bytes) -> list[int]:
        nonlocal pending
        buf = pending + chunk
        whole = len(buf) - len(buf) % frame
        pending = buf[whole:]
        return [unpack(buf, pos + RELAY_HEADER.size)[0] for pos in range(0, whole, frame)]

    with socket.create_connection((host, port)) as s:
        Framing("relay").subscribe(s)
        print("ready", flush=True)
        latencies = collect_latencies(s, expected, time.monotonic() + seconds + timeout, stamps)
    _report(latencies, expected)


def lat_pub_relay(*, host: str, port: int, rate: float, seconds: float, size: int, tick: float = TICK) -> None:
    total = int(rate * seconds)
    payload = _payload(size)
    header = RELAY_HEADER.pack(RELAY_OPCODE, size)
    due, wait = _schedule(rate, total, tick)
    with socket.create_connection((host, port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        Framing("relay").connect_publisher(s)
        sent = 0
        while sent < total:
            for _ in range(due() - sent):
                s.sendall(header + payload())
                sent += 1
            time.sleep(wait(sent))


# -- Redis with redis.asyncio ------------------------------------------------------


def lat_sub_redis(**kw: Any) -> None:
    asyncio.run(_lat_sub_redis(**kw))


async def _lat_sub_redis(*, host: str, port: int, rate: float, seconds: float, size: int,
                         # Bounds only the wait for messages: a short count is reported, not raised.
                         timeout: float = 60.0) -> None:  # fmt: skip  # noqa: ASYNC109
    import redis.asyncio as aioredis

    expected = int(rate * seconds)
    client = aioredis.Redis(host=host, port=port)
    pubsub = client.pubsub()
    latencies: list[int] = []
    try:
        await pubsub.subscribe(CHANNEL)
        while (m := await pubsub.get_message(timeout=1.0)) is None or m["type"] != "subscribe":
            pass
        print("ready", flush=True)
        deadline = time.monotonic() + seconds + timeout
        unpack = STAMP.unpack_from
        while len(latencies) < expected and time.monotonic() < deadline:
            m = await pubsub.get_message(timeout=0.5)
            if m is not None and m["type"] == "message":
                latencies.append(time.monotonic_ns() - unpack(m["data"])[0])
    finally:
        await pubsub.aclose()
        await client.aclose()
    _report(latencies, expected)


def lat_pub_redis(**kw: Any) -> None:
    asyncio.run(_lat_pub_redis(**kw))


async def _lat_pub_redis(*, host: str, port: int, rate: float, seconds: float, size: int,
                         tick: float = TICK) -> None:  # fmt: skip
    import redis.asyncio as aioredis

    client = aioredis.Redis(host=host, port=port)
    try:

        async def send(n: int, payload: Callable[[], bytes]) -> None:
            if n == 1:
                await client.publish(CHANNEL, payload())
                return
            pipe = client.pipeline(transaction=False)
            for _ in range(n):
                pipe.publish(CHANNEL, payload())
            await pipe.execute()

        await _paced(send, rate=rate, seconds=seconds, size=size, tick=tick)
    finally:
        await client.aclose()


async def _paced(send: Callable[[int, Callable[[], bytes]], Awaitable[None]], *, rate: float, seconds: float,
                 size: int, tick: float) -> None:  # fmt: skip
    total = int(rate * seconds)
    payload = _payload(size)
    due, wait = _schedule(rate, total, tick)
    sent = 0
    while sent < total:
        n = due() - sent
        if n > 0:
            await send(n, payload)
            sent += n
        await asyncio.sleep(wait(sent))


# -- NATS with nats-py -------------------------------------------------------------


def lat_sub_nats(**kw: Any) -> None:
    asyncio.run(_lat_sub_nats(**kw))


async def _lat_sub_nats(*, host: str, port: int, rate: float, seconds: float, size: int,
                        # Bounds only the wait for messages: a short count is reported, not raised.
                        timeout: float = 60.0) -> None:  # fmt: skip  # noqa: ASYNC109
    import nats

    expected = int(rate * seconds)
    latencies: list[int] = []
    done = asyncio.Event()
    unpack = STAMP.unpack_from

    async def on_message(msg: Any) -> None:
        latencies.append(time.monotonic_ns() - unpack(msg.data)[0])
        if len(latencies) >= expected:
            done.set()

    nc = await nats.connect(f"nats://{host}:{port}", allow_reconnect=False)
    try:
        await nc.subscribe(CHANNEL, cb=on_message)
        await nc.flush()
        print("ready", flush=True)
        with contextlib.suppress(TimeoutError):  # a short count is reported, not raised
            await asyncio.wait_for(done.wait(), seconds + timeout)
    finally:
        await nc.close()
    _report(latencies, expected)


def lat_pub_nats(**kw: Any) -> None:
    asyncio.run(_lat_pub_nats(**kw))


async def _lat_pub_nats(*, host: str, port: int, rate: float, seconds: float, size: int,
                        tick: float = TICK) -> None:  # fmt: skip
    import nats

    nc = await nats.connect(f"nats://{host}:{port}", allow_reconnect=False)
    try:

        async def send(n: int, payload: Callable[[], bytes]) -> None:
            for _ in range(n):
                await nc.publish(CHANNEL, payload())

        await _paced(send, rate=rate, seconds=seconds, size=size, tick=tick)
        await nc.flush(timeout=30)
    finally:
        await nc.close()


ROLES: dict[str, Callable[..., None]] = {
    "lat-sub-relay": lat_sub_relay,
    "lat-pub-relay": lat_pub_relay,
    "lat-sub-redis": lat_sub_redis,
    "lat-pub-redis": lat_pub_redis,
    "lat-sub-nats": lat_sub_nats,
    "lat-pub-nats": lat_pub_nats,
}
