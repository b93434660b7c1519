"""``client.kv(topic)``: get/put/delete/keys/watch against a real hub with a compacted topic,
with the async client and the blocking one (docs/compaction.md, "the KV view")."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.abc
import pytest

import sdk
from tests.support.compacting import StartHub, compacting_hub, wait_compacted


@pytest.fixture
def kv_hub(start_hub: StartHub, tmp_path: Path) -> str:
    return compacting_hub(start_hub, tmp_path / "data").address


async def test_async_get_put_delete_keys(kv_hub: str) -> None:
    async with sdk.connect(kv_hub) as client:
        for r in range(40):  # history enough for several segments and passes
            for k in range(10):
                await client.publish("kv.cfg", b"r%d" % r, key=b"k%d" % k)
        await client.publish_acked("kv.cfg", b"gone-soon", key=b"dead")
        async with client.kv("kv.cfg") as kv:
            assert await kv.get("k3") == b"r39"
            assert await kv.keys() == sorted([b"k%d" % k for k in range(10)] + [b"dead"])
            assert await kv.keys(prefix="k1") == [b"k1"]
            assert kv.caught_up
            offset = await kv.put("k3", b"new")
            assert await kv.get(b"k3") == b"new"  # read your own write
            entry = await kv.entry("k3")
            assert entry is not None and entry.offset == offset
            await kv.delete("dead")
            assert await kv.get("dead") is None
            assert b"dead" not in await kv.keys()
            assert await kv.get("never") is None
            with pytest.raises(ValueError, match="delete"):
                await kv.put("k1", b"")
    await anyio.to_thread.run_sync(lambda: wait_compacted(kv_hub))
    # A fresh view (after compaction) opens on the current values.
    async with sdk.connect(kv_hub) as client, client.kv("kv.cfg") as kv:
        assert await kv.get("k3") == b"new"
        assert await kv.get("k0") == b"r39"
        assert await kv.get("dead") is None


async def test_async_watch_a_key_and_a_prefix(kv_hub: str) -> None:
    async with sdk.connect(kv_hub) as client, client.kv("kv.cfg") as kv:
        await kv.put("app.mode", b"slow")
        seen: list[tuple[bytes, bytes | None]] = []
        prefixed: list[bytes] = []
        watching = anyio.Event()  # set once the key's watch delivered the current value: it is open

        async def watch_key(task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            task_status.started()
            async for change in kv.watch("app.mode", start="earliest"):
                seen.append((change.key, change.value))
                watching.set()
                if change.deleted:
                    return

        async def watch_prefix(task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            task_status.started()
            async for change in kv.watch(prefix="db.", start="earliest"):
                prefixed.append(change.key)
                if len(prefixed) == 2:
                    return

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                await tg.start(watch_key)
                await tg.start(watch_prefix)
                await watching.wait()
                await kv.put("other", b"x")
                await kv.put("db.host", b"h")
                await kv.put("app.mode", b"fast")
                await kv.put("db.port", b"1")
                await kv.delete("app.mode")
        assert seen == [(b"app.mode", b"slow"), (b"app.mode", b"fast"), (b"app.mode", None)]
        assert prefixed == [b"db.host", b"db.port"]


def test_blocking_kv(kv_hub: str) -> None:
    with sdk.connect_blocking(kv_hub) as client:
        with client.kv("kv.blk") as kv:
            assert kv.get("a") is None and kv.keys() == []
            kv.put("a", b"1")
            kv.put("b", b"2")
            kv.put("a", b"3")
            assert (kv.get("a"), kv.get("b")) == (b"3", b"2")
            kv.delete("b")
            assert kv.keys() == [b"a"]
            changes = kv.watch("a", start="earliest", timeout=1.0)
            assert [(c.key, c.value) for c in changes] == [(b"a", b"1"), (b"a", b"3")]
        # Another client's write shows in a view that is already open.
        with client.kv("kv.blk") as kv, sdk.connect_blocking(kv_hub) as other:
            other.publish_acked("kv.blk", b"4", key=b"a")
            assert until(lambda: kv.get("a") == b"4")


def until(done: Callable[[], bool], within: float = 10.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if done():
            return True
        time.sleep(0.02)
    return False
