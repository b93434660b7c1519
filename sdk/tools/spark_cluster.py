"""A Spark standalone cluster on loopback: one master and N workers, from the ``pyspark`` package alone.

Behind ``pub0sub spark up`` and the cluster runs of ``pub0sub spark exactly-once``, ``spark scale``
and ``bench S1/S2``.  Each daemon is ``$SPARK_HOME/bin/spark-class`` (which ``exec``s the JVM,
so the PID we hold is the JVM's) with its output in ``ROOT/<name>.log``; the addresses are read
back from those logs, so every port can be 0.  The workers' Python is this interpreter (the
project's virtualenv): ``PYSPARK_PYTHON`` and ``PATH`` of the workers point at it, so executors
import ``sdk`` and ``wire`` from the same install as the driver.

Everything is stopped by PID: each daemon, and the processes under it (an executor JVM and its
Python workers), which are looked up in ``/proc`` before the daemon goes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .start_lines import start_lines

HOST = "127.0.0.1"
START_SECONDS = 90.0
STOP_SECONDS = 15.0
#: Heap of the master and worker daemons themselves (executors get ``--memory``): they keep little.
DAEMON_MEMORY = "256m"
_POLL = 0.1
STATE_FILE = "spark-cluster.json"
#: Driver settings for an application on such a cluster: 1-core executors that fit a worker's
#: default 1g, no driver UI.  ``spark.cores.max`` is the application's to set (all workers' cores).
DRIVER_CONF = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
}

_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_UI_URL = re.compile(r"Bound \w+WebUI to \S+, and started at http://[^:/]+:(\d+)")
_WORKER_AT = re.compile(r"Starting Spark worker (\S+) with")
_REGISTERED = re.compile(r"Successfully registered with master")


def spark_home() -> Path:
    """The installed pyspark package: it ships ``bin/spark-class`` and every jar a cluster needs."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class SparkDaemon:
    """One master or worker JVM, its log, and what it said about itself."""

    name: str
    log_path: Path
    #: None for a daemon of another process's cluster (attached from its state file)
    proc: subprocess.Popen[bytes] | None = None
    #: spark://host:port for the master, host:port for a worker
    address: str = ""
    ui: str = ""
    known_pid: int = 0
    #: processes under this daemon (executors, Python workers), as last seen in /proc
    children: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else self.known_pid

    @property
    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.known_pid > 0 and not _gone(self.known_pid)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "pid": self.pid, "address": self.address, "ui": self.ui, "log": str(self.log_path)}


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (Linux ``/proc``; an empty set elsewhere or once it is gone)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*/children"):
            with contextlib.suppress(OSError, ValueError):
                kids = {int(k) for k in task.read_text().split()}
                todo.extend(kids - found)
                found |= kids
    return found


