"""Mesh scenarios: M1 (3 hubs, publisher on A, subscriber on C) and L2 (latency across 2 hubs),
beside py-libp2p's GossipSub on three hosts (M1) and two routed nats-servers (L2) in the same run.

* ``pub0sub-mesh3`` / ``pub0sub-mesh2``: a :class:`MeshCluster` server -- 3 (or 2)
  ``python -m hub`` processes meshed on 127.0.0.1, the first alone, the rest
  bootstrapped to it.  A measurement subscribes on the last hub, waits until the
  first hub's STATUS shows that interest (otherwise the first messages would be
  published before the mesh knows anyone wants them), then starts the publisher
  on the first hub.
* GossipSub: ``python -m hub.tools.gossipsub_bench`` (with the hub: it needs the hub's libp2p
  host) runs three libp2p hosts (Noise + yamux, like the hubs) in one process, fully connected;
  a publisher on host 1, a subscriber on host 3.  It publishes as fast as ``publish()`` returns
  and counts what arrives within a bounded time -- once as configured by default
  (spam protection: 10 msgs/s per topic per peer) and once with spam protection off.
* ``nats-cluster``: a :class:`~sdk.tools.bench.peers.NatsCluster`, two nats-servers joined by a
  route; L2's NATS method runs L1's nats-py workers across it exactly as pub0sub's run
  across the mesh (subscriber on server B, its interest seen by server A, publisher on A).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

import wire

from .orchestrate import READY_TIMEOUT, latency_measurement, latency_workers, throughput, worker
from .peers import Cluster, FirstAddress, NatsCluster, Server, missing
from .procs import EXEMPT_LOOPBACK, HOST, LineReader, python_module, spawn, stop_process
from .registry import Method, Params, Scenario, register_method, register_scenario, register_server, with_defaults
from .results import FigureSpec, Measurement
from .wireproto import CHANNEL

#: How long the first hub may take to see the last hub's interest (a SUBSCRIBE round trip).
INTEREST_TIMEOUT = 15.0
#: Hubs in the overlay: time for a subscriber hub's INTEREST to reach its rendezvous owners.
OVERLAY_SETTLE = 0.5
MESH_TIMEOUT = 30.0
#: GossipSub: messages published per measurement at most, and how long arrivals are awaited after.
GOSSIP_MAX_MESSAGES = 5_000
GOSSIP_DRAIN_SECONDS = 5.0
#: As sdk/tools/bench/pub0sub.py: unpaced publishers must not get a slow subscriber cancelled.
BENCH_PENDING_BYTES = 1 << 30


# -- the cluster server -------------------------------------------------------------


class _Hub:
    def __init__(self, argv: list[str]) -> None:
        self.proc = spawn(argv)
        self.lines = LineReader(self.proc)
        self.address: tuple[str, int] = (HOST, 0)
        self.peer_id = ""
        self.multiaddr = ""

    def ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        got: dict[str, str] = {}
        while not {"listening", "mesh"} <= set(got):
            line = self.lines.next_line(timeout=deadline - time.monotonic(), what="mesh hub")
            if line.split():
                got[line.split()[0]] = line
        host, _, port = got["listening"].split()[-1].rpartition(":")
        self.address = (host, int(port))
        self.multiaddr = got["mesh"].split()[-1]
        self.peer_id = self.multiaddr.rsplit("/p2p/", 1)[1]


class MeshCluster(FirstAddress):
    """``hubs`` hub processes in one mesh; ``address`` is the first (publisher) hub's,
    ``addresses`` all of them in start order."""

    def __init__(self, hubs: int, *extra: str) -> None:
        """``extra``: more ``pub0sub hub`` options for every hub."""
        self.name = f"pub0sub-mesh{hubs}"
        self.count = hubs
        self.extra = extra
        self.hubs: list[_Hub] = []

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [h.address for h in self.hubs]

    def _argv(self, bootstrap: str | None) -> list[str]:
        # No --data-dir: no topic logs, so this measures routing and forwarding like T1's log-less hub.
        args = ["--listen", f"{HOST}:0", "--mesh-listen", f"/ip4/{HOST}/tcp/0", "--max-pending-bytes",
                str(BENCH_PENDING_BYTES), "--log-level", "WARNING", *EXEMPT_LOOPBACK, *self.extra]  # fmt: skip
        if bootstrap:
            args += ["--bootstrap", bootstrap]
        return python_module("hub", *args)

    def start(self) -> None:
        try:
            first = _Hub(self._argv(None))
            self.hubs.append(first)
            first.ready()
            rest = [_Hub(self._argv(first.multiaddr)) for _ in range(1, self.count)]
            self.hubs += rest
            for hub in rest:
                hub.ready()
            self._wait_meshed()
        except BaseException:
            self.stop()
            raise

    def _wait_meshed(self) -> None:
        deadline = time.monotonic() + MESH_TIMEOUT
        for hub in self.hubs:
            want = {h.peer_id for h in self.hubs if h is not hub}
            while not want <= {p["peer_id"] for p in hub_status(hub.address)["mesh"]["peers"] if p["connected"]}:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.name}: mesh not converged after {MESH_TIMEOUT:.0f}s")
                time.sleep(0.05)

    def wait_interest(self, at: int, of: int, topic: str = CHANNEL, timeout: float = INTEREST_TIMEOUT) -> None:
        """Block until hub ``at`` lists ``topic`` in hub ``of``'s announced interest.

        Hubs in the overlay (``PUB0SUB_HUB_MESH_OVERLAY=1`` in the environment, docs/scale.md)
        keep interest at rendezvous owners, not per peer: there, wait until hub ``of`` reaches
        every hub and give its INTEREST the round trip it takes (a publish meanwhile is held
        until the owners answer, at most the overlay's ``park_max``)."""
        pid = self.hubs[of].peer_id
        deadline = time.monotonic() + timeout
        if hub_status(self.hubs[at].address)["mesh"].get("overlay") is not None:
            while hub_status(self.hubs[of].address)["mesh"]["overlay"]["reachable"] < len(self.hubs) - 1:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"hub {of} does not reach every hub of the overlay")
                time.sleep(0.05)
            time.sleep(OVERLAY_SETTLE)
            return
        while True:
            peers = hub_status(self.hubs[at].address)["mesh"]["peers"]
            if any(p["peer_id"] == pid and p["connected"] and topic in p["interest"] for p in peers):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"hub {at} never saw hub {of}'s interest in {topic!r}")
            time.sleep(0.01)

    def stop(self) -> None:
        for hub in reversed(self.hubs):
            stop_process(hub.proc)
        self.hubs = []


