"""``--mesh-dump DIR``: two real hubs write their mesh streams' plaintext, ``pub0sub decode`` reads it.

Mesh v2 runs inside Noise, so this is how an operator sees its frames (docs/decoder.md).  The
hubs are real processes linked over libp2p; what a client published on one must show up in
the dump as the FORWARD_BATCH that carried it -- in the sender's ``-sent`` file and, the same
frames, in the receiver's ``-received`` file -- and the receiver's acknowledgement in the
other direction.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import sdk
from hub.mesh.dump import RECEIVED_SUFFIX, SENT_SUFFIX
from tests.support.cluster import Cluster
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
PAYLOADS = [b"dumped #1", b"dumped #2", b"dumped #3"]


def decode(path: Path) -> list[dict[str, Any]]:
    """``pub0sub decode --json FILE``, which must read the whole file."""
    done = subprocess.run([sys.executable, "-m", "wire", "--json", str(path)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, f"{path.name}: {done.stderr}"
    return [json.loads(line) for line in done.stdout.splitlines()]


def without_offsets(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in f.items() if k != "offset"} for f in frames]


def carries_the_payloads(frames: list[dict[str, Any]]) -> bool:
    text = json.dumps(frames)
    return all(p.decode() in text for p in PAYLOADS) and '"dump.t"' in text


@pytest.mark.slow
def test_a_mesh_dump_decodes_to_the_frames_that_crossed(tmp_path: Path) -> None:
    dumps = {name: tmp_path / f"dump-{name}" for name in ("a", "b")}
    with Cluster(tmp_path) as cluster:
        (a,) = cluster.start(1, args=["--mesh-dump", str(dumps["a"])])
        b = cluster.add(a, args=["--mesh-dump", str(dumps["b"])])
        cluster.wait_converged()
        with sdk.connect_blocking(b.address) as sub_client, sdk.connect_blocking(a.address) as pub_client:
            sub = sub_client.subscribe("dump.t")
            cluster.wait_interest(a, "dump.t", b)
            for payload in PAYLOADS:
                pub_client.publish("dump.t", payload, key=b"k")
            pub_client.flush()
            assert [sub.next(timeout=10).data for _ in PAYLOADS] == PAYLOADS  # type: ignore[union-attr]
            wait_until(lambda: (a.peer(b) or {}).get("acks_received", 0) > 0, timeout=10,
                       what="b to acknowledge the forwards")  # fmt: skip
    # The hubs are stopped: every session has ended and closed its files.

    for directory in dumps.values():
        files = sorted(directory.iterdir())
        assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)  # payloads inside
    a_sent = {f: decode(f) for f in dumps["a"].glob(f"*-{b.peer_id[-8:]}{SENT_SUFFIX}")}
    b_received = {f: decode(f) for f in dumps["b"].glob(f"*-{a.peer_id[-8:]}{RECEIVED_SUFFIX}")}
    b_sent = {f: decode(f) for f in dumps["b"].glob(f"*-{a.peer_id[-8:]}{SENT_SUFFIX}")}
    # (Two sessions may have started, when both hubs dialled at once: the one that carried it counts.)
    [sent] = [frames for frames in a_sent.values() if carries_the_payloads(frames)]
    [received] = [frames for frames in b_received.values() if carries_the_payloads(frames)]

    # Each file is one direction of the stream from its first byte: v2 starts with MESH_HELLO.
    assert sent[0]["name"] == received[0]["name"] == "MESH_HELLO"
    assert sent[0]["hub_id"] == a.hub_id
    # What a wrote is what b read, frame for frame (b may have read less before the end).
    assert without_offsets(received) == without_offsets(sent)[: len(received)]
    forwards = [f for f in sent if f["name"] == "FORWARD_BATCH"]
    assert forwards and carries_the_payloads(forwards)
    # b acknowledged them on its side of the same link, and says who it is first.
    [b_frames] = [frames for frames in b_sent.values() if any(f["name"] == "FORWARD_ACK" for f in frames)]
    assert b_frames[0]["name"] == "MESH_HELLO" and b_frames[0]["hub_id"] == b.hub_id


def test_mesh_dump_needs_a_mesh(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "hub", "--listen", "127.0.0.1:0", "--mesh-dump", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert done.returncode == 2 and "mesh_dump needs a mesh: set mesh_listen too" in done.stderr, done.stderr
