"""Group commit for ``--durability fsync``: one fsync, in a worker thread, for many publishes.

The storage layer keeps the bookkeeping (what is written, who waits for it); this
task only waits until a commit is wanted, runs the blocking fsyncs off the event
loop so the hub keeps serving, and hands the result back.  Appends made while
one commit runs wait for the next, which then covers them all.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import trio

from ..core.histogram import Histogram
from ..storage.store import Commit, LogStore


async def run_committer(
    store: LogStore, *, after: Callable[[], None] = lambda: None, timings: Histogram | None = None
) -> None:
    """Commit whenever ``store`` wants one; ``after`` runs once its callbacks ran (to flush output).

    ``timings`` gets how long each commit's fsyncs took (one observation per commit, not per publish).
    """
    wanted = trio.Event()

    def want() -> None:
        wanted.set()

    store.on_commit_wanted = want
    if store.commit_wanted():
        want()
    while True:
        await wanted.wait()
        wanted = trio.Event()
        commit = store.begin_commit()
        try:
            sizes, took = await trio.to_thread.run_sync(_timed_sync, commit)
        except OSError as exc:
            store.finish_commit(commit, None, exc)
        else:
            if timings is not None:
                timings.observe(took)
            store.finish_commit(commit, sizes)
        after()


def _timed_sync(commit: Commit) -> tuple[list[int], float]:
    """In the worker thread: the commit's fsyncs, and the seconds they took."""
    start = time.perf_counter()
    sizes = commit.sync()
    return sizes, time.perf_counter() - start
