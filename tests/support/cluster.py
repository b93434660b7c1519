"""A cluster of ``python -m hub`` subprocesses with a mesh, for the cluster tests and benchmarks.

>>> cluster = Cluster(tmp_path, heartbeat_interval=0.5)          # doctest: +SKIP
>>> a, b, c = cluster.start(3)     # a without --bootstrap, b and c bootstrapped to a
>>> cluster.wait_converged()       # every hub shows N-1 connected peers (v3: and reaches them)
>>> cluster.wait_interest(a, "orders.eu", c)   # a sends orders.eu to c (sends_to: v2 or v3)
>>> c.kill(); c = cluster.restart(c)           # same data dir -> same peer id
>>> cluster.close()

Each hub has its own data dir under the base dir, so a restart keeps its
libp2p identity (peer id) and its topic logs.  Processes are stopped by their
PID; every wait polls a hub's STATUS with a deadline (no fixed sleeps).
Status is read through a raw socket speaking ``wire`` -- it works from any
thread, so trio tests call the ``a*`` variants, which poll in a worker thread
and keep their own event loop (and its SDK clients' heartbeats) running.
Waits of one's own: ``wait_until(check, ..., **HUB_POLL)`` (tests/support/waiting.py).
"""

from __future__ import annotations

import bisect
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio

import wire
from hub.core.mesh.protocols import MeshVersion
from hub.core.overlay.membership import RENDEZVOUS_OWNERS, hub_ring_position, key_ring_position, rendezvous_key
from hub.shell.watchdog import PAUSED, STALL_ENDED, STALLED
from sdk.tools.bench.procs import LineReader
from sdk.tools.cluster import restartable_ports
from tests.support.forkserver import ForkedProcess
from tests.support.hubprocess import start_hub_process
from tests.support.waiting import await_until, wait_until

START_TIMEOUT = 30.0
POLL_INTERVAL = 0.05
STATUS_TIMEOUT = 5.0


#: What the hubs' loop watchdog writes (hub/shell/watchdog.py): shown in a failed test's report.
WATCHDOG_EVENTS = tuple(f"event={e}" for e in (STALLED, STALL_ENDED, PAUSED))


class HubError(RuntimeError):
    pass


