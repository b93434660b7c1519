"""``pub0sub demo``: a local hub mesh with traffic a person can watch.

Starts three meshed hubs (subprocesses on 127.0.0.1, data in a local folder),
simulated sensors publishing JSON readings to ``sensors.<room>.<kind>`` topics
on hub-1, a live pattern subscriber (``sensors.>``) on hub-3 that measures
rates and publish-to-deliver latency across the mesh, and a durable consumer
of ``alerts`` on hub-2 -- then shows it all in a live table until Ctrl-C (or
``--seconds``).  Nothing outside the machine is needed.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from .. import connect
from .cluster import LocalCluster
from .stopping import run_trio, run_until_stopped

ROOMS = ("kitchen", "lab", "server-room", "garage")
KINDS = ("temperature", "humidity")
HUBS = 3
#: How long a demo that ends at ``--seconds`` waits for readings still crossing the mesh, so that
#: its last line counts them.
DRAIN_SECONDS = 5.0


@dataclass
class TopicStats:
    messages: int = 0
    last_offset: int = -1
    last_value: str = ""
    recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=50))
    latencies: deque[int] = field(default_factory=lambda: deque(maxlen=2000))

    def rate(self) -> float:
        if len(self.recent) < 2:
            return 0.0
        (t0, n0), (t1, n1) = self.recent[0], self.recent[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0


@dataclass
class DemoState:
    #: client addresses: sensors publish on the first hub, the watcher reads on the last
    addresses: list[str]
    data_dir: str
    #: what every client connects with (the CA, when the hubs speak TLS)
    client_options: dict[str, Any] = field(default_factory=dict)
    published: int = 0
    topics: dict[str, TopicStats] = field(default_factory=lambda: defaultdict(TopicStats))
    alerts: deque[str] = field(default_factory=lambda: deque(maxlen=5))
    hubs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: set once the sensors have stopped and the watcher has counted every reading they sent
    caught_up: trio.Event = field(default_factory=trio.Event)
    sensors_stopped: bool = False

    def check_caught_up(self) -> None:
        if self.sensors_stopped and delivered(self) >= self.published:
            self.caught_up.set()


async def sensors(state: DemoState, rate: float, stop: trio.Event) -> None:
    async with connect(state.addresses[0], name="demo-sensors", **state.client_options) as client:
        period = 1.0 / rate
        next_at = trio.current_time()
        values = {(r, k): 20.0 if k == "temperature" else 45.0 for r in ROOMS for k in KINDS}
        while not stop.is_set():
            room, kind = random.choice(list(values))
            values[room, kind] += random.uniform(-0.5, 0.5)
            value = round(values[room, kind], 2)
            body = {"room": room, "kind": kind, "value": value, "sent_us": time.time_ns() // 1000}
            await client.publish(f"sensors.{room}.{kind}", json.dumps(body).encode(), key=room.encode())
            if kind == "temperature" and value > 24:
                await client.publish("alerts", f"{room} is hot: {value} °C".encode())
            state.published += 1
            next_at += period
            with trio.move_on_at(next_at):
                await stop.wait()
    # Left by its end, not cancelled: the client's close sent every reading counted above.


async def watcher(state: DemoState) -> None:
    async with (
        connect(state.addresses[-1], name="demo-watcher", **state.client_options) as client,
        client.subscribe("sensors.>") as sub,
    ):
        async for batch in sub.batches():
            now_us = time.time_ns() // 1000
            for msg in batch:
                stats = state.topics[msg.topic]
                stats.messages += 1
                stats.last_offset = msg.offset
                reading = json.loads(msg.data)
                stats.last_value = str(reading["value"])
                stats.latencies.append(now_us - reading["sent_us"])
            mono = time.monotonic()
            for stats in state.topics.values():
                stats.recent.append((mono, stats.messages))
            state.check_caught_up()


async def alert_consumer(state: DemoState) -> None:
    # Durable: stop the demo and start it again on the same data dir, and this
    # consumer resumes where it left off (acknowledged position kept on disk).
    address = state.addresses[len(state.addresses) // 2]
    async with (
        connect(address, name="demo-alerts", **state.client_options) as client,
        client.subscribe("alerts", durable="demo-alerts", start="earliest", ack="auto") as sub,
    ):
        async for msg in sub:
            state.alerts.append(f"[{msg.offset}] {msg.data.decode()}")


async def hub_status(state: DemoState, address: str) -> None:
    async with connect(address, name="demo-status", **state.client_options) as client:
        while True:
            doc = await client.status()
            state.hubs[doc.get("name") or address] = doc
            await trio.sleep(1.0)


def percentile(values: Sequence[int], q: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def render(state: DemoState) -> Group:
    table = Table(title=f"sensors publish on hub-1, read on hub-{len(state.addresses)} (latency across the mesh)")
    for name in ("topic", "messages", "msgs/s", "last offset", "last value", "p50 µs", "p99 µs"):
        table.add_column(name, justify="left" if name == "topic" else "right")
    for topic in sorted(state.topics):
        s = state.topics[topic]
        table.add_row(
            topic, str(s.messages), f"{s.rate():.0f}", str(s.last_offset), s.last_value,
            str(percentile(s.latencies, 0.5)), str(percentile(s.latencies, 0.99)),
        )  # fmt: skip
    hubs = Table(title=f"hubs (data in {state.data_dir}/)")
    for name in ("hub", "clients", "mesh peers", "in msgs/s", "forwarded in", "topics", "subscriptions", "dropped"):
        hubs.add_column(name, justify="left" if name in ("hub", "clients") else "right")
    for name in sorted(state.hubs):
        doc = state.hubs[name]
        mesh = doc.get("mesh", {})
        peers = sum(1 for p in mesh.get("peers", []) if p.get("connected"))
        hubs.add_row(
            name, doc.get("listen", ""), str(peers), f"{doc.get('rates', {}).get('messages_in_per_s', 0):.0f}",
            str(mesh.get("forwarded_messages_in", 0)), str(doc.get("topics", 0)), str(doc.get("subscriptions", 0)),
            str(doc.get("counters", {}).get("dropped_messages", 0)),
        )  # fmt: skip
    alerts = Table(title="durable consumer of 'alerts' on hub-2 (latest 5)", show_header=False)
    alerts.add_column("alert")
    for line in state.alerts:
        alerts.add_row(line)
    return Group(table, hubs, alerts, f"published {state.published} - Ctrl-C stops the demo")


def delivered(state: DemoState) -> int:
    return sum(s.messages for s in state.topics.values())


def plain_line(state: DemoState) -> str:
    total = delivered(state)
    rate = sum(s.rate() for s in state.topics.values())
    lat = [v for s in state.topics.values() for v in s.latencies]
    forwarded = sum(doc.get("mesh", {}).get("forwarded_messages_in", 0) for doc in state.hubs.values())
    return (
        f"published={state.published} delivered={total} rate={rate:.0f}/s topics={len(state.topics)} "
        f"p50={percentile(lat, 0.5)}us p99={percentile(lat, 0.99)}us forwarded_in={forwarded} "
        f"alerts={len(state.alerts)}"
    )


async def run_demo(state: DemoState, rate: float, seconds: float | None, console: Console) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watcher, state)
        nursery.start_soon(alert_consumer, state)
        for address in state.addresses:
            nursery.start_soon(hub_status, state, address)
        await trio.sleep(1.0)  # let the subscriptions open and their interest reach hub-1
        deadline = trio.current_time() + seconds if seconds else float("inf")
        stop = trio.Event()
        async with trio.open_nursery() as publishing:
            publishing.start_soon(sensors, state, rate, stop)
            if console.is_terminal:
                with Live(render(state), console=console, refresh_per_second=4) as live:
                    while trio.current_time() < deadline:
                        await trio.sleep(0.25)
                        live.update(render(state))
            else:
                while trio.current_time() < deadline:
                    await trio.sleep(min(1.0, max(deadline - trio.current_time(), 0)))
                    console.print(plain_line(state))
            stop.set()
        # The summary counts what was still crossing the mesh at the deadline: a demo that printed
        # "delivered" one short of "published" would look like a lost reading.
        state.sensors_stopped = True
        state.check_caught_up()
        with trio.move_on_after(DRAIN_SECONDS):
            await state.caught_up.wait()
        nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub demo") -> int:
    parser = argparse.ArgumentParser(prog=prog, description="A local hub mesh with demo traffic to watch.")
    parser.add_argument("--data-dir", type=Path, default=Path("pub0sub-demo-data"), help="one data dir per hub below")
    parser.add_argument("--rate", type=float, default=500.0, help="sensor readings per second (default 500)")
    parser.add_argument("--seconds", type=float, help="stop after this many seconds (default: run until Ctrl-C)")
    parser.add_argument("--tls", action="store_true",
                        help="the hubs speak TLS (a throwaway CA in DATA_DIR/tls); the demo's clients verify them")
    args = parser.parse_args(argv)
    if args.rate <= 0:
        parser.error("--rate must be positive")
    # soft_wrap: off a terminal rich assumes 80 columns and would break multiaddrs and peer ids
    # across lines; a line is only ever broken by the terminal showing it.
    console = Console(soft_wrap=True)
    console.print(f"starting {HUBS} meshed hubs on 127.0.0.1 ...")
    # The hubs' output goes to DATA_DIR/hub-<i>.log (sdk/tools/cluster.py), not through the live table.
    # Each hub serves its metrics and live status page (free ports, printed): the demo is also a
    # look at the operators' view.
    cluster = LocalCluster(HUBS, args.data_dir, tls=args.tls, metrics=True)
    state = DemoState(addresses=[], data_dir=str(args.data_dir), client_options=cluster.client_options())

    def demo() -> None:
        cluster.start()
        for hub in cluster.hubs:
            console.print(f"{hub.name}: clients {hub.address}  mesh {hub.multiaddrs[0]}  "
                          f"status page {hub.metrics_url}/")
        console.print(f"mesh admission: the hubs prove the cluster secret in {cluster.secret_file}")
        if not cluster.wait_converged():
            console.print("warning: the mesh is not fully linked yet; traffic starts anyway")
        state.addresses = [h.address for h in cluster.hubs]
        run_trio(run_demo, state, args.rate, args.seconds, console)

    try:
        outcome = run_until_stopped(demo, cleanup=cluster.stop)
    except RuntimeError as exc:
        console.print(f"{prog}: {exc}")
        return 1
    # The summary, also (above all) after Ctrl-C or SIGTERM: what the demo did.
    console.print(plain_line(state) + (f" (stopped on {outcome.signal})" if outcome.stopped else ""))
    return 0
