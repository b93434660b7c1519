"""C1 and C1M: connections at scale -- idle subscribers held on one hub, and over a 6-hub mesh.

C1 holds :data:`ONE_HUB` subscriber connections on one hub (one nats-server beside it),
C1M :data:`MESH` over six meshed hubs (six routed nats-servers beside it), every
connection subscribed to one topic and otherwise idle (answering heartbeats).  The
connections come from load-generator processes (:mod:`sdk.tools.bench.c1_load`), each
holding at most :data:`PER_PROCESS` sockets from its own source address 127.0.0.k.
Figures: the servers' RSS per idle connection (RSS with the connections held less RSS
before, over the count), and the time one publish takes to reach every connection --
from the publisher's stamp to the last connection's read -- p50/p99 over
:data:`PUBLISHES` publishes sent one after the other, each once the previous one had
reached everyone.  The generators share the machine's two cores with the servers, so
the time to reach everyone includes the generators reading their sockets (the same
generator for every system).  Beside these: a healthy client's L1 on the first server,
idle and with the connections held (its ratio), and a steady phase of
:data:`STEADY_PUBLISHES` more publishes offered at :data:`STEADY_RATE` a second
(deliveries/s, the last read's lag, each server's CPU).
"""

from __future__ import annotations

import json
import math
import socket
import time
from typing import Any

import wire

from .c1_load import C1_TOPIC, STAMP, c1_payload
from .mesh import MeshCluster
from .orchestrate import latency_measurement, latency_workers, run_pubsub, worker
from .peers import Cluster, NatsCluster, Server, missing
from .procs import LineReader, spawn, stop_process
from .pub0sub import Pub0subHub
from .pub0sub_clients import _connect as pub0sub_connect
from .registry import Method, Params, Scenario, register_method, register_scenario, register_server, with_defaults
from .results import FigureSpec, Measurement
from .wireproto import recv_until

ONE_HUB, MESH = 19_000, 100_000
QUICK_ONE_HUB, QUICK_MESH = 300, 1_200
#: Sockets per load-generator process: under its 20,000 descriptors, with room to spare.
PER_PROCESS = 16_000
PUBLISHES, QUICK_PUBLISHES = 20, 3
#: The steady phase: this many more publishes, offered at STEADY_RATE a second whether or not
#: the previous one has reached everyone (the servers may batch them into one write per connection).
STEADY_PUBLISHES, QUICK_STEADY_PUBLISHES = 20, 3
STEADY_RATE = 4.0
MESH_SIZE = 6
#: Seconds allowed per 1,000 connections to be opened and subscribed (plus a floor).
CONNECT_SECONDS_PER_1000 = 10.0
PUBLISH_TIMEOUT = 60.0
#: Pause after the last connection is confirmed before RSS is read (allocator settles).
SETTLE_SECONDS = 2.0

#: The hubs' heartbeat interval in C1: the bench's nats-servers PING every 10 minutes
#: (sdk/tools/bench/peers.py), so the hubs do too.  At the default 5 s, 19,000 idle
#: connections are 3,800 PINGs and PONGs a second; on a loaded 2-core machine a hub that
#: fell behind reading the PONGs declared their clients dead (HEARTBEAT_TIMEOUT).
HEARTBEAT = ("--heartbeat-interval", "600")

register_server("pub0sub-c1", lambda: Pub0subHub(*HEARTBEAT))
register_server("pub0sub-mesh6", lambda: MeshCluster(MESH_SIZE, *HEARTBEAT))
register_server("nats-cluster6", lambda: NatsCluster(MESH_SIZE))


def _pids(server: Server) -> list[int]:
    """The server processes' PIDs (one server or every node of a cluster)."""
    if isinstance(server, MeshCluster):
        return [hub.proc.pid for hub in server.hubs]
    if isinstance(server, NatsCluster):
        return [pid for node in server.nodes for pid in _pids(node)]
    proc = getattr(server, "_proc", None)
    return [proc.pid] if proc is not None else []


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) * 1024
    return total


def cpu_seconds(pids: list[int]) -> float:
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / 100.0


