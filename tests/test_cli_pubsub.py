"""``pub0sub pub``, ``sub`` and ``status`` as subprocesses against a real hub."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import sdk
from sdk.handshake import DEFAULT_HANDSHAKE_TIMEOUT
from tests.support.nothub import HTTP_400, answering_server, silent_server
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def start_sub(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sdk.cli", "sub", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def wait_for_subscriptions(address: str, count: int, timeout: float = 15.0) -> None:
    """Poll the hub's status until ``count`` subscriptions are open (the subscriber is ready)."""
    with sdk.connect_blocking(address) as client:
        wait_until(lambda: client.status()["subscriptions"] >= count, timeout=timeout,
                   what="the subscriber to subscribe", interval=0.02)  # fmt: skip


def finish(proc: subprocess.Popen[str], timeout: float = 20) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"subscriber did not finish: {out!r} {err!r}") from None
    return proc.returncode, out, err


def test_pub_arguments_to_sub_lines(hub_address: str) -> None:
    proc = start_sub("--hub", hub_address, "--topic", "cli.a", "--topic", "cli.*", "--count", "3")
    try:
        wait_for_subscriptions(hub_address, 1)
        result = cli("pub", "--hub", hub_address, "--topic", "cli.a", "one", "two", "three words")
        assert result.returncode == 0, result.stderr
        code, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, err
    assert out.splitlines() == ["cli.a 0 one", "cli.a 1 two", "cli.a 2 three words"]


def test_pub_stdin_lines_with_key_to_sub_json(hub_address: str) -> None:
    proc = start_sub("--hub", hub_address, "--topic", "j", "--count", "3", "--json")
    try:
        wait_for_subscriptions(hub_address, 1)
        result = cli("pub", "--hub", hub_address, "--topic", "j", "--key", "k1", input="alpha\nbeta\r\ngamma")
        assert result.returncode == 0, result.stderr
        code, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, err
    docs = [json.loads(line) for line in out.splitlines()]
    assert [(d["topic"], d["offset"], d["key"], d["data"]) for d in docs] == [
        ("j", 0, "k1", "alpha"),
        ("j", 1, "k1", "beta"),
        ("j", 2, "k1", "gamma"),
    ]
    assert all(isinstance(d["timestamp"], int) and d["origin"] for d in docs)


def test_pub_ack_prints_offsets(hub_address: str) -> None:
    result = cli("pub", "--hub", hub_address, "--topic", "acked", "--topic", "copy", "--ack", "m1", "m2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["acked@0 copy@0", "acked@1 copy@1"]


def test_pub_headers_to_sub_json(hub_address: str) -> None:
    proc = start_sub("--hub", hub_address, "--topic", "hd", "--count", "2", "--json")
    try:
        wait_for_subscriptions(hub_address, 1)
        result = cli("pub", "--hub", hub_address, "--topic", "hd", "--ack", "-H", "trace=4bf9", "--header", "env=a=b",
                     "with")  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert cli("pub", "--hub", hub_address, "--topic", "hd", "without").returncode == 0
        code, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, err
    docs = [json.loads(line) for line in out.splitlines()]
    expected = [("with", {"trace": "4bf9", "env": "a=b"}), ("without", None)]
    assert [(d["data"], d.get("headers")) for d in docs] == expected
    bad = cli("pub", "--hub", hub_address, "--topic", "hd", "-H", "novalue", "x")
    assert bad.returncode == 2 and "--header takes NAME=VALUE, got 'novalue'" in bad.stderr


def test_status_text_and_json(hub_address: str) -> None:
    cli("pub", "--hub", hub_address, "--topic", "st", "x")
    text = cli("status", "--hub", hub_address)
    assert text.returncode == 0, text.stderr
    assert "connections" in text.stdout and "st" in text.stdout
    doc = cli("status", "--hub", hub_address, "--json")
    assert doc.returncode == 0, doc.stderr
    parsed = json.loads(doc.stdout)
    assert parsed["connections"] == 1  # the status client itself


def test_sub_timeout_exits_cleanly(hub_address: str) -> None:
    result = cli("sub", "--hub", hub_address, "--topic", "quiet", "--timeout", "0.3")
    assert result.returncode == 0 and result.stdout == ""


@pytest.mark.parametrize("command", ["pub", "sub", "status"])
def test_unreachable_hub_is_exit_1_without_traceback(command: str) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        args = (
            ["--hub", address] + ([] if command == "status" else ["--topic", "t"]) + (["x"] if command == "pub" else [])
        )
        result = cli(command, *args)
    assert result.returncode == 1
    assert "cannot connect" in result.stderr and "Traceback" not in result.stderr


def test_usage_errors_are_exit_2(hub_address: str) -> None:
    assert cli("pub", "--hub", hub_address).returncode == 2  # --topic missing
    assert cli("sub", "--hub", hub_address, "--topic", "t", "--start", "yesterday").returncode == 2
    bad_topic = cli("pub", "--hub", hub_address, "--topic", "a.*", "x")
    assert bad_topic.returncode == 2 and "pattern" in bad_topic.stderr and "Traceback" not in bad_topic.stderr
    bad_address = cli("status", "--hub", "nonsense")
    assert bad_address.returncode == 2 and "HOST:PORT" in bad_address.stderr


# -- a port that is not a hub -----------------------------------------------------------------


def _command_args(command: str, address: str) -> list[str]:
    return [command, "--hub", address] + ([] if command == "status" else ["--topic", "t"]) + (
        ["x"] if command == "pub" else [])  # fmt: skip


@pytest.mark.parametrize(
    ("server", "detail"),
    [(lambda: answering_server(HTTP_400), '(it sent "HTTP/1.1 400 Bad Request")'),
     (silent_server, f"(no answer to HELLO within {DEFAULT_HANDSHAKE_TIMEOUT:g}s)")],
    ids=["http-400", "silent"],
)  # fmt: skip
def test_a_port_that_is_not_a_hub_is_named_in_one_line(server: Any, detail: str) -> None:
    with server() as address:
        # The three commands at once: the silent server costs each the handshake timeout.
        procs = {
            command: subprocess.Popen([sys.executable, "-m", "sdk.cli", *_command_args(command, address)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
            for command in ("pub", "sub", "status")
        }  # fmt: skip
        results = {command: finish(proc) for command, proc in procs.items()}
    for command, (code, out, err) in results.items():
        assert code == 1 and out == "", (command, code, out, err)
        assert err == f"pub0sub {command}: {address} did not answer like a pub0sub hub {detail}\n", err
