"""On the overlay a hub closes libp2p connections that no mesh stream uses (hub/mesh/idle.py),
and libp2p does not dial them again by itself (hub/mesh/host.py).

Real ``python -m hub`` subprocesses on 127.0.0.1 and a real libp2p host beside them that
connects and opens nothing: the connection a referral, a pruned link or a refused shortcut
leaves behind once its stream has ended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import multiaddr
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr

from hub.mesh.host import make_host, quiet_libp2p_logs
from tests.support.cluster import HUB_POLL, Cluster, Hub
from tests.support.waiting import await_until

OVERLAY = ["--mesh-overlay", "--no-discovery"]
CLOSE_AFTER = 1.0


def overlay_of(hub: Hub) -> dict[str, Any]:
    overlay = hub.mesh()["overlay"]
    assert overlay is not None, f"{hub.name} runs no overlay"
    return overlay


async def test_a_connection_no_stream_uses_is_closed_and_links_are_kept(tmp_path: Path) -> None:
    with Cluster(tmp_path, heartbeat_interval=0.5, heartbeat_misses=3, extra=OVERLAY) as cl:
        closer, keeper = await trio.to_thread.run_sync(lambda: (
            cl.start(1, args=["--mesh-idle-close", str(CLOSE_AFTER)])[0],
            cl.add(args=["--mesh-idle-close", "0"])))  # fmt: skip
        await await_until(lambda: all(overlay_of(h)["links"] for h in (closer, keeper)), timeout=20,
                          what="the two hubs linked", in_thread=True, **HUB_POLL)  # fmt: skip
        quiet_libp2p_logs()
        host = make_host(create_new_key_pair())
        async with host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
            infos = [info_from_p2p_addr(multiaddr.Multiaddr(h.multiaddr)) for h in (closer, keeper)]
            with trio.fail_after(15):
                for info in infos:
                    await host.connect(info)
            network = host.get_network()
            assert all(network.get_connections(info.peer_id) for info in infos)
            assert await trio.to_thread.run_sync(lambda: overlay_of(closer)["connections"]) == 2

            await await_until(lambda: not network.get_connections(infos[0].peer_id), timeout=4 * CLOSE_AFTER + 5,
                              what="the idle connection closed by the hub")  # fmt: skip
            # Idle as long again: the link between the hubs carries only heartbeats and stays up,
            # the hub with --mesh-idle-close 0 keeps the idle connection, and neither libp2p host
            # dials the other again on its own (hub/mesh/host.py: no_auto_dials).
            await trio.sleep(3 * CLOSE_AFTER)
            assert network.get_connections(infos[1].peer_id), "--mesh-idle-close 0 closed a connection"
            assert not network.get_connections(infos[0].peer_id), "the closed connection was dialled again"
            closer_overlay, keeper_overlay = await trio.to_thread.run_sync(
                lambda: (overlay_of(closer), overlay_of(keeper)))  # fmt: skip
            assert closer_overlay["idle_closed"] == 1 and closer_overlay["connections"] == 1
            assert keeper_overlay["idle_closed"] is None and keeper_overlay["connections"] == 2
            assert len(closer_overlay["links"]) == 1 and len(keeper_overlay["links"]) == 1
            await host.close()
