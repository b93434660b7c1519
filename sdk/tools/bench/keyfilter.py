"""K1: a hub publishing at its full rate to subscribers filtered to 1 key of 10,000.

``python -m sdk.tools.bench.keyfilter [--messages N] [--rounds R] [--subscribers S]``

One hub process; one raw publisher sends N messages in PUBLISH frames of 1,000, every record
keyed ``k00000`` .. ``k09999`` in turn (64-byte data), then a STATUS whose answer says the hub
has handled everything.  Rounds alternate two configurations:

* ``none``: no subscriber -- the hub's publish rate with nothing to deliver;
* ``filtered``: S raw subscribers on the topic, each filtered to one key (``keys=[k00042]``):
  the hub cuts every stored batch for each of them (``hub.core.key_filters``), and each must
  receive exactly N / 10,000 messages -- nothing else leaves the hub.

Printed per round: the publisher's msgs/s (first send to the STATUS answer) and what each
subscriber received; then medians.  One JSON object per round with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from collections.abc import Sequence

import wire

from . import scenarios  # noqa: F401 - the registry pub0sub's methods register into
from .pub0sub import Pub0subHub
from .pub0sub_clients import _connect, _read_frame

TOPIC = "k1.actors"
KEYS = 10_000
FRAME_MESSAGES = 1_000
WANTED = b"k00042"


def publish_frames(messages: int, size: int) -> list[bytes]:
    """The PUBLISH frames of one run (built before the clock starts)."""
    frames = []
    data = b"x" * size
    for start in range(0, messages, FRAME_MESSAGES):
        keys = [b"k%05d" % (i % KEYS) for i in range(start, min(start + FRAME_MESSAGES, messages))]
        mset = wire.MessageSet.build((TOPIC,), [(k, data) for k in keys])
        frames.append(wire.Publish(sets=(mset,)).encode())
    return frames


class FilteredSubscriber:
    """A raw connection subscribed to TOPIC with a one-key filter, counting what arrives."""

    def __init__(self, host: str, port: int, sub_id: int) -> None:
        self.sock = _connect(host, port)
        one_key = wire.KeyFilter(keys=(WANTED,))
        self.sock.sendall(wire.Sub(sub_id=sub_id, patterns=(TOPIC,), key_filter=one_key).encode())
        _read_frame(self.sock, wire.SubOk)
        self.received = 0
        self.wrong_keys = 0
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        decoder = wire.FrameDecoder(accept=wire.HUB_TO_CLIENT_OPCODES, limits=wire.Limits(max_body=16 << 20))
        while chunk := self._recv():
            decoder.feed(chunk)
            for frame in decoder:
                if isinstance(frame, wire.Deliver):
                    for _, key, _ in frame.batch.messages():
                        self.received += 1
                        self.wrong_keys += key != WANTED

    def _recv(self) -> bytes:
        try:
            return self.sock.recv(1 << 16)
        except OSError:
            return b""

    def wait_for(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.received < count and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=5)


def one_round(host: str, port: int, frames: list[bytes], messages: int, subscribers: int) -> dict[str, object]:
    subs = [FilteredSubscriber(host, port, i + 1) for i in range(subscribers)]
    try:
        with _connect(host, port) as pub:
            pub.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            started = time.perf_counter()
            for frame in frames:
                pub.sendall(frame)
            pub.sendall(wire.Status().encode())
            _read_frame(pub, wire.StatusReply)  # the hub has handled every PUBLISH before it
            seconds = time.perf_counter() - started
        expected = messages // KEYS + (1 if messages % KEYS > int(WANTED[1:]) else 0)
        for sub in subs:
            sub.wait_for(expected, timeout=30)
        received = [s.received for s in subs]
        wrong = sum(s.wrong_keys for s in subs)
    finally:
        for sub in subs:
            sub.close()
    return {"config": "filtered" if subscribers else "none", "subscribers": subscribers, "messages": messages,
            "seconds": round(seconds, 4), "msgs_per_s": round(messages / seconds), "expected_each": expected,
            "received": received, "wrong_keys": wrong}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sdk.tools.bench.keyfilter", description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--subscribers", type=int, default=1)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    frames = publish_frames(args.messages, args.size)
    server = Pub0subHub()
    server.start()
    rates: dict[str, list[int]] = {"none": [], "filtered": []}
    failed = False
    try:
        host, port = server.address
        for r in range(1, args.rounds + 1):
            for subscribers in (0, args.subscribers):
                result = one_round(host, port, frames, args.messages, subscribers)
                result["round"] = r
                rates[str(result["config"])].append(int(result["msgs_per_s"]))  # type: ignore[call-overload]
                received: list[int] = result["received"]  # type: ignore[assignment]
                exact = all(n == result["expected_each"] for n in received) and not result["wrong_keys"]
                failed |= not exact
                line = (f"round {r} {result['config']:<8} {result['msgs_per_s']:>10,} msgs/s  "
                        f"received {received} (expected {result['expected_each']} each)")  # fmt: skip
                print(json.dumps(result) if args.json else line, flush=True)
    finally:
        server.stop()
    if not args.json:
        for config, values in rates.items():
            print(f"median {config:<8} {statistics.median(values):>10,.0f} msgs/s  ({min(values):,}-{max(values):,})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
