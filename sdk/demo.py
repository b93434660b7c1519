"""``pub0sub demo``: a local hub with traffic a person can watch.

Starts a hub (a subprocess, data in a local folder), simulated sensors
publishing JSON readings to ``sensors.<room>.<kind>`` topics, a live pattern
subscriber (``sensors.>``) that measures rates and publish-to-deliver latency,
and a durable consumer of ``alerts`` -- then shows it all in a live table until
Ctrl-C (or ``--seconds``).  Everything runs on 127.0.0.1; nothing outside the
machine is needed.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
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

from . import connect

ROOMS = ("kitchen", "lab", "server-room", "garage")
KINDS = ("temperature", "humidity")
HUB_START_SECONDS = 20.0


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
    address: str = ""
    data_dir: str = ""
    published: int = 0
    topics: dict[str, TopicStats] = field(default_factory=lambda: defaultdict(TopicStats))
    alerts: deque[str] = field(default_factory=lambda: deque(maxlen=5))
    hub: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)


def start_hub(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "hub", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), "--name", "demo"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + HUB_START_SECONDS
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("listening on "):
            return proc, line.split()[-1]
        if not line:
            break
    proc.terminate()
    raise RuntimeError("the hub did not start")


async def sensors(state: DemoState, rate: float) -> None:
    async with connect(state.address, name="demo-sensors") as client:
        period = 1.0 / rate
        next_at = trio.current_time()
        values = {(r, k): 20.0 if k == "temperature" else 45.0 for r in ROOMS for k in KINDS}
        while True:
            room, kind = random.choice(list(values))
            values[room, kind] += random.uniform(-0.5, 0.5)
            value = round(values[room, kind], 2)
            body = {"room": room, "kind": kind, "value": value, "sent_us": time.time_ns() // 1000}
            await client.publish(f"sensors.{room}.{kind}", json.dumps(body).encode(), key=room.encode())
            if kind == "temperature" and value > 24:
                await client.publish("alerts", f"{room} is hot: {value} °C".encode())
            state.published += 1
            next_at += period
            await trio.sleep_until(next_at)


async def watcher(state: DemoState) -> None:
    async with connect(state.address, name="demo-watcher") as client, client.subscribe("sensors.>") as sub:
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


async def alert_consumer(state: DemoState) -> None:
    # Durable: stop the demo and start it again on the same data dir, and this
    # consumer resumes where it left off (acknowledged position kept on disk).
    async with connect(state.address, name="demo-alerts") as client:
        async with client.subscribe("alerts", durable="demo-alerts", start="earliest", ack="auto") as sub:
            async for msg in sub:
                state.alerts.append(f"[{msg.offset}] {msg.data.decode()}")


async def hub_status(state: DemoState) -> None:
    async with connect(state.address, name="demo-status") as client:
        while True:
            state.hub = await client.status()
            await trio.sleep(1.0)


def percentile(values: Sequence[int], q: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def render(state: DemoState) -> Group:
    table = Table(title=f"pub0sub demo - hub {state.address} - data in {state.data_dir}", expand=False)
    for name in ("topic", "messages", "msgs/s", "last offset", "last value", "p50 µs", "p99 µs"):
        table.add_column(name, justify="left" if name == "topic" else "right")
    for topic in sorted(state.topics):
        s = state.topics[topic]
        table.add_row(
            topic, str(s.messages), f"{s.rate():.0f}", str(s.last_offset), s.last_value,
            str(percentile(s.latencies, 0.5)), str(percentile(s.latencies, 0.99)),
        )
    hub = state.hub
    counters = hub.get("counters", {})
    footer = Table.grid(padding=(0, 2))
    footer.add_row(
        f"published {state.published}",
        f"hub: {hub.get('connections', 0)} connections, {hub.get('subscriptions', 0)} subscriptions, "
        f"{hub.get('topics', 0)} topics, in {hub.get('rates', {}).get('messages_in_per_s', 0):.0f} msgs/s, "
        f"dropped {counters.get('dropped_messages', 0)}",
    )
    alerts = Table(title="durable consumer of 'alerts' (latest 5)", show_header=False)
    alerts.add_column("alert")
    for line in state.alerts:
        alerts.add_row(line)
    return Group(table, footer, alerts)


def plain_line(state: DemoState) -> str:
    total = sum(s.messages for s in state.topics.values())
    rate = sum(s.rate() for s in state.topics.values())
    lat = [v for s in state.topics.values() for v in s.latencies]
    return (
        f"published={state.published} delivered={total} rate={rate:.0f}/s topics={len(state.topics)} "
        f"p50={percentile(lat, 0.5)}us p99={percentile(lat, 0.99)}us alerts={len(state.alerts)}"
    )


async def run_demo(state: DemoState, rate: float, seconds: float | None, console: Console) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watcher, state)
        nursery.start_soon(alert_consumer, state)
        nursery.start_soon(hub_status, state)
        await trio.sleep(0.2)  # let the subscriptions open before traffic starts
        nursery.start_soon(sensors, state, rate)
        deadline = trio.current_time() + seconds if seconds else float("inf")
        if console.is_terminal:
            with Live(render(state), console=console, refresh_per_second=4) as live:
                while trio.current_time() < deadline:
                    await trio.sleep(0.25)
                    live.update(render(state))
        else:
            while trio.current_time() < deadline:
                await trio.sleep(min(1.0, max(deadline - trio.current_time(), 0)))
                console.print(plain_line(state))
        nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub demo") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=Path("pub0sub-demo-data"), help="where the hub keeps its logs")
    parser.add_argument("--rate", type=float, default=2000.0, help="sensor readings per second (default 2000)")
    parser.add_argument("--seconds", type=float, help="stop after this many seconds (default: run until Ctrl-C)")
    args = parser.parse_args(argv)
    if args.rate <= 0:
        parser.error("--rate must be positive")
    console = Console(stderr=False)
    proc, address = start_hub(args.data_dir)
    state = DemoState(address=address, data_dir=str(args.data_dir))
    console.print(f"hub listening on {address}; data in {args.data_dir}/ ; Ctrl-C to stop")
    try:
        trio.run(run_demo, state, args.rate, args.seconds, console)
    except KeyboardInterrupt:
        pass
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
    console.print(plain_line(state))
    return 0
