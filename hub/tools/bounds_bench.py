"""Figures for the hub's resource bounds (docs/reliability.md, docs/benchmarks.md).

    python -m hub.tools.bounds_bench patterns [--patterns 80000] [--seconds 5]
    python -m hub.tools.bounds_bench topics [--topics 256]
    python -m hub.tools.bounds_bench attack [--seconds 5] [--rounds 3] [--attackers never_read,...]
        [--attacker-source 127.0.0.2] [--pin] [--hub-arg=--max-connects-per-second-per-address --hub-arg=0]

``patterns``: the acknowledged publish rate of one client while 8 other connections
hold ``--patterns`` distinct wildcard patterns between them (none matching what is
published), and with none held; every publish goes to a topic not published before
in the run, so each one is a routing-cache miss.

``topics``: how long the hub's core spends on one PUBLISH frame that creates
``--topics`` new topic logs (in process, on a temporary data directory; the median
of 5 frames).

``attack``: a healthy client's acknowledged publish rate alone and while the hub is
under attack (10,000 malformed connections, a connection flood past
``--max-connections``, a slow-drip sender, subscribers that ping and never read; or the
``--attackers`` named), ``--rounds`` alternations of the two; the ratio of the medians; the
hub's CPU share in each sample; the hub's RSS before and after.

``--hub-root DIR`` runs the hub from another checkout (a before/after comparison).
Hubs run as ``python -m hub`` subprocesses on 127.0.0.1, stopped by their PID.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import wire

from .attackers import ATTACKERS, Attack, connect_from

ROOT = Path(__file__).resolve().parents[2]
PUBLISH_WINDOW = 16


class Client:
    """A blocking raw-frame client (benchmarks keep the SDK out of the figure)."""

    def __init__(self, address: str, *, name: str = "bench", timeout: float = 30.0, source: str | None = None) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = connect_from(host, int(port), source, timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = wire.FrameDecoder(limits=wire.Limits(max_body=64 << 20), accept=wire.HUB_TO_CLIENT_OPCODES)
        # Version 1: nothing here needs COMMIT, and a hub from before it (--hub-root) speaks only 1.
        self.send(wire.Hello(version=1, client_name=name))
        self.expect(wire.Welcome)

    def send(self, *frames: wire.Frame) -> None:
        self.sock.sendall(b"".join(f.encode() for f in frames))

    def expect(self, kind: type[wire.Frame]) -> Any:
        while True:
            frame = self.decoder.next_frame()
            if frame is None:
                data = self.sock.recv(1 << 16)
                if not data:
                    raise ConnectionError(f"EOF while waiting for {kind.__name__}")
                self.decoder.feed(data)
                continue
            if isinstance(frame, wire.Heartbeat):
                if frame.word == "ping":
                    self.send(wire.PONG)
                continue
            if not isinstance(frame, kind):
                raise AssertionError(f"expected {kind.__name__}, got {frame!r}")
            return frame

    def close(self) -> None:
        self.sock.close()


@contextmanager
def hub_process(*args: str, root: Path = ROOT) -> Iterator[tuple[str, int]]:
    """A ``python -m hub`` subprocess: its address and PID; stopped by its PID at the end."""
    proc = subprocess.Popen([sys.executable, "-m", "hub", "--listen", "127.0.0.1:0", "--log-level", "WARNING", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=root,
                            env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"hub did not start: {line!r}")
        yield line.split()[-1], proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def acked_rate(address: str, seconds: float, *, topic: Callable[[int], str], size: int = 64) -> float:
    """Acknowledged messages per second of one new publisher (see :func:`client_acked_rate`)."""
    client = Client(address, name="healthy")
    try:
        return client_acked_rate(client, seconds, topic=topic, size=size)
    finally:
        client.close()


def client_acked_rate(
    client: Client, seconds: float, *, topic: Callable[[int], str], size: int = 64, window: int = PUBLISH_WINDOW
) -> float:
    """Acknowledged messages per second of ``client`` keeping ``window`` frames in flight."""
    payload = bytes(size)
    sent = acked = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        now = time.perf_counter()
        while sent - acked < window and now < deadline:
            mset = wire.MessageSet.build((topic(sent),), [(b"", payload)])
            client.send(wire.Publish(sequence=sent + 1, flags=wire.PublishFlags.ACK, sets=(mset,)))
            sent += 1
        if acked == sent:
            break
        client.expect(wire.PublishAck)
        acked += 1
    return acked / (time.perf_counter() - started)


# -- patterns ------------------------------------------------------------------------------


#: Topics the ``patterns`` publisher rotates over: made before the patterns are held, so
#: every publish of the measured pass is a routing-cache miss (the cache is cleared by
#: every subscription change and holds each topic once matched).
ROTATED_TOPICS = 15_000


def bench_patterns(patterns: int, seconds: float, root: Path) -> dict[str, Any]:
    holders = 8
    per_holder = -(-patterns // holders)
    args = ["--max-topics-per-connection", str(max(1, per_holder)), "--max-body", str(4 << 20)]
    rows: dict[str, Any] = {"patterns": patterns, "rotated_topics": ROTATED_TOPICS}
    for held in (0, patterns):
        with hub_process(*args, root=root) as (address, _pid):
            make_topics(address, ROTATED_TOPICS)
            clients = []
            for h in range(holders if held else 0):
                client = Client(address, name=f"holder{h}")
                # One SUB per 1,000 patterns (frames stay small); none matches "bench.*".
                for s, first in enumerate(range(0, per_holder, 1000)):
                    names = tuple(f"w{h}.{i}.*" for i in range(first, min(first + 1000, per_holder)))
                    client.send(wire.Sub(sub_id=s + 1, patterns=names))
                    client.expect(wire.SubOk)
                clients.append(client)
            rate = acked_rate(address, seconds, topic=lambda n: f"bench.t{n % ROTATED_TOPICS}")
            rows[f"acked_msgs_per_s_with_{held}_patterns"] = round(rate)
            for client in clients:
                client.close()
    return rows


def make_topics(address: str, count: int, *, per_frame: int = 250, per_connection: int = 5_000) -> None:
    """Publish once to ``bench.t0 .. bench.t<count-1>`` (within any hub's default topic limits)."""
    for first_of_connection in range(0, count, per_connection):
        client = Client(address, name="maker")
        last = min(first_of_connection + per_connection, count)
        for seq, first in enumerate(range(first_of_connection, last, per_frame), 1):
            names = tuple(f"bench.t{i}" for i in range(first, min(first + per_frame, last)))
            mset = wire.MessageSet.build(names, [(b"", b"x")])
            client.send(wire.Publish(sequence=seq, flags=wire.PublishFlags.ACK, sets=(mset,)))
            client.expect(wire.PublishAck)
        client.close()


# -- topics --------------------------------------------------------------------------------


def bench_topics(topics: int) -> dict[str, Any]:
    from ..core.clients import ClientSession
    from ..core.clock import ManualClock
    from ..core.hub import CoreSettings, HubCore
    from ..core.topic_budget import TopicLimits
    from ..storage.store import LogStore
    from ..storage.topic_log import LogSettings

    class _Sink:
        def flush_now(self) -> None: ...
        def wake_writer(self) -> None: ...
        def closing(self) -> None: ...

    times = []
    with tempfile.TemporaryDirectory(prefix="pub0sub-bench-") as tmp:
        store = LogStore(Path(tmp), LogSettings())
        store.open()
        limits = TopicLimits(max_topics=1 << 30, max_new_topics_per_connection=1 << 30, max_new_topics_per_frame=topics)
        core = HubCore(CoreSettings(max_body=64 << 20, topics=limits), hub_id=1, clock=ManualClock(), store=store)
        session = core.open_session("bench")
        assert isinstance(session, ClientSession)
        session.transport = _Sink()
        core.receive_data(session, wire.Hello(client_name="bench").encode())
        for run in range(5):
            names = tuple(f"new.r{run}.t{i}" for i in range(topics))
            sets = tuple(wire.MessageSet.build(names[i : i + 255], [(b"", b"x")]) for i in range(0, topics, 255))
            data = wire.Publish(sequence=run + 1, flags=wire.PublishFlags.ACK, sets=sets).encode()
            started = time.perf_counter()
            core.receive_data(session, data)
            times.append(time.perf_counter() - started)
            session.out.clear()
        store.close()
    return {"new_topics_in_one_frame": topics, "median_ms": round(statistics.median(times) * 1000, 1),
            "max_ms": round(max(times) * 1000, 1)}  # fmt: skip


# -- attack --------------------------------------------------------------------------------


def user_system_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU time the process has used, apart."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used."""
    return sum(user_system_seconds(pid))


def hub_status(client: Client) -> dict[str, Any]:
    client.send(wire.Status())
    return json.loads(client.expect(wire.StatusReply).document)


def client_bytes(client: Client) -> tuple[int, int]:
    """Bytes the hub has read from and written to all its clients (its STATUS, asked on ``client``)."""
    doc = hub_status(client)
    counters, connections = doc["counters"], doc["connection_list"]
    return (counters["bytes_in_closed"] + sum(c["bytes_in"] for c in connections),
            counters["bytes_out_closed"] + sum(c["bytes_out"] for c in connections))  # fmt: skip


def bench_attack(
    seconds: float,
    root: Path,
    *,
    rounds: int = 3,
    attackers: tuple[str, ...] = tuple(ATTACKERS),
    source: str | None = None,
    hub_args: tuple[str, ...] = (),
    window: int = PUBLISH_WINDOW,
    pin: bool = False,
) -> dict[str, Any]:
    """``rounds`` alternations of the healthy client alone and under attack, on one hub.

    Alternating spreads the machine's other load over both sides; the ratio is of the medians.
    The attackers are processes of their own (see :class:`Attack`).  The hub's CPU share
    during each sample (CPU seconds per second) and the bytes per second it reads from and
    writes to its clients (its own counters: the attackers' frames taken in, the answers sent,
    the healthy client's share included) show what the attack costs the hub
    itself, which the healthy client's rate shows only through the noise of a shared machine.

    ``pin``: the hub runs on CPU 0, the healthy client and the attackers share CPU 1, the
    attackers at nice 10.  On a 2-core machine the attackers' own processes otherwise take CPU
    from the hub and the healthy client whatever the hub does (on a real network they run
    elsewhere); pinned, none of the bench's own processes share the hub's core.  The attackers'
    counts in the row show how hard they still pushed.
    """
    args = ["--max-connections", "200", "--heartbeat-interval", "2", "--max-pending-bytes", str(1 << 20), *hub_args]
    alone: list[float] = []
    attacked: list[float] = []
    cpu_alone: list[float] = []
    cpu_attacked: list[float] = []
    io_alone: list[tuple[float, float]] = []
    io_attacked: list[tuple[float, float]] = []
    counts: dict[str, int] = {}
    under_way: list[bool] = []
    attackers_cpu: list[float] = []

    def sample(healthy: Client, rates: list[float], cpu: list[float], io: list[tuple[float, float]], pid: int,
               attack: Attack | None = None) -> None:  # fmt: skip
        read, written = client_bytes(healthy)
        attackers = attack.pids if attack is not None else []
        started, used, attackers_used = time.perf_counter(), cpu_seconds(pid), sum(map(cpu_seconds, attackers))
        rates.append(client_acked_rate(healthy, seconds, topic=topic, window=window))
        took = time.perf_counter() - started
        cpu.append((cpu_seconds(pid) - used) / took)
        if attack is not None:
            attackers_cpu.append((sum(map(cpu_seconds, attackers)) - attackers_used) / took)
        now_read, now_written = client_bytes(healthy)
        io.append(((now_read - read) / took / (1 << 20), (now_written - written) / took / (1 << 20)))

    with hub_process(*args, root=root) as (address, pid):
        if pin:
            os.sched_setaffinity(pid, {0})
            os.sched_setaffinity(0, {1})  # this process (the healthy client) and the attackers it spawns
        topic = lambda n: f"bench.t{n % 100}"  # noqa: E731
        # One connection for every sample, made before any attack: an established client
        # (the flood holds the hub at --max-connections, so a new one would be refused).
        healthy = Client(address, name="healthy")
        try:
            client_acked_rate(healthy, 1.0, topic=topic, window=window)  # warm-up: topics exist, caches filled
            rss_before = rss_mib(pid)
            for _ in range(rounds):
                sample(healthy, alone, cpu_alone, io_alone, pid)
                attack = Attack(address, attackers=attackers, source=source)
                attack.start()
                if pin:
                    for attacker in attack.pids:
                        os.setpriority(os.PRIO_PROCESS, attacker, 10)
                # Every attacker at work (spawning and importing takes seconds under load), then a
                # second more for the hub to meet all of them.
                under_way.append(attack.wait_under_way())
                time.sleep(1.0)
                try:
                    sample(healthy, attacked, cpu_attacked, io_attacked, pid, attack)
                finally:
                    attack.stop()
                    attack_counts = attack.counts
                for name, value in attack_counts.items():
                    counts[name] = counts.get(name, 0) + value
                time.sleep(1.0)  # the hub sees the attackers' connections close
            rss_after = rss_mib(pid)
            doc = hub_status(healthy)
        finally:
            healthy.close()
    return {
        "rounds": rounds,
        "attackers": list(attackers),
        "attack_under_way_before_each_sample": under_way,
        "attackers_from": source or "127.0.0.1 (the healthy client's address)",
        "healthy_publishes_in_flight": window,
        "hub_args": list(hub_args),
        "pinned": "hub on CPU 0; healthy client and attackers (nice 10) on CPU 1" if pin else None,
        "seconds_per_sample": seconds,
        "healthy_acked_msgs_per_s_alone": round(statistics.median(alone)),
        "healthy_acked_msgs_per_s_under_attack": round(statistics.median(attacked)),
        "ratio": round(statistics.median(attacked) / statistics.median(alone), 3),
        "alone_samples": [round(x) for x in alone],
        "under_attack_samples": [round(x) for x in attacked],
        "hub_cpu_share_alone": [round(x, 2) for x in cpu_alone],
        "hub_cpu_share_under_attack": [round(x, 2) for x in cpu_attacked],
        # The attackers' own processes (CPU seconds per second, all of them): on one machine they
        # take cores from the hub and the healthy client whatever the hub does.
        "attackers_cpu_share": [round(x, 2) for x in attackers_cpu],
        "hub_mib_per_s_read_written_alone": [[round(r, 2), round(w, 2)] for r, w in io_alone],
        "hub_mib_per_s_read_written_under_attack": [[round(r, 2), round(w, 2)] for r, w in io_attacked],
        "rss_mib_before": round(rss_before, 1),
        "rss_mib_after": round(rss_after, 1),
        **counts,
        # What the hub made of them: sessions opened, refused at --max-connections, refused by the
        # per-address rate limit (absent on a hub from before it), protocol errors answered.
        "hub_connections_opened": doc["counters"]["connections_total"],
        "hub_refused_max_connections": doc["counters"]["connections_refused"],
        "hub_refused_connect_rate": doc.get("connect_rate", {}).get("refused"),
        "hub_protocol_errors": doc["counters"]["protocol_errors"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.tools.bounds_bench", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("patterns", "topics", "attack"))
    parser.add_argument("--patterns", type=int, default=80_000)
    parser.add_argument("--topics", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3, help="attack: alternations of alone and under attack")
    parser.add_argument("--hub-root", type=Path, default=ROOT, help="run the hub from this checkout")
    parser.add_argument(
        "--attackers",
        default=",".join(ATTACKERS),
        help=f"attack: which attackers, comma-separated (default: all of {', '.join(ATTACKERS)})",
    )
    parser.add_argument("--attacker-source", metavar="ADDRESS", help="attack: the attackers connect from this "
                        "address and the next ones, one each (127.0.0.2: .2, .3, ...); default: 127.0.0.1, the "
                        "healthy client's")  # fmt: skip
    parser.add_argument("--window", type=int, default=PUBLISH_WINDOW, help="attack: the healthy client's "
                        "acked publishes in flight (16: bound by round trips, so by how soon a hub wakes; "
                        "256: by what the hub can do)")  # fmt: skip
    parser.add_argument("--pin", action="store_true", help="attack: the hub on CPU 0 alone, the healthy client "
                        "and the attackers (nice 10) on CPU 1 (a machine with 2 cores or more)")  # fmt: skip
    parser.add_argument("--hub-arg", action="append", default=[], metavar="ARG",
                        help="attack: one more argument for the hub (repeatable; --hub-arg=--flag --hub-arg=VALUE)")
    args = parser.parse_args(argv)
    if args.what == "patterns":
        row = bench_patterns(args.patterns, args.seconds, args.hub_root)
    elif args.what == "topics":
        row = bench_topics(args.topics)
    else:
        chosen = tuple(name.strip() for name in args.attackers.split(",") if name.strip())
        if unknown := [name for name in chosen if name not in ATTACKERS]:
            parser.error(f"unknown attackers {unknown}: choose from {', '.join(ATTACKERS)}")
        row = bench_attack(args.seconds, args.hub_root, rounds=args.rounds, attackers=chosen,
                           source=args.attacker_source, hub_args=tuple(args.hub_arg), window=args.window,
                           pin=args.pin)  # fmt: skip
    row["load_average"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps({"bench": args.what, **row}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
