"""Reading a child process's log while it starts: the lines it writes, until it exits or a deadline.

``pub0sub cluster`` (hubs) and ``pub0sub spark up`` (Spark daemons) both learn their children's
addresses from what the children log once they listen.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

POLL = 0.05


def start_lines(proc: subprocess.Popen[bytes], log_path: Path, offset: int, seconds: float, name: str) -> Iterator[str]:
    """Each complete line written to ``log_path`` after ``offset``, as it comes.

    The caller stops iterating once it has what it waited for.  ``RuntimeError`` when ``proc`` exits
    first (with the log's last line: a refusal is one line) or ``seconds`` pass first.
    """
    deadline = time.monotonic() + seconds
    with open(log_path, "rb") as log:
        log.seek(offset)
        pending = b""
        while True:
            chunk = log.readline()
            if chunk.endswith(b"\n"):
                line, pending = (pending + chunk).decode(errors="replace"), b""
                yield line
                continue
            pending += chunk  # nothing new (or half a line): look again shortly
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited during start-up (exit status {proc.returncode}): "
                                   f"{last_line(log_path)}")  # fmt: skip
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start within {seconds:.0f}s (see {log_path})")
            time.sleep(POLL)


def last_line(path: Path) -> str:
    """The last non-empty line of a log (a hub's one-line reason when it refuses to start)."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""
