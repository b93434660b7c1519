"""The collector stays off long-lived connections (hub.shell.gc_freeze), and ended
connections leave no reference cycle behind -- what makes freezing them safe."""

from __future__ import annotations

import gc

import trio

import wire
from hub.app import HubServer
from hub.config import HubConfig
from hub.core.clients import ClientSession
from hub.shell.connection import ClientConnection
from hub.shell.gc_freeze import FreezePolicy
from tests.support.rawclient import RawClient
from tests.support.waiting import await_until


def test_freezes_after_enough_new_connections() -> None:
    policy = FreezePolicy(freeze_after=100)
    assert policy.decide(opened=99, ended=0) is None
    assert policy.decide(opened=100, ended=0) == "freeze"
    assert policy.decide(opened=199, ended=0) is None
    assert policy.decide(opened=200, ended=0) == "freeze"


def test_thaws_once_half_the_frozen_connections_ended() -> None:
    policy = FreezePolicy(freeze_after=100)
    assert policy.decide(opened=1_000, ended=0) == "freeze"  # 1,000 open at the freeze
    assert policy.decide(opened=1_000, ended=499) is None
    assert policy.decide(opened=1_050, ended=500) == "thaw"  # then 550 open: the next thaw at 275 more
    assert policy.decide(opened=1_050, ended=774) is None
    assert policy.decide(opened=1_050, ended=775) == "thaw"  # 275 open: the next at 137 more
    assert policy.decide(opened=1_050, ended=912) == "thaw"  # 138 open: half is under freeze_after
    assert policy.decide(opened=1_050, ended=1_011) is None
    assert policy.decide(opened=1_050, ended=1_012) == "thaw"


def _alive() -> list[object]:
    return [o for o in gc.get_objects() if isinstance(o, ClientSession | ClientConnection)]


async def test_ended_connections_leave_no_cycles(nursery: trio.Nursery) -> None:
    server = HubServer(HubConfig(listen="127.0.0.1:0"))
    await nursery.start(server.serve)
    gc.collect()
    gc.disable()  # only reference counts free anything now
    try:
        clients = [await RawClient.connect(server.address) for _ in range(10)]
        for n, client in enumerate(clients):
            await client.send(wire.Sub(sub_id=n, patterns=(f"t{n}", "all.>")))
            await client.expect(wire.SubOk)
        await clients[0].send(b"\xff\x00\x00\x00\x00")  # not a frame: the hub closes this one (ERROR)
        await clients[0].expect(wire.Error)
        for client in clients:
            await client.aclose()
        await await_until(lambda: not server.core.sessions, timeout=5, what="every session ended")
        await await_until(lambda: not _alive(), timeout=5, what=lambda: f"{len(_alive())} sessions or connections "
                          "still alive without the cyclic collector")  # fmt: skip
    finally:
        gc.enable()
