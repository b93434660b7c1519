"""DHT discovery: hubs find each other from one bootstrap address; a late joiner is found."""

from __future__ import annotations

import trio

from hub.mesh import Mesh
from tests.support.mesh import start_mesh
from tests.support.waiting import await_until


def _full_mesh(meshes: list[Mesh]) -> bool:
    return all({str(p) for p in m.connected_peers()} == {str(o.peer_id) for o in meshes if o is not m} for m in meshes)


async def test_hubs_discover_each_other_and_a_late_joiner() -> None:
    async with trio.open_nursery() as nursery:
        common = {"discovery": True, "discovery_interval": 0.3, "cluster": "t1"}
        a = await start_mesh(nursery, **common)
        boot = (a.listen_addrs[0],)
        b = await start_mesh(nursery, bootstrap=boot, **common)
        c = await start_mesh(nursery, bootstrap=boot, **common)
        await await_until(lambda: _full_mesh([a, b, c]), timeout=15, what="a full mesh of 3")

        late = await start_mesh(nursery, bootstrap=boot, **common)
        await await_until(lambda: _full_mesh([a, b, c, late]), timeout=15, what="the late joiner linked by all")

        # Interest from the late joiner reaches everyone over the discovered links.
        late.announce(["news"])
        await await_until(
            lambda: all(m.interest.patterns_of(str(late.peer_id)) == {"news"} for m in (a, b, c)),
            timeout=5,
            what="every hub to see the late hub's interest",
        )
        nursery.cancel_scope.cancel()
