"""``pub0sub hub`` as a process: address on stdout, config sources, garbage, signals."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import wire
from hub.config import load_config
from tests.support.hubprocess import HubProcess

StartHub = Callable[..., HubProcess]


def status(address: str) -> dict[str, object]:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(wire.Hello(client_name="t").encode() + wire.Status().encode())
        decoder = wire.FrameDecoder(accept=wire.HUB_TO_CLIENT_OPCODES, limits=wire.Limits(max_body=16 << 20))
        while True:
            decoder.feed(s.recv(65536))
            for frame in decoder:
                if isinstance(frame, wire.StatusReply):
                    return dict(json.loads(frame.document))


def test_config_sources_in_order(tmp_path: Path) -> None:
    toml = tmp_path / "hub.toml"
    toml.write_text('[hub]\nname = "from-file"\nmax-body = 2048\nheartbeat_interval = 2.5\n')
    config = load_config(file=toml, env={"PUB0SUB_HUB_MAX_BODY": "4096"}, overrides={"heartbeat_interval": 1.0})
    assert (config.name, config.max_body, config.heartbeat_interval) == ("from-file", 4096, 1.0)
    with pytest.raises(ValueError, match="unknown setting"):
        load_config(file=None, env={"PUB0SUB_HUB_MAX_BODDY": "1"})
    toml.write_text("[hub]\ncolour = 'blue'\n")
    with pytest.raises(ValueError, match="colour"):
        load_config(file=toml, env={})


def test_port_zero_address_is_printed_and_status_answers(start_hub: StartHub, tmp_path: Path) -> None:
    toml = tmp_path / "hub.toml"
    toml.write_text('[hub]\nname = "alpha"\n')
    hub = start_hub("--config", str(toml), env={"PUB0SUB_HUB_MAX_CONNECTIONS": "50"})
    assert hub.port > 0
    doc = status(hub.address)
    assert doc["name"] == "alpha" and doc["listen"] == hub.address


def test_garbage_from_many_connections_does_not_hurt(start_hub: StartHub) -> None:
    # 300 connections from 127.0.0.1 in a tight loop: past the per-address connection rate limit's
    # burst, which would refuse the rest before their garbage is decoded (test_connect_rate.py).
    hub = start_hub("--max-connects-per-second-per-address", "0")
    host, port = hub.host, hub.port
    junk = [
        b"\x00" * 5,
        b"GET / HTTP/1.1\r\n\r\n",
        b"\xff\xff\xff\xff\xff\xff",
        b"\x22\xff\xff\xff\xff",
        bytes(range(256)),
    ]
    answered = 0
    for i in range(300):
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(junk[i % len(junk)])
            data = b""
            while chunk := s.recv(4096):
                data += chunk
            decoder = wire.FrameDecoder(accept=wire.HUB_TO_CLIENT_OPCODES)
            decoder.feed(data)
            frames = list(decoder)
            assert len(frames) == 1 and isinstance(frames[0], wire.Error), frames
            answered += 1
    assert answered == 300
    doc = status(hub.address)
    assert doc["counters"]["protocol_errors"] == 300  # type: ignore[index]
    assert hub.proc.poll() is None


def test_sigterm_stops_cleanly(start_hub: StartHub) -> None:
    hub = start_hub()
    hub.proc.send_signal(signal.SIGTERM)
    assert hub.proc.wait(10) == 0
    log = hub.stderr_text()
    assert "INFO pub0sub.hub: SIGTERM: shutting down" in log  # a stop asked for is not a WARNING
    # The one warning: a hub without --auth-file says at start that it is open (docs/security.md).
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "OPEN HUB: no --auth-file" in warnings[0], log
    assert "Traceback" not in log, log


def test_bad_settings_exit_2_without_traceback(tmp_path: Path) -> None:
    for args in (["--listen", "nonsense"], ["--config", str(tmp_path / "missing.toml")], ["--max-body", "-1"],
                 ["--mesh-window-bytes", "0"]):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "hub", *args], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stderr.strip()


# -- one hub per data dir, one owner per port --------------------------------------------------


def run_refused_hub(*args: str) -> subprocess.CompletedProcess[str]:
    """A hub that must refuse to start: it exits (a deadline, not a wait) with a one-line reason."""
    return subprocess.run([sys.executable, "-m", "hub", *args], capture_output=True, text=True, timeout=60)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    return proc.stderr.strip()


def read_mesh_port(hub: HubProcess) -> int:
    """The mesh port from the start-up lines after ``listening on`` (``hub id``, ``mesh listening on``)."""
    assert hub.proc.stdout is not None
    for _ in range(2):
        line = hub.proc.stdout.readline()
        if line.startswith("mesh listening on "):
            return int(line.split("/tcp/")[1].split("/")[0])
    raise AssertionError("no mesh address printed")


def test_second_hub_on_a_data_dir_is_refused_naming_the_first(start_hub: StartHub, tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start_hub("--data-dir", str(data))
    message = one_line_error(run_refused_hub("--listen", "127.0.0.1:0", "--data-dir", str(data)))
    assert f"data directory {data} is in use by another hub (PID {first.pid})" in message
    # The lock goes with the process, however it ends: after a clean stop and after SIGKILL.
    assert first.stop() == 0
    second = start_hub("--data-dir", str(data))
    second.proc.kill()
    second.proc.wait(10)
    third = start_hub("--data-dir", str(data))
    assert status(third.address)["pid"] == third.pid


def test_client_port_in_use_is_one_line(start_hub: StartHub) -> None:
    first = start_hub()
    message = one_line_error(run_refused_hub("--listen", first.address))
    assert message.endswith(f": address {first.address} is in use")


def test_mesh_port_in_use_is_refused(start_hub: StartHub, tmp_path: Path) -> None:
    # py-libp2p listens with SO_REUSEPORT: without the check the second hub starts and the
    # kernel shares the port between the two.
    first = start_hub("--data-dir", str(tmp_path / "a"), "--mesh-listen", "/ip4/127.0.0.1/tcp/0")
    port = read_mesh_port(first)
    refused = run_refused_hub("--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "b"),
                              "--mesh-listen", f"/ip4/127.0.0.1/tcp/{port}")  # fmt: skip
    assert one_line_error(refused).endswith(f"mesh address 127.0.0.1:{port} is in use")


def test_pub0sub_hub_becomes_the_hub_process(tmp_path: Path) -> None:
    """``pub0sub hub`` runs ``python -m hub`` in its own place (the SDK never imports the hub): one
    PID, so a supervisor's SIGTERM reaches the hub itself, and the hub's exit status is the command's."""
    with (tmp_path / "stderr").open("w+") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "sdk.cli", "hub", "--listen", "127.0.0.1:0"],
                                stdout=subprocess.PIPE, stderr=stderr, text=True)  # fmt: skip
        assert proc.stdout is not None
        try:
            line = proc.stdout.readline()
            assert line.startswith("listening on "), line
            assert status(line.split()[-1])["pid"] == proc.pid
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            proc.stdout.close()
        stderr.seek(0)
        assert "INFO pub0sub.hub: SIGTERM: shutting down" in stderr.read()
    refused = subprocess.run([sys.executable, "-m", "sdk.cli", "hub", "--listen", "nonsense"],
                             capture_output=True, text=True, timeout=30)  # fmt: skip
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.startswith("pub0sub hub: "), "messages name the command that was typed"


