"""The data directory: every topic's log, group commit, retention.

Durability modes:

* ``received`` -- a publish is acknowledged once written to the OS (it survives a
  hub crash, not a power loss: the window is what the kernel had not flushed).
* ``fsync`` -- a publish is acknowledged only after the segments holding it are
  fsync'ed.  Group commit: while one fsync runs (in a worker thread, so the
  hub keeps serving), further appends accumulate and the next fsync covers
  them all, so one fsync serves many publishers.

One hub per data directory: :meth:`LogStore.open` takes an exclusive ``flock`` on
``DATA/hub.lock`` (kept until :meth:`LogStore.close` or the process ends, however it
ends) and writes its PID in it; a second hub is refused with that PID.  Two writers
on one log would interleave their appends and corrupt it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .compaction_policy import CompactionPolicy
from .file_cache import FileCache, fsync_path
from .segment import RecoveryReport, Segment
from .statefile import replace_atomically, sync_directory
from .topic_log import LogSettings, TopicLog

log = logging.getLogger("pub0sub.hub.storage")

DURABILITY_MODES = ("received", "fsync")
#: Test hook for simulated power loss: after every fsync the hub appends
#: ``<path> <synced bytes>`` lines to this file, so a test can truncate each
#: segment to what had really reached the disk.
SYNC_JOURNAL_ENV = "PUB0SUB_SYNC_JOURNAL"
#: The data directory's lock file: flock'ed by the hub using the directory, its PID inside.
#: ``pub0sub cluster status|down`` read it too (sdk/cluster.py) to tell a live hub from a stale PID.
LOCK_FILE = "hub.lock"


class DataDirInUseError(Exception):
    """Another process (``pid``, None if it had not written it yet) holds the data directory's lock."""

    def __init__(self, root: Path, pid: int | None) -> None:
        self.root = root
        self.pid = pid
        holder = f"another hub (PID {pid})" if pid is not None else "another hub"
        super().__init__(f"data directory {root} is in use by {holder}")


