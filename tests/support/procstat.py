"""Process state from /proc, for tests that check what a command left running."""

from __future__ import annotations

from pathlib import Path


def _fields(stat_file: Path) -> list[str]:
    """The fields of a /proc/PID/stat file after the command name (state, ppid, ...)."""
    return stat_file.read_text().rsplit(")", 1)[1].split()


def running(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        return _fields(Path(f"/proc/{pid}/stat"))[0] != "Z"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int(_fields(entry / "stat")[1]) == pid:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
