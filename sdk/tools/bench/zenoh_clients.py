"""Zenoh workers for ``python -m sdk.tools.bench.clients ROLE JSON``, and its router.

Every Zenoh process of the bench -- routers, publishers, subscribers -- runs the
eclipse-zenoh Python API (Rust inside) and caps Zenoh's Rust thread pools with
:data:`RUNTIME` before Zenoh starts (``ZENOH_RUNTIME``, read once per process).
By default a Zenoh process starts six tokio worker threads (app 1, acc 1, tx 1,
rx 2, net 1) besides the Python thread; on a 2-core machine beside the other
systems measured, that is a process taking more cores than it can get.  The cap
keeps one worker each for the application, transmit and receive pools and hands
the acceptor and network pools over to the application pool: three worker
threads.  An operator's own ``ZENOH_RUNTIME`` is left alone.

Publishers ``put`` one message per call, with ``CongestionControl.BLOCK`` (nothing
dropped; a full transmit queue blocks the ``put``) or ``DROP`` (Zenoh's default for
``put``: a full queue drops the message silently).  A publisher starts only once its
publisher's matching status says a subscriber is known, as pub0sub's and NATS's
publishers start only once the interest reached their server.  Subscribers are
callbacks (Zenoh's fastest Python path) that count, or subtract the stamp.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .latency import STAMP, TICK, _payload, _report, _schedule
from .wireproto import CHANNEL

#: ZENOH_RUNTIME for every Zenoh process the bench starts (RON; see the module docstring).
RUNTIME = "(app: (worker_threads: 1), tx: (worker_threads: 1), rx: (worker_threads: 1), acc: (handover: app), net: (handover: app))"  # noqa: E501
#: A subscriber that heard nothing for this long after its first message reports what it has
#: (with DROP some messages never come).
IDLE_END = 2.0
#: How long a publisher waits for its matching status to show the subscriber.
MATCH_TIMEOUT = 15.0


def _zenoh() -> Any:
    """The zenoh module, imported after the runtime cap is in the environment."""
    os.environ.setdefault("ZENOH_RUNTIME", RUNTIME)
    import zenoh

    return zenoh


def config(mode: str, *, listen: Sequence[str] = (), connect: Sequence[str] = ()) -> Any:
    """A Zenoh config on loopback: no multicast or gossip scouting, explicit endpoints only."""
    zenoh = _zenoh()
    c = zenoh.Config()
    c.insert_json5("mode", json.dumps(mode))
    c.insert_json5("listen/endpoints", json.dumps(list(listen)))
    c.insert_json5("connect/endpoints", json.dumps(list(connect)))
    c.insert_json5("scouting/multicast/enabled", "false")
    c.insert_json5("scouting/gossip/enabled", "false")
    return c


def _client(host: str, port: int) -> Any:
    return _zenoh().open(config("client", connect=[f"tcp/{host}:{port}"]))


def _exit(code: int = 0) -> None:
    """Leave now: a Zenoh process can hang in its runtime's shutdown at interpreter exit."""
    sys.stdout.flush()
    os._exit(code)


def _publisher(session: Any, congestion: str) -> Any:
    zenoh = _zenoh()
    control = zenoh.CongestionControl.BLOCK if congestion == "block" else zenoh.CongestionControl.DROP
    pub = session.declare_publisher(CHANNEL, congestion_control=control)
    deadline = time.monotonic() + MATCH_TIMEOUT
    while not pub.matching_status.matching:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no matching Zenoh subscriber after {MATCH_TIMEOUT:.0f}s")
        time.sleep(0.005)
    return pub


# -- throughput ----------------------------------------------------------------------


