"""What one client connection costs the hub, from accept to close (docs/benchmarks.md, issue 17).

    python -m hub.tools.connection_cost [--connections 6000] [--kind junk] [--pin]
        [--hub-arg=--max-connects-per-second-per-address --hub-arg=0]

``--connections`` connections, one after another, each of one ``--kind``: ``eof`` connects and
closes; ``junk`` sends a frame with an unknown opcode, half-closes and reads the hub's ERROR to
the end (what the malformed attacker of ``bounds_bench attack`` does); ``hello`` sends HELLO,
reads the WELCOME and closes.  Prints the hub's CPU per connection (user and system, from /proc,
less its idle share measured just before) and what the hub counted: sessions opened, refused by
the per-address connection rate (on by default: most of a fast run is refused), protocol errors.
The hub runs as a ``python -m hub`` subprocess on 127.0.0.1, stopped by its PID; ``--pin`` puts
it on CPU 0 and this client on CPU 1.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import wire

from .bounds_bench import ROOT, Client, hub_process, hub_status, user_system_seconds

KINDS = ("eof", "junk", "hello")
#: A frame with opcode 0xff: the hub answers ERROR UNKNOWN_OPCODE and closes.
JUNK = b"\xff\x00\x00\x00\x01x"


def one_connection(host: str, port: int, kind: str, hello: bytes) -> None:
    with socket.create_connection((host, port), timeout=10) as sock:
        try:
            if kind == "junk":
                sock.sendall(JUNK)
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(4096):
                    pass
            elif kind == "hello":
                sock.sendall(hello)
                sock.recv(4096)
        except OSError:
            pass  # a refusal can close the connection before this end has said its piece


def measure(connections: int, kind: str, *, hub_args: tuple[str, ...] = (), pin: bool = False,
            root: Path = ROOT) -> dict[str, Any]:  # fmt: skip
    hello = wire.Hello(client_name="cost").encode()
    with hub_process(*hub_args, root=root) as (address, pid):
        if pin:
            os.sched_setaffinity(pid, {0})
            os.sched_setaffinity(0, {1})
        host, port = address.rsplit(":", 1)
        time.sleep(1.0)  # the hub's start-up work done
        started, (user, system) = time.perf_counter(), user_system_seconds(pid)
        time.sleep(2.0)
        idle = sum(user_system_seconds(pid)) - user - system
        idle_share = idle / (time.perf_counter() - started)
        started, (user, system) = time.perf_counter(), user_system_seconds(pid)
        for _ in range(connections):
            one_connection(host, int(port), kind, hello)
        took = time.perf_counter() - started
        time.sleep(1.0)  # the last connections' ends handled
        elapsed = time.perf_counter() - started
        user_after, system_after = user_system_seconds(pid)
        # From an address of its own: 127.0.0.1 may still owe the rate limit for failed connections.
        client = Client(address, name="cost", source="127.0.0.2")
        try:
            counters = hub_status(client)
        finally:
            client.close()
    used = user_after - user + system_after - system - idle_share * elapsed
    return {
        "kind": kind,
        "connections": connections,
        "hub_args": list(hub_args),
        "pinned": pin,
        "connections_per_s": round(connections / took),
        "hub_cpu_us_per_connection": round(used / connections * 1e6, 1),
        "hub_user_us_per_connection": round((user_after - user) / connections * 1e6, 1),
        "hub_system_us_per_connection": round((system_after - system) / connections * 1e6, 1),
        "hub_idle_cpu_share": round(idle_share, 4),
        # the status connection itself is one more session
        "hub_sessions_opened": counters["counters"]["connections_total"] - 1,
        "hub_refused_connect_rate": counters.get("connect_rate", {}).get("refused"),
        "hub_failed_charged": counters.get("connect_rate", {}).get("failed_charged"),
        "hub_protocol_errors": counters["counters"]["protocol_errors"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.tools.connection_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=6000)
    parser.add_argument("--kind", choices=KINDS, default="junk")
    parser.add_argument("--pin", action="store_true", help="the hub on CPU 0, this client on CPU 1")
    parser.add_argument("--hub-root", type=Path, default=ROOT, help="run the hub from this checkout")
    parser.add_argument("--hub-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for the hub (repeatable; --hub-arg=--flag --hub-arg=VALUE)")
    args = parser.parse_args(argv)
    row = measure(args.connections, args.kind, hub_args=tuple(args.hub_arg), pin=args.pin, root=args.hub_root)
    row["load_average"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps({"bench": "connection_cost", **row}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
