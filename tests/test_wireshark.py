"""The Wireshark dissector (deploy/wireshark/pub0sub.lua) read by Debian's tshark.

A capture of real hub traffic -- an SDK client talking to a real hub through a relay that
records both directions, written as a pcap on a port the dissector was not told about -- and
a stream holding one of every mesh v1 and v2 frame: for every frame, tshark must show the
same fields with the same values as ``pub0sub decode --json``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import sdk
import wire
from tests.support.hubprocess import HubProcess
from tests.support.pcap import Conversation, write_pcap
from tests.support.recorder import Recorder

ROOT = Path(__file__).resolve().parent.parent
DISSECTOR = ROOT / "deploy" / "wireshark" / "pub0sub.lua"
TSHARK = shutil.which("tshark")

pytestmark = pytest.mark.skipif(
    TSHARK is None, reason="Debian's tshark is not installed (deploy/local.sh test installs it when run as root)"
)

Fields = Counter[tuple[str, str]]
#: JSON lists whose items are dissector fields of a singular name.
SINGULAR = {"topics": "topic", "patterns": "pattern"}
#: Fields that hold hub ids: JSON writes 16 hex digits, the dissector a hex number.
HUB_IDS = {"hub_id", "origin"}


def json_fields(frame: dict[str, Any]) -> Fields:
    """A decoded frame's fields as (dissector field, value) pairs; enum names checked apart."""
    out: Fields = Counter()

    def walk(key: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(k, v)
        elif isinstance(value, list):
            for item in value:
                walk(SINGULAR.get(key, key), item)
        elif not key.endswith("_name") or key in ("client_name", "hub_name"):
            out[(f"pub0sub.{key}", normal(key, value))] += 1

    for key, value in frame.items():
        if key != "offset":  # where the frame starts in the decoder's input, not a field
            walk(key, value)
    return out


def normal(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if key in HUB_IDS:
        return str(int(value, 16) if isinstance(value, str) else int(value))
    return str(value)


def pdml_frames(pdml: str) -> dict[int, list[tuple[Fields, dict[str, str]]]]:
    """Per TCP source port, each pub0sub frame tshark shows, in order: its fields, and the
    enum fields' display texts."""
    frames: dict[int, list[tuple[Fields, dict[str, str]]]] = {}
    for packet in ET.fromstring(pdml).iter("packet"):
        port = next(int(f.get("show", "0")) for f in packet.iter("field") if f.get("name") == "tcp.srcport")
        for proto in packet.iter("proto"):
            if proto.get("name") != "pub0sub":
                continue
            fields: Fields = Counter()
            shown: dict[str, str] = {}
            for f in proto.iter("field"):
                name = f.get("name", "")
                if not name.startswith("pub0sub."):
                    continue
                kind_bytes = name.split(".")[1] in ("key", "data", "token", "document")
                value = f.get("value", "") if kind_bytes else f.get("show", "")
                if name.split(".")[1] in HUB_IDS:
                    value = str(int(value, 16))
                elif name == "pub0sub.opcode":
                    value = str(int(value, 0))  # shown in hex
                fields[(name, value)] += 1
                shown[name] = f.get("showname", "")
            frames.setdefault(port, []).append((fields, shown))
    return frames


def decoded(data: bytes, tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "stream.bin"
    path.write_bytes(data)
    out = subprocess.run([sys.executable, "-m", "wire", "--json", "--bytes", "hex", str(path)],
                         capture_output=True, text=True, check=True, cwd=ROOT)  # fmt: skip
    return [json.loads(line) for line in out.stdout.splitlines()]


def tshark(pcap: Path) -> str:
    assert TSHARK is not None
    out = subprocess.run([TSHARK, "-n", "-X", f"lua_script:{DISSECTOR}", "-r", str(pcap), "-T", "pdml"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Lua: Error" not in out.stderr, out.stderr
    return out.stdout


def assert_same(stream: bytes, shown: list[tuple[Fields, dict[str, str]]], tmp: Path, what: str) -> int:
    frames = decoded(stream, tmp)
    assert len(shown) == len(frames), f"{what}: tshark shows {len(shown)} frames, decode {len(frames)}"
    for i, (frame, (fields, names)) in enumerate(zip(frames, shown, strict=True)):
        assert fields == json_fields(frame), f"{what} frame {i} ({frame['name']})"
        for key, name in frame.items():
            if key.endswith("_name") and key not in ("client_name", "hub_name"):
                assert name in names[f"pub0sub.{key[:-5]}"], (what, i, key)
    return len(frames)


@pytest.fixture
def recorded_session(start_hub: Callable[..., HubProcess], tmp_path: Path) -> Iterator[list[tuple[bool, bytes]]]:
    """A real client session through the recorder: most client frames, both ways."""
    # PINGs come after 0.2 s idle, but a client is dead only after 5 s of silence: a loaded machine
    # that answers a PING late must not turn the capture's UNSUB into a heartbeat-timeout ERROR.
    hub = start_hub("--data-dir", str(tmp_path / "d"), "--heartbeat-interval", "0.2", "--heartbeat-misses", "25")
    recorder = Recorder((hub.host, hub.port))
    with sdk.connect_blocking(f"127.0.0.1:{recorder.port}", name="capture") as client:
        live = client.subscribe("cap.*")
        durable = client.subscribe("cap.a", durable="d1", ack="manual", start="earliest", credit=100)
        client.publish("cap.a", b"first", key=b"k1")
        client.publish_acked(["cap.a", "cap.b"], b"\x00binary\xff")
        assert live.next(timeout=10) is not None
        got = durable.next(timeout=10)
        assert got is not None
        durable.ack(got)
        live.add("cap2.>")
        client.status()
        time.sleep(0.6)  # idle: the hub's heartbeat PING, and the client's answer
        live.close()
    yield recorder.close()


def test_tshark_shows_what_decode_shows(recorded_session: list[tuple[bool, bytes]], tmp_path: Path) -> None:
    mesh_frames = [
        wire.Subscribe(topics=("orders.eu", "orders.us")), wire.SubscribeAck(success=True),
        wire.Unsubscribe(topics=("orders.us",)), wire.UnsubscribeAck(success=False),
        wire.Forward(topics=("orders.eu",), data=b"v1 message"), wire.PING, wire.PONG,
        wire.MeshHello(hub_id=0xF00DCAFE00000001, positions=(wire.ResumePosition(origin=7, seq=42),)),
        wire.ForwardBatch(origin=0xF00DCAFE00000001, sets=(wire.ForwardSet(
            origin_seq=1, timestamp=1_700_000_000_000_000,
            messages=wire.MessageSet.build(["orders.eu"], [(b"", b"a"), (b"k", b"b")])),)),
        wire.ForwardAck(origin=0xF00DCAFE00000001, seq=2),
        wire.SubEnd(sub_id=3, code=wire.ErrorCode.OUT_OF_CAPACITY, reason="cannot keep up"),
        wire.Gap(sub_id=3, topic="orders.eu", first_offset=10, dropped=5),
        wire.Error(code=wire.ErrorCode.UNKNOWN_OPCODE, reason="unknown opcode 127", ref=0),
    ]  # fmt: skip
    mesh_stream = b"".join(f.encode() for f in mesh_frames)
    client_port, hub_port, mesh_port = 51234, 7555, 9999  # none of them 7420: found by the heuristic
    pcap = tmp_path / "capture.pcap"
    split = [(True, mesh_stream[:37]), (True, mesh_stream[37:])]  # a frame across two segments
    write_pcap(pcap, [
        Conversation(("127.0.0.1", client_port), ("127.0.0.1", hub_port), recorded_session),
        Conversation(("127.0.0.1", 40000), ("127.0.0.1", mesh_port), split),
    ])  # fmt: skip
    shown = pdml_frames(tshark(pcap))
    to_hub = b"".join(data for from_client, data in recorded_session if from_client)
    to_client = b"".join(data for from_client, data in recorded_session if not from_client)
    sent = assert_same(to_hub, shown.get(client_port, []), tmp_path, "client to hub")
    received = assert_same(to_client, shown.get(hub_port, []), tmp_path, "hub to client")
    assert assert_same(mesh_stream, shown.get(40000, []), tmp_path, "mesh frames") == len(mesh_frames)
    names = {frame["name"] for frame in decoded(to_hub + to_client, tmp_path)}
    assert {"HELLO", "WELCOME", "SUB", "SUB_OK", "PUBLISH", "PUBLISH_ACK", "DELIVER", "ACK", "SUB_UPDATE",
            "STATUS", "STATUS_REPLY", "HEARTBEAT", "UNSUB"} <= names, names  # fmt: skip
    assert sent > 5 and received > 5


def test_the_dissector_knows_wire_s_enums() -> None:
    lua = DISSECTOR.read_text()
    for enum in (wire.ErrorCode, wire.StartPosition, wire.AckMode, wire.SlowConsumerPolicy, wire.UpdateOp,
                 wire.AckStatus):  # fmt: skip
        for member in enum:
            assert f'[{int(member)}] = "{member.name}"' in lua, f"{enum.__name__}.{member.name}"
    for opcode in wire.Opcode:
        if opcode < 0x40:
            assert f'[0x{opcode:02X}] = "{opcode.name}"' in lua, opcode.name
