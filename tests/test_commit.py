"""COMMIT: an acknowledgement the client can wait on, durable once answered (issue 17, item 6).

The core's rules without sockets, the group commit of the position saves, then real
``python -m hub`` processes killed with SIGKILL right after COMMITTED: the position holds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

import sdk
import wire
from hub.core.consumers import ConsumerRegistry
from tests.support.corehub import CoreHub
from tests.support.hubprocess import HubProcess
from tests.support.scenarios import kill9

StartHub = Callable[..., HubProcess]


def durable_sub(hub: CoreHub, name: str = "d") -> object:
    client = hub.connect()
    client.send(wire.Sub(sub_id=1, patterns=("t",), durable=name, start=wire.StartPosition.EARLIEST,
                         ack_mode=wire.AckMode.EXPLICIT))  # fmt: skip
    client.expect(wire.SubOk)
    return client


def test_commit_answers_with_the_positions_once_saved(tmp_path: Path) -> None:
    hub = CoreHub(tmp_path)
    hub.publish("t", b"a", b"b", b"c")
    client = durable_sub(hub)
    hub.pump()
    assert [off for _, off, _ in client.delivered()] == [0, 1, 2]
    saves = hub.core.consumers.saves
    client.send(wire.Ack(sub_id=1, ranges=(wire.AckRange(topic="t", first_offset=0, last_offset=1),)),
                wire.Commit(sub_id=1, ref=41))  # fmt: skip
    committed = client.expect(wire.Committed)
    assert (committed.sub_id, committed.ref) == (1, 41)
    assert committed.positions == (wire.TopicOffset(topic="t", offset=2),)
    assert hub.core.consumers.saves == saves + 1
    on_disk = ConsumerRegistry(tmp_path, expiry_seconds=60)
    on_disk.load()
    assert on_disk.get("durable", "d").positions["t"].floor == 2
    client.send(wire.Commit(sub_id=1, ref=42))  # nothing changed since: answered without a save
    assert client.expect(wire.Committed).ref == 42
    assert hub.core.consumers.saves == saves + 1
    hub.close()


def test_commit_refusals(tmp_path: Path) -> None:
    hub = CoreHub(tmp_path)
    live = hub.connect()
    live.send(wire.Sub(sub_id=1, patterns=("t",)))
    live.expect(wire.SubOk)
    live.send(wire.Commit(sub_id=9, ref=1))  # no such subscription: SUB_END, the connection stays
    end = live.expect(wire.SubEnd)
    assert (end.sub_id, end.code) == (9, wire.ErrorCode.UNKNOWN_SUBSCRIPTION)
    live.send(wire.Commit(sub_id=1, ref=2))  # a live subscription keeps no position
    error = live.expect(wire.Error)
    assert (error.code, error.ref) == (wire.ErrorCode.INVALID_ACK, 1)

    old = hub.connect(greet=False)
    old.send(wire.Hello(version=1, client_name="v1"))
    assert old.expect(wire.Welcome).version == 1  # a version 1 client is served as before
    old.send(wire.Commit(sub_id=1, ref=1))
    assert old.expect(wire.Error).code is wire.ErrorCode.UNEXPECTED_FRAME
    hub.close()


def test_commits_waiting_on_one_save_share_it(tmp_path: Path) -> None:
    """Group commit: saves run one at a time (the shell's worker thread); everything that
    arrives meanwhile is answered by the next one."""
    registry = ConsumerRegistry(tmp_path, expiry_seconds=60)
    wanted: list[int] = []
    registry.on_save_wanted = lambda: wanted.append(registry.version)
    answered: list[tuple[str, OSError | None]] = []
    registry.touch()
    registry.when_saved(lambda e: answered.append(("first", e)))
    in_flight = registry.snapshot()  # the saver takes the state as of now...
    for name in ("second", "third"):
        registry.touch()
        registry.when_saved(lambda e, name=name: answered.append((name, e)))  # type: ignore[misc]
    registry.file.write(in_flight[1], in_flight[0])
    registry.saved(in_flight[0], None)  # ...so only the first is answered by it
    assert answered == [("first", None)]
    version, data = registry.snapshot()
    registry.file.write(data, version)
    registry.saved(version, None)  # one more save answers both
    assert answered == [("first", None), ("second", None), ("third", None)]
    assert registry.saves == 2
    assert not registry.file.write(in_flight[1], in_flight[0])  # never backwards


def test_a_failed_save_fails_every_waiting_commit(tmp_path: Path) -> None:
    registry = ConsumerRegistry(tmp_path, expiry_seconds=60)
    registry.on_save_wanted = lambda: None
    errors: list[OSError | None] = []
    registry.touch()
    registry.when_saved(errors.append)
    registry.when_saved(errors.append)
    registry.saved(registry.version, OSError(28, "No space left on device"))
    assert [str(e) for e in errors] == ["[Errno 28] No space left on device"] * 2


# -- real hubs, killed --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["durable", "group"])
def test_a_committed_position_survives_sigkill_right_after_the_answer(
    start_hub: StartHub, tmp_path: Path, kind: str
) -> None:
    """Three rounds: read, ack some, COMMIT, SIGKILL as soon as COMMITTED arrives, restart;
    the subscription resumes exactly at the committed position (the periodic save, every 0.2 s,
    could not have saved it in time: the kill follows the answer at once)."""
    args = ["--data-dir", str(tmp_path / "data")]
    hub = start_hub(*args)
    with sdk.connect_blocking(hub.address) as client:
        for i in range(90):
            client.publish("c.t", b"%d" % i)
        client.flush()
        client.publish_acked("c.t", b"end")
    options = {"durable": "d"} if kind == "durable" else {"group": "g"}
    resume_at = 0
    for round_ in range(3):
        with sdk.connect_blocking(hub.address, reconnect=None) as client, client.subscribe(
            "c.t", start="earliest", ack="manual", **options
        ) as sub:
            got = [sub.next(timeout=10) for _ in range(20)]
            offsets = [m.offset for m in got if m is not None]
            assert offsets[0] == resume_at, (round_, offsets)
            keep = offsets[:15]
            sub.ack([m for m in got if m is not None and m.offset in keep])
            positions = sub.commit(timeout=10)
            kill9(hub)
        assert positions == {"c.t": keep[-1] + 1}
        resume_at = keep[-1] + 1
        hub = start_hub(*args)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_commit_from_the_async_client(start_hub: StartHub, tmp_path: Path, backend: str) -> None:
    hub = start_hub("--data-dir", str(tmp_path / "data"))

    async def scenario() -> dict[str, int]:
        async with sdk.connect(hub.address) as client:
            await client.publish_acked("a.t", b"x")
            async with client.subscribe("a.t", durable="ad", start="earliest", ack="manual") as sub:
                msg = await sub.next(timeout=10)
                assert msg is not None
                await sub.ack(msg)
                return await sub.commit()

    assert anyio.run(scenario, backend=backend) == {"a.t": 1}