def hub_status(address: tuple[str, int], timeout: float = 5.0) -> dict[str, Any]:
    """One STATUS round trip on a fresh raw connection."""
    decoder = wire.FrameDecoder(accept=wire.HUB_TO_CLIENT_OPCODES, limits=wire.Limits(max_body=64 << 20))
    with socket.create_connection(address, timeout=timeout) as s:
        s.sendall(wire.Hello(client_name="bench-status").encode() + wire.Status().encode())
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                raise ConnectionError("hub closed the status connection")
            decoder.feed(chunk)
            for frame in decoder:
                if isinstance(frame, wire.StatusReply):
                    return dict(json.loads(frame.document))


register_server("pub0sub-mesh3", lambda: MeshCluster(3))
register_server("pub0sub-mesh2", lambda: MeshCluster(2))
register_server("nats-cluster", NatsCluster)


def run_across(cluster: Cluster, sub_argv: list[str], pub_argv: list[str], sub_hub: int, *,
               timeout: float) -> dict[str, Any]:  # fmt: skip
    """Subscriber on hub ``sub_hub`` (ready), its interest seen by hub 0, then the publisher on hub 0."""
    sub = spawn(sub_argv)
    pub = None
    try:
        lines = LineReader(sub)
        line = lines.next_line(timeout=READY_TIMEOUT, what=f"subscriber {sub.pid}")
        if line != "ready":
            raise RuntimeError(f"subscriber said {line!r} instead of ready")
        cluster.wait_interest(0, sub_hub)
        pub = spawn(pub_argv, capture=False)
        result = json.loads(lines.next_line(timeout=timeout + READY_TIMEOUT, what=f"subscriber {sub.pid}"))
        return dict(result)
    finally:
        stop_process(pub)
        stop_process(sub)


def _at(cluster: Cluster, hub: int) -> dict[str, Any]:
    host, port = cluster.addresses[hub]
    return {"host": host, "port": port}


def _m1(sub_role: str, pub_role: str) -> Callable[[Server | None, Params], Measurement]:
    def measure(server: Server | None, p: Params) -> Measurement:
        assert isinstance(server, MeshCluster)
        last = server.count - 1
        sub = worker(sub_role, **_at(server, last), messages=p.messages, size=p.size, timeout=p.timeout)
        pub = worker(pub_role, **_at(server, 0), messages=p.messages, size=p.size)
        t = throughput([run_across(server, sub, pub, last, timeout=p.timeout)])
        return Measurement(figures={"delivered": t.pop("rate")}, details=t)

    return measure


