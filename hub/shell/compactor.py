"""The compaction loop: finds compacted topics due for a pass, runs each pass's file work in a
worker thread, and puts its output in place between two turns of the event loop.

Appends never wait for compaction: they go to the active segment, which no pass touches,
while the worker reads closed segments through descriptors of its own.  The one step in the
loop (hub/storage/compaction_commit.py) is a few renames and unlinks per output file; the
checkpoint after them is written in a worker thread too (it fsyncs).
"""

from __future__ import annotations

import itertools
import logging
import threading
from functools import partial

import trio

from wire import ProtocolError

from ..core.clock import Clock
from ..storage.compaction import PassResult, SegmentRef, compact
from ..storage.compaction_checkpoint import save_checkpoint
from ..storage.compaction_commit import put_in_place
from ..storage.compaction_policy import CompactionPolicy
from ..storage.compaction_read import pause_if_asked
from ..storage.store import LogStore
from ..storage.topic_log import TopicLog

log = logging.getLogger("pub0sub.hub.storage")


#: Passes in a row on one topic whose offset map filled before the end of its dirty part, before
#: the loop moves on to other topics (it comes back at the next check).
ROUNDS_IN_A_ROW = 16


async def run_compaction(store: LogStore, policy: CompactionPolicy, clock: Clock, every: float) -> None:
    while True:
        await trio.sleep(every)
        for topic_log in list(store.logs.values()):
            for _ in range(ROUNDS_IN_A_ROW):
                if not (policy.applies(topic_log.topic) and policy.due(topic_log, clock.wall_us())):
                    break
                await compact_topic(store, policy, topic_log, clock.wall_us())
                if not policy.unfinished(topic_log.topic) or store.logs.get(topic_log.topic) is not topic_log:
                    break


async def compact_topic(store: LogStore, policy: CompactionPolicy, topic_log: TopicLog, now_us: int) -> None:
    """One pass over ``topic_log``'s closed segments, put in place oldest output first, then
    its checkpoint written (docs/compaction.md, "crash safety")."""
    segments = topic_log.segments
    topic = topic_log.topic
    if any(s.bad_ranges for s in segments[:-1]):
        log.error("%s: not compacted: a closed segment holds corrupted batches (see the recovery report)", topic,
                  extra={"event": "compaction_refused", "topic": topic})  # fmt: skip
        policy.failed(topic, segments[-1].base_offset)
        return
    refs = [SegmentRef(s.path, s.base_offset, nxt.base_offset) for s, nxt in itertools.pairwise(segments)]
    work = partial(
        compact,
        topic_log.directory,
        refs,
        now_us=now_us,
        tombstone_us=int(policy.tombstone_seconds_for(topic) * 1e6),
        segment_bytes=store.settings.segment_bytes,
        producers=dict(topic_log.producers),  # a copy: the loop goes on appending meanwhile
        map_bytes=policy.map_bytes,
    )
    try:
        result = await _in_worker(work)
    except (OSError, ProtocolError) as exc:
        log.error("%s: compaction failed: %s", topic, exc, extra={"event": "compaction_failed", "topic": topic})
        policy.failed(topic, refs[-1].end)
        return
    sync = store.durability == "fsync"
    placed = True
    for written in result.groups:  # oldest first: see docs/compaction.md, crash safety
        if store.logs.get(topic) is not topic_log or not put_in_place(topic_log, written, sync=sync):
            for rest in result.groups[result.groups.index(written) + 1 :]:
                rest.swap.unlink(missing_ok=True)
            placed = False
            break
    checkpointed = placed and await _save_checkpoint(topic_log, result)
    policy.done(topic, result, checkpointed=checkpointed)
    log.info("%s: compacted %d records, removed %d, %d -> %d bytes in %.3f s; read %d bytes; map %d of %d keys; "
             "clean to %d", topic, result.records_read, result.records_removed, result.bytes_before,
             result.bytes_after, result.seconds, result.bytes_read, result.map_entries, result.map_capacity,
             result.checkpoint.clean_end if checkpointed else result.dirty_start,
             extra={"event": "compaction_pass", "topic": topic})  # fmt: skip


async def _save_checkpoint(topic_log: TopicLog, result: PassResult) -> bool:
    """Write the pass's checkpoint in a worker thread (it fsyncs); False if it could not be."""
    directory = topic_log.directory

    def save() -> None:
        pause_if_asked("placed", directory)
        save_checkpoint(directory, result.checkpoint)
        pause_if_asked("checkpointed", directory)

    try:
        await trio.to_thread.run_sync(save)
    except OSError as exc:
        log.error("%s: compaction checkpoint not written: %s (the next pass cleans the same part again)",
                  topic_log.topic, exc, extra={"event": "compaction_failed", "topic": topic_log.topic})  # fmt: skip
        return False
    return True


async def _in_worker(work: partial[PassResult]) -> PassResult:
    """Run ``work(stop=...)`` in a thread; if this task is cancelled (the hub stops), tell the
    thread to stop and wait for it, so no file work outlives the store."""
    stop = threading.Event()
    finished = threading.Event()

    def run() -> PassResult:
        try:
            return work(stop=stop)
        finally:
            finished.set()

    try:
        # abandon_on_cancel: trio-typing's stale stubs do not know it (as in hub/shell/auth.py).
        return await trio.to_thread.run_sync(run, abandon_on_cancel=True)  # type: ignore[call-arg]
    except trio.Cancelled:
        stop.set()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(finished.wait)
        raise
