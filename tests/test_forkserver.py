"""The suite's hubs are forks of a fork server (tests/support/forkserver.py): each must behave
as ``python -m hub`` would -- its own PID, environment, descriptor limit, stdio and exit code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import sdk
from tests.support.forkserver import EXEC_ENV, ForkedProcess
from tests.support.hubprocess import ROOT, HubProcess, hub_status
from tests.support.waiting import wait_until

MODES = ["fork", "exec"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(EXEC_ENV, "1" if request.param == "exec" else "0")
    return str(request.param)


def _limits(pid: int) -> str:
    return next(line for line in Path(f"/proc/{pid}/limits").read_text().splitlines() if "open files" in line)


def test_a_hub_serves_as_itself_and_exits_0_on_sigterm_and_minus_9_on_sigkill(mode: str, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    hub = HubProcess("--data-dir", str(tmp_path / "data"), "--durability", "fsync", nofile=1500,
                     env={"PUB0SUB_SYNC_JOURNAL": str(journal)})  # fmt: skip
    try:
        assert isinstance(hub.proc, ForkedProcess) == (mode == "fork")
        status = hub_status(hub.address)
        assert status["pid"] == hub.pid != os.getpid()
        assert _limits(hub.pid).split()[3:5] == ["1500", "1500"]
        with sdk.connect_blocking(hub.address, reconnect=None) as client:
            client.publish_acked("t", b"x")
        assert journal.read_text().strip()  # the environment reached the hub: it journals its fsyncs
        hub.proc.send_signal(signal.SIGSTOP)  # a fault test's pause, by PID
        try:
            wait_until(lambda: Path(f"/proc/{hub.pid}/stat").read_text().split(") ", 1)[1].startswith("T"),
                       timeout=10, what="the hub stopped")  # fmt: skip
        finally:
            hub.proc.send_signal(signal.SIGCONT)
    finally:
        assert hub.stop() == 0
    assert "OPEN HUB" in hub.stderr_text()
    again = HubProcess("--data-dir", str(tmp_path / "data"))
    again.proc.kill()
    assert again.proc.wait(10) == -signal.SIGKILL
    assert again.proc.poll() == -signal.SIGKILL


def test_a_bad_option_exits_2_with_the_usage_like_python_m_hub(tmp_path: Path) -> None:
    with tempfile.TemporaryFile("w+") as err:
        forked = ForkedProcess(["--no-such-option"], env=dict(os.environ), cwd=str(ROOT), stderr=err)
        assert forked.wait(30) == 2
        forked.stdout.close()
        err.seek(0)
        forked_err = err.read()
    executed = subprocess.run([sys.executable, "-m", "hub", "--no-such-option"], capture_output=True, text=True,
                              cwd=ROOT, timeout=60, check=False)  # fmt: skip
    assert executed.returncode == 2
    assert forked_err == executed.stderr and "usage: python -m hub" in forked_err


def test_a_wait_that_times_out_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EXEC_ENV, "0")
    hub = HubProcess()
    try:
        assert isinstance(hub.proc, ForkedProcess)
        with pytest.raises(subprocess.TimeoutExpired):
            hub.proc.wait(0.2)
        assert hub.proc.poll() is None
    finally:
        assert hub.stop() == 0
