"""Finding the input on the driver: hub data directories, their hub ids, their segment files.

No Spark, numpy or pyarrow here: the command checks its arguments before starting anything heavy.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


class UsageError(Exception):
    """A problem with the command line (exit status 2), not with the data."""


class UnreadableInput(UsageError):
    """A directory or segment the job could not read: checked here, before Spark starts,
    so the answer is one line naming the file and the reason, not a Java stack trace."""

    def __init__(self, error: OSError, fallback: Path | str) -> None:
        self.path = str(error.filename or fallback)
        self.reason = error.strerror or str(error)
        super().__init__(f"cannot read {self.path}: {self.reason}")


@dataclass(frozen=True)
class HubDir:
    path: Path
    hub_id: str


@dataclass
class Segments:
    hubs: list[HubDir]
    files: list[Path]
    bytes: int


def hex_id(value: int) -> str:
    """Hub ids are u64 (half of them above 2**63): shown as 16 hex digits, as the hub prints them."""
    return f"{value:016x}"


def read_hub_id(data_dir: Path) -> str:
    """The hub id from ``DATA/hub-id`` (hex, as the hub writes it), else the directory's name."""
    try:
        return hex_id(int((data_dir / "hub-id").read_text().strip(), 16))
    except (OSError, ValueError):
        return data_dir.name


def find_hub_dirs(paths: Iterable[str | Path]) -> list[HubDir]:
    """Each argument is a hub data directory (it has ``topics/``) or a directory of them."""
    found: dict[Path, HubDir] = {}
    for arg in paths:
        path = Path(arg).expanduser()
        try:
            if not path.exists():
                raise UsageError(f"no such directory: {arg}")
            if not path.is_dir():
                raise UsageError(f"not a directory: {arg}")
            path = path.resolve()
            if (path / "topics").is_dir():
                candidates = [path]
            else:
                candidates = sorted(p for p in path.iterdir() if (p / "topics").is_dir())
        except OSError as exc:  # a directory we may not list or enter
            raise UnreadableInput(exc, arg) from None
        if not candidates:
            raise UsageError(f"{arg} is not a hub data directory (no topics/ in it or in its subdirectories)")
        for candidate in candidates:
            found.setdefault(candidate, HubDir(candidate, read_hub_id(candidate)))
    return list(found.values())


def list_segments(hubs: Sequence[HubDir]) -> Segments:
    """Every ``*.log`` segment under the hubs' ``topics/``, each opened once to prove it readable.

    ``os.walk`` with an error handler, not ``Path.rglob``, which skips a directory it may not
    list without a word: that topic's data would be missing from the report.
    """

    def fail(error: OSError) -> None:
        raise UnreadableInput(error, "?")

    files: list[Path] = []
    size = 0
    for hub in hubs:
        for directory, _dirs, names in os.walk(hub.path / "topics", onerror=fail):
            for name in sorted(names):
                path = Path(directory) / name
                if not name.endswith(".log") or not path.is_file():
                    continue
                try:
                    with open(path, "rb") as segment:
                        segment.read(1)
                        size += os.fstat(segment.fileno()).st_size
                except OSError as exc:
                    raise UnreadableInput(exc, path) from None
                files.append(path)
    return Segments(list(hubs), sorted(files), size)