class Hub:
    """One hub subprocess: its addresses, identity and data dir; stopped by PID."""

    def __init__(self, name: str, data_dir: Path, args: Sequence[str], *, mesh_port: int = 0) -> None:
        self.name = name
        self.data_dir = data_dir
        self.args = list(args)
        self.mesh_port = mesh_port
        self.log_path = data_dir.parent / f"{name}.log"
        self.proc: subprocess.Popen[str] | ForkedProcess | None = None
        self.address = ""
        self.hub_id = ""
        self.multiaddr = ""
        self.peer_id = ""
        #: ``HOST:PORT`` of its operators' port when started with ``--metrics-listen``.
        self.metrics_address = ""
        self.restarts = 0

    # -- process ---------------------------------------------------------------------

    def spawn(self) -> None:
        """Start the process; :meth:`ready` reads its start-up lines (so several can boot at once)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.mesh_port:
            # Not port 0: a restart listens on the same port (peers' redials find the hub), and a
            # port from the ephemeral range could be some connection's source port by then.
            [self.mesh_port] = restartable_ports(1)
        args = [
            "--listen", "127.0.0.1:0",
            "--mesh-listen", f"/ip4/127.0.0.1/tcp/{self.mesh_port}", "--data-dir", str(self.data_dir), *self.args,
        ]  # fmt: skip
        # stderr to a file: a pipe nobody reads would block a chatty hub.
        with open(self.log_path, "a") as log:
            self.proc = start_hub_process(args, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stderr=log)

    def ready(self, timeout: float = START_TIMEOUT) -> Hub:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        # A reader thread: select() on a text pipe misses lines already in Python's buffer.
        reader = LineReader(self.proc)
        lines: dict[str, str] = {}
        wanted = {"listening", "hub", "mesh"} | ({"metrics"} if "--metrics-listen" in self.args else set())
        try:
            while not wanted <= set(lines):
                try:
                    line = reader.next_line(timeout=deadline - time.monotonic(), what=f"hub {self.name}")
                except (RuntimeError, TimeoutError) as exc:
                    raise HubError(f"{exc}\n{self.log_tail()}") from None
                if line.split():
                    lines[line.split()[0]] = line
        except BaseException:
            self.kill()
            raise
        self.address = lines["listening"].split()[-1]
        self.hub_id = lines["hub"].split()[-1]
        self.multiaddr = lines["mesh"].split()[-1]
        self.peer_id = self.multiaddr.rsplit("/p2p/", 1)[1]
        if "metrics" in lines:
            self.metrics_address = lines["metrics"].split("//")[1].split("/")[0]
        # Keep the port: a restart listens on it again, so peers' redials find the hub.
        self.mesh_port = int(self.multiaddr.split("/tcp/")[1].split("/")[0])
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL by PID: no goodbye to peers or clients."""
        self._end(signal.SIGKILL)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM by PID, SIGKILL if it does not exit within ``timeout``."""
        self._end(signal.SIGTERM, timeout)

    def _end(self, sig: int, timeout: float = 10.0) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout)
        if proc.stdout is not None:
            proc.stdout.close()

    def log_lines(self) -> list[str]:
        """This hub's log so far (none yet: empty)."""
        try:
            return self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return []

    def loop_reports(self) -> list[str]:
        """The watchdog's lines in this hub's log (hub/shell/watchdog.py), stacks unfolded."""
        return [line.replace("\\n", "\n") for line in self.log_lines() if any(e in line for e in WATCHDOG_EVENTS)]

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_lines()[-lines:])

    # -- status ------------------------------------------------------------------------

    @property
    def host_port(self) -> tuple[str, int]:
        host, port = self.address.rsplit(":", 1)
        return host, int(port)

    def status(self, timeout: float = STATUS_TIMEOUT) -> dict[str, Any]:
        """The hub's STATUS_REPLY document, through a short-lived raw client connection."""
        decoder = wire.FrameDecoder(accept=wire.HUB_TO_CLIENT_OPCODES, limits=wire.Limits(max_body=64 << 20))
        with socket.create_connection(self.host_port, timeout=timeout) as s:
            s.sendall(wire.Hello(client_name="cluster-test").encode() + wire.Status().encode())
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    raise HubError(f"hub {self.name} closed the status connection")
                decoder.feed(chunk)
                for frame in decoder:
                    if isinstance(frame, wire.StatusReply):
                        return dict(json.loads(frame.document))

    def mesh(self) -> dict[str, Any]:
        return dict(self.status()["mesh"])

    def overlay(self) -> dict[str, Any] | None:
        """The overlay's status (mesh v3: a hub started with ``--mesh-overlay``), None for mesh v2."""
        found = self.mesh()["overlay"]
        return None if found is None else dict(found)

    def peer(self, other: Hub | str, mesh: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """This hub's status entry for ``other`` (a Hub or a peer id), or None if unknown."""
        pid = other.peer_id if isinstance(other, Hub) else other
        for entry in (mesh or self.mesh())["peers"]:
            if entry["peer_id"] == pid:
                return dict(entry)
        return None

    def connected_peers(self) -> set[str]:
        return {p["peer_id"] for p in self.mesh()["peers"] if p["connected"]}

    def __repr__(self) -> str:
        return f"Hub({self.name}, pid={self.proc.pid if self.proc else None}, {self.address}, {self.peer_id[-8:]})"


# -- waiting -------------------------------------------------------------------------------

#: How a wait polls hub processes (keyword arguments for tests.support.waiting): a hub that is
#: restarting refuses or drops the status connection, which means "not yet"; every STATUS is a
#: fresh connection to the hub under test, so at most 20 a second.
HUB_POLL: dict[str, Any] = {"retry_on": (OSError, HubError), "interval": POLL_INTERVAL}


async def expect_nothing(sub: Any, seconds: float) -> None:
    """Fail if ``sub`` delivers anything within ``seconds``."""
    with trio.move_on_after(seconds):
        msg = await sub.__anext__()
        raise AssertionError(f"expected nothing, got {msg.data!r}")


async def next_data(sub: Any) -> bytes:
    """The data of ``sub``'s next message (15 s at most)."""
    with trio.fail_after(15):
        return bytes((await sub.__anext__()).data)


async def publish_until_linked(pub: Any, sub: Any, topic: str, *, seconds: float = 30.0, **publish: Any) -> Any:
    """Publish probes on ``pub`` until ``sub`` (on another hub) gets one: its interest has reached
    ``pub``'s hub.  ``publish`` are ``publish_acked``'s options (a key, headers); the message.

    The probes published after the first to arrive are on their way too (those before it were
    published before the interest was known, and are not): they are taken here, so the caller's
    next message is its own."""
    sent = 0
    with trio.fail_after(seconds):
        while True:
            await pub.publish_acked(topic, b"probe %d" % sent, **publish)
            sent += 1
            with trio.move_on_after(0.5):
                first = await sub.__anext__()
                break
        for _ in range(int(first.data.split()[1]) + 1, sent):
            await sub.__anext__()
    return first


# What arrived by the deadline is the result: the test compares it and says what is missing.
async def collect(sub: Any, count: int, timeout: float) -> list[bytes]:  # noqa: ASYNC109
    """Message payloads from an SDK subscription until ``count`` arrived or ``timeout`` passed."""
    got: list[bytes] = []
    with trio.move_on_after(timeout):
        async for batch in sub.batches():
            got.extend(m.data for m in batch)
            if len(got) >= count:
                break
    return got


def converged(group: Sequence[Hub]) -> bool:
    """Every hub of ``group`` has a live link to every other; and, mesh v3, each overlay hub's map
    reaches every other (link-state settled: it routes to them and computes the rendezvous
    owners the others do)."""
    overlays = []
    for hub in group:
        want = {h.peer_id for h in group if h is not hub}
        mesh = hub.mesh()
        if not want <= {p["peer_id"] for p in mesh["peers"] if p["connected"]}:
            return False
        if mesh["overlay"] is not None:
            overlays.append(mesh["overlay"])
    return all(o["reachable"] >= len(overlays) - 1 for o in overlays)


def sends_to(at: Hub, topic: str, of: Hub, *, present: bool = True, hubs: Iterable[Hub] = ()) -> bool:
    """Does ``at`` send what is published on ``topic`` to hub ``of``, for ``of``'s pattern
    ``topic`` (with ``present=False``: does it no longer)?  ``hubs``: the live hubs (mesh v3
    asks the key's owners among them).

    Mesh v2 (full mesh; also an overlay hub's v2 link with a v2 hub): ``at``'s link to ``of``
    is up and carries ``of``'s pattern.
    Mesh v3 (``--mesh-overlay``): interest lives at the pattern's rendezvous key's owners and a
    publisher learns it by watching the key (docs/scale.md "Interest: rendezvous by key"), so
    a set published now goes to ``of`` when ``of`` is reachable from ``at`` and either ``at``
    watches the key and the owners' answers name ``of``'s pattern, or ``at`` does not watch it
    yet (its first publish waits for the owners' answers) and one of the key's owners, as
    ``at``'s complete map gives them, holds the pattern (a publisher sends to every hub either
    owner names).  No longer: none does.
    """
    mesh = at.mesh()
    overlay = mesh.get("overlay")
    entry = at.peer(of, mesh)
    if overlay is not None and entry is not None and entry["protocol"] is None:
        return False  # a link to it being set up: v2 or v3 is not known yet (ask again)
    if overlay is None or (entry is not None and not MeshVersion.from_protocol(entry["protocol"]).overlay):
        if present:
            return entry is not None and entry["connected"] and topic in entry["interest"]
        return not (entry is not None and topic in entry["interest"])
    if of.hub_id in overlay["unreachable"]:
        return not present
    key = rendezvous_key(topic)
    watched = overlay["watched"].get(key)
    if watched is not None and watched["answered"]:
        return (topic in watched["hubs"].get(of.hub_id, ())) == present
    # Not watching yet: the owners say.  Which hubs own the key depends on the map, so only a
    # map that reaches every overlay hub gives the owners the harness computes.
    ring = [h for h in hubs if h is at or _overlay_linked(h)]
    if overlay["reachable"] != len(ring) - 1 or of not in ring:
        return False
    held = [topic in _owned(owner, key).get(of.hub_id, ()) for owner in owners_of(key, ring)]
    return any(held) == present


def _overlay_linked(hub: Hub) -> bool:
    """Is ``hub`` in an overlay (an overlay hub with a v3 link; a hub refused by every peer is not)?"""
    overlay = hub.mesh()["overlay"]
    return overlay is not None and bool(overlay["links"])


def _owned(owner: Hub, key: str) -> dict[str, list[str]]:
    """Every hub's patterns under ``key`` as its owner ``owner`` holds them."""
    return dict(owner.mesh()["overlay"]["owned"].get(key, {}).get("hubs", {}))


def owners_of(key: str, hubs: Iterable[Hub]) -> list[Hub]:
    """The owners of rendezvous ``key`` among ``hubs`` by the overlay's rule
    (``Membership.owners``: the successors of the key on the ring of hub ids)."""
    ring = sorted((hub_ring_position(int(h.hub_id, 16)), h.hub_id, h) for h in hubs)
    start = bisect.bisect_left([position for position, _, _ in ring], key_ring_position(key))
    return [ring[(start + i) % len(ring)][2] for i in range(min(RENDEZVOUS_OWNERS, len(ring)))]


class Cluster:
    """N hubs meshed on 127.0.0.1; the first is the bootstrap of the others."""

    def __init__(
        self,
        base_dir: Path,
        *,
        heartbeat_interval: float | None = 0.5,
        heartbeat_misses: int | None = 3,
        cluster: str | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        self.base_dir = Path(base_dir)
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_misses = heartbeat_misses
        self.common: list[str] = ["--log-level", "INFO"]
        if heartbeat_interval is not None:
            self.common += ["--mesh-heartbeat-interval", str(heartbeat_interval)]
        if heartbeat_misses is not None:
            self.common += ["--mesh-heartbeat-misses", str(heartbeat_misses)]
        if cluster is not None:
            self.common += ["--cluster", cluster]
        self.common += list(extra)
        self.hubs: list[Hub] = []

    @property
    def heartbeat_bound(self) -> float:
        """interval x misses: how long a silent peer may stay 'connected'."""
        return (self.heartbeat_interval or 1.0) * (self.heartbeat_misses or 3)

    def _new(self, *, bootstrap: Sequence[str] = (), args: Sequence[str] = ()) -> Hub:
        name = f"hub{len(self.hubs)}"
        hub_args = [*self.common, *args]
        for addr in bootstrap:
            hub_args += ["--bootstrap", addr]
        hub = Hub(name, self.base_dir / name / "data", hub_args)
        self.hubs.append(hub)
        return hub

    def start(self, n: int, *, args: Sequence[str] = ()) -> list[Hub]:
        """Start ``n`` hubs: the first alone, the rest (booting in parallel) bootstrapped to it."""
        first = self._new(args=args)
        first.spawn()
        first.ready()
        rest = [self._new(bootstrap=[first.multiaddr], args=args) for _ in range(n - 1)]
        for hub in rest:
            hub.spawn()
        for hub in rest:
            hub.ready()
        return [first, *rest]

    def add(self, bootstrap: Hub | str | None = None, *, args: Sequence[str] = ()) -> Hub:
        """One more hub, bootstrapped to ``bootstrap`` (a Hub or a multiaddr; default: the first hub)."""
        target = bootstrap if bootstrap is not None else self.hubs[0]
        addr = target.multiaddr if isinstance(target, Hub) else target
        hub = self._new(bootstrap=[addr], args=args)
        hub.spawn()
        return hub.ready()

    def restart(self, hub: Hub) -> Hub:
        """Start ``hub`` again (after kill/stop): same data dir, same peer id, same mesh port."""
        if hub.alive:
            hub.stop()
        old_peer = hub.peer_id
        hub.restarts += 1
        hub.spawn()
        hub.ready()
        if hub.peer_id != old_peer:
            raise HubError(f"{hub.name} came back as {hub.peer_id}, not {old_peer}")
        return hub

    def live(self) -> list[Hub]:
        return [h for h in self.hubs if h.alive]

    # -- conditions (each returns a zero-argument check for wait_until / await_until) -

    def converged_check(self, hubs: Iterable[Hub] | None = None) -> Callable[[], bool]:
        group = list(hubs) if hubs is not None else self.live()
        return lambda: converged(group)

    def interest_check(self, at: Hub, topic: str, of: Hub, *, present: bool = True) -> Callable[[], bool]:
        return lambda: sends_to(at, topic, of, present=present, hubs=self.live())

    # -- waits --------------------------------------------------------------------------

    def wait_converged(self, hubs: Iterable[Hub] | None = None, timeout: float = 30.0) -> None:
        """Every hub (default: every live one) shows all the others as connected peers."""
        wait_until(self.converged_check(hubs), timeout=timeout, what="mesh convergence", **HUB_POLL)

    def wait_interest(self, at: Hub, topic: str, of: Hub, *, present: bool = True, timeout: float = 15.0) -> None:
        """Hub ``at`` sends (or no longer sends) ``topic`` to ``of`` for its pattern (:func:`sends_to`)."""
        what = f"{at.name} to see {of.name} {'want' if present else 'drop'} {topic!r}"
        wait_until(self.interest_check(at, topic, of, present=present), timeout=timeout, what=what, **HUB_POLL)

    # Passed on to await_until, which fails naming the wait: a caller's cancel scope could not.
    async def await_converged(self, hubs: Iterable[Hub] | None = None, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        check = self.converged_check(hubs)
        await await_until(check, timeout=timeout, what="mesh convergence", in_thread=True, **HUB_POLL)

    async def await_interest(
        # As await_converged.
        self, at: Hub, topic: str, of: Hub, *, present: bool = True, timeout: float = 15.0  # noqa: ASYNC109
    ) -> None:
        what = f"{at.name} to see {of.name} {'want' if present else 'drop'} {topic!r}"
        check = self.interest_check(at, topic, of, present=present)
        await await_until(check, timeout=timeout, what=what, in_thread=True, **HUB_POLL)

    def close(self) -> None:
        errors: list[BaseException] = []
        for hub in reversed(self.hubs):
            try:
                hub.stop()
            except Exception as exc:  # keep stopping the others
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            self.close()
        finally:
            # A failed test's report shows any hub whose event loop stood still, and where.
            if exc_type is not None and (report := stall_report(self.hubs)):
                print(report)


def stall_report(hubs: Iterable[Hub]) -> str:
    """Every hub's loop stalls and pauses, as the watchdog logged them ("" when there were none)."""
    return "\n".join(f"{hub.name}: {line}" for hub in hubs for line in hub.loop_reports())


@contextmanager
def converged_cluster(base_dir: Path, hubs: int = 3, *, extra: Sequence[str] = ()) -> Iterator[Cluster]:
    """``hubs`` hubs started and meshed (every one linked to every other), stopped at the end."""
    cluster = Cluster(base_dir, extra=extra)
    try:
        cluster.start(hubs)
        cluster.wait_converged()
        yield cluster
    finally:
        cluster.close()
