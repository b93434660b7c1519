"""A hub as a ``python -m hub`` subprocess on 127.0.0.1, and what tests read from one.

The ``start_hub``/``hub`` fixtures (tests/conftest.py) start them and stop them at the end.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import sdk
from tests.support import forkserver
from tests.support.forkserver import ForkedProcess

ROOT = Path(__file__).resolve().parents[2]
HUB_START_TIMEOUT = 20.0


def start_hub_process(
    args: list[str], *, env: dict[str, str], stderr: IO[str], root: Path = ROOT, nofile: int | None = None
) -> subprocess.Popen[str] | ForkedProcess:
    """``python -m hub ARGS`` with stdout to a pipe: forked from the worker's fork server when it is
    this tree's hub (:mod:`tests.support.forkserver`), exec'd otherwise (``root``: another tree's)."""
    if root == ROOT and forkserver.wanted():
        return ForkedProcess(args, env=env, cwd=str(root), stderr=stderr, nofile=nofile)
    limit = None if nofile is None else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    return subprocess.Popen([sys.executable, "-m", "hub", *args], stdout=subprocess.PIPE, stderr=stderr,
                            stdin=subprocess.DEVNULL, text=True, cwd=root, env=env, preexec_fn=limit)  # fmt: skip


class HubProcess:
    """A hub process (:func:`start_hub_process`); stopped by its PID, never by name."""

    def __init__(
        self, *args: str, env: dict[str, str] | None = None, nofile: int | None = None, root: Path = ROOT
    ) -> None:
        """``nofile``: the hub's descriptor limit (``ulimit -n``), for resource-bound tests; ``root``:
        the tree whose ``hub`` runs (another commit's, unpacked, for compatibility tests)."""
        self.args = ["--listen", "127.0.0.1:0", *args]
        # stderr to a file: the hub logs at INFO, and a pipe nobody reads would block it once full.
        self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 - read after the hub stops; GC closes it
        self.proc = start_hub_process(self.args, env={**os.environ, **(env or {})}, stderr=self._stderr, root=root,
                                      nofile=nofile)  # fmt: skip
        assert self.proc.stdout is not None
        deadline = time.monotonic() + HUB_START_TIMEOUT
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("listening on ") or not line:
                break
        if not line.startswith("listening on "):
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=10)
            raise RuntimeError(f"hub did not start: {line!r}\n{self.stderr_text()}")
        self.address = line.split()[-1]
        self.host, port = self.address.rsplit(":", 1)
        self.port = int(port)
        #: ``HOST:PORT`` of the operators' port (``--metrics-listen``), printed after the hub id.
        self.metrics_address = ""
        while "--metrics-listen" in self.args and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("metrics on ") or not line:
                self.metrics_address = line.split("//")[-1].split("/")[0] if line else ""
                break

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_text(self) -> str:
        """What the hub wrote to stderr so far (its log)."""
        self._stderr.seek(0)
        return self._stderr.read()

    def stop(self, timeout: float = 5.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


def mesh_lines(hub: HubProcess) -> tuple[str, str]:
    """The hub's hub id and mesh multiaddr from its start-up lines (after ``listening on``)."""
    assert hub.proc.stdout is not None
    hub_id = hub.proc.stdout.readline().split()[-1]
    multiaddr = hub.proc.stdout.readline().split()[-1]
    return hub_id, multiaddr


def hub_status(address: str) -> dict[str, Any]:
    """The STATUS document of the hub at ``address``."""
    with sdk.connect_blocking(address, reconnect=None) as client:
        return client.status()