class _Publisher:
    """One raw publishing connection to the first server."""

    def __init__(self, system: str, address: tuple[str, int], size: int) -> None:
        self.system, self.size = system, size
        if system == "pub0sub":
            self.sock = pub0sub_connect(*address)
        else:
            self.sock = socket.create_connection(address)
            recv_until(self.sock, b"\r\n")
            self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
            recv_until(self.sock, b"PONG\r\n")

    def publish(self, number: int) -> int:
        """Send publish ``number``; its stamp (monotonic ns)."""
        payload = c1_payload(number, self.size)
        if self.system == "pub0sub":
            mset = wire.MessageSet.build((C1_TOPIC,), [(b"", payload)])
            self.sock.sendall(wire.Publish(sets=(mset,)).encode())
        else:
            self.sock.sendall(b"PUB %s %d\r\n%s\r\n" % (C1_TOPIC.encode(), len(payload), payload))
        return int(STAMP.unpack_from(payload)[0])

    def close(self) -> None:
        self.sock.close()


def _steady(pub: _Publisher, gens: list[tuple[Any, LineReader]], pids: list[int], *, first: int, count: int,
            connections: int) -> dict[str, Any]:  # fmt: skip
    """Publishes ``first``.. ``first+count-1`` sent at :data:`STEADY_RATE` a second: deliveries a
    second over the phase (from the first publish's stamp to the last connection's read of the
    last, plus the one interval the last publish has: a server that keeps up delivers exactly
    the offered rate), how far that last read lagged its publish, and each server's CPU seconds."""
    cpu_before = [cpu_seconds([pid]) for pid in pids]
    stamps: list[int] = []
    start = time.monotonic()
    for k in range(count):
        time.sleep(max(0.0, start + k / STEADY_RATE - time.monotonic()))
        stamps.append(pub.publish(first + k))
    reports = [json.loads(lines.next_line(timeout=PUBLISH_TIMEOUT * 3, what=f"c1 generator {proc.pid}"))
               for proc, lines in gens]  # fmt: skip
    delivered = sum(r["steady_deliveries"] for r in reports)
    last_ns = max(r["last_ns"] for r in reports)
    seconds = (last_ns - stamps[0]) / 1e9 + 1 / STEADY_RATE
    return {"deliveries_per_s": delivered / seconds, "delivered": delivered,
            "expected": count * connections, "offered_per_s": STEADY_RATE * connections, "publishes": count,
            "last_lag_ms": round((last_ns - stamps[-1]) / 1e6, 1),
            "server_cpu_seconds": [round(cpu_seconds([pid]) - used, 2)
                                   for pid, used in zip(pids, cpu_before, strict=True)]}  # fmt: skip