@pytest.mark.parametrize("ignored", [False, True], ids=["sighup", "sighup-under-nohup"])
def test_a_closed_terminal_stops_the_hub_unless_hangups_are_ignored(ignored: bool) -> None:
    """SIGHUP (the terminal went away) is a clean stop, as SIGINT and SIGTERM are -- but a hub started
    under ``nohup`` (SIGHUP ignored) keeps running through one."""
    def start() -> None:
        # Set either way: a suite run under nohup would hand its ignored SIGHUP down to the hub.
        signal.signal(signal.SIGHUP, signal.SIG_IGN if ignored else signal.SIG_DFL)

    proc = subprocess.Popen([sys.executable, "-m", "hub", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, preexec_fn=start)  # fmt: skip
    assert proc.stdout is not None
    try:
        address = proc.stdout.readline().split()[-1]
        proc.send_signal(signal.SIGHUP)
        if ignored:
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(1.0)
            assert status(address)["pid"] == proc.pid, "still serving"
        else:
            assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)
        proc.stdout.close()


def test_mesh_announce_takes_host_and_port_multiaddrs_of_a_hub_with_a_mesh() -> None:
    # A configuration error: exit status 2 and one line, as every bad setting.
    refused = run_refused_hub("--listen", "127.0.0.1:0", "--mesh-listen", "/ip4/127.0.0.1/tcp/0",
                              "--mesh-announce", "127.0.0.1:7000")  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr == ("python -m hub: mesh_announce takes /ip4|ip6|dns/HOST/tcp/PORT multiaddrs (the hub "
                              "adds its /p2p/<peer id>), got '127.0.0.1:7000'\n")
    alone = run_refused_hub("--listen", "127.0.0.1:0", "--mesh-announce", "/ip4/127.0.0.1/tcp/7000")
    assert (alone.returncode, alone.stderr) == (2, "python -m hub: mesh_announce needs a mesh: set mesh_listen too\n")
