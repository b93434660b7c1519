"""py-libp2p's own GossipSub on hosts built like a hub's: the baseline ``pub0sub bench`` measures
beside the pub0sub mesh in scenario M1.  Run as a process; it prints one JSON line.

    python -m hub.tools.gossipsub_bench --messages 5000 --size 64 [--no-spam-protection]

Three libp2p hosts (Noise + yamux, as :func:`~hub.mesh.host.make_host` builds them) in one
process on 127.0.0.1, fully connected like the pub0sub mesh; a publisher on host 1, a subscriber
on host 3.  It publishes as fast as ``publish()`` returns and counts what arrives within a
bounded time: GossipSub's default spam protection (10 msgs/s per topic per peer) drops the rest.
This lives with the hub because it needs the hub's libp2p host, which the SDK never imports.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Sequence
from typing import Any

import multiaddr
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service

from ..mesh.host import DEFAULT_LISTEN, make_host, quiet_libp2p_logs


# ``timeout`` bounds set-up and publishing apart; ``drain`` bounds the rest.
async def measure(
    *, messages: int, size: int, topic: str, spam_protection: bool, drain: float, timeout: float  # noqa: ASYNC109
) -> dict[str, Any]:
    """Publish ``messages`` on host 1 (for ``timeout`` s at most), wait ``drain`` s more for host 3
    to receive them; the delivered rate and the loss."""
    quiet_libp2p_logs()
    listen = multiaddr.Multiaddr(DEFAULT_LISTEN)
    hosts = [make_host(create_new_key_pair(), DEFAULT_LISTEN) for _ in range(3)]
    routers = [
        GossipSub(protocols=[PROTOCOL_ID_V11, PROTOCOL_ID], degree=6, degree_low=4, degree_high=12,
                  heartbeat_interval=1, spam_protection_enabled=spam_protection)
        for _ in hosts
    ]  # fmt: skip
    pubsubs = [Pubsub(host, router) for host, router in zip(hosts, routers, strict=True)]
    received = 0
    first_pub = last_recv = 0
    async with contextlib.AsyncExitStack() as stack:
        for host in hosts:
            await stack.enter_async_context(host.run([listen]))
        for service in (*pubsubs, *routers):
            await stack.enter_async_context(background_trio_service(service))
        for ps in pubsubs:
            await ps.wait_until_ready()
        # Fully connected, like the pub0sub mesh.
        for i, j in ((0, 1), (1, 2), (0, 2)):
            await hosts[i].connect(info_from_p2p_addr(hosts[j].get_addrs()[0]))
        sub = await pubsubs[2].subscribe(topic)
        with trio.fail_after(timeout):
            # Host 3's subscription known to host 1, and host 1's outbound queue to it open.
            # libp2p's pubsub sets no event for either: poll its tables.
            while (  # noqa: ASYNC110
                hosts[2].get_id() not in pubsubs[0].peer_topics.get(topic, set())
                or hosts[2].get_id() not in pubsubs[0].peer_queues
            ):
                await trio.sleep(0.01)
        payload = b"x" * size
        done = trio.Event()

        async def count() -> None:
            nonlocal received, last_recv
            while received < messages:
                await sub.get()
                received += 1
                last_recv = time.monotonic_ns()
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(count)
            first_pub = time.monotonic_ns()
            # publish() never blocks on the network: what the queues drop is the loss measured.  One
            # checkpoint per publish lets the other hosts' tasks (same loop) run, as a polite app would.
            with trio.move_on_after(timeout):
                for _ in range(messages):
                    await pubsubs[0].publish(topic, payload)
                    await trio.lowlevel.checkpoint()
            published_s = (time.monotonic_ns() - first_pub) / 1e9
            with trio.move_on_after(drain):
                await done.wait()
            nursery.cancel_scope.cancel()
    for host in hosts:
        await host.close()
    # Over the whole publishing time at least: a capped topic delivers a few messages early, then nothing.
    seconds = max((last_recv - first_pub) / 1e9 if last_recv else 0.0, published_s)
    return {
        "rate": received / seconds if seconds > 0 else float("nan"),
        "published": messages,
        "received": received,
        "loss": 1 - received / messages if messages else 0.0,
        "seconds": seconds,
        "publish_seconds": published_s,
        "spam_protection": spam_protection,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.tools.gossipsub_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5_000, help="messages published at most")
    parser.add_argument("--size", type=int, default=64, help="message size in bytes")
    parser.add_argument("--topic", default="bench")
    parser.add_argument("--no-spam-protection", dest="spam_protection", action="store_false",
                        help="GossipSub(spam_protection_enabled=False)")  # fmt: skip
    parser.add_argument("--drain", type=float, default=5.0, metavar="SECONDS",
                        help="how long arrivals are awaited after the last publish")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                        help="bound on linking the hosts, and on publishing")  # fmt: skip
    args = parser.parse_args(argv)
    result = trio.run(
        lambda: measure(messages=args.messages, size=args.size, topic=args.topic,
                        spam_protection=args.spam_protection, drain=args.drain, timeout=args.timeout)
    )  # fmt: skip
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
