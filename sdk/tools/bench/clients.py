"""Load workers, each run as its own process: ``python -m sdk.tools.bench.clients ROLE JSON``.

Publisher and subscribers are separate processes because the machine has two
cores and one GIL per process.  A subscriber prints ``ready`` once its
subscription is confirmed, then one JSON line: messages received and the
``time.monotonic_ns()`` of the first and last (CLOCK_MONOTONIC is system-wide,
so stamps from several subscriber processes compare).  Throughput is measured
from the subscriber side only: first to last message received, count exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import selectors
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from .wireproto import CHANNEL, Framing

RECV_SIZE = 1 << 18
PUBLISH_BATCH = 1000
REDIS_PIPELINE = 100


def _emit(result: dict[str, Any]) -> None:
    print(json.dumps(result), flush=True)


def _ready() -> None:
    print("ready", flush=True)


# -- fastest tooling: raw sockets --------------------------------------------------


def sub_raw(*, system: str, host: str, port: int, messages: int, size: int, connections: int = 1,
            counter: str = "bytes", timeout: float = 60.0) -> None:  # fmt: skip
    """Subscribe ``connections`` sockets and count ``messages`` on each.

    ``counter="bytes"`` counts delivered bytes (exact because payloads are
    fixed-size); ``counter="hiredis"`` parses every RESP reply with hiredis.
    """
    framing = Framing(system)
    frame = framing.delivered_size(size)
    socks = []
    sel = selectors.DefaultSelector()
    counts: dict[int, int] = {}
    readers: dict[int, Any] = {}
    try:
        for _ in range(connections):
            s = socket.create_connection((host, port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            socks.append(s)
            extra = framing.subscribe(s)
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
            counts[s.fileno()] = len(extra)
            if counter == "hiredis":
                import hiredis

                readers[s.fileno()] = hiredis.Reader()
                if extra:
                    readers[s.fileno()].feed(extra)
        socks_by_fd = {s.fileno(): s for s in socks}
        _ready()
        target = messages * frame if counter == "bytes" else messages
        buf = bytearray(RECV_SIZE)
        view = memoryview(buf)
        first = last = 0
        before_first = 0  # counted at the first stamp: they arrived before timing began
        open_fds = set(counts)
        deadline = time.monotonic() + timeout
        while open_fds and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.5):
                s = socks_by_fd[key.fd]
                fd = key.fd
                n = s.recv_into(buf)
                if not n:
                    open_fds.discard(fd)
                    sel.unregister(s)
                    continue
                last = time.monotonic_ns()
                if counter == "bytes":
                    counts[fd] += n
                else:
                    reader = readers[fd]
                    reader.feed(view[:n])
                    got = 0
                    while reader.gets() is not False:
                        got += 1
                    counts[fd] += got
                if not first:
                    first = last
                    before_first = counts[fd] // frame if counter == "bytes" else counts[fd]
                if counts[fd] >= target:
                    open_fds.discard(fd)
                    sel.unregister(s)
        per_conn = [c // frame if counter == "bytes" else c for c in counts.values()]
        _emit({"received": sum(per_conn), "expected": messages * connections, "first_ns": first, "last_ns": last,
               "at_first": before_first})  # fmt: skip
    finally:
        for s in socks:
            s.close()
        sel.close()


def pub_raw(*, system: str, host: str, port: int, messages: int, size: int) -> None:
    """Write ``messages`` pre-framed messages in batches of :data:`PUBLISH_BATCH`."""
    framing = Framing(system)
    one = framing.published(b"x" * size)
    with socket.create_connection((host, port)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        framing.connect_publisher(s)
        full, rest = divmod(messages, PUBLISH_BATCH)
        batch = one * PUBLISH_BATCH
        for _ in range(full):
            s.sendall(batch)
        if rest:
            s.sendall(one * rest)
        if system == "nats":
            # A PING answered means the server has read everything before it.
            s.sendall(b"PING\r\n")
            from .wireproto import recv_until

            recv_until(s, b"PONG\r\n")
        else:
            s.shutdown(socket.SHUT_WR)
            s.settimeout(60)
            while s.recv(4096):
                pass


# -- usual Python clients ----------------------------------------------------------


def sub_redis_py(*, host: str, port: int, messages: int, size: int, timeout: float = 60.0) -> None:
    import redis

    client = redis.Redis(host=host, port=port)
    pubsub = client.pubsub()
    try:
        pubsub.subscribe(CHANNEL)
        deadline = time.monotonic() + 10
        while (m := pubsub.get_message(timeout=1.0)) is None or m["type"] != "subscribe":
            if time.monotonic() > deadline:
                raise TimeoutError("no subscribe confirmation")
        _ready()
        received = first = last = 0
        deadline = time.monotonic() + timeout
        get = pubsub.get_message
        while received < messages and time.monotonic() < deadline:
            m = get(timeout=0.5)
            if m is None or m["type"] != "message":
                continue
            last = time.monotonic_ns()
            if not first:
                first = last
            received += 1
        _emit({"received": received, "expected": messages, "first_ns": first, "last_ns": last})
    finally:
        pubsub.close()
        client.close()


def pub_redis_py(*, host: str, port: int, messages: int, size: int) -> None:
    import redis

    client = redis.Redis(host=host, port=port)
    payload = b"x" * size
    try:
        pipe = client.pipeline(transaction=False)
        sent = 0
        while sent < messages:
            n = min(REDIS_PIPELINE, messages - sent)
            for _ in range(n):
                pipe.publish(CHANNEL, payload)
            pipe.execute()
            sent += n
    finally:
        client.close()


def sub_nats_py(*, host: str, port: int, messages: int, size: int, timeout: float = 60.0) -> None:
    asyncio.run(_sub_nats_py(host, port, messages, timeout))


# The bench child's --timeout bounds only the wait for messages: a short count is reported, not raised.
async def _sub_nats_py(host: str, port: int, messages: int, timeout: float) -> None:  # noqa: ASYNC109
    import nats

    nc = await nats.connect(f"nats://{host}:{port}", allow_reconnect=False)
    state = {"received": 0, "first": 0, "last": 0}
    done = asyncio.Event()

    async def on_message(msg: Any) -> None:
        now = time.monotonic_ns()
        if not state["first"]:
            state["first"] = now
        state["last"] = now
        state["received"] += 1
        if state["received"] >= messages:
            done.set()

    try:
        await nc.subscribe(CHANNEL, cb=on_message, pending_msgs_limit=max(messages, 1 << 19) + 1,
                           pending_bytes_limit=1 << 30)  # fmt: skip
        await nc.flush()
        _ready()
        with contextlib.suppress(TimeoutError):  # a short count is reported, not raised
            await asyncio.wait_for(done.wait(), timeout)
        _emit({"received": state["received"], "expected": messages, "first_ns": state["first"],
               "last_ns": state["last"]})  # fmt: skip
    finally:
        await nc.close()


def pub_nats_py(*, host: str, port: int, messages: int, size: int) -> None:
    asyncio.run(_pub_nats_py(host, port, messages, size))


async def _pub_nats_py(host: str, port: int, messages: int, size: int) -> None:
    import nats

    nc = await nats.connect(f"nats://{host}:{port}", allow_reconnect=False)
    payload = b"x" * size
    try:
        publish = nc.publish
        for _ in range(messages):
            await publish(CHANNEL, payload)
        await nc.flush(timeout=60)
    finally:
        await nc.close()


ROLES: dict[str, Callable[..., None]] = {
    "sub-raw": sub_raw,
    "pub-raw": pub_raw,
    "sub-redis-py": sub_redis_py,
    "pub-redis-py": pub_redis_py,
    "sub-nats-py": sub_nats_py,
    "pub-nats-py": pub_nats_py,
}


def main(argv: Sequence[str] | None = None) -> int:
    from .c1_load import ROLES as C1_ROLES
    from .latency import ROLES as LATENCY_ROLES
    from .pub0sub_clients import ROLES as PUB0SUB_ROLES
    from .zenoh_clients import ROLES as ZENOH_ROLES

    roles = {**ROLES, **LATENCY_ROLES, **PUB0SUB_ROLES, **ZENOH_ROLES, **C1_ROLES}
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] not in roles:
        print(f"usage: python -m sdk.tools.bench.clients {{{','.join(roles)}}} JSON", file=sys.stderr)
        return 2
    roles[args[0]](**json.loads(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
