"""Small state files rewritten whole: written to a temporary file, fsynced, renamed into place.

The rename is atomic, so a reader (or a hub restarting after a crash) sees the old
file or the new one, never half of one; the directory is fsynced as well, or a
power loss could bring back the old name.  Used for the hub id, consumer positions
and the mesh's known-peers record.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def replace_atomically(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Make ``path`` hold exactly ``data``, durably, or leave it as it was (raises OSError)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    sync_directory(path.parent)


def sync_directory(directory: Path) -> None:
    """fsync a directory, so the names created or renamed in it survive a power loss."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, document: Any) -> None:
    """:func:`replace_atomically` with ``document`` as compact JSON."""
    replace_atomically(path, json.dumps(document, separators=(",", ":")).encode())
