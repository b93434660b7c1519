"""N meshed hub processes on loopback: the launcher behind ``pub0sub cluster up`` and the demo.

The first hub starts alone; the others bootstrap from its multiaddr and find each other
through the DHT.  Each hub keeps its data (logs, identity) in ``DATA_ROOT/hub-<i>`` and
writes its output to ``DATA_ROOT/hub-<i>.log``, so stopping and starting the cluster again
brings back the same hubs with the same peer ids and data.

With a base port, hub *i* (from 0) listens for clients on ``base + 10*i`` and for the mesh
on the port after it (7420/7421, 7430/7431, ... from 7420), and -- with ``metrics`` -- serves
its metrics, probes and status page on the port after that (7422, 7432, ...), so the addresses
are known before the start; a hub whose ports are taken gets free ones instead.  The hubs run in
their own sessions: a Ctrl-C in the terminal reaches only the launcher, which stops them
in order (its clients first, then the hubs) -- and ``cluster up --detach`` can leave them.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..blocking import connect_blocking
from .cluster_secret import cluster_secret
from .local_tls import local_tls
from .port_leases import lease, renew
from .start_lines import start_lines

HUB_START_SECONDS = 30.0
CONVERGE_SECONDS = 30.0
STOP_SECONDS = 10.0
#: Client ports of consecutive hubs are this far apart; each hub's mesh port is its client port + 1,
#: its metrics port (``--metrics``) its client port + 2.
PORT_STEP = 10
HOST = "127.0.0.1"


@dataclass
class HubInfo:
    name: str
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    address: str = ""
    hub_id: str = ""
    multiaddrs: list[str] = field(default_factory=list)
    #: What other hubs dial instead, when it was started with ``--mesh-announce`` (see ``hub_args``)
    announced: list[str] = field(default_factory=list)
    #: ``http://HOST:PORT`` of its metrics, probes and status page ("" when started without them)
    metrics_url: str = ""

    @property
    def dial_addrs(self) -> list[str]:
        """The multiaddrs another hub bootstraps from: the announced ones, else those it listens on."""
        return self.announced or self.multiaddrs

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


def port_free(port: int) -> bool:
    """Nothing listens on ``127.0.0.1:port``: a trial bind (``SO_REUSEADDR``, as the hub's own
    check in hub/shell/ports.py, so a stopped hub's connections in TIME_WAIT do not count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def restartable_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now, below the kernel's ephemeral range: for a hub
    that is restarted on its ports.  A port from the range (what binding port 0 gives) can be
    taken, while its hub is down, as the source port of any outgoing connection on the machine,
    and the restart then fails with "address in use" (a fault test saw it, 2026-11-29).  Each is
    leased (:mod:`sdk.tools.port_leases`) so that no other pick hands it out before its hub binds."""
    low = _ephemeral_low()
    rng = random.Random()
    picked = lease((rng.randrange(max(1024, low // 3), low) for _ in range(50 * n)), n, port_free)
    if len(picked) < n:
        raise RuntimeError(f"no {n} free ports below {low} on {HOST}")
    return picked


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def planned_ports(base_port: int, index: int, note: Callable[[str], object], *, metrics: bool = False) -> Ports:
    """The ports of hub ``index`` from ``base_port``; free ones (:meth:`Ports.free`) if one of them is taken."""
    client = base_port + PORT_STEP * index
    planned = Ports(client, client + 1, client + 2 if metrics else None)
    taken = [p for p in planned.all() if not port_free(p)]
    if not taken:
        return planned
    note(f"hub-{index + 1}: port {' and '.join(map(str, taken))} in use on {HOST}; using free ports instead")
    return Ports.free(metrics=metrics)


@dataclass(frozen=True)
class Ports:
    """Where one hub listens: clients, mesh, and its metrics (None: no ``--metrics-listen``)."""

    client: int
    mesh: int
    metrics: int | None = None

    @classmethod
    def free(cls, *, metrics: bool) -> Ports:
        """Free ports a restart can listen on again (see :func:`restartable_ports`)."""
        ports = restartable_ports(3 if metrics else 2)
        return cls(ports[0], ports[1], ports[2] if metrics else None)

    def all(self) -> list[int]:
        return [self.client, self.mesh] + ([] if self.metrics is None else [self.metrics])


class LocalCluster:
    """Start, watch and stop a set of meshed hub processes (stopped by PID, never by name).

    ``base_port`` None: every hub on free ports (the demo).  ``metrics``: each hub serves
    ``--metrics-listen`` too.  ``note`` receives the lines a person should see while it starts
    (ports taken).  ``hub_args(name, ports)``: more arguments for one hub, at each start of it
    (the test bed's ``--mesh-announce`` of the proxy in front of its mesh port).
    """

    def __init__(
        self,
        hubs: int,
        data_root: Path,
        *,
        base_port: int | None = None,
        extra_args: Sequence[str] = (),
        metrics: bool = False,
        note: Callable[[str], object] = print,
        tls: bool = False,
        hub_args: Callable[[str, Ports], Sequence[str]] | None = None,
    ) -> None:
        if hubs < 1:
            raise ValueError("a cluster needs at least one hub")
        self.count = hubs
        self.data_root = data_root
        self.base_port = base_port
        self.extra_args = list(extra_args)
        self.hub_args = hub_args
        self.metrics = metrics
        self.note = note
        #: With ``tls``: the hubs speak TLS with a throwaway local CA's certificate (sdk/tools/local_tls.py).
        self.tls = local_tls(data_root / "tls") if tls else None
        if self.tls is not None:
            self.extra_args += self.tls.hub_args()
        #: Every hub proves this secret to the others before any mesh frame counts (sdk/tools/cluster_secret.py).
        self.secret_file = cluster_secret(data_root)
        self.extra_args += ["--cluster-secret-file", str(self.secret_file)]
        self.hubs: list[HubInfo] = []

    def start(self) -> None:
        try:
            for i in range(self.count):
                bootstrap = ["--bootstrap", self.hubs[0].dial_addrs[0]] if self.hubs else []
                ports = (Ports.free(metrics=self.metrics) if self.base_port is None
                         else planned_ports(self.base_port, i, self.note, metrics=self.metrics))  # fmt: skip
                self.hubs.append(self._start_hub(f"hub-{i + 1}", ports, bootstrap))
        except BaseException:
            self.stop()
            raise

    def _start_hub(self, name: str, ports: Ports, bootstrap: list[str]) -> HubInfo:
        data_dir = self.data_root / name
        data_dir.mkdir(parents=True, exist_ok=True)
        info = HubInfo(name, data_dir, self.data_root / f"{name}.log")
        metrics = [] if ports.metrics is None else ["--metrics-listen", f"{HOST}:{ports.metrics}"]
        argv = [
            sys.executable, "-m", "hub", "--name", name, "--listen", f"{HOST}:{ports.client}",
            "--mesh-listen", f"/ip4/{HOST}/tcp/{ports.mesh}", "--data-dir", str(data_dir), *metrics, *bootstrap,
            *self.extra_args, *(self.hub_args(name, ports) if self.hub_args is not None else ()),
        ]  # fmt: skip
        with open(info.log_path, "ab") as log:
            start = log.tell()
            info.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        try:
            self._read_start_lines(info, start, metrics=bool(metrics))
        except BaseException:
            stop_processes([info.proc])
            raise
        return info

    def _read_start_lines(self, info: HubInfo, offset: int, *, metrics: bool) -> None:
        """Wait (deadline) for the addresses the hub prints once it listens (its metrics URL last)."""
        assert info.proc is not None
        for line in start_lines(info.proc, info.log_path, offset, HUB_START_SECONDS, info.name):
            if line.startswith("listening on "):
                info.address = line.split()[-1]
            elif line.startswith("hub id "):
                info.hub_id = line.split()[-1]
            elif line.startswith("mesh announced as "):  # before the "listening" lines
                info.announced.append(line.split()[-1])
            elif line.startswith("mesh listening on "):
                info.multiaddrs.append(line.split()[-1])
            elif line.startswith("metrics on "):  # http://HOST:PORT/metrics; the page is at its root
                info.metrics_url = line.split()[-1].removesuffix("/metrics")
            if info.multiaddrs and (info.metrics_url or not metrics):
                return

    def restart(self, index: int) -> HubInfo:
        """Stop hub ``index`` (SIGTERM by PID) and start it again on the same data dir and ports,
        bootstrapping from another hub: the same hub to its clients and peers."""
        old = self.hubs[index]
        ports = self.ports_of(index)
        renew(ports.all())  # ours while it is down (see kill)
        if old.proc is not None:
            stop_processes([old.proc])
        others = [h for i, h in enumerate(self.hubs) if i != index and h.multiaddrs]
        bootstrap = ["--bootstrap", others[0].dial_addrs[0]] if others else []
        self.hubs[index] = self._start_hub(old.name, ports, bootstrap)
        return self.hubs[index]

    def kill(self, index: int) -> None:
        """SIGKILL hub ``index`` by its PID (a crash; :meth:`restart` starts it again).  Its ports
        are leased again first: the lease taken when they were picked may have ended long ago, and
        while the hub is down another pick (a test in another worker) could take them."""
        hub = self.hubs[index]
        renew(self.ports_of(index).all())
        if hub.proc is not None and hub.proc.poll() is None:
            hub.proc.send_signal(signal.SIGKILL)
            hub.proc.wait(STOP_SECONDS)

    def ports_of(self, index: int) -> Ports:
        """Where hub ``index`` listens (its clients', mesh and metrics ports), from its start lines."""
        hub = self.hubs[index]
        metrics_port = int(hub.metrics_url.rsplit(":", 1)[1]) if hub.metrics_url else None
        mesh_port = int(hub.multiaddrs[0].split("/tcp/")[1].split("/")[0])
        return Ports(int(hub.address.rsplit(":", 1)[1]), mesh_port, metrics_port)

    def wait_converged(self, timeout: float = CONVERGE_SECONDS) -> bool:
        """True once every hub is linked to every other one."""
        deadline = time.monotonic() + timeout
        want = self.count - 1
        while time.monotonic() < deadline:
            if all(self.connected_peers(h) >= want for h in self.hubs):
                return True
            time.sleep(0.2)
        return False

    def connected_peers(self, hub: HubInfo) -> int:
        try:
            with connect_blocking(hub.address, name="cluster", **self.client_options()) as client:
                peers = client.status().get("mesh", {}).get("peers", [])
        except (OSError, ConnectionError):
            return 0
        return sum(1 for p in peers if p.get("connected"))

    def client_options(self) -> dict[str, Any]:
        """What a client of these hubs connects with (the CA to verify them, under TLS)."""
        return self.tls.client_options() if self.tls is not None else {}

    def exited(self) -> list[HubInfo]:
        return [h for h in self.hubs if h.proc is not None and h.proc.poll() is not None]

    def stop(self) -> None:
        stop_processes([h.proc for h in self.hubs if h.proc is not None])

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_processes(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each child by its PID, wait, SIGKILL what is still there after :data:`STOP_SECONDS`."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def describe(cluster: LocalCluster) -> str:
    lines = []
    for hub in cluster.hubs:
        lines.append(f"{hub.name}: clients {hub.address}  mesh {hub.multiaddrs[0]}  data {hub.data_dir}")
        if hub.metrics_url:
            lines.append(f"       metrics {hub.metrics_url}/metrics  status page {hub.metrics_url}/")
    return "\n".join(lines)
