"""Fault plans over a 3-hub mesh, searched systematically, judged by the history checker.

A *fault* is a pause (SIGSTOP ... SIGCONT), a crash (SIGKILL ... restart on the
same data dir) or a link cut (both proxies between two hubs cut ... healed).
A *plan* is an order of fault events; :func:`all_plans` gives every single
fault and every interleaving of two faults (each fault's start before its
end): the independent harness lost acknowledged messages in one such order
(hub 3 paused, hub 2 killed and restarted, hub 3 resumed) and held in three
hand-picked ones, so orders are enumerated, not picked.

Every run: hubs 1..3 in a full mesh whose every link goes through a
:class:`TcpProxy` (``--no-discovery``, each hub bootstrapped to the others
through proxies, identities made up front so peer ids are known); durable
subscriptions on hub 3 for both topics (a standing interest); an idempotent
acknowledged publisher on hub 1 and one on hub 2 (each its own topic).  The
first event comes as traffic starts; each is followed by a dwell longer than
the heartbeat bound, with traffic flowing.  Then every fault heals, the publishers finish their retries, and the
checker reads hub 3's log and durable subscription and each origin's own log:
nothing acknowledged lost, nothing duplicated, nothing reordered per publisher.

Run as a command for the whole search (``python -m tests.support.faultplan
--all``); the suite runs a fixed sample (tests/test_mesh_faults.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from libp2p.peer.id import ID

import sdk
from hub.mesh.identity import load_or_create_identity
from sdk.tools.cluster import restartable_ports
from sdk.tools.tcpproxy import TcpProxy
from tests.support.cluster import HUB_POLL, Hub, converged, sends_to
from tests.support.history import History, check
from tests.support.publisher import Publisher
from tests.support.syncclient import read_all
from tests.support.waiting import wait_until

HUBS = 3
HEARTBEAT = 0.5
MISSES = 3
#: Each event is followed by this much traffic: past the heartbeat bound, so every fault is seen.
DWELL = HEARTBEAT * MISSES + 0.5
#: How long the hubs may take to hold everything once every fault healed.
DRAIN_SECONDS = 60.0
#: Topic of the publisher on hub N; hub 3 keeps a durable subscription on all of them.
TOPICS = {1: "plan.h1", 2: "plan.h2"}
DURABLE = "plan-d3"


@dataclass(frozen=True, order=True)
class Fault:
    """``pause`` / ``kill`` of hub ``a``, or ``cut`` of the link between hubs ``a`` and ``b``."""

    kind: str
    a: int
    b: int = 0

    def events(self) -> tuple[str, str]:
        start, end = {"pause": ("pause", "resume"), "kill": ("kill", "restart"), "cut": ("cut", "heal")}[self.kind]
        where = f"h{self.a}" if not self.b else f"h{self.a}-h{self.b}"
        return f"{start} {where}", f"{end} {where}"


def all_faults() -> list[Fault]:
    hubs = range(1, HUBS + 1)
    return (
        [Fault("pause", h) for h in hubs]
        + [Fault("kill", h) for h in hubs]
        + [Fault("cut", a, b) for a, b in itertools.combinations(hubs, 2)]
    )


def interleavings(x: Fault, y: Fault) -> Iterator[tuple[str, ...]]:
    """Every order of the two faults' four events with each fault's start before its end."""
    xs, ys = x.events(), y.events()
    for slots in itertools.combinations(range(4), 2):  # where x's two events go
        order: list[str] = []
        xi = yi = 0
        for i in range(4):
            if i in slots:
                order.append(xs[xi])
                xi += 1
            else:
                order.append(ys[yi])
                yi += 1
        yield tuple(order)


def all_plans() -> list[tuple[str, ...]]:
    """Each fault alone, then every interleaving of every pair of faults (deduplicated)."""
    faults = all_faults()
    plans: list[tuple[str, ...]] = [f.events() for f in faults]
    seen = set(plans)
    for x, y in itertools.combinations(faults, 2):
        for plan in interleavings(x, y):
            if plan not in seen:
                seen.add(plan)
                plans.append(plan)
    return plans


#: What each link event does to both proxies of a link (the plans' "cut" is one of several).
LINK_FAULTS: dict[str, Any] = {
    "cut": TcpProxy.cut,
    "heal": TcpProxy.heal,
    "blackhole": TcpProxy.blackhole,
    "stall": TcpProxy.stall,
    "delay": lambda proxy: proxy.delay(0.05),
    "drop": lambda proxy: proxy.drop(0.02),
}
#: Link faults beyond the systematic search (run by the reliability command): each alone.
LINK_PLANS = [
    ("blackhole h1-h3", "heal h1-h3"),
    ("stall h2-h3", "heal h2-h3"),
    ("delay h1-h3", "delay h2-h3", "heal h1-h3", "heal h2-h3"),
    ("drop h1-h3", "heal h1-h3"),
    ("blackhole h1-h3", "kill h1", "restart h1", "heal h1-h3"),
]

#: The order the independent harness found (hub 3 paused, hub 2 killed and restarted, hub 3 resumed).
HARNESS_ORDER = ("pause h3", "kill h2", "restart h2", "resume h3")


@dataclass
class PlanResult:
    plan: tuple[str, ...]
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    unknown: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def row(self) -> dict[str, Any]:
        return {
            "plan": " | ".join(self.plan), "ok": self.ok, "acknowledged": self.acknowledged, "lost": self.lost,
            "duplicated": self.duplicated, "reordered": self.reordered, "unknown": self.unknown,
            "seconds": round(self.seconds, 1), "problems": self.problems[:3],
        }  # fmt: skip


class ProxiedMesh:
    """Hubs 1..N, every ordered pair (i, j) dialing through its own proxy to j's mesh port."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        ports = restartable_ports(HUBS)  # a killed hub comes back on its port
        self.mesh_ports = {h: ports[h - 1] for h in range(1, HUBS + 1)}
        peer_ids = {}
        for h in self.mesh_ports:
            key_pair = load_or_create_identity(self._data_dir(h))  # made now: peer ids known up front
            peer_ids[h] = str(ID.from_pubkey(key_pair.public_key))
        self.proxies = {
            (i, j): TcpProxy(("127.0.0.1", self.mesh_ports[j])).start()
            for i in self.mesh_ports for j in self.mesh_ports if i != j
        }  # fmt: skip
        self.hubs: dict[int, Hub] = {}
        for i in self.mesh_ports:
            args = [
                "--log-level", "INFO", "--no-discovery",
                "--mesh-heartbeat-interval", str(HEARTBEAT), "--mesh-heartbeat-misses", str(MISSES),
            ]  # fmt: skip
            for j in self.mesh_ports:
                if j != i:
                    args += ["--bootstrap", f"/ip4/127.0.0.1/tcp/{self.proxies[(i, j)].port}/p2p/{peer_ids[j]}"]
            self.hubs[i] = Hub(f"hub{i}", self._data_dir(i), args, mesh_port=self.mesh_ports[i])

    def _data_dir(self, h: int) -> Path:
        return self.base_dir / f"hub{h}" / "data"

    def start(self) -> None:
        for hub in self.hubs.values():
            hub.spawn()
        for hub in self.hubs.values():
            hub.ready()
        self.wait_converged()

    def wait_converged(self, timeout: float = 30.0) -> None:
        hubs = list(self.hubs.values())
        wait_until(lambda: converged(hubs), timeout=timeout, what="the proxied mesh to converge", **HUB_POLL)

    def apply(self, event: str) -> None:
        verb, where = event.split()
        if verb in LINK_FAULTS:
            a, b = (int(x[1:]) for x in where.split("-"))
            for pair in ((a, b), (b, a)):
                LINK_FAULTS[verb](self.proxies[pair])
            return
        hub = self.hubs[int(where[1:])]
        if verb == "pause":
            hub.signal(signal.SIGSTOP)
        elif verb == "resume":
            hub.signal(signal.SIGCONT)  # a no-op on a hub killed meanwhile
        elif verb == "kill":
            hub.signal(signal.SIGCONT)  # a stopped process dies as well; its pipe must be read again
            hub.kill()
        elif verb == "restart":
            if not hub.alive:
                hub.spawn()
                hub.ready()
        else:
            raise ValueError(f"unknown event {event!r}")

    def heal_all(self) -> None:
        for proxy in self.proxies.values():
            proxy.heal()
        for hub in self.hubs.values():
            hub.signal(signal.SIGCONT)
            if not hub.alive:
                hub.spawn()
                hub.ready()

    def close(self) -> None:
        for hub in self.hubs.values():
            hub.signal(signal.SIGCONT)
            hub.stop()
        for proxy in self.proxies.values():
            proxy.stop()


