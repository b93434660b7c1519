"""Small state files rewritten whole: written to a temporary file, fsynced, renamed into place.

The rename is atomic, so a reader (or a hub restarting after a crash) sees the old
file or the new one, never half of one; the directory is fsynced as well, or a
power loss could bring back the old name.  Used for the hub id, consumer positions
and the mesh's known-peers record.
"""

from __future__ import annotations

import json
import os
import threading
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


class VersionedStateFile:
    """One state file written from the event loop and from a worker thread, never backwards.

    Each write carries the version of the state it holds; writes are serialized by a
    lock and a version older than the one on disk is skipped, so a slow background
    save can never replace a newer file an urgent save wrote meanwhile.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._written = -1

    def write(self, data: bytes, version: int) -> bool:
        """Make the file hold ``data`` (state ``version``) unless a newer version is there;
        True if written.  Blocking: fsyncs (raises OSError)."""
        with self._lock:
            if version < self._written:
                return False
            replace_atomically(self.path, data)
            self._written = version
            return True
