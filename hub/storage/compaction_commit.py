"""Putting a compacted file in place: in the event loop, between two turns, so no read sees half of it.

The worker thread (hub/storage/compaction.py) leaves a durable ``BASE-END.swap``; here the
segments it replaces are closed, their files removed and the swap file renamed over
``BASE.log`` (hub/storage/compaction_files.py says how each state is recovered), and the
topic log's segment list and tail cache are updated in the same step.  Only renames and
unlinks run here (plus one directory fsync with ``--durability fsync``); the reading and
writing of records stays in the worker.
"""

from __future__ import annotations

import logging

from .compaction import Written
from .compaction_files import finish_swap
from .compaction_read import pause_if_asked
from .segment import Segment, segment_name
from .topic_log import TopicLog

log = logging.getLogger("pub0sub.hub.storage")


def put_in_place(topic_log: TopicLog, written: Written, *, sync: bool) -> bool:
    """Replace the segments ``written`` was made from.  False (and the swap file removed) when
    they are no longer all there as they were (retention removed one meanwhile)."""
    segments = topic_log.segments
    paths = [r.path for r in written.replaces]
    first = next((i for i, s in enumerate(segments) if s.path == paths[0]), None)
    last = None if first is None else first + len(paths)
    if (
        first is None
        or last is None
        or last >= len(segments)  # the active segment is never replaced
        or [s.path for s in segments[first:last]] != paths
        or segments[last].base_offset != written.end
    ):
        written.swap.unlink(missing_ok=True)
        log.info(
            "%s: not put in place: the segments it replaces changed meanwhile",
            written.swap,
            extra={"event": "compaction_skipped", "topic": topic_log.topic},
        )
        return False
    for old in segments[first:last]:
        old.close()
    pause_if_asked("swap", topic_log.directory)
    finish_swap(topic_log.directory, written.swap, written.base, written.end, sync=sync,
                between=lambda: pause_if_asked("unlinked", topic_log.directory))  # fmt: skip
    new = Segment(topic_log.directory / segment_name(written.base), topic_log.topic, written.base,
                  topic_log.files, written.size)  # fmt: skip
    new.batches = written.batches
    new.next_offset = written.next_offset
    new.first_timestamp = written.first_timestamp
    new.last_timestamp = written.last_timestamp
    new.index = written.index
    segments[first:last] = [new]
    topic_log.forget_tail_below(written.end)
    return True
