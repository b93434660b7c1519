"""RELIABILITY.md's process-level scenarios as functions: the suite runs them small and asserts,
the reliability command (``python -m tests.support.reliability``) runs them long and prints figures.

Each takes ``start_hub(*args, env=None, nofile=None) -> HubProcess`` (the conftest fixture, or
:class:`HubStarter` outside pytest), drives real ``python -m hub`` processes on 127.0.0.1, logs
every publish in a :class:`History` (invoked, then ok / fail / unknown) and returns what the
history checker found beside the scenario's own figures.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import wire
from hub.tools.attackers import Attack
from hub.tools.bounds_bench import rss_mib
from tests.support.history import CheckResult, History, check
from tests.support.hubprocess import ROOT, HubProcess, hub_status
from tests.support.publisher import Publisher, wait_progress
from tests.support.syncclient import SyncClient, publish_frame, read_all

StartHub = Callable[..., HubProcess]
#: RELIABILITY.md scenario 1: a killed hub serves again within this many seconds.
SERVE_AGAIN_WITHIN = 5.0


class HubStarter:
    """``start_hub`` outside pytest: every hub it started is stopped by :meth:`stop_all` (by PID)."""

    def __init__(self) -> None:
        self.hubs: list[HubProcess] = []

    def __call__(self, *args: str, env: dict[str, str] | None = None, nofile: int | None = None) -> HubProcess:
        hub = HubProcess(*args, env=env, nofile=nofile)
        self.hubs.append(hub)
        return hub

    def stop_all(self) -> None:
        for hub in self.hubs:
            hub.stop()


def kill9(hub: HubProcess) -> None:
    """SIGKILL the hub by its PID and reap it."""
    os.kill(hub.pid, signal.SIGKILL)
    hub.proc.wait(5)


def restart_timed(start_hub: StartHub, args: list[str], env: dict[str, str] | None = None) -> tuple[HubProcess, float]:
    """Start a hub; returns it and the seconds until it answered STATUS."""
    t0 = time.monotonic()
    hub = start_hub(*args, env=env)
    with SyncClient.connect_retry(hub.address, within=SERVE_AGAIN_WITHIN) as client:
        client.status()
    return hub, time.monotonic() - t0


@dataclass
class FaultRun:
    """What one scenario run saw: the history, the checker's verdict, and its own figures."""

    history: History
    verdict: CheckResult
    publishers: list[Publisher]
    hub: HubProcess
    reads: dict[str, list[tuple[int, bytes]]]
    figures: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        counts = self.history.counts()
        v = self.verdict
        return {
            "invoked": sum(counts.values()), "ok": counts["ok"], "fail": counts["fail"], "unknown": counts["unknown"],
            "acknowledged_values": v.acknowledged, "lost": v.lost, "duplicated": v.duplicated,
            "reordered": v.reordered, "offset_anomalies": v.offset_skips + v.offset_backwards,
            "unknown_values_read": v.unknown_read, **self.figures,
        }  # fmt: skip


# -- 1. kill -9 under load ------------------------------------------------------------------


def kill_loop(start_hub: StartHub, data_dir: Path, *, kills: int, seed: int, batches_between: int = 20) -> FaultRun:
    """Two idempotent producers on overlapping topics; the hub SIGKILLed ``kills`` times at random
    moments and restarted on the same data dir; then every topic read back from earliest."""
    args = ["--data-dir", str(data_dir), "--durability", "received", "--segment-bytes", str(64 << 10)]
    hub = start_hub(*args)
    current = [hub.address]
    rng = random.Random(seed)
    history = History()
    pubs = [
        Publisher(history, lambda: current[0], ["load.a", "load.b", "load.c"], producer=0xA11CE, window=4,
                  max_seconds=60 + 5 * kills),
        Publisher(history, lambda: current[0], ["load.b", "load.c", "load.d"], producer=0xB0B, window=8,
                  max_seconds=60 + 5 * kills),
    ]  # fmt: skip
    for pub in pubs:
        pub.start()
    restart_times = []
    try:
        for _ in range(kills):
            for pub in pubs:
                wait_progress(pub, pub.acked_batches + batches_between)
            time.sleep(rng.uniform(0.1, 0.6))  # kill at a random moment, mid-stream
            kill9(hub)
            hub, took = restart_timed(start_hub, args)
            restart_times.append(took)
            current[0] = hub.address
        for pub in pubs:
            wait_progress(pub, pub.acked_batches + batches_between)
    finally:
        for pub in pubs:
            pub.stop()
    reads, gaps = read_all(hub.address, ["load.a", "load.b", "load.c", "load.d"])
    assert not gaps, gaps
    figures = {"kills": kills, "seed": seed, "restart_s_max": round(max(restart_times, default=0.0), 2),
               "retries_answered_duplicate": sum(p.duplicate_acks for p in pubs),
               "connects_to_another_hub_refused": sum(p.wrong_hub_connects for p in pubs)}  # fmt: skip
    return FaultRun(history, check(history, reads), pubs, hub, reads, figures)


