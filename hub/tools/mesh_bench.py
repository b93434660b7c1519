"""Measure v2 forwarding between two in-process hubs over one libp2p stream on 127.0.0.1.

    python -m hub.tools.mesh_bench --messages 500000 --per-set 100 --size 64
    python -m hub.tools.mesh_bench --replay --messages 500000 --per-set 100 --size 64

Both hubs share one trio loop (one CPU core), so the figure includes the
receiver's decoding too.  The clock runs from the first ``forward()`` to the
moment the receiver's store holds the last message.

``--replay`` measures a peer catching up from the sender's topic logs
(``hub/core/mesh/replay.py``): a real hub with a data directory stores the
messages first (not timed), then a receiver that already holds the first set
links to it; the clock runs from the link being up to the receiver holding
the rest.  The logs are fresh, so they are read from the page cache.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

import wire

from ..core.mesh.config import MeshConfig
from ..mesh.mesh import Mesh


class _Receiver:
    """The receiving hub's ``on_forward``: counts messages until ``want`` arrived."""

    def __init__(self, want: int) -> None:
        self.want = want
        self.received = 0
        self.done = trio.Event()

    def on_forward(self, origin: int, sets: list[wire.ForwardSet], peer: Any) -> None:
        self.received += sum(s.messages.count for s in sets)
        if self.received >= self.want:
            self.done.set()

    def result(self, elapsed: float, sender: Mesh, *counters: str) -> dict[str, Any]:
        status = sender.peers_status()[0]
        return {
            "messages": self.received,
            "seconds": round(elapsed, 3),
            "msgs_per_s": round(self.received / elapsed),
            "MiB_per_s": round(status["bytes_sent"] / elapsed / (1 << 20), 1),
            **{name: status[name] for name in counters},
        }


async def bench(messages: int, per_set: int, size: int) -> dict[str, Any]:
    receiving = _Receiver(messages)
    on_forward = receiving.on_forward
    config = MeshConfig(discovery=False)
    sender = Mesh(config, hub_id=1, on_forward=on_forward)
    receiver = Mesh(config, hub_id=2, on_forward=on_forward)
    async with trio.open_nursery() as nursery:
        await nursery.start(sender.run)
        await nursery.start(receiver.run)
        await receiver.connect(sender.listen_addrs[0])
        receiver.announce(["bench"])
        while not sender.interest.patterns_of(str(receiver.peer_id)):  # noqa: ASYNC110 - no event says it
            await trio.sleep(0.01)
        batch = wire.MessageSet.build(["bench"], [(b"", b"x" * size)] * per_set)
        start = time.perf_counter()
        seq = 1
        while seq <= messages:
            sender.forward(seq, seq, batch)
            seq += per_set
            if (seq // per_set) % 1000 == 0:
                # Publisher backpressure, as a hub would apply it: never outrun the window.
                await trio.lowlevel.checkpoint()
                while sender.backlog() > 100_000:  # noqa: ASYNC110 - acks trim it; no event says so
                    await trio.sleep(0.001)
        await receiving.done.wait()
        result = receiving.result(time.perf_counter() - start, sender, "writes", "frames_sent")
        nursery.cancel_scope.cancel()
    return result


async def bench_replay(messages: int, per_set: int, size: int) -> dict[str, Any]:
    # The hub's storage and its MeshBridge are what is measured; imported here because the
    # rest of this module needs only the mesh.
    from hub.app import HubServer
    from hub.config import HubConfig

    receiving = _Receiver(messages - per_set)
    with tempfile.TemporaryDirectory(prefix="pub0sub-replay-bench-") as tmp:
        server = HubServer(HubConfig(listen="127.0.0.1:0", data_dir=Path(tmp), mesh_listen="/ip4/127.0.0.1/tcp/0",
                                     discovery=False))  # fmt: skip
        assert server.mesh is not None and server.store is not None
        count, records = wire.encode_records([(b"", b"x" * size)] * per_set)
        core = server.core
        for _ in range(messages // per_set):
            seq = core.origin.take(per_set)
            core.publisher.store_set(("bench",), count, records, timestamp=seq, origin=core.hub_id, origin_seq=seq)
        sender = server.mesh
        # The receiver linked before the sets were published and stored the first one before it
        # went away: it resumes from there (a peer the sender never linked with gets no replay).
        key_pair = create_new_key_pair()
        sender.core.known_peers.add(str(ID.from_pubkey(key_pair.public_key)), since=0, hub_id=2)
        receiver = Mesh(MeshConfig(discovery=False), hub_id=2, on_forward=receiving.on_forward,
                        resume_positions=lambda: {server.hub_id: per_set}, key_pair=key_pair)  # fmt: skip
        receiver.announce(["bench"])
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(sender.run)
                await nursery.start(receiver.run)
                await receiver.connect(sender.listen_addrs[0])
                start = time.perf_counter()
                await receiving.done.wait()
                result = receiving.result(time.perf_counter() - start, sender, "messages_replayed", "writes")
                nursery.cancel_scope.cancel()
        finally:
            server.store.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.tools.mesh_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--per-set", type=int, default=100, help="messages per forward() call (publish batch)")
    parser.add_argument("--size", type=int, default=64, help="message size in bytes")
    parser.add_argument("--replay", action="store_true", help="measure catching up from the logs instead")
    args = parser.parse_args(argv)
    print(trio.run(bench_replay if args.replay else bench, args.messages, args.per_set, args.size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