Reads = dict[str, list[tuple[int, bytes]]]


def _wait_holds(hub: Hub, topics: list[str], want: set[Any], deadline: float) -> Reads:
    while True:
        reads, _gaps = read_all(hub.address, topics)
        held = {v for items in reads.values() for _, v in items}
        if want <= held or time.monotonic() >= deadline:
            return reads
        time.sleep(0.5)


def _drain_durable(hub: Hub, topics: list[str], want: set[Any], deadline: float) -> Reads:
    got: Reads = {t: [] for t in topics}
    seen: set[bytes] = set()
    with (
        sdk.connect_blocking(hub.address) as client,
        client.subscribe(topics, durable=DURABLE, start="earliest", ack="auto") as sub,
    ):
        while not want <= seen and time.monotonic() < deadline:
            msg = sub.next(timeout=1.0)
            if msg is not None:
                got[msg.topic].append((msg.offset, msg.data))
                seen.add(msg.data)
    return got


def run_plan(plan: Sequence[str], base_dir: Path) -> PlanResult:
    """Run one plan on a fresh proxied 3-hub mesh; the checker's verdict."""
    result = PlanResult(tuple(plan))
    started = time.monotonic()
    mesh = ProxiedMesh(base_dir)
    history = History()
    publishers: list[Publisher] = []
    try:
        mesh.start()
        h3 = mesh.hubs[3]
        topics = sorted(TOPICS.values())
        with sdk.connect_blocking(h3.address) as client, client.subscribe(topics, durable=DURABLE, start="earliest"):
            pass  # hub 3 wants both topics from here on, attached or not
        for origin, topic in TOPICS.items():
            wait_until(lambda o=origin, t=topic: sends_to(mesh.hubs[o], t, h3, hubs=mesh.hubs.values()),  # type: ignore[misc]
                       timeout=15, what=f"hub {origin} to see hub 3's interest", **HUB_POLL)  # fmt: skip
        for origin, topic in TOPICS.items():
            hub = mesh.hubs[origin]
            pub = Publisher(history, lambda hub=hub: hub.address, [topic], producer=0xF00 + origin,  # type: ignore[misc]
                            per_batch=10, window=4, interval=0.005, max_seconds=120)  # fmt: skip
            publishers.append(pub)
            pub.start()
        # The first event comes as traffic starts: a hub faulted before it stored anything from an
        # origin is the case that lost messages (its MESH_HELLO then says position 0).
        for event in plan:
            mesh.apply(event)
            time.sleep(DWELL)
        mesh.heal_all()
        mesh.wait_converged(timeout=60)
        for pub in publishers:
            pub.stop(timeout=60)
            result.problems += pub.errors
        acked = {v for op in history.ops if op.status == "ok" for v in op.values}
        deadline = time.monotonic() + DRAIN_SECONDS
        reads: dict[str, Reads] = {"hub 3's log": _wait_holds(h3, topics, acked, deadline)}
        for origin, topic in TOPICS.items():
            own = {v for op in history.ops if op.status == "ok" and op.topic == topic for v in op.values}
            reads[f"hub {origin}'s log"] = _wait_holds(mesh.hubs[origin], [topic], own, deadline)
        reads["hub 3's durable subscriber"] = _drain_durable(h3, topics, acked, deadline)
        result.acknowledged = len(acked)
        result.unknown = sum(1 for op in history.ops if op.status == "unknown")
        for where, read in reads.items():
            topics_read = list(read)
            sub_history = _restricted(history, topics_read)
            verdict = check(sub_history, read)
            result.lost += verdict.lost
            result.duplicated += verdict.duplicated
            result.reordered += verdict.reordered
            if verdict.lost or verdict.duplicated or verdict.reordered:
                result.problems.append(f"{where}: {verdict.summary()}")
    except Exception as exc:  # a run that could not finish is a failed plan, with the reason
        result.problems.append(f"run failed: {exc!r}")
    finally:
        for pub in publishers:
            pub.stopping.set()
        mesh.close()
        result.seconds = time.monotonic() - started
    return result


