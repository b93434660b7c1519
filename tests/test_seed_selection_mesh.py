"""Issue 21's check, as one scenario: a subscriber by key (the Ray seed) and a subscriber by tag
query (the Tendermint seed) on two hubs of a 3-hub mesh, against a publisher on the third; each
gets exactly what its seed would deliver, and nothing is shipped to a client to be filtered there.

Ray (000_ray_pubsub_module.md): one subscription on a channel, many keys on it, last command
wins (a key added and another removed live).  Tendermint (003_tendermint_adr033_pubsub2.md):
messages published with tags, a query over them, and each delivery says which query matched.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import sdk
from tests.support.cluster import Cluster, publish_until_linked

TX = "tm.event = 'Tx' AND tx.height > 5"
BLOCKS = "tm.event = 'NewBlock'"


async def next_message(sub):  # type: ignore[no-untyped-def]
    """The next message that is not a probe (publish_until_linked may have sent more than one)."""
    while True:
        m = await sub.__anext__()
        if m.data != b"probe":
            return m


@pytest.mark.slow
def test_key_and_query_subscribers_on_a_3_hub_mesh_get_what_their_seeds_deliver(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        publisher_hub, ray_hub, tm_hub = cluster.start(3)
        cluster.wait_converged(timeout=60)

        async def scenario() -> None:
            async with (
                sdk.connect(ray_hub.address) as ray,
                ray.subscribe("ray.actors", keys=[b"actor-1", b"actor-2"]) as actors,
                sdk.connect(tm_hub.address) as tm,
                tm.subscribe("chain", query=TX) as txs,
                tm.subscribe("chain", query=BLOCKS) as blocks,
                sdk.connect(publisher_hub.address) as pub,
            ):
                await publish_until_linked(pub, actors, "ray.actors", key=b"actor-1")
                await publish_until_linked(pub, txs, "chain", headers={"tm.event": "Tx", "tx.height": "6"})
                await publish_until_linked(pub, blocks, "chain", headers={"tm.event": "NewBlock"})

                # Ray: updates of many actors; the subscriber wants actor-1 and actor-2 only.
                for i in range(300):
                    await pub.publish("ray.actors", b"state %d" % i, key=b"actor-%d" % (i % 30))
                await pub.publish_acked("ray.actors", b"fence", key=b"actor-2")
                got = []
                while not got or got[-1] != (b"actor-2", b"fence"):
                    m = await next_message(actors)
                    got.append((m.key, m.data))
                assert got == [(b"actor-%d" % (i % 30), b"state %d" % i) for i in range(300) if i % 30 in (1, 2)] + [
                    (b"actor-2", b"fence")]  # fmt: skip
                # Last command wins: actor-7 in, actor-1 out, on the live subscription.
                await actors.add_keys(b"actor-7")
                await actors.remove_keys(b"actor-1")
                for i in range(30):
                    await pub.publish("ray.actors", b"later %d" % i, key=b"actor-%d" % i)
                await pub.publish_acked("ray.actors", b"fence 2", key=b"actor-7")
                got = [(m.key, m.data) for m in [await next_message(actors) for _ in range(3)]]
                assert got == [(b"actor-2", b"later 2"), (b"actor-7", b"later 7"), (b"actor-7", b"fence 2")]

                # Tendermint: tagged events; each subscription gets what its query accepts, and
                # says which query matched.
                events = [(b"tx-3", {"tm.event": "Tx", "tx.height": "3"}),
                          (b"block-9", {"tm.event": "NewBlock", "tx.height": "9"}),
                          (b"tx-7", {"tm.event": "Tx", "tx.height": "7"}),
                          (b"untagged", {}),
                          (b"tx-12", {"tm.event": "Tx", "tx.height": "12"})]  # fmt: skip
                for data, headers in events:
                    await pub.publish_acked("chain", data, headers=headers)
                tx_got = [await next_message(txs) for _ in range(2)]
                assert [(m.data, m.subscription.query) for m in tx_got] == [(b"tx-7", TX), (b"tx-12", TX)]
                block_got = await next_message(blocks)
                assert (block_got.data, block_got.subscription.query, block_got.headers["tx.height"]) == (
                    b"block-9", BLOCKS, "9")  # fmt: skip
                for sub in (actors, txs, blocks):
                    with trio.move_on_after(0.5):
                        extra = await next_message(sub)
                        raise AssertionError(f"a message no seed would deliver arrived: {extra}")

        trio.run(scenario)
        # Everything crossed the mesh and was stored at the subscribers' hubs; the filters ran
        # there, not in the clients (the clients got only the messages above).
        stored = {t["topic"]: t["next_offset"] for t in ray_hub.status()["topic_list"]}
        assert stored["ray.actors"] >= 332