def _l2(sub_role: str, pub_role: str) -> Callable[[Server | None, Params], Measurement]:
    def measure(server: Server | None, p: Params) -> Measurement:
        assert isinstance(server, MeshCluster | NatsCluster)
        sub, pub = latency_workers(sub_role, pub_role, p, sub_at=_at(server, 1), pub_at=_at(server, 0))
        return latency_measurement(run_across(server, sub, pub, 1, timeout=(p.seconds or 0) + p.timeout))

    return measure


# -- GossipSub ---------------------------------------------------------------------------


def _gossipsub(spam_protection: bool) -> Callable[[Server | None, Params], Measurement]:
    def measure(server: Server | None, p: Params) -> Measurement:
        messages = min(p.messages or GOSSIP_MAX_MESSAGES, GOSSIP_MAX_MESSAGES)
        # A process of its own: it needs the hub's libp2p host, and the SDK never imports hub modules.
        argv = python_module("hub.tools.gossipsub_bench", "--messages", str(messages), "--size", str(p.size),
                             "--topic", CHANNEL, "--drain", str(GOSSIP_DRAIN_SECONDS), "--timeout", str(p.timeout),
                             *([] if spam_protection else ["--no-spam-protection"]))  # fmt: skip
        proc = spawn(argv)
        try:
            line = LineReader(proc).next_line(
                timeout=p.timeout + READY_TIMEOUT + GOSSIP_DRAIN_SECONDS, what="gossipsub"
            )
            result = json.loads(line)
        finally:
            stop_process(proc)
        return Measurement(figures={"delivered": result["rate"]}, details=result)

    return measure


# -- registration ---------------------------------------------------------------------------

M1 = register_scenario(Scenario(
    id="M1", title="3 hubs meshed, publisher on A -> subscriber on C, delivered msgs/s",
    figures=(FigureSpec(name="delivered", unit="msgs/s"),),
    defaults=with_defaults(messages=300_000, quick_messages=50_000),
))  # fmt: skip
L2 = register_scenario(Scenario(
    id="L2", title="paced 10k msgs/s across 2 hubs (mesh link), publish->deliver latency",
    figures=(FigureSpec(name="p50", unit="us", higher_is_better=False),
             FigureSpec(name="p99", unit="us", higher_is_better=False),
             FigureSpec(name="p99.9", unit="us", higher_is_better=False)),
    defaults=with_defaults(messages=0, quick_messages=0, seconds=5.0, quick_seconds=0.5),
))  # fmt: skip

_RAW = "raw socket PUBLISH frames (1000 msgs each) -> hub A -> mesh -> hub C -> "
_M1_RAW = _m1("sub-pub0sub-raw", "pub-pub0sub-raw")
_M1_SDK = _m1("sub-pub0sub-sdk", "pub-pub0sub-sdk")
for _m in (
    Method(system="pub0sub", method="fastest", server="pub0sub-mesh3", measure=_M1_RAW,
           tooling=_RAW + "subscriber counting DELIVER record counts"),
    Method(system="pub0sub", method="python", server="pub0sub-mesh3", measure=_M1_SDK,
           tooling="SDK client.publish loop on hub A -> mesh -> SDK sub.batches() on hub C"),
    Method(system="gossipsub", method="default", measure=_gossipsub(True),
           tooling="py-libp2p GossipSub, 3 hosts in one process (Noise+yamux, fully connected), publish() loop on "
                   "host 1 -> subscription on host 3; default config (spam protection 10 msgs/s/topic/peer)"),
    Method(system="gossipsub", method="nospam", measure=_gossipsub(False),
           tooling="same, GossipSub(spam_protection_enabled=False)"),
):  # fmt: skip
    register_method("M1", _m)
for _method, _sub, _pub, _tooling in (
    ("python", "lat-sub-pub0sub", "lat-pub-pub0sub",
     "SDK paced publisher on hub A -> mesh link -> SDK sub.batches() on hub B"),
    ("python-callback", "lat-sub-pub0sub-callback", "lat-pub-pub0sub",
     "SDK paced publisher on hub A -> mesh link -> SDK on_batch subscriber (reader task) on hub B"),
    ("fastest", "lat-sub-pub0sub-raw", "lat-pub-pub0sub-raw",
     "raw paced publisher on hub A -> mesh link -> raw decoding subscriber on hub B"),
):  # fmt: skip
    register_method("L2", Method(system="pub0sub", method=_method, server="pub0sub-mesh2", measure=_l2(_sub, _pub),
                                 tooling=_tooling))  # fmt: skip
register_method(
    "L2",
    Method(
        system="nats",
        method="python",
        server="nats-cluster",
        unavailable=missing("nats-server"),
        measure=_l2("lat-sub-nats", "lat-pub-nats"),
        tooling="nats-py paced publisher on server A -> route -> nats-py callback subscriber on server B",
    ),
)