# -- 2. simulated power loss ----------------------------------------------------------------


def simulate_power_loss(data_dir: Path, journal: Path) -> dict[str, int]:
    """Truncate every segment to the last synced length journaled for it; empty unjournaled ones.

    Call only after the hub was SIGKILLed.  Returns {segment: bytes cut}.
    """
    synced: dict[str, int] = {}
    if journal.exists():
        for line in journal.read_text().splitlines(keepends=True):
            if not line.endswith("\n"):
                continue  # a torn last line: that fsync's acks were never sent
            path, _, length = line.strip().rpartition(" ")
            if path and length.isdigit():
                key = str(Path(path).resolve())
                synced[key] = max(synced.get(key, 0), int(length))
    cut = {}
    for segment in sorted((data_dir / "topics").glob("*/*.log")):
        keep = synced.get(str(segment.resolve()), 0)
        size = segment.stat().st_size
        if size > keep:
            os.truncate(segment, keep)
            cut[segment.name] = size - keep
    return cut


def power_loss_loop(start_hub: StartHub, data_dir: Path, journal: Path, *, losses: int) -> FaultRun:
    """``--durability fsync`` under a wide window of acked publishes; ``losses`` times: SIGKILL, then
    every segment cut to what had reached the disk (the hub's sync journal), then restart."""
    args = ["--data-dir", str(data_dir), "--durability", "fsync", "--segment-bytes", str(64 << 10)]
    env = {"PUB0SUB_SYNC_JOURNAL": str(journal)}
    hub = start_hub(*args, env=env)
    current = [hub.address]
    topics = ["power.a", "power.b", "power.c"]
    history = History()
    # A wide window keeps appends waiting on the group commit when the power goes.
    pub = Publisher(history, lambda: current[0], topics, producer=0xF5, per_batch=20, window=32,
                    max_seconds=60 + 5 * losses)  # fmt: skip
    pub.start()
    cut: dict[str, int] = {}
    restart_times = []
    try:
        for _ in range(losses):
            wait_progress(pub, pub.acked_batches + 150)
            kill9(hub)
            for name, n in simulate_power_loss(data_dir, journal).items():
                cut[name] = cut.get(name, 0) + n
            hub, took = restart_timed(start_hub, args, env)
            restart_times.append(took)
            current[0] = hub.address
        wait_progress(pub, pub.acked_batches + 50)
    finally:
        pub.stop()
    reads, gaps = read_all(hub.address, topics)
    assert not gaps, gaps
    figures = {"power_losses": losses, "unsynced_bytes_cut": sum(cut.values()), "segment_cuts": len(cut),
               "restart_s_max": round(max(restart_times, default=0.0), 2)}  # fmt: skip
    return FaultRun(history, check(history, reads), [pub], hub, reads, figures)


# -- 4. a paused client ---------------------------------------------------------------------

#: A durable consumer in its own process: prints each offset it gets, acks and commits every 10.
PAUSABLE_CONSUMER = """
import sys
import sdk
with sdk.connect_blocking(sys.argv[1], reconnect=sdk.Reconnect(1000, 0.05, 0.5, 2.0)) as client, \\
        client.subscribe("pause.t", durable="paused", start="earliest", ack="manual") as sub:
    print("ready", flush=True)
    while True:
        msg = sub.next(timeout=30)
        if msg is None:
            break
        print(msg.offset, flush=True)
        sub.ack(msg)
        if msg.offset % 10 == 9:
            try:
                sub.commit()
            except sdk.ConnectionLostError:
                pass  # the hub dropped us while we were paused: the next commit covers it
"""


