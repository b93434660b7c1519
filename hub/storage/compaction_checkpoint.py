"""Where a compacted topic's clean part ends: the checkpoint a pass leaves for the next.

Kafka's cleaner keeps ``cleaner-offset-checkpoint``; ours is one small JSON file per topic
directory, rewritten whole through :func:`statefile.write_json` (temporary file, fsync,
rename, directory fsync), so a crash leaves the old checkpoint or the new one.  It is
written only after every output of the pass is in place: a crash before that leaves the
old one, and the next pass cleans the same dirty part again (docs/compaction.md).

- ``clean_end``: every record below this offset went through a pass that saw every later
  record of its key up to here: at most one record per key (its latest) is below it, besides
  the ``held`` ones.  The dirty part is from here to the active segment.
- ``held``: offsets of records below ``clean_end`` kept only as producer marks although a
  later record of their key exists (docs/compaction.md, "idempotent producers").  The map of
  a later pass holds only dirty keys, so without this list it could not tell they are
  superseded once they are no longer marks.  At most one per producer.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from .statefile import write_json

log = logging.getLogger("pub0sub.hub.storage")

CHECKPOINT_NAME = "compaction-checkpoint.json"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    clean_end: int = 0
    held: tuple[int, ...] = ()


def load_checkpoint(directory: Path) -> Checkpoint:
    """The topic's checkpoint; none yet (or unreadable: logged) is an empty clean part."""
    path = directory / CHECKPOINT_NAME
    try:
        doc = json.loads(path.read_bytes())
        return Checkpoint(int(doc["clean_end"]), tuple(int(o) for o in doc["held"]))
    except FileNotFoundError:
        return Checkpoint()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        # Written atomically, so this is outside damage; starting from nothing is always safe
        # (a pass over a clean part it takes for dirty removes only what a later record supersedes).
        log.error("%s: unreadable compaction checkpoint (%s): the whole log is cleaned again", path, exc,
                  extra={"event": "compaction_checkpoint_unreadable"})  # fmt: skip
        return Checkpoint()


def save_checkpoint(directory: Path, checkpoint: Checkpoint) -> None:
    """Blocking (fsyncs): make ``checkpoint`` the topic's, durably."""
    write_json(directory / CHECKPOINT_NAME, {"clean_end": checkpoint.clean_end, "held": list(checkpoint.held)})