class DataDirLock:
    """The exclusive lock on a data directory (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.path = root / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise DataDirInUseError(self.path.parent, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Closing the descriptor drops the lock; the stale PID left in the file means nothing unlocked."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode("ascii").strip())
    return None


class LogStore:
    def __init__(
        self, root: Path, settings: LogSettings, *, durability: str = "received", max_open_files: int | None = None
    ) -> None:
        if durability not in DURABILITY_MODES:
            raise ValueError(f"durability must be one of {DURABILITY_MODES}, got {durability!r}")
        self.root = root
        self.topics_dir = root / "topics"
        self.settings = settings
        self.durability = durability
        self.logs: dict[str, TopicLog] = {}
        #: Open segment descriptors, bounded (None: derived from the process's descriptor limit).
        self.files = FileCache(max_open_files)
        #: bumped whenever a topic log is created (cached topic selections compare it)
        self.generation = 0
        self.reports: list[RecoveryReport] = []
        self._dirty: dict[Segment, None] = {}
        self._new_dirs: set[Path] = set()
        self._after_sync: list[Callable[[], None]] = []
        #: Told when a commit is wanted (the shell's committer wakes up).
        self.on_commit_wanted: Callable[[], None] | None = None
        self.fsyncs = 0
        self.storage_error: OSError | None = None
        #: Which topics are compacted and what compaction did (None: no topic is; hub/shell/compactor.py)
        self.compaction: CompactionPolicy | None = None
        self._lock = DataDirLock(root)
        journal = os.environ.get(SYNC_JOURNAL_ENV)
        self._journal = open(journal, "a") if journal else None  # noqa: SIM115 - lives as long as the store

    # -- opening -----------------------------------------------------------------------

    def open(self) -> None:
        """Lock the directory (:class:`DataDirInUseError` if another hub has it), then recover every log."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            self._open_logs()
        except BaseException:
            self.close()
            raise

    def _open_logs(self) -> None:
        self.topics_dir.mkdir(parents=True, exist_ok=True)
        for directory in sorted(p for p in self.topics_dir.iterdir() if p.is_dir()):
            topic_log, reports = TopicLog.open(directory, self.settings, self.files)
            self.reports.extend(reports)
            if topic_log is not None:
                self.logs[topic_log.topic] = topic_log
        repaired = [r for r in self.reports if r.truncated_bytes or r.bad_ranges]
        log.info("opened %d topic logs from %s (%d segments repaired)", len(self.logs), self.root, len(repaired),
                 extra={"event": "storage_opened"})

    def hub_id(self, new_id: int | None = None) -> int:
        """A stable hub id, kept in the data directory across restarts.

        ``new_id`` is the id to record if there is none yet (a hub with a mesh derives it
        from its identity, so peers can verify it); None picks a random one.
        """
        path = self.root / "hub-id"
        if path.exists():
            text = path.read_text().strip()
            try:
                return int(text, 16)
            except ValueError:
                # Only a crash right after the very first start can leave this
                # file empty: the id was never used by anyone yet.
                log.error("%s is unreadable (%r): choosing a new hub id", path, text[:40],
                          extra={"event": "hub_id_unreadable"})
        hub_id = new_id or int.from_bytes(secrets.token_bytes(8), "big") or 1
        replace_atomically(path, f"{hub_id:016x}\n".encode())
        return hub_id

    def log_for(self, topic: str, now: int) -> TopicLog:
        topic_log = self.logs.get(topic)
        if topic_log is None:
            topic_log = self.logs[topic] = TopicLog.create(topic, self.topics_dir, self.settings, now, self.files)
            self.generation += 1
            self._new_dirs.add(self.topics_dir)
            self._new_dirs.add(topic_log.directory)
        return topic_log

    def close(self) -> None:
        for topic_log in self.logs.values():
            topic_log.close()
        self.files.close()
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        self._lock.release()

    # -- durability --------------------------------------------------------------------

    def wrote(self, segment: Segment) -> None:
        """``segment`` has unsynced bytes."""
        if self.durability == "fsync":
            self._dirty[segment] = None
            if segment.synced == 0:  # a new file: its directory entry must reach the disk too
                self._new_dirs.add(segment.path.parent)

    def when_durable(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once everything written so far is durable per the mode."""
        if self.durability != "fsync":
            callback()
            return
        self._after_sync.append(callback)
        if self.on_commit_wanted is not None:
            self.on_commit_wanted()

    # The group commit itself runs in the I/O shell (hub/shell/committer.py): it takes a
    # Commit when one is wanted, runs its fsyncs in a worker thread, and hands it back here.

    def commit_wanted(self) -> bool:
        """Publishers wait for an fsync (``when_durable``) that no commit has started yet."""
        return bool(self._after_sync)

    def begin_commit(self) -> Commit:
        """Take everything written so far, and everyone waiting on it, into one commit."""
        segments = list(self._dirty)
        # Sizes are taken here, in the loop: everything appended so far is covered by the fsync.
        commit = Commit(segments, [s.size for s in segments], list(self._new_dirs), self._after_sync)
        self._dirty.clear()
        self._new_dirs.clear()
        self._after_sync = []
        return commit

    def finish_commit(self, commit: Commit, sizes: list[int] | None, error: OSError | None = None) -> None:
        """``commit.sync()`` returned ``sizes`` (or raised ``error``): mark what is durable, run callbacks."""
        if error is not None:
            self.storage_error = error
            log.critical("fsync failed: %s: acknowledgements withheld, publishers get STORAGE_ERROR", error,
                         extra={"event": "storage_failed", "reason": "fsync"})
        else:
            assert sizes is not None
            self.fsyncs += 1
            for segment, size in zip(commit.segments, sizes, strict=True):
                segment.synced = max(segment.synced, size)
                if self._journal is not None:
                    self._journal.write(f"{segment.path} {segment.synced}\n")
            if self._journal is not None:
                self._journal.flush()
        for callback in commit.callbacks:
            callback()

    # -- retention ---------------------------------------------------------------------

    def enforce_retention(self, now_us: int, keep_from: Callable[[str], int]) -> int:
        removed = 0
        for topic, topic_log in self.logs.items():
            for path in topic_log.enforce_retention(now_us, keep_from(topic)):
                log.info("retention removed %s", path, extra={"event": "segment_removed", "reason": "retention"})
                removed += 1
        return removed


@dataclass(slots=True)
class Commit:
    """One group commit: the segments and new directory entries to make durable, and who waits."""

    segments: list[Segment]
    #: each segment's size when the commit began: what its fsync makes durable
    sizes: list[int]
    dirs: list[Path]
    callbacks: list[Callable[[], None]]

    def sync(self) -> list[int]:
        """Blocking (a worker thread): fsync every segment and directory; the synced size of each segment.

        Each file is opened by path for its fsync, never through the loop's file cache
        (see :mod:`hub.storage.file_cache`)."""
        for segment in self.segments:
            fsync_path(segment.path)
        for directory in self.dirs:
            sync_directory(directory)  # a new file's directory entry must be durable too, or the file may vanish
        return self.sizes
