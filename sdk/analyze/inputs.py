"""Finding the input on the driver: hub data directories, their hub ids, their segment files.

No Spark, numpy or pyarrow here: the command checks its arguments before starting anything heavy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


class UsageError(Exception):
    """A problem with the command line (exit status 2), not with the data."""


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
        if not path.exists():
            raise UsageError(f"no such directory: {arg}")
        if not path.is_dir():
            raise UsageError(f"not a directory: {arg}")
        path = path.resolve()
        if (path / "topics").is_dir():
            candidates = [path]
        else:
            candidates = sorted(p for p in path.iterdir() if (p / "topics").is_dir())
        if not candidates:
            raise UsageError(f"{arg} is not a hub data directory (no topics/ in it or in its subdirectories)")
        for candidate in candidates:
            found.setdefault(candidate, HubDir(candidate, read_hub_id(candidate)))
    return list(found.values())


def list_segments(hubs: Sequence[HubDir]) -> Segments:
    files = sorted(f for hub in hubs for f in (hub.path / "topics").rglob("*.log") if f.is_file())
    return Segments(list(hubs), files, sum(f.stat().st_size for f in files))
