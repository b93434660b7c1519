"""What ``pub0sub cluster up`` leaves for ``cluster status`` and ``cluster down``: ``DATA_ROOT/cluster.json``.

The state file names each hub's client address, multiaddr, PID, data dir, log and metrics URL.  Whether a
hub listed there still runs is read from its data dir's lock, not from the PID alone: once a
hub is gone its PID may be reused by an unrelated process, while the lock (an ``flock`` the
kernel drops when the hub's process ends) cannot outlive it.  So nothing is ever signalled
unless it holds the lock of the data dir the state file gave it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cluster import LocalCluster

STATE_FILE = "cluster.json"
#: The hub's data-directory lock (``hub.storage.store.LOCK_FILE``): flock'ed while a hub runs, its PID inside.
LOCK_FILE = "hub.lock"
#: A lock held by a process that has not written its PID yet (it is starting).
UNKNOWN_PID = -1
STOP_SECONDS = 10.0
_POLL = 0.05


@dataclass
class HubEntry:
    name: str
    pid: int
    address: str
    multiaddr: str
    hub_id: str
    data_dir: str
    log: str
    #: The CA a client verifies this hub with ("" = plain TCP; state files older than TLS lack it).
    ca_file: str = ""
    #: ``http://HOST:PORT`` of its metrics and status page ("" without ``cluster up --metrics``)
    metrics_url: str = ""

    def holder(self) -> int | None:
        """PID of the process holding this hub's data dir (None: no hub runs on it)."""
        return lock_holder(Path(self.data_dir))

    def running(self) -> bool:
        """This very hub still runs: the lock of its data dir is held by its PID."""
        return self.holder() == self.pid


@dataclass
class ClusterState:
    data_root: Path
    launcher_pid: int
    detached: bool
    hubs: list[HubEntry] = field(default_factory=list)
    #: set by ``cluster down`` before it stops the hubs, so a foreground launcher seeing them
    #: go knows it was asked for
    stopping: bool = False

    @property
    def path(self) -> Path:
        return self.data_root / STATE_FILE

    @classmethod
    def of(cls, cluster: LocalCluster, *, detached: bool) -> ClusterState:
        hubs = [
            HubEntry(name=h.name, pid=h.pid, address=h.address, multiaddr=h.multiaddrs[0], hub_id=h.hub_id,
                     data_dir=str(h.data_dir.resolve()), log=str(h.log_path.resolve()),
                     ca_file=str(cluster.tls.ca.resolve()) if cluster.tls is not None else "",
                     metrics_url=h.metrics_url)
            for h in cluster.hubs
        ]  # fmt: skip
        return cls(cluster.data_root, os.getpid(), detached, hubs)

    @classmethod
    def read(cls, data_root: Path) -> ClusterState | None:
        """The state in ``data_root``; None if there is none; ValueError naming the file if unreadable."""
        path = data_root / STATE_FILE
        try:
            doc = json.loads(path.read_text())
            return cls(
                data_root,
                int(doc["launcher_pid"]),
                bool(doc["detached"]),
                [HubEntry(**entry) for entry in doc["hubs"]],
                bool(doc.get("stopping", False)),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} is not a cluster state file ({type(exc).__name__}: {exc}); "
                             "remove it if no cluster runs from there") from None

    def write(self) -> None:
        doc: dict[str, Any] = {
            "launcher_pid": self.launcher_pid,
            "detached": self.detached,
            "stopping": self.stopping,
            "hubs": [asdict(h) for h in self.hubs],
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp, self.path)  # readers see the old file or the new one, never half of one

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def running(self) -> list[HubEntry]:
        return [h for h in self.hubs if h.running()]


def lock_holder(data_dir: Path) -> int | None:
    """PID of the process holding ``data_dir``'s hub lock; None when none does.

    A shared lock taken for an instant is the probe: it fails only while a hub holds the
    exclusive one.
    """
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            with contextlib.suppress(OSError, ValueError):
                return int(os.pread(fd, 32, 0).decode("ascii").strip())
            return UNKNOWN_PID
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def process_alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie (a hub that exited but whose launcher has not reaped it yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_hubs(entries: list[HubEntry], *, timeout: float = STOP_SECONDS) -> dict[str, str]:
    """SIGTERM each hub that still runs (its lock held by its PID), wait, SIGKILL the ones left.

    Returns what happened to each, by name: ``stopped``, ``killed`` or ``not running``.
    """
    outcome = {h.name: "not running" for h in entries}
    targets = [h for h in entries if h.running()]
    for hub in targets:
        with contextlib.suppress(ProcessLookupError):
            os.kill(hub.pid, signal.SIGTERM)
        outcome[hub.name] = "stopped"
    deadline = time.monotonic() + timeout
    while any(process_alive(h.pid) for h in targets) and time.monotonic() < deadline:
        time.sleep(_POLL)
    killed = [h for h in targets if process_alive(h.pid) and h.running()]
    for hub in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(hub.pid, signal.SIGKILL)
        outcome[hub.name] = "killed"
    deadline = time.monotonic() + timeout
    while any(process_alive(h.pid) for h in killed) and time.monotonic() < deadline:
        time.sleep(_POLL)
    return outcome