def _signal_pids(pids: set[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # A zombie child of ours still answers kill(0): it has exited all the same.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    return True


class LocalSparkCluster:
    """Start, watch and stop a standalone master and ``workers`` workers on 127.0.0.1.

    ``port``/``ui_port`` of the master: 0 for any free port.  Each worker offers ``cores``
    cores and ``memory`` for executors (an application asking for more per executor than a
    worker offers gets no executor there).
    """

    def __init__(
        self,
        workers: int,
        root: Path,
        *,
        cores: int = 1,
        memory: str = "1g",
        port: int = 0,
        ui_port: int = 0,
        python: str = sys.executable,
        note: Callable[[str], object] = lambda line: None,
    ) -> None:
        if workers < 1:
            raise ValueError("a Spark cluster needs at least one worker")
        self.worker_count = workers
        self.root = root
        self.cores = cores
        self.memory = memory
        self.port = port
        self.ui_port = ui_port
        self.python = python
        self.note = note
        self.master: SparkDaemon | None = None
        self.workers: list[SparkDaemon] = []

    # -- a cluster another process runs (pub0sub spark up) ----------------------------------------

    @property
    def state_path(self) -> Path:
        return self.root / STATE_FILE

    def write_state(self) -> None:
        """``ROOT/spark-cluster.json``: the master URL and every daemon's PID, for :meth:`attach`."""
        assert self.master is not None
        state = {
            "master": self.master.to_json(), "workers": [w.to_json() for w in self.workers],
            "cores": self.cores, "memory": self.memory, "python": self.python, "launcher_pid": os.getpid(),
        }  # fmt: skip
        self.state_path.write_text(json.dumps(state, indent=2) + "\n")

    @classmethod
    def attach(cls, root: Path) -> LocalSparkCluster:
        """The cluster a ``pub0sub spark up --root ROOT`` runs.  Its daemons stay that command's:
        :meth:`stop` stops only what this object started (a worker started again after a kill)."""
        try:
            state = json.loads((root / STATE_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"no running cluster in {root} ({exc}): start one with pub0sub spark up") from None

        def daemon(d: dict[str, object]) -> SparkDaemon:
            return SparkDaemon(str(d["name"]), Path(str(d["log"])), None, str(d["address"]), str(d["ui"]),
                               int(str(d["pid"])))  # fmt: skip

        cluster = cls(len(state["workers"]), root, cores=state["cores"], memory=state["memory"], python=state["python"])
        cluster.master = daemon(state["master"])
        cluster.workers = [daemon(w) for w in state["workers"]]
        if not cluster.master.alive:
            raise RuntimeError(f"the Spark master of {root} (PID {cluster.master.pid}) is not running")
        return cluster

    # -- start ----------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The daemons' environment: loopback, small daemon heaps, the venv's Python for executors."""
        venv_bin = str(Path(self.python).parent)
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            # Executors run this interpreter, whatever the driver says: the package is installed in it.
            "PYSPARK_PYTHON": self.python,
            "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
            # The REST submission server listens on a fixed port (6066): not wanted here.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_WORKER_DIR": str(self.root / "work"),
            "PYTHONUNBUFFERED": "1",
        }

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.master = self._launch(
                "master",
                ["org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(self.port),
                 "--webui-port", str(self.ui_port)],
                [_MASTER_URL, _UI_URL],
            )  # fmt: skip
            for i in range(self.worker_count):
                self.workers.append(self._start_worker(i))
        except BaseException:
            self.stop()
            raise

    def _worker_argv(self) -> list[str]:
        assert self.master is not None
        return [
            "org.apache.spark.deploy.worker.Worker", "--host", HOST, "--port", "0", "--webui-port", "0",
            "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(self.root / "work"),
            self.master.address,
        ]  # fmt: skip

    def _start_worker(self, index: int) -> SparkDaemon:
        return self._launch(f"worker-{index + 1}", self._worker_argv(), [_WORKER_AT, _UI_URL, _REGISTERED])

    def _launch(self, name: str, argv: list[str], wanted: list[re.Pattern[str]]) -> SparkDaemon:
        daemon = SparkDaemon(name, self.root / f"{name}.log")
        command = [str(spark_home() / "bin" / "spark-class"), *argv]
        with open(daemon.log_path, "ab") as log:
            offset = log.tell()
            # Its own session: a Ctrl-C in the terminal reaches only the launcher, which stops it.
            daemon.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                           env=self.env(), start_new_session=True)  # fmt: skip
        try:
            self._read_start_lines(daemon, offset, wanted)
        except BaseException:
            self._stop_daemons([daemon])
            raise
        return daemon

    def _read_start_lines(self, daemon: SparkDaemon, offset: int, wanted: list[re.Pattern[str]]) -> None:
        assert daemon.proc is not None
        missing = list(wanted)
        for line in start_lines(daemon.proc, daemon.log_path, offset, START_SECONDS, f"Spark {daemon.name}"):
            for pattern in list(missing):
                found = pattern.search(line)
                if found is None:
                    continue
                missing.remove(pattern)
                if pattern is _MASTER_URL or pattern is _WORKER_AT:
                    daemon.address = found.group(1)
                elif pattern is _UI_URL:
                    daemon.ui = f"http://{HOST}:{found.group(1)}"
            if not missing:
                return

    # -- failures, for tests and the exactly-once run --------------------------------------------

    def kill_worker(self, index: int) -> int:
        """SIGKILL worker ``index`` and everything under it (its executor, their Python workers),
        as a machine that dies would; how many processes were killed."""
        worker = self.workers[index]
        pids = {worker.pid, *descendants(worker.pid)}
        _signal_pids(pids, signal.SIGKILL)
        if worker.proc is not None:
            worker.proc.wait(STOP_SECONDS)
        deadline = time.monotonic() + STOP_SECONDS
        while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(_POLL)
        return len(pids)

    def restart_worker(self, index: int) -> SparkDaemon:
        """Start worker ``index`` again (a new worker to the master, same cores and memory)."""
        old = self.workers[index]
        if old.alive:
            self._stop_daemons([old])
        # Its own log: a worker of ``spark up`` keeps its log to itself.
        if old.proc is None:
            self.workers[index] = self._launch(f"{old.name}-again", self._worker_argv(), [_WORKER_AT, _UI_URL,
                                                                                           _REGISTERED])  # fmt: skip
            return self.workers[index]
        self.workers[index] = self._start_worker(index)
        return self.workers[index]

    # -- stop -----------------------------------------------------------------------------------

    @property
    def daemons(self) -> list[SparkDaemon]:
        return [*self.workers, *([self.master] if self.master is not None else [])]

    def exited(self) -> list[SparkDaemon]:
        return [d for d in self.daemons if d.proc is not None and not d.alive]

    def stop(self) -> int:
        """Stop the workers, then the master; how many processes (daemons and their children) were stopped."""
        return self._stop_daemons(self.daemons)

    def _stop_daemons(self, daemons: list[SparkDaemon]) -> int:
        running = [d for d in daemons if d.proc is not None and d.alive]  # only our own
        for d in running:
            d.children = descendants(d.pid)
        everything = {pid for d in running for pid in (d.pid, *d.children)}
        # A worker stops its executors on SIGTERM; the executors' Python workers follow their JVM.
        _signal_pids({d.pid for d in running}, signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        while time.monotonic() < deadline and not all(_gone(pid) for pid in everything):
            for d in running:
                if d.proc is not None:
                    d.proc.poll()  # reap our own children so they stop answering
            time.sleep(_POLL)
        _signal_pids({pid for pid in everything if not _gone(pid)}, signal.SIGKILL)
        for d in running:
            if d.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    d.proc.wait(STOP_SECONDS)
        return len(everything)

    def __enter__(self) -> LocalSparkCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def master_url(self) -> str:
        assert self.master is not None
        return self.master.address

    def describe(self) -> str:
        assert self.master is not None
        lines = [f"master    {self.master.address}  web UI {self.master.ui}  PID {self.master.pid}"]
        for w in self.workers:
            lines.append(f"{w.name:<9} {w.address}  web UI {w.ui}  PID {w.pid}  "
                         f"({self.cores} core{'s' if self.cores != 1 else ''}, {self.memory})")  # fmt: skip
        lines.append(f"executors run {self.python} (PYSPARK_PYTHON); logs in {self.root}")
        return "\n".join(lines)
