"""A bounded cache of open segment files: the least recently used is closed first.

One descriptor per topic log would let one client that publishes to many topics
exhaust the process's descriptor limit (20,000 topics against ``ulimit -n``
20,000), after which every append and every accepted connection fails, and a
restart fails the same way because recovery reopens every segment.  Segments
therefore borrow their descriptor from here: at most ``capacity`` are open at
once; an evicted segment is reopened by path on its next read or write (an
``open`` costs microseconds, a topic nobody touches costs no descriptor).

Only the event loop's thread uses the cache.  The group commit's fsyncs run in a
worker thread and so never borrow a cached descriptor (the loop could close it,
and the number could be reused for another file meanwhile): they open the file
by path (:func:`fsync_path`); fsync makes the file durable whichever descriptor
wrote it.
"""

from __future__ import annotations

import os
import resource
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

#: Descriptors left for everything else (sockets, the mesh, state files) when the
#: capacity is derived from the process's limit.
RESERVED_DESCRIPTORS = 256
#: The capacity when nothing else is said, if the descriptor limit allows it: half of the
#: 512 descriptors the hub keeps back from client connections (``RESERVED_FDS`` in
#: hub/shell/fdlimit.py), so that a full cache and a full connection table fit the limit
#: together.  A larger ``--max-open-files`` needs as many more descriptors.
DEFAULT_CAPACITY = 256


class CachedFile(Protocol):
    """A segment as the cache sees it: a path to reopen with its flags."""

    path: Path

    def reopen_flags(self) -> int: ...


def default_capacity() -> int:
    """:data:`DEFAULT_CAPACITY`, or half of the descriptors left above the reserve if fewer."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return DEFAULT_CAPACITY
    return max(16, min(DEFAULT_CAPACITY, (soft - RESERVED_DESCRIPTORS) // 2))


class FileCache:
    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity if capacity is not None else default_capacity()
        if self.capacity < 1:
            raise ValueError("the file cache needs room for at least one file")
        self._open: OrderedDict[CachedFile, int] = OrderedDict()
        self.opens = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._open)

    def fd(self, owner: CachedFile) -> int:
        """``owner``'s descriptor, reopened if it was closed; it is now the most recently used."""
        fd = self._open.get(owner)
        if fd is not None:
            self._open.move_to_end(owner)
            return fd
        self._make_room()
        fd = os.open(owner.path, owner.reopen_flags())
        self.opens += 1
        self._open[owner] = fd
        return fd

    def adopt(self, owner: CachedFile, fd: int) -> None:
        """Take over ``fd``, opened by ``owner`` itself (creating or recovering the file)."""
        self.release(owner)
        self._make_room()
        self._open[owner] = fd

    def release(self, owner: CachedFile) -> None:
        """Close ``owner``'s descriptor if it has one open (the file is deleted or the log closed)."""
        fd = self._open.pop(owner, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        while self._open:
            _, fd = self._open.popitem(last=False)
            os.close(fd)

    def _make_room(self) -> None:
        while len(self._open) >= self.capacity:
            _, fd = self._open.popitem(last=False)
            os.close(fd)
            self.evictions += 1

    def status(self) -> dict[str, int]:
        return {"open": len(self._open), "capacity": self.capacity, "opens": self.opens, "evictions": self.evictions}


def fsync_path(path: Path) -> None:
    """fsync the file at ``path`` through a descriptor of its own (a worker thread's way).

    A file deleted meanwhile (retention) has nothing left to make durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
