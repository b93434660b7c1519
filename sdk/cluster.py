"""``pub0sub cluster up --hubs N``: N hubs meshed on loopback, until Ctrl-C.

The first hub starts alone; the others bootstrap from its multiaddr and find
each other through the DHT.  Each hub keeps its data (logs, identity) in
``DATA_ROOT/hub-<i>``, so stopping and starting the cluster again brings back
the same hubs with the same peer ids and data.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .blocking import connect_blocking

HUB_START_SECONDS = 30.0
CONVERGE_SECONDS = 30.0


@dataclass
class HubInfo:
    name: str
    data_dir: Path
    proc: subprocess.Popen[str]
    address: str = ""
    hub_id: str = ""
    multiaddrs: list[str] = field(default_factory=list)


class LocalCluster:
    """Start, watch and stop a set of meshed hub processes (stopped by PID, never by name)."""

    def __init__(self, hubs: int, data_root: Path, *, extra_args: Sequence[str] = ()) -> None:
        if hubs < 1:
            raise ValueError("a cluster needs at least one hub")
        self.count = hubs
        self.data_root = data_root
        self.extra_args = list(extra_args)
        self.hubs: list[HubInfo] = []

    def start(self) -> None:
        try:
            for i in range(1, self.count + 1):
                bootstrap = ["--bootstrap", self.hubs[0].multiaddrs[0]] if self.hubs else []
                self.hubs.append(self._start_hub(f"hub-{i}", bootstrap))
        except BaseException:
            self.stop()
            raise

    def _start_hub(self, name: str, bootstrap: list[str]) -> HubInfo:
        data_dir = self.data_root / name
        data_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable, "-m", "hub", "--name", name, "--listen", "127.0.0.1:0",
            "--mesh-listen", "/ip4/127.0.0.1/tcp/0", "--data-dir", str(data_dir), *bootstrap, *self.extra_args,
        ]  # fmt: skip
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        info = HubInfo(name, data_dir, proc)
        assert proc.stdout is not None
        deadline = time.monotonic() + HUB_START_SECONDS
        while time.monotonic() < deadline and not info.multiaddrs:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{name} exited during start-up (exit status {proc.wait()})")
            if line.startswith("listening on "):
                info.address = line.split()[-1]
            elif line.startswith("hub id "):
                info.hub_id = line.split()[-1]
            elif line.startswith("mesh listening on "):
                info.multiaddrs.append(line.split()[-1])
        if not info.multiaddrs:
            proc.terminate()
            raise RuntimeError(f"{name} did not start within {HUB_START_SECONDS:.0f}s")
        return info

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
            with connect_blocking(hub.address, name="cluster") as client:
                peers = client.status().get("mesh", {}).get("peers", [])
        except (OSError, ConnectionError):
            return 0
        return sum(1 for p in peers if p.get("connected"))

    def stop(self) -> None:
        for hub in self.hubs:
            if hub.proc.poll() is None:
                hub.proc.send_signal(signal.SIGTERM)
        for hub in self.hubs:
            try:
                hub.proc.wait(10)
            except subprocess.TimeoutExpired:
                hub.proc.kill()
                hub.proc.wait(5)
            if hub.proc.stdout is not None:
                hub.proc.stdout.close()

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def describe(cluster: LocalCluster) -> str:
    lines = []
    for hub in cluster.hubs:
        lines.append(f"{hub.name}: clients {hub.address}  mesh {hub.multiaddrs[0]}  data {hub.data_dir}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub cluster") -> int:
    parser = argparse.ArgumentParser(prog=prog, description="Run a local cluster of meshed hubs.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start N hubs on 127.0.0.1 and keep them running until Ctrl-C")
    up.add_argument("--hubs", type=int, default=3, help="number of hubs (default 3)")
    up.add_argument("--data-root", type=Path, default=Path("pub0sub-cluster-data"), help="one data dir per hub below")
    up.add_argument("--seconds", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    args = parser.parse_args(argv)
    if args.hubs < 1:
        parser.error("--hubs must be at least 1")
    cluster = LocalCluster(args.hubs, args.data_root)
    try:
        cluster.start()
        print(describe(cluster), flush=True)
        converged = cluster.wait_converged()
        print("mesh converged" if converged else "mesh not fully linked yet (see pub0sub status)", flush=True)
        deadline = time.monotonic() + args.seconds if args.seconds else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.5)
            for hub in cluster.hubs:
                if hub.proc.poll() is not None:
                    print(f"{hub.name} exited with status {hub.proc.returncode}", file=sys.stderr)
                    return 1
    except KeyboardInterrupt:
        pass
    except RuntimeError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()
    return 0
