"""Group commit for ``--durability fsync``: one fsync, in a worker thread, for many publishes.

The storage layer keeps the bookkeeping (what is written, who waits for it); this
task only waits until a commit is wanted, runs the blocking fsyncs off the event
loop so the hub keeps serving, and hands the result back.  Appends made while
one commit runs wait for the next, which then covers them all.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from ..storage.store import LogStore


async def run_committer(store: LogStore, *, after: Callable[[], None] = lambda: None) -> None:
    """Commit whenever ``store`` wants one; ``after`` runs once its callbacks ran (to flush output)."""
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
            sizes = await trio.to_thread.run_sync(commit.sync)
        except OSError as exc:
            store.finish_commit(commit, None, exc)
        else:
            store.finish_commit(commit, sizes)
        after()
