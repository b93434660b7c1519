"""DHT discovery: hubs find each other from one bootstrap address; a late joiner is found."""

from __future__ import annotations

import trio

from hub.mesh import Mesh
from hub.mesh.discovery import Discovery
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


async def test_lookups_back_off_while_they_find_no_new_hub_and_a_joiner_links_itself() -> None:
    """Each v2 lookup asks the whole small cluster, so a hub whose lookups keep finding the same
    hubs (none it had not found before) looks up less and less often, down to
    ``discovery_interval_max``.  A joiner does not
    wait for that: it looks up at the base interval and dials the hubs it finds.  A link that
    ends brings a hub's interval back to the base (the hub that went may come back elsewhere)."""
    async with trio.open_nursery() as nursery:
        common = {"discovery": True, "discovery_interval": 0.1, "discovery_interval_max": 0.8, "cluster": "t2"}
        a = await start_mesh(nursery, **common)
        b = await start_mesh(nursery, bootstrap=(a.listen_addrs[0],), **common)
        await await_until(lambda: _full_mesh([a, b]), timeout=15, what="a and b linked")
        settled = [m.discovery for m in (a, b)]
        await await_until(lambda: all(d is not None and d.wait == 0.8 for d in settled), timeout=15,
                          what=lambda: f"both lookups backed off to 0.8 s: {[d and d.status() for d in settled]}")

        async def run_late(task_status: trio.TaskStatus[tuple[Mesh, trio.CancelScope]]) -> None:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as own:
                    task_status.started((await start_mesh(own, bootstrap=(a.listen_addrs[0],), **common), scope))

        late, late_scope = await nursery.start(run_late)
        await await_until(lambda: _full_mesh([a, b, late]), timeout=15, what="the late joiner linked by all")
        assert late.discovery is not None and late.discovery.lookups >= 1

        # The late hub goes: a's link to it ends, and a's interval is the base one again.
        assert a.discovery is not None
        hurried_to: list[float] = []
        hurry = a.discovery.hurry
        a.discovery.hurry = lambda: (hurry(), hurried_to.append(a.discovery.wait))  # type: ignore[method-assign,func-returns-value,union-attr]
        late_scope.cancel()
        await await_until(lambda: hurried_to, timeout=15, what="a's link to the late hub ended")
        assert hurried_to[0] == 0.1
        nursery.cancel_scope.cancel()


def test_the_lookup_interval_doubles_while_no_new_hub_is_found_and_starts_over_on_a_change() -> None:
    found = Discovery(None, cluster="t", bootstrap=[], interval=2.0, max_interval=30.0,  # type: ignore[arg-type]
                      on_found=lambda info: None)
    same = frozenset({"hub-a", "hub-b"})
    assert [found._next_wait(same) for _ in range(6)] == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]  # the first is new
    assert found._next_wait(same | {"hub-c"}) == 2.0  # a hub it had not found
    assert found._next_wait(same | {"hub-c"}) == 4.0
    found.hurry()  # a link ended
    assert found.wait == 2.0
    assert found._next_wait(same | {"hub-c"}) == 4.0
    assert found._next_wait(frozenset()) == 8.0  # an empty lookup after hubs were found: nothing new
    assert found._next_wait(same) == 16.0  # a hub found before is not new
    alone = Discovery(None, cluster="t", bootstrap=[], interval=2.0, max_interval=30.0,  # type: ignore[arg-type]
                      on_found=lambda info: None)
    assert [alone._next_wait(frozenset()) for _ in range(3)] == [2.0, 2.0, 2.0]  # found nobody yet: keep looking
    fixed = Discovery(None, cluster="t", bootstrap=[], interval=2.0, on_found=lambda info: None)  # type: ignore[arg-type]
    assert [fixed._next_wait(same) for _ in range(3)] == [2.0, 2.0, 2.0]  # no max_interval: no backoff
    assert found.status()["found"] == 3 and found.status()["interval"] == 16.0