def sub_zenoh(*, host: str, port: int, messages: int, size: int, connections: int = 1,
              timeout: float = 60.0) -> None:  # fmt: skip
    """``connections`` client sessions each subscribed with a counting callback."""
    lock = threading.Lock()
    state = {"received": 0, "first": 0, "last": 0, "at_first": 0}
    done = threading.Event()
    target = messages * connections

    def on_sample(_sample: Any) -> None:
        now = time.monotonic_ns()
        with lock:
            state["received"] += 1
            state["last"] = now
            if not state["first"]:
                state["first"], state["at_first"] = now, 1
            if state["received"] >= target:
                done.set()

    sessions = [_client(host, port) for _ in range(connections)]
    subs = [s.declare_subscriber(CHANNEL, on_sample) for s in sessions]
    print("ready", flush=True)
    deadline = time.monotonic() + timeout
    while not done.wait(0.1) and time.monotonic() < deadline:
        last = state["last"]
        if last and time.monotonic_ns() - last > IDLE_END * 1e9:
            break
    with lock:
        result = {"received": state["received"], "expected": target, "first_ns": state["first"],
                  "last_ns": state["last"], "at_first": state["at_first"]}  # fmt: skip
    print(json.dumps(result), flush=True)
    del subs
    _exit()


def pub_zenoh(*, host: str, port: int, messages: int, size: int, congestion: str = "block") -> None:
    """``messages`` puts of ``size`` bytes, one per call, as fast as ``put`` returns."""
    session = _client(host, port)
    pub = _publisher(session, congestion)
    payload = b"x" * size
    put = pub.put
    for _ in range(messages):
        put(payload)
    session.close()  # sends what the transmit queue still holds
    _exit()


# -- latency -------------------------------------------------------------------------


def lat_sub_zenoh(*, host: str, port: int, rate: float, seconds: float, size: int, timeout: float = 60.0) -> None:
    expected = int(rate * seconds)
    latencies: list[int] = []
    done = threading.Event()
    unpack = STAMP.unpack_from

    def on_sample(sample: Any) -> None:
        now = time.monotonic_ns()
        latencies.append(now - unpack(sample.payload.to_bytes())[0])
        if len(latencies) >= expected:
            done.set()

    session = _client(host, port)
    sub = session.declare_subscriber(CHANNEL, on_sample)
    print("ready", flush=True)
    done.wait(seconds + timeout)
    del sub
    _report(list(latencies[:expected]), expected)
    _exit()


def lat_pub_zenoh(*, host: str, port: int, rate: float, seconds: float, size: int, tick: float = TICK) -> None:
    """Paced as every L1/L2 publisher (:mod:`sdk.tools.bench.latency`), one ``put`` per message, BLOCK."""
    total = int(rate * seconds)
    payload = _payload(size)
    session = _client(host, port)
    put = _publisher(session, "block").put
    due, wait = _schedule(rate, total, tick)
    sent = 0
    while sent < total:
        for _ in range(due() - sent):
            put(payload())
            sent += 1
        time.sleep(wait(sent))
    session.close()
    _exit()


ROLES: dict[str, Callable[..., None]] = {
    "sub-zenoh": sub_zenoh,
    "pub-zenoh": pub_zenoh,
    "lat-sub-zenoh": lat_sub_zenoh,
    "lat-pub-zenoh": lat_pub_zenoh,
}


# -- the router ------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sdk.tools.bench.zenoh_clients --listen PORT [--connect PORT]... [--neighbours N]``:
    a Zenoh router on 127.0.0.1; prints ``ready`` once linked to ``N`` routers, runs until SIGTERM."""
    parser = argparse.ArgumentParser(prog="zenoh-router")
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--connect", type=int, action="append", default=[])
    parser.add_argument("--neighbours", type=int, default=0, help="routers to be linked to before ready")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    session = _zenoh().open(config("router", listen=[f"tcp/127.0.0.1:{args.listen}"],
                                   connect=[f"tcp/127.0.0.1:{p}" for p in args.connect]))  # fmt: skip
    deadline = time.monotonic() + MATCH_TIMEOUT
    while len(list(session.info.routers_zid())) < args.neighbours:
        if time.monotonic() > deadline or stop.is_set():
            print(f"linked to {len(list(session.info.routers_zid()))} of {args.neighbours} routers", flush=True)
            _exit(1)
        time.sleep(0.01)
    print("ready", flush=True)
    while not stop.wait(1.0):
        pass
    _exit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