def _restricted(history: History, topics: list[str]) -> History:
    """The part of ``history`` on ``topics`` (the checker counts values of other topics as lost)."""
    part = History()
    for op in history.ops:
        if op.topic in topics:
            part.ops.append(op)
    part.publish_order = {k: v for k, v in history.publish_order.items() if k[1] in topics}
    return part


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.faultplan", description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help=f"every plan ({len(all_plans())})")
    parser.add_argument("--plan", action="append", default=[],
                        help='one plan, e.g. "pause h3,kill h2,restart h2,resume h3" (default: that one)')
    parser.add_argument("--list", action="store_true", help="print the plans and exit")
    parser.add_argument("--json", action="store_true", help="one JSON line per plan")
    args = parser.parse_args(argv)
    plans = all_plans() if args.all or args.list else [tuple(p.split(",")) for p in args.plan] or [HARNESS_ORDER]
    if args.list:
        print("\n".join(" | ".join(plan) for plan in plans))
        return 0
    failed = 0
    for n, plan in enumerate(plans, 1):
        with tempfile.TemporaryDirectory(prefix="pub0sub-faultplan-") as tmp:
            result = run_plan(plan, Path(tmp))
        failed += not result.ok
        if args.json:
            print(json.dumps(result.row()), flush=True)
        else:
            row = result.row()
            verdict = "ok  " if result.ok else "FAIL"
            print(f"[{n}/{len(plans)}] {verdict} {row['plan']:<48} acked={row['acknowledged']} lost={row['lost']} "
                  f"dup={row['duplicated']} reordered={row['reordered']} unknown_ops={row['unknown']} "
                  f"{row['seconds']}s {'; '.join(row['problems'])}", flush=True)  # fmt: skip
    print(f"{len(plans) - failed} of {len(plans)} plans held", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
