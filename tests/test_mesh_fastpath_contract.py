"""The contract between the mesh's fast paths and py-libp2p's internals (hub/mesh/fastpath.py).

Every private name the fast reader, writer and demux use is listed in
``PRIVATE_NAMES``; these tests check the list is complete (read from their
source) and true (on a real Noise/yamux connection), that anything missing turns
the fast paths off with the reason, and that ``--mesh-plain-io`` works end to end.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import trio

import wire
from hub.mesh import fastpath
from hub.mesh.fastpath import PRIVATE_NAMES, TESTED_LIBP2P_VERSION, FastPathGate, missing_names, stack_of
from tests.support.libp2p_pair import stream_pair
from tests.support.mesh import interest_of, start_mesh, status_of
from tests.support.waiting import await_until

FAST_PATH_MODULES = ["fastread.py", "fastwrite.py", "demux.py"]
MESH_DIR = Path(fastpath.__file__).parent


def private_names_used(path: Path) -> set[str]:
    """``obj._name`` accesses in ``path`` on anything but ``self`` (the module's own state)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            names.add(node.attr)
    return names


def test_every_private_name_the_fast_paths_use_is_listed() -> None:
    listed = {name for names in PRIVATE_NAMES.values() for name in names}
    unlisted = {
        module: sorted(used - listed)
        for module in FAST_PATH_MODULES
        if (used := private_names_used(MESH_DIR / module)) - listed
    }
    assert not unlisted, f"private libp2p names used but not in fastpath.PRIVATE_NAMES: {unlisted}"


async def test_the_listed_names_are_where_the_fast_paths_expect_them() -> None:
    assert fastpath.installed_libp2p_version() == TESTED_LIBP2P_VERSION
    async with stream_pair() as (stream, _incoming):
        objects = stack_of(stream)
        assert objects is not None, "a mesh stream is Noise over yamux over TCP"
        assert missing_names(objects) == []
        assert FastPathGate().reason_not_to(stream) is None


async def test_anything_missing_turns_the_fast_paths_off_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from libp2p.stream_muxer.yamux.yamux import YamuxStream

    async with stream_pair() as (stream, _incoming):
        monkeypatch.delattr(YamuxStream, "_grow_threshold")
        reason = FastPathGate().reason_not_to(stream)
        assert reason is not None and "YamuxStream._grow_threshold" in reason
        monkeypatch.undo()
        monkeypatch.setattr(fastpath, "installed_libp2p_version", lambda: "0.9.0")
        reason = FastPathGate().reason_not_to(stream)
        assert reason is not None and "0.9.0" in reason and TESTED_LIBP2P_VERSION in reason
        monkeypatch.undo()
        monkeypatch.setenv(fastpath.PLAIN_IO_ENV, "1")
        assert "plain I/O was asked for" in (FastPathGate().reason_not_to(stream) or "")


async def test_plain_io_carries_a_link_with_no_fast_read_or_write(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="hub.mesh.session")
    async with trio.open_nursery() as nursery:
        a = await start_mesh(nursery, plain_io=True)
        b = await start_mesh(nursery, plain_io=True)
        await b.connect(a.listen_addrs[0])
        b.announce(["plain"])
        await await_until(lambda: interest_of(a, b) == {"plain"}, timeout=10, what="b's interest at a")
        for seq in range(1, 201):
            a.forward(seq, seq, wire.MessageSet.build(["plain"], [(b"", b"x" * 64)]))
        await await_until(lambda: b.store.messages == 200, timeout=10, what="every forward")  # type: ignore[attr-defined]
        to_b, from_a = status_of(a, b), status_of(b, a)
        assert to_b["writes"] > 0 and to_b["writes_fast"] == 0
        assert from_a["reads"] > 0 and from_a["reads_fast"] == 0
        assert "uses libp2p's plain read/write path: plain I/O was asked for" in caplog.text
        nursery.cancel_scope.cancel()