def _healthy_l1(system: str, address: tuple[str, int], p: Params) -> Measurement:
    """L1 (a paced 10k msgs/s publisher and a subscriber, each its own connection, on topic
    ``bench``, which no held connection has) on the first server: p50/p99/p99.9 in µs."""
    at = {"host": address[0], "port": address[1]}
    sub, pub = latency_workers(f"lat-sub-{system}", f"lat-pub-{system}", p, sub_at=at, pub_at=at)
    [result] = run_pubsub([sub], pub, timeout=(p.seconds or 0) + p.timeout)
    return latency_measurement(result)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _c1(system: str, one_hub: bool) -> Any:
    def measure(server: Server | None, p: Params) -> Measurement:
        assert server is not None
        total = (QUICK_ONE_HUB if p.quick else ONE_HUB) if one_hub else (QUICK_MESH if p.quick else MESH)
        publishes = QUICK_PUBLISHES if p.quick else PUBLISHES
        addresses = server.addresses if isinstance(server, MeshCluster | NatsCluster) else [server.address]
        pids = _pids(server)
        l1_idle = _healthy_l1(system, addresses[0], p)
        rss_before = rss_bytes(pids)
        processes = max(1, math.ceil(total / PER_PROCESS), len(addresses) if not one_hub else 1)
        shares = [total // processes + (k < total % processes) for k in range(processes)]
        gens: list[tuple[Any, LineReader]] = []
        pub: _Publisher | None = None
        try:
            started = time.monotonic()
            for k, share in enumerate(shares):
                # Each generator starts at a different hub, so every hub gets its share.
                rotated = addresses[k % len(addresses) :] + addresses[: k % len(addresses)]
                argv = worker("c1-hold", system=system, addresses=[list(a) for a in rotated], connections=share,
                              source=f"127.0.0.{2 + k}", publishes=publishes, size=p.size,
                              steady=QUICK_STEADY_PUBLISHES if p.quick else STEADY_PUBLISHES,
                              timeout=CONNECT_SECONDS_PER_1000 * total / 1000 + 60)  # fmt: skip
                proc = spawn(argv)
                gens.append((proc, LineReader(proc)))
            connect_deadline = time.monotonic() + CONNECT_SECONDS_PER_1000 * total / 1000 + 60
            for proc, lines in gens:
                line = lines.next_line(timeout=connect_deadline - time.monotonic(), what=f"c1 generator {proc.pid}")
                if not line.startswith("ready "):
                    raise RuntimeError(f"c1 generator {proc.pid} said {line!r}")
            connect_seconds = time.monotonic() - started
            time.sleep(SETTLE_SECONDS)
            rss_held = rss_bytes(pids)
            l1_held = _healthy_l1(system, addresses[0], p)
            if isinstance(server, MeshCluster | NatsCluster):
                for k in range(1, len(addresses)):
                    cluster: Cluster = server
                    cluster.wait_interest(at=0, of=k, topic=C1_TOPIC)
            pub = _Publisher(system, addresses[0], p.size)
            cpu_before = cpu_seconds(pids)
            times: list[float] = []
            for number in range(publishes):
                pub.publish(number)
                reports = [json.loads(lines.next_line(timeout=PUBLISH_TIMEOUT, what=f"c1 generator {proc.pid}"))
                           for proc, lines in gens]  # fmt: skip
                times.append((max(r["last_ns"] for r in reports) - reports[0]["stamp_ns"]) / 1e6)
            cpu_used = cpu_seconds(pids) - cpu_before
            steady = _steady(pub, gens, pids, first=publishes, connections=total,
                             count=QUICK_STEADY_PUBLISHES if p.quick else STEADY_PUBLISHES)  # fmt: skip
        finally:
            if pub is not None:
                pub.close()
            for proc, _ in gens:
                stop_process(proc)
        figures = {"p50": _percentile(times, 0.5), "p99": _percentile(times, 0.99),
                   "rss_per_conn": (rss_held - rss_before) / total,
                   "l1_p99_held": l1_held.figures["p99"],
                   "l1_p99_ratio": l1_held.figures["p99"] / l1_idle.figures["p99"],
                   "steady_deliveries": steady.pop("deliveries_per_s")}  # fmt: skip
        details = {"connections": total, "servers": len(pids), "generators": processes,
                   "connect_seconds": round(connect_seconds, 1), "rss_before": rss_before, "rss_held": rss_held,
                   "publish_ms": [round(t, 1) for t in times],
                   "server_cpu_seconds_publishing": round(cpu_used, 2),
                   "l1_idle_us": l1_idle.figures, "l1_held_us": l1_held.figures, "steady": steady}  # fmt: skip
        return Measurement(figures=figures, details=details)

    return measure


_FIGURES = (FigureSpec(name="p99", unit="ms", higher_is_better=False),
            FigureSpec(name="p50", unit="ms", higher_is_better=False),
            FigureSpec(name="rss_per_conn", unit="B", higher_is_better=False),
            FigureSpec(name="l1_p99_held", unit="us", higher_is_better=False),
            FigureSpec(name="l1_p99_ratio", unit="x idle", higher_is_better=False),
            FigureSpec(name="steady_deliveries", unit="deliveries/s"))  # fmt: skip
C1 = register_scenario(Scenario(
    id="C1", title=f"{ONE_HUB:,} idle subscribers on one server: RSS per connection, one publish to all (ms)",
    figures=_FIGURES, defaults=with_defaults(messages=0, quick_messages=0),
))  # fmt: skip
C1M = register_scenario(Scenario(
    id="C1M", title=f"{MESH:,} idle subscribers over {MESH_SIZE} meshed servers: RSS per connection, one publish "
    "to all (ms)",
    figures=_FIGURES, defaults=with_defaults(messages=0, quick_messages=0),
))  # fmt: skip
_GENERATORS = f"load generators of <= {PER_PROCESS:,} raw sockets each (sdk/tools/bench/c1_load.py), one publisher"
register_method("C1", Method(system="pub0sub", method="hub", server="pub0sub-c1", measure=_c1("pub0sub", True),
                             tooling=f"one hub; {_GENERATORS}"))  # fmt: skip
register_method("C1", Method(system="nats", method="server", server="nats", measure=_c1("nats", True),
                             unavailable=missing("nats-server"),
                             tooling=f"one nats-server; {_GENERATORS}"))  # fmt: skip
register_method("C1M", Method(system="pub0sub", method="mesh6", server="pub0sub-mesh6",
                              measure=_c1("pub0sub", False),
                              tooling=f"{MESH_SIZE} meshed hubs, publisher on the first; {_GENERATORS}"))  # fmt: skip
register_method("C1M", Method(system="nats", method="cluster6", server="nats-cluster6", measure=_c1("nats", False),
                              unavailable=missing("nats-server"),
                              tooling=f"{MESH_SIZE} routed nats-servers, publisher on the first; "
                                      f"{_GENERATORS}"))  # fmt: skip
