"""A ``pub0sub`` command as a subprocess a test can Ctrl-C the way a terminal does.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group, not to one PID, so
each command runs in its own session (its own group) and :meth:`Command.ctrl_c` signals that
group by its id.  Both output streams are read by threads, so a test waits for a line with a
deadline (:meth:`Command.wait_for`) and never for a fixed time.

The ``command`` fixture (tests/conftest.py) starts them and kills any left at the end.

>>> cmd = Command("sub", "--hub", address, "--topic", "t")     # doctest: +SKIP
>>> cmd.wait_for("t 0 ")                                       # a line on stdout
>>> cmd.ctrl_c()
>>> code, out, err = cmd.finish()
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
WAIT_TIMEOUT = 60.0


def pub0sub(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``pub0sub *args`` to completion (killed after ``timeout`` seconds); its exit status and output."""
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


class Command:
    def __init__(self, *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> None:
        self.args = list(args)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sdk.cli", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, start_new_session=True,
        )  # fmt: skip
        self.lines: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._changed = threading.Condition()
        self._open = 2
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._threads = [
            threading.Thread(target=self._pump, args=(name, stream), daemon=True)
            for name, stream in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr))
        ]
        for thread in self._threads:
            thread.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _pump(self, name: str, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self.lines[name].append(line)
                self._changed.notify_all()
        with self._changed:
            self._open -= 1
            self._changed.notify_all()

    def wait_for(self, text: str, *, stream: str = "stdout", timeout: float = WAIT_TIMEOUT) -> str:
        """The first line of ``stream`` containing ``text``; AssertionError (with the output) at the deadline."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines[stream]:
                    if text in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self._open == 0:
                    raise AssertionError(f"no {text!r} on {stream} of {self.args}: {self.lines}")
                self._changed.wait(left)

    def ctrl_c(self) -> None:
        """SIGINT to the command's process group, as a terminal's Ctrl-C."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def signal(self, sig: int) -> None:
        """``sig`` to the command's process only (a supervisor's or ``kill``'s SIGTERM)."""
        os.kill(self.proc.pid, sig)

    def finish(self, timeout: float = WAIT_TIMEOUT) -> tuple[int, str, str]:
        """Wait for the exit (killing it at the deadline); the exit status and the whole output."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.args} did not exit within {timeout:.0f}s: {self.lines}") from None
        for thread in self._threads:
            thread.join(timeout)
        return code, "".join(self.lines["stdout"]), "".join(self.lines["stderr"])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def no_traceback(err: str) -> None:
    assert "Traceback" not in err and "Exception" not in err, err
