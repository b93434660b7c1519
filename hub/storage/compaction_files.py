"""The files a compaction leaves in a topic directory, and the recovery rule for each.

A compaction replaces a run of closed segments ``BASE.log .. `` (every segment whose
base offset is in ``[BASE, END)``) by one file holding their surviving records
(docs/compaction.md).  On disk it goes through these states, each safe to crash in:

1. ``BASE-END.compacting``: being written.  Incomplete by definition: removed on
   start; the segments it was made from are untouched.
2. ``BASE-END.swap``: written whole and fsync'ed, then renamed here -- the commit
   point.  On start the replacement is finished: every ``*.log`` with a base in
   ``(BASE, END)`` is removed, then the swap file is renamed over ``BASE.log``.
3. ``BASE.log`` holds the compacted records: done.

Both steps of the finish are idempotent (a removed file stays removed, a rename
that happened leaves no swap file), so a crash during recovery is recovered the
same way on the next start.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

from .segment import SUFFIX, segment_name
from .statefile import sync_directory

log = logging.getLogger("pub0sub.hub.storage")

TEMP_SUFFIX = ".compacting"
SWAP_SUFFIX = ".swap"
_RANGE = re.compile(r"^(\d{20})-(\d{20})$")


def range_name(base: int, end: int, suffix: str) -> str:
    return f"{base:020d}-{end:020d}{suffix}"


def parse_range(path: Path) -> tuple[int, int] | None:
    match = _RANGE.match(path.name.removesuffix(path.suffix))
    return (int(match[1]), int(match[2])) if match else None


def segment_base(path: Path) -> int | None:
    stem = path.name.removesuffix(SUFFIX)
    return int(stem) if path.name.endswith(SUFFIX) and stem.isdigit() else None


def finish_swap(
    directory: Path, swap: Path, base: int, end: int, *, sync: bool, between: Callable[[], None] | None = None
) -> list[Path]:
    """Step 2 -> 3: remove the replaced segments after the first, then rename the swap file
    over the first.  Returns the removed paths.  ``sync``: fsync the directory between the
    removals and the rename, so that after a power loss the rename is never found without
    them (a kept old segment would repeat offsets the compacted one holds).  ``between``: called
    between the removals and the rename (the crash tests' hook)."""
    removed = []
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        first = segment_base(path)
        if first is not None and base < first < end:
            path.unlink(missing_ok=True)
            removed.append(path)
    if sync:
        sync_directory(directory)
    if between is not None:
        between()
    os.replace(swap, directory / segment_name(base))
    return removed


def recover(directory: Path) -> None:
    """Bring a topic directory left by a crash mid-compaction to a state with only ``*.log`` files."""
    for temp in sorted(directory.glob(f"*{TEMP_SUFFIX}")):
        log.warning(
            "%s: removed an unfinished compaction (a crash while it was written); the segments it "
            "was made from are intact",
            temp,
            extra={"event": "compaction_recovered", "reason": "temp"},
        )
        temp.unlink()
    swaps = sorted(directory.glob(f"*{SWAP_SUFFIX}"))
    for swap in swaps:
        span = parse_range(swap)
        if span is None:
            raise OSError(f"{swap}: a compaction swap file whose name does not say which segments it replaces")
        removed = finish_swap(directory, swap, *span, sync=True)
        log.warning(
            "%s: finished a compaction cut short by a crash (%d replaced segments removed)",
            swap,
            len(removed),
            extra={"event": "compaction_recovered", "reason": "swap"},
        )
    if swaps:
        sync_directory(directory)