def client_pause(start_hub: StartHub, data_dir: Path, *, heartbeat: float, messages: int) -> dict[str, Any]:
    """A durable consumer process is paused (SIGSTOP) past the hub's heartbeat bound while messages
    keep coming, then resumed: the hub declared it dead; it reconnects and gets every offset from
    its committed position on, none skipped.  Returns the figures (and the offsets it printed)."""
    hub = start_hub("--data-dir", str(data_dir), "--heartbeat-interval", str(heartbeat), "--heartbeat-misses", "3")
    proc = subprocess.Popen([sys.executable, "-c", PAUSABLE_CONSUMER, hub.address], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)  # fmt: skip
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        with SyncClient.connect(hub.address, name="pause-publisher") as pub:

            def publish(first: int, count: int) -> None:
                for i in range(first, first + count):
                    pub.send(publish_frame("pause.t", [b"%d" % i], seq=i + 1))
                    pub.expect(wire.PublishAck)

            publish(0, messages // 2)
            time.sleep(0.5)
            os.kill(proc.pid, signal.SIGSTOP)
            stopped = time.monotonic()
            before = hub_status(hub.address)["counters"]["heartbeat_timeouts"]
            publish(messages // 2, messages - messages // 2)
            deadline = stopped + 3 * heartbeat * 3
            declared_dead = None
            while time.monotonic() < deadline:
                if hub_status(hub.address)["counters"]["heartbeat_timeouts"] > before:
                    declared_dead = time.monotonic() - stopped
                    break
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGCONT)
        offsets: list[int] = []
        end = time.monotonic() + 30
        while time.monotonic() < end and (not offsets or offsets[-1] < messages - 1):
            line = proc.stdout.readline()
            if not line:
                break
            offsets.append(int(line))
    finally:
        proc.kill()
        proc.wait(5)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    return {"declared_dead_after_s": None if declared_dead is None else round(declared_dead, 2),
            "heartbeat_bound_s": 3 * heartbeat, "offsets": offsets}  # fmt: skip


# -- 7 and 8: a live hub under attack ------------------------------------------------------


def survive_attack(start_hub: StartHub, data_dir: Path, *, seconds: float, malformed: int) -> FaultRun:
    """A healthy idempotent publisher logs every publish while the hub meets malformed connections
    (``malformed`` of them), a connection flood past --max-connections, a slow-drip sender and
    subscribers that never read, for at least ``seconds`` (and until the malformed connections are
    done); afterwards the hub still serves and holds everything acknowledged."""
    # The per-address connection rate limit is off: every malformed connection reaches the hub's
    # decoders, which is what this scenario is about (tests/test_connect_rate.py has the limit).
    args = ["--data-dir", str(data_dir), "--max-connections", "200", "--heartbeat-interval", "1",
            "--max-pending-bytes", str(1 << 20), "--max-connects-per-second-per-address", "0"]  # fmt: skip
    hub = start_hub(*args)
    history = History()
    pub = Publisher(history, lambda: hub.address, ["healthy.a", "healthy.b"], producer=0x600D, window=4,
                    interval=0.002, max_seconds=seconds + 60)  # fmt: skip
    rss_before = rss_mib(hub.pid)
    pub.start()
    attack = Attack(hub.address, malformed=malformed)
    attack.start()
    try:
        deadline = time.monotonic() + seconds
        give_up = deadline + 300
        while (time.monotonic() < deadline or not attack.done_malformed()) and time.monotonic() < give_up:
            time.sleep(0.2)
    finally:
        attack.stop()
        pub.stop()
    rss_after = rss_mib(hub.pid)
    status = hub_status(hub.address)
    reads, gaps = read_all(hub.address, ["healthy.a", "healthy.b"])
    assert not gaps, gaps
    figures = {**attack.counts, "hub_alive": hub.proc.poll() is None, "rss_mib_before": round(rss_before, 1),
               "rss_mib_after": round(rss_after, 1), "connections_refused": status["counters"]["connections_refused"],
               "protocol_errors": status["counters"]["protocol_errors"],
               "heartbeat_timeouts": status["counters"]["heartbeat_timeouts"],
               "seconds_under_attack": seconds}  # fmt: skip
    return FaultRun(history, check(history, reads), [pub], hub, reads, figures)
