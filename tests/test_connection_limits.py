"""Connections at scale: the descriptor limit the hub raises, and ``max_connections`` refusing cleanly."""

from __future__ import annotations

import resource
from collections.abc import Iterator
from contextlib import contextmanager

import trio

import wire
from hub.app import HubServer
from hub.config import HubConfig
from hub.shell.fdlimit import RESERVED_FDS, FdLimit, connection_limit
from tests.support.hubprocess import HubProcess
from tests.support.rawclient import RawClient
from tests.support.waiting import await_until


@contextmanager
def soft_fd_limit(value: int) -> Iterator[None]:
    """This process's soft descriptor limit lowered for a while (children started meanwhile inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (value, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_hub_raises_its_soft_descriptor_limit_to_the_hard_one_and_says_so() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with soft_fd_limit(700):
        hub = HubProcess()
    try:
        log = hub.stderr_text()
        with open(f"/proc/{hub.pid}/limits") as f:
            limits = next(line for line in f if line.startswith("Max open files")).split()
        assert (int(limits[3]), int(limits[4])) == (hard, hard)
        assert f"file descriptor limit {hard} (soft, was 700; hard {hard})" in log, log
        assert f"up to {hard - RESERVED_FDS} client connections" in log, log
    finally:
        hub.stop()


def test_max_connections_is_what_the_descriptors_allow_unless_configured_lower() -> None:
    fds = FdLimit(before=1024, soft=20_000, hard=20_000)
    assert connection_limit(None, fds) == 20_000 - RESERVED_FDS
    assert connection_limit(50, fds) == 50
    # Beyond the descriptors, accept() would fail (EMFILE) and connections hang in the backlog.
    assert connection_limit(1_000_000, fds) == 20_000 - RESERVED_FDS
    assert connection_limit(None, FdLimit(before=100, soft=100, hard=100)) == 1


async def test_a_connection_storm_past_max_connections_is_refused_frame_by_frame(nursery: trio.Nursery) -> None:
    limit, storm = 20, 150
    server = HubServer(HubConfig(listen="127.0.0.1:0", max_connections=limit))
    await nursery.start(server.serve)
    kept = [await RawClient.connect(server.address) for _ in range(limit)]
    answers: list[wire.Frame | None] = []

    async def connect_once() -> None:
        client = await RawClient.connect(server.address, hello=False)
        await client.send(wire.Hello(client_name="storm"))
        answers.append(await client.recv(10.0))
        answers.append(await client.recv(10.0))  # then the hub hangs up
        await client.aclose()

    async with trio.open_nursery() as storm_nursery:
        for _ in range(storm):
            storm_nursery.start_soon(connect_once)
    errors = [a for a in answers if isinstance(a, wire.Error)]
    assert len(errors) == storm and answers.count(None) == storm, answers
    assert {e.code for e in errors} == {wire.ErrorCode.LIMIT_EXCEEDED}
    assert f"max_connections={limit}" in errors[0].reason
    assert server.core.stats.connections_refused == storm
    # Everyone already in is still served, and a freed place is taken again.
    for client in kept:
        await client.send(wire.PING)
        assert (await client.expect(wire.Heartbeat)).word == "pong"
    await kept.pop().aclose()
    await await_until(lambda: len(server.core.sessions) < limit, timeout=10, what="a place freed")
    kept.append(await RawClient.connect(server.address))
    for client in kept:
        await client.aclose()


def _tasks() -> int:
    """Every task running in this trio run."""
    count, todo = 0, [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        count += 1
        todo += [child for nursery in task.child_nurseries for child in nursery.child_tasks]
    return count


async def test_an_idle_subscriber_costs_the_hub_one_task_and_no_queue(nursery: trio.Nursery) -> None:
    # What a connection holds while idle is what C1 multiplies by 19,000: one task (its reader),
    # no writer parked beside it, no deque for an empty outbound queue.
    server = HubServer(HubConfig(listen="127.0.0.1:0"))
    await nursery.start(server.serve)
    before = _tasks()
    clients = [await RawClient.connect(server.address) for _ in range(30)]
    for client in clients:
        await client.send(wire.Sub(sub_id=1, patterns=("t",)))
        await client.expect(wire.SubOk)
    publisher = clients[0]
    await publisher.send(wire.Publish(sets=(wire.MessageSet.build(("t",), [(b"", b"x")]),)))
    for client in clients:
        await client.expect(wire.Deliver)
    assert _tasks() - before == len(clients)
    for session in server.core.sessions.values():
        assert not session.out.items and type(session.out.items) is tuple
    for client in clients:
        await client.aclose()
