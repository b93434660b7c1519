"""What a NATS or Redis user expects of the command line, through the real commands and real hubs.

``--version``; ``sub --start TIME``, ``--durable``, ``--group``, ``--ack``; an offset with a pattern;
``hub --help`` defaults; the hub's INFO lines for mesh peers; ``status`` compact, ``--wide`` and
``--json``; hub ids as 16 hex digits in ``decode``.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

import sdk
import wire
from tests.support.command import pub0sub
from tests.support.hubprocess import HubProcess, hub_status, mesh_lines
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
StartHub = Callable[..., HubProcess]


def sub_lines(*args: str) -> list[str]:
    result = pub0sub("sub", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


#: Between two STATUS checks: each is a fresh client connection to the hub under test.
STATUS_POLL = 0.05


def publish_each(address: str, topic: str, datas: list[bytes]) -> list[sdk.PublishAck]:
    """One PUBLISH per message (each its own batch in the log)."""
    with sdk.connect_blocking(address, reconnect=None) as client:
        return [client.publish_acked(topic, data, timeout=30) for data in datas]


# -- --version ------------------------------------------------------------------------------


def test_version_is_the_installed_distributions() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for flag in ("--version", "-V"):
        result = pub0sub(flag)
        assert result.returncode == 0 and result.stderr == ""
        assert result.stdout == f"pub0sub {importlib.metadata.version('pub0sub')}\n" == f"pub0sub {pyproject}\n"


# -- sub: where to start --------------------------------------------------------------------


def test_sub_start_at_a_time(start_hub: StartHub, tmp_path: Path) -> None:
    hub = start_hub("--data-dir", str(tmp_path / "data"))
    first = publish_each(hub.address, "t", [b"before"])[0]

    def publish_later() -> sdk.PublishAck | None:
        ack = publish_each(hub.address, "t", [b"at"])[0]
        return ack if ack.timestamp > first.timestamp else None  # the hub's µs clock must have moved on

    later = wait_until(publish_later, timeout=10, what="a publish stamped after the first")
    at = dt.datetime.fromtimestamp(later.timestamp / 1e6, dt.UTC).isoformat(timespec="microseconds")
    lines = sub_lines("--hub", hub.address, "--topic", "t", "--start", at, "--count", "1")
    assert lines == [f"t {later.offsets['t']} at"]
    # The same instant in another zone is the same start; Z is accepted as UTC.
    plus2 = dt.datetime.fromtimestamp(later.timestamp / 1e6, dt.timezone(dt.timedelta(hours=2)))
    assert sub_lines("--hub", hub.address, "--topic", "t", "--start", plus2.isoformat(), "--count", "1") == lines
    zulu = at.replace("+00:00", "Z")
    assert sub_lines("--hub", hub.address, "--topic", "t", "--start", zulu, "--count", "1") == lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic", "orders.*", "--start", "3"], "--start 3 cannot apply to the pattern 'orders.*': an offset is"),
        (["--topic", "a", "--topic", "b.>", "--start", "0"], "--start 0 cannot apply to the pattern 'b.>'"),
        (["--topic", "a", "--start", "2024-05-01T12:00"], "--start 2024-05-01T12:00: add a UTC offset (Z or +02:00)"),
        (["--topic", "a", "--start", "yesterday"], "--start must be latest, earliest, an offset or an ISO 8601 time"),
        (["--topic", "a", "--group", "g", "--ack", "none"], "a consumer group needs ack='auto' or ack='manual'"),
    ],
)
def test_sub_says_why_a_start_or_ack_cannot_apply(hub_address: str, args: list[str], message: str) -> None:
    result = pub0sub("sub", "--hub", hub_address, *args, "--timeout", "5")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"pub0sub sub: {message}") and result.stderr.count("\n") == 1


# -- sub: durable, group, ack ------------------------------------------------------------


def test_sub_durable_resumes_where_it_stopped(start_hub: StartHub, tmp_path: Path) -> None:
    hub = start_hub("--data-dir", str(tmp_path / "data"))
    publish_each(hub.address, "jobs", [b"j0", b"j1", b"j2", b"j3", b"j4"])
    common = ["--hub", hub.address, "--topic", "jobs", "--durable", "worker"]
    assert sub_lines(*common, "--start", "earliest", "--count", "2") == ["jobs 0 j0", "jobs 1 j1"]
    # Away: the hub keeps the name's position; back: it resumes there (no --start needed).
    doc = hub_status(hub.address)
    assert doc["durables"] == [{"name": "worker", "attached": False, "positions": {"jobs": 2}}]
    assert sub_lines(*common, "--count", "3") == ["jobs 2 j2", "jobs 3 j3", "jobs 4 j4"]


def test_sub_group_of_two_shares_the_messages(start_hub: StartHub, tmp_path: Path) -> None:
    hub = start_hub("--data-dir", str(tmp_path / "data"))
    argv = [sys.executable, "-m", "sdk.cli", "sub", "--hub", hub.address, "--topic", "work", "--group", "g",
            "--start", "earliest", "--json", "--timeout", "3"]  # fmt: skip
    members = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
               for _ in range(2)]  # fmt: skip
    try:
        wait_until(lambda: hub_status(hub.address)["subscriptions_by_kind"]["group"] == 2, timeout=30,
                   what="both members to join", interval=STATUS_POLL)  # fmt: skip
        publish_each(hub.address, "work", [f"w{i}".encode() for i in range(20)])
        outputs = [m.communicate(timeout=60) for m in members]
    finally:
        for m in members:
            if m.poll() is None:
                m.kill()
                m.wait()
    assert [m.returncode for m in members] == [0, 0], [err for _, err in outputs]
    got = [[json.loads(line)["offset"] for line in out.splitlines()] for out, _ in outputs]
    assert all(got), got  # round robin: each member took some
    assert sorted(got[0] + got[1]) == list(range(20))  # each message to exactly one member


def test_sub_manual_ack_acknowledges_what_it_printed(start_hub: StartHub, tmp_path: Path) -> None:
    hub = start_hub("--data-dir", str(tmp_path / "data"), "--ack-wait-seconds", "1")
    publish_each(hub.address, "tasks", [b"t0", b"t1", b"t2"])
    common = ["--hub", hub.address, "--topic", "tasks", "--group", "g"]
    lines = sub_lines(*common, "--ack", "manual", "--start", "earliest", "--count", "3")
    assert lines == ["tasks 0 t0", "tasks 1 t1", "tasks 2 t2"]
    # A member that leaves hands its unacknowledged messages back to the group at once, and the
    # group's ack wait (1 s) is shorter than this member's patience: nothing comes back, so all
    # three were acknowledged.
    assert sub_lines(*common, "--timeout", "2") == []
    publish_each(hub.address, "tasks", [b"t3"])
    assert sub_lines(*common, "--ack", "manual", "--count", "1") == ["tasks 3 t3"]


# -- hub --help and the hub's log ----------------------------------------------------------


def test_every_hub_option_has_help_and_its_default() -> None:
    result = subprocess.run([sys.executable, "-m", "hub", "--help"], capture_output=True, text=True, cwd=ROOT,
                            timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    body = result.stdout.split("options:", 1)[1]
    entries = re.split(r"\n  (?=-)", "\n" + body)[1:]
    options = {entry.split()[0].rstrip(","): " ".join(entry.split()) for entry in entries}
    assert len(options) > 25
    missing = [flag for flag, text in options.items() if flag != "-h" and "(default: " not in text]
    assert missing == []
    assert "(default: 1048576 = 1 MiB)" in options["--max-body"]
    assert "(default: 127.0.0.1:7420)" in options["--listen"]
    assert "(default: INFO)" in options["--log-level"]
    assert "(default: 604800 = 7 days)" in options["--consumer-expiry-seconds"]


def test_hub_logs_mesh_peers_linking_and_leaving_at_info_by_default(start_hub: StartHub) -> None:
    mesh = ["--mesh-listen", "/ip4/127.0.0.1/tcp/0", "--no-discovery"]
    first = start_hub(*mesh, "--name", "hub-1")
    _, first_addr = mesh_lines(first)
    second = start_hub(*mesh, "--name", "hub-2", "--bootstrap", first_addr)
    _, second_addr = mesh_lines(second)
    first_peer, second_peer = first_addr.rsplit("/", 1)[1], second_addr.rsplit("/", 1)[1]
    first_port = first_addr.split("/tcp/")[1].split("/")[0]

    wait_until(lambda: f"mesh peer {second_peer} linked" in first.stderr_text(), timeout=30,
               what="hub-1 to log the link")  # fmt: skip
    wait_until(lambda: f"mesh peer {first_peer} linked" in second.stderr_text(), timeout=30,
               what="hub-2 to log the link")  # fmt: skip
    (outbound,) = [line for line in second.stderr_text().splitlines() if "linked" in line]
    assert f" hub-2 INFO hub.mesh: mesh peer {first_peer} linked: outbound link to 127.0.0.1:{first_port}" in outbound
    (inbound,) = [line for line in first.stderr_text().splitlines() if "linked" in line]
    assert re.search(rf" hub-1 INFO .*mesh peer {second_peer} linked: inbound link from 127\.0\.0\.1:\d+", inbound)

    second.stop()
    wait_until(lambda: f"mesh peer {second_peer} left" in first.stderr_text(), timeout=30,
               what="hub-1 to log the leave")  # fmt: skip
    (left,) = [line for line in first.stderr_text().splitlines() if " left: " in line]
    assert " INFO " in left and "inbound link from 127.0.0.1:" in left and "ended (peer_closed)" in left
    # The structured keys: which event, which peer, why.
    assert left.endswith(f"event=mesh_link_down peer={second_peer} reason=peer_closed"), left


# -- status ---------------------------------------------------------------------------------


def test_status_compact_wide_and_json(start_hub: StartHub, tmp_path: Path) -> None:
    mesh = ["--mesh-listen", "/ip4/127.0.0.1/tcp/0", "--no-discovery"]
    first = start_hub(*mesh, "--name", "hub-1", "--data-dir", str(tmp_path / "one"))
    first_id, first_addr = mesh_lines(first)
    second = start_hub(*mesh, "--name", "hub-2", "--bootstrap", first_addr)
    second_id, _ = mesh_lines(second)
    wait_until(lambda: any(p["connected"] for p in hub_status(first.address)["mesh"]["peers"]), timeout=30,
               what="the link", interval=STATUS_POLL)  # fmt: skip
    publish_each(first.address, "orders", [b"x" * 1000] * 3)
    durable = pub0sub("sub", "--hub", first.address, "--topic", "orders", "--durable", "d", "--start", "earliest",
                      "--count", "3")  # fmt: skip
    assert durable.returncode == 0, durable.stderr
    live = subprocess.Popen([sys.executable, "-m", "sdk.cli", "sub", "--hub", first.address, "--topic", "orders"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)  # fmt: skip
    try:
        wait_until(lambda: hub_status(first.address)["subscriptions"] == 1, timeout=30, what="the live subscriber",
                   interval=STATUS_POLL)  # fmt: skip
        _check_status_views(first, first_id, second_id)
    finally:
        live.kill()
        live.wait()


def _check_status_views(first: HubProcess, first_id: str, second_id: str) -> None:
    compact = pub0sub("status", "--hub", first.address)
    assert compact.returncode == 0, compact.stderr
    lines = compact.stdout.splitlines()
    # One screen; only the data directory's path may be as long as it is.
    assert len(lines) <= 30 and max(len(line) for line in lines if not line.startswith("data ")) <= 100
    fields = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in lines if "  " in line}
    assert fields["hub"] == f"hub-1  id {first_id}  pid {first.pid}"
    assert fields["address"] == first.address
    assert re.fullmatch(r"\d+\.\ds|\d+m \d\ds", fields["uptime"])
    assert re.fullmatch(r"3 \(2\.9\d KiB\), now \d+\.\d/s", fields["messages in"])  # 3 x 1000 B + headers
    assert fields["subscriptions"] == "1: 1 live, 0 follower, 0 durable, 0 group"
    assert fields["consumers"] == "1 durable (0 attached)"
    assert fields["mesh"].startswith("cluster default, 1 of 1 peer linked")
    (peer,) = [line for line in lines if line.startswith(second_id)]
    assert peer.split()[1].startswith("127.0.0.1:") and "linked, v2, inbound" in peer

    wide = pub0sub("status", "--hub", first.address, "--wide")
    assert wide.returncode == 0 and "counters:" in wide.stdout and "connections_total" in wide.stdout
    doc = json.loads(pub0sub("status", "--hub", first.address, "--json").stdout)
    assert doc["hub_id"] == first_id and doc["name"] == "hub-1" and doc["counters"]["messages_in"] == 3
    assert doc["subscriptions_by_kind"] == {"live": 1, "follower": 0, "durable": 0, "group": 0}
    assert pub0sub("status", "--hub", first.address, "--wide", "--json").returncode == 2


def test_status_compact_of_a_hub_without_data_or_mesh(hub_address: str) -> None:
    result = pub0sub("status", "--hub", hub_address)
    assert result.returncode == 0, result.stderr
    assert "data           none: memory only, live subscriptions only" in result.stdout
    assert "mesh           off (no --mesh-listen)" in result.stdout


# -- decode: hub ids --------------------------------------------------------------------------


def test_decode_shows_hub_ids_as_16_hex_digits(tmp_path: Path) -> None:
    batch = wire.RecordBatch(topic="t", base_offset=0, timestamp=1, origin=0xF00DCAFE00000001, origin_seq=1,
                             count=1, records=wire.encode_record(b"", b"x"))  # fmt: skip
    frames = [
        wire.LogBatch.create(append_ts=2, producer_id=0, producer_seq=0, batch=batch),
        wire.Welcome(version=1, hub_id=0xB0B, max_body=1024, heartbeat_ms=5000),
        wire.ForwardAck(origin=0xB0B, seq=7),
    ]
    capture = tmp_path / "capture.bin"
    capture.write_bytes(b"".join(f.encode() for f in frames))
    plain = pub0sub("decode", str(capture))
    assert plain.returncode == 0, plain.stderr
    assert "origin=f00dcafe00000001" in plain.stdout
    assert "hub_id=0000000000000b0b" in plain.stdout and "origin=0000000000000b0b" in plain.stdout
    assert "origin: f00dcafe00000001" in pub0sub("decode", "-v", str(capture)).stdout
    docs = [json.loads(line) for line in pub0sub("decode", "--json", str(capture)).stdout.splitlines()]
    assert docs[0]["batch"]["origin"] == "f00dcafe00000001"
    assert docs[1]["hub_id"] == docs[2]["origin"] == "0000000000000b0b"
