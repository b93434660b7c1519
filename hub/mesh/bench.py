"""Measure v2 forwarding between two in-process hubs over one libp2p stream on 127.0.0.1.

    python -m hub.mesh.bench --messages 500000 --per-set 100 --size 64

Both hubs share one trio loop (one CPU core), so the figure includes the
receiver's decoding too.  The clock runs from the first ``forward()`` to the
moment the receiver's store holds the last message.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import trio

import wire

from .config import MeshConfig
from .mesh import Mesh


async def bench(messages: int, per_set: int, size: int) -> dict[str, Any]:
    received = 0
    done = trio.Event()

    def on_forward(origin: int, sets: list[wire.ForwardSet], peer: Any) -> None:
        nonlocal received
        received += sum(s.messages.count for s in sets)
        if received >= messages:
            done.set()

    config = MeshConfig(discovery=False)
    sender = Mesh(config, hub_id=1, on_forward=on_forward)
    receiver = Mesh(config, hub_id=2, on_forward=on_forward)
    async with trio.open_nursery() as nursery:
        await nursery.start(sender.run)
        await nursery.start(receiver.run)
        await receiver.connect(sender.listen_addrs[0])
        receiver.announce(["bench"])
        while not sender.interest.patterns_of(receiver.peer_id):
            await trio.sleep(0.01)
        batch = wire.MessageSet.build(["bench"], [(b"", b"x" * size)] * per_set)
        start = time.perf_counter()
        seq = 1
        while seq <= messages:
            sender.forward(seq, seq, batch)
            seq += per_set
            if (seq // per_set) % 1000 == 0:
                # Publisher backpressure, as a hub would apply it: never outrun the window.
                await trio.sleep(0)
                while sender.backlog() > 100_000:
                    await trio.sleep(0.001)
        await done.wait()
        elapsed = time.perf_counter() - start
        status = sender.peers_status()[0]
        nursery.cancel_scope.cancel()
    return {
        "messages": received,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(received / elapsed),
        "MiB_per_s": round(status["bytes_sent"] / elapsed / (1 << 20), 1),
        "writes": status["writes"],
        "frames_sent": status["frames_sent"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.mesh.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--per-set", type=int, default=100, help="messages per forward() call (publish batch)")
    parser.add_argument("--size", type=int, default=64, help="message size in bytes")
    args = parser.parse_args(argv)
    print(trio.run(bench, args.messages, args.per_set, args.size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
