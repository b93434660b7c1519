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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import sdk
from hub.mesh.dump import RECEIVED_SUFFIX, SENT_SUFFIX
from tests.support.cluster import Cluster, Hub
from tests.support.pcap import Conversation, write_pcap
from tests.support.waiting import wait_until
from tests.test_wireshark import TSHARK, assert_same, pdml_frames, tshark

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


@dataclass
class Dumped:
    dumps: dict[str, Path]
    a: Hub
    b: Hub


@pytest.fixture(scope="module")
def dumped(tmp_path_factory: pytest.TempPathFactory) -> Dumped:
    """Two real hubs with --mesh-dump; a client publishes on a, one subscribes on b; then both stop."""
    base = tmp_path_factory.mktemp("mesh-dump")
    dumps = {name: base / f"dump-{name}" for name in ("a", "b")}
    with Cluster(base) as cluster:
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
    return Dumped(dumps, a, b)


def the_session(directory: Path, peer: Hub) -> tuple[Path, Path]:
    """(sent, received) files of the session with ``peer`` that carried the payloads."""
    # (Two sessions may have started, when both hubs dialled at once: the one that carried it counts.)
    for sent in directory.glob(f"*-{peer.peer_id[-8:]}{SENT_SUFFIX}"):
        received = sent.with_name(sent.name.removesuffix(SENT_SUFFIX) + RECEIVED_SUFFIX)
        if carries_the_payloads(decode(sent)) or carries_the_payloads(decode(received)):
            return sent, received
    raise AssertionError(f"no session with {peer.name} in {directory} carried the payloads")


@pytest.mark.slow
@pytest.mark.v2_only  # the dump is read for v2's FORWARD_BATCH and FORWARD_ACK
def test_a_mesh_dump_decodes_to_the_frames_that_crossed(dumped: Dumped) -> None:
    dumps, a, b = dumped.dumps, dumped.a, dumped.b
    for directory in dumps.values():
        files = sorted(directory.iterdir())
        assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)  # payloads inside
    a_sent, _ = the_session(dumps["a"], b)
    b_sent, b_received = the_session(dumps["b"], a)
    sent, received = decode(a_sent), decode(b_received)
    # Each file is one direction of the stream from its first byte: v2 starts with MESH_HELLO.
    assert sent[0]["name"] == received[0]["name"] == "MESH_HELLO"
    assert sent[0]["hub_id"] == a.hub_id
    # What a wrote is what b read, frame for frame (b may have read less before the end).
    assert without_offsets(received) == without_offsets(sent)[: len(received)]
    forwards = [f for f in sent if f["name"] == "FORWARD_BATCH"]
    assert forwards and carries_the_payloads(forwards)
    # b acknowledged them on its side of the same link, and says who it is first.
    b_frames = decode(b_sent)
    assert b_frames[0]["name"] == "MESH_HELLO" and b_frames[0]["hub_id"] == b.hub_id
    assert any(f["name"] == "FORWARD_ACK" for f in b_frames)


@pytest.mark.slow
@pytest.mark.skipif(TSHARK is None, reason="Debian's tshark is not installed (deploy/local.sh test installs it)")
@pytest.mark.v2_only
def test_the_dissector_reads_a_mesh_dump_as_decode_does(dumped: Dumped, tmp_path: Path) -> None:
    """The dump's two directions as one TCP conversation in a pcap: tshark with the dissector shows
    every frame with the fields ``pub0sub decode --json`` shows (as for client captures)."""
    sent, received = the_session(dumped.dumps["a"], dumped.b)
    out, back = sent.read_bytes(), received.read_bytes()
    pcap = tmp_path / "mesh.pcap"
    write_pcap(pcap, [Conversation(("127.0.0.1", 41000), ("127.0.0.1", 9421), [(True, out), (False, back)])])
    shown = pdml_frames(tshark(pcap))
    assert assert_same(out, shown.get(41000, []), tmp_path, "a to b") >= 3
    assert assert_same(back, shown.get(9421, []), tmp_path, "b to a") >= 2


def test_mesh_dump_needs_a_mesh(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "hub", "--listen", "127.0.0.1:0", "--mesh-dump", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert done.returncode == 2 and "mesh_dump needs a mesh: set mesh_listen too" in done.stderr, done.stderr
