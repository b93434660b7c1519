"""``pub0sub cluster up|status|down`` as a person uses it: real hub processes on 127.0.0.1.

Most tests pass ``--base-port 0`` (free ports): other test runs on this machine may hold
7420.  Hubs are checked through /proc and their data dirs' locks, and every test stops what
it started by PID, whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hub.storage.store import LOCK_FILE as HUB_LOCK_FILE
from sdk.tools.cluster import LocalCluster, port_free, restartable_ports
from sdk.tools.cluster_state import LOCK_FILE, STATE_FILE
from sdk.tools.port_leases import lease, renew
from tests.support.command import Command, no_traceback
from tests.support.procstat import children, running

ROOT = Path(__file__).resolve().parent.parent
StartCommand = Callable[..., Command]


def cluster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sdk.cli", "cluster", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)  # fmt: skip


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sdk.cli", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)  # fmt: skip


def state_of(root: Path) -> dict[str, object]:
    return dict(json.loads((root / STATE_FILE).read_text()))


def hub_pids(root: Path) -> list[int]:
    return [int(h["pid"]) for h in state_of(root)["hubs"]]  # type: ignore[attr-defined]


@pytest.fixture
def data_root(tmp_path: Path) -> Iterator[Path]:
    """The cluster's data root; any hub its state file still names is SIGKILLed at the end."""
    root = tmp_path / "cluster"
    yield root
    if (root / STATE_FILE).exists():
        for pid in hub_pids(root):
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_sdk_reads_the_lock_file_the_hub_writes() -> None:
    assert LOCK_FILE == HUB_LOCK_FILE


@pytest.mark.slow
def test_detached_cluster_status_and_down(data_root: Path) -> None:
    up = cluster("up", "--hubs", "2", "--detach", "--base-port", "0", "--data-root", str(data_root))
    assert up.returncode == 0, up.stderr
    state = state_of(data_root)
    hubs = state["hubs"]
    assert isinstance(hubs, list) and [h["name"] for h in hubs] == ["hub-1", "hub-2"]
    assert all(running(h["pid"]) for h in hubs)
    assert f"pub0sub cluster down --data-root {data_root}" in up.stdout
    # The hubs prove a secret made for this cluster to each other (mesh admission).
    secret = data_root / "cluster.secret"
    assert f"mesh: the hubs prove the cluster secret in {secret} to each other" in up.stdout
    assert secret.stat().st_mode & 0o777 == 0o600 and len(secret.read_text().strip()) == 64
    assert "admission: cluster secret" in (data_root / "hub-1.log").read_text()

    status = cluster("status", "--data-root", str(data_root))
    assert status.returncode == 0, status.stdout
    for h in hubs:
        assert f"{h['name']}  up    PID {h['pid']}  address {h['address']}  peers 1/1" in status.stdout
        assert f"mesh {h['multiaddr']}" in status.stdout
    assert status.stdout.rstrip().endswith("2 of 2 hubs up")

    # The addresses it printed are the hubs': publish on one, read it back there.
    first = hubs[0]["address"]
    assert cli("pub", "--hub", first, "--topic", "orders.eu", "hello").returncode == 0
    sub = cli("sub", "--hub", first, "--topic", "orders.>", "--start", "earliest", "--count", "1")
    assert sub.stdout == "orders.eu 0 hello\n", sub.stderr

    again = cluster("up", "--hubs", "2", "--base-port", "0", "--data-root", str(data_root))
    assert again.returncode == 1
    assert f"a cluster already runs from {data_root}: hub-1 (PID {hubs[0]['pid']}, {first})" in again.stderr

    os.kill(hubs[1]["pid"], signal.SIGKILL)
    status = cluster("status", "--data-root", str(data_root))
    assert status.returncode == 1
    assert f"hub-2  down  (was PID {hubs[1]['pid']})" in status.stdout and "1 of 2 hubs up" in status.stdout

    down = cluster("down", "--data-root", str(data_root))
    assert down.returncode == 0, down.stderr
    assert f"hub-1 (PID {hubs[0]['pid']}, {first}): stopped" in down.stdout
    assert f"hub-2 (PID {hubs[1]['pid']}, {hubs[1]['address']}): not running" in down.stdout
    assert not running(hubs[0]["pid"]) and not (data_root / STATE_FILE).exists()

    nothing = cluster("status", "--data-root", str(data_root))
    assert nothing.returncode == 1 and f"no cluster in {data_root}" in nothing.stdout
    nothing = cluster("down", "--data-root", str(data_root))
    assert nothing.returncode == 0 and "nothing to stop" in nothing.stdout


@pytest.mark.slow
def test_a_cluster_with_tls(data_root: Path) -> None:
    up = cluster("up", "--hubs", "2", "--detach", "--tls", "--base-port", "0", "--data-root", str(data_root))
    assert up.returncode == 0, up.stderr
    ca = data_root / "tls" / "ca.pem"
    assert f"TLS: clients verify the hubs with --ca-file {ca}" in up.stdout and "mesh converged" in up.stdout
    status = cluster("status", "--data-root", str(data_root))  # status connects with the cluster's CA
    assert status.returncode == 0 and "peers 1/1" in status.stdout, status.stdout
    first = state_of(data_root)["hubs"][0]["address"]  # type: ignore[index]
    assert cli("pub", "--hub", first, "--topic", "t", "--ack", "--ca-file", str(ca), "hi").returncode == 0
    plain = cli("pub", "--hub", first, "--topic", "t", "--ack", "hi")
    assert plain.returncode == 1 and "speaks TLS only" in plain.stderr
    assert cluster("down", "--data-root", str(data_root)).returncode == 0


def test_cluster_secret_writes_a_new_secret_and_never_replaces_one(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "cluster.secret"
    made = cli("cluster", "secret", str(path))
    assert made.returncode == 0 and f"--cluster-secret-file {path}" in made.stdout, made.stderr
    text = path.read_text()
    assert len(text.strip()) == 64 and int(text, 16) and path.stat().st_mode & 0o777 == 0o600
    again = cli("cluster", "secret", str(path))
    assert again.returncode == 1 and "is never replaced" in again.stderr and path.read_text() == text
    default = cli("cluster", "secret", "--data-root", str(tmp_path / "root"))
    assert default.returncode == 0 and (tmp_path / "root" / "cluster.secret").exists()


def free_base_port(hubs: int) -> int:
    """A base port whose client, mesh and metrics ports for ``hubs`` hubs are all free right now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1] // 10 * 10
        ports = [base + 10 * i + j for i in range(hubs) for j in (0, 1, 2)]
        if ports[-1] <= 65535 and all(port_free(port) for port in ports):
            return base
    raise AssertionError("no free block of ports")


@pytest.mark.slow
def test_base_ports_with_one_taken_and_metrics(data_root: Path) -> None:
    base = free_base_port(3)
    with socket.socket() as squatter:  # something else already listens on hub-2's client port
        squatter.bind(("127.0.0.1", base + 10))
        squatter.listen()
        up = cluster("up", "--hubs", "3", "--detach", "--metrics", "--base-port", str(base),
                     "--data-root", str(data_root))  # fmt: skip
        try:
            assert up.returncode == 0, up.stderr
            hubs = state_of(data_root)["hubs"]
            assert isinstance(hubs, list)
            assert hubs[0]["address"] == f"127.0.0.1:{base}" and f"/tcp/{base + 1}/" in hubs[0]["multiaddr"]
            assert hubs[0]["metrics_url"] == f"http://127.0.0.1:{base + 2}"
            assert hubs[1]["address"] != f"127.0.0.1:{base + 10}"
            assert hubs[1]["metrics_url"] not in ("", f"http://127.0.0.1:{base + 12}")  # a free port instead
            assert f"hub-2: port {base + 10} in use on 127.0.0.1; using free ports instead" in up.stderr
            assert hubs[2]["address"] == f"127.0.0.1:{base + 20}" and f"/tcp/{base + 21}/" in hubs[2]["multiaddr"]
            assert hubs[2]["metrics_url"] == f"http://127.0.0.1:{base + 22}"
            for hub in hubs:  # printed by up and status; each serves its own figures, its two peers linked
                line = f"metrics {hub['metrics_url']}/metrics  status page {hub['metrics_url']}/"
                assert line in up.stdout
                assert line in cluster("status", "--data-root", str(data_root)).stdout
                with urllib.request.urlopen(f"{hub['metrics_url']}/metrics", timeout=10) as reply:
                    metrics = reply.read().decode()
                assert f'pub0sub_hub_info{{hub_id="{hub["hub_id"]}",name="{hub["name"]}"}} 1.0' in metrics
                assert 'pub0sub_mesh_peers{state="linked"} 2.0' in metrics
        finally:
            cluster("down", "--data-root", str(data_root))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c twice", "sigterm"])
def test_foreground_up_stops_on_ctrl_c_and_sigterm(command: StartCommand, data_root: Path, how: str) -> None:
    up = command("cluster", "up", "--hubs", "2", "--base-port", "0", "--data-root", str(data_root))
    up.wait_for("running until Ctrl-C")
    hubs = children(up.pid)
    assert sorted(hubs) == sorted(hub_pids(data_root))
    if how == "sigterm":
        up.signal(signal.SIGTERM)
    else:
        up.ctrl_c()
        up.ctrl_c()
    code, out, err = up.finish()
    assert code == 0, err
    name = "SIGTERM" if how == "sigterm" else "SIGINT"
    assert out.rstrip().endswith(f"stopped 2 hubs on {name}; their data stays in {data_root}")
    no_traceback(err)
    assert [pid for pid in hubs if running(pid)] == [] and not (data_root / STATE_FILE).exists()


@pytest.mark.slow
def test_down_from_another_terminal_ends_a_foreground_up(command: StartCommand, data_root: Path) -> None:
    up = command("cluster", "up", "--hubs", "2", "--base-port", "0", "--data-root", str(data_root))
    up.wait_for("running until Ctrl-C")
    pids = hub_pids(data_root)
    down = cluster("down", "--data-root", str(data_root))
    assert down.returncode == 0 and down.stdout.count(": stopped") == 2, down.stdout
    code, out, err = up.finish()
    assert code == 0, err
    assert out.rstrip().endswith(f"stopped 2 hubs by pub0sub cluster down; their data stays in {data_root}")
    assert not any(running(pid) for pid in pids)


def test_restartable_ports_are_free_distinct_and_below_the_ephemeral_range() -> None:
    """What a hub restarted on its port needs: no outgoing connection can have taken it meanwhile."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    ports = restartable_ports(20)
    assert len(set(ports)) == 20 and all(1024 <= p < low for p in ports)
    assert all(port_free(port) for port in ports)
    assert lease(ports, 20, port_free) == [], "leased: no other pick hands them out before their hubs bind"


def test_a_killed_hub_keeps_its_ports_leased_and_is_restarted_on_them(tmp_path: Path) -> None:
    """A hub down between a crash and its restart (the test bed's) is not bound to its ports, and
    the lease taken when they were picked ends after two minutes: killing it leases them again."""
    with LocalCluster(1, tmp_path / "cluster", metrics=True, note=lambda _line: None) as cluster:
        ports = cluster.ports_of(0).all()
        renew(ports, seconds=0.0)  # as if the hub had run past its ports' first lease
        cluster.kill(0)
        assert not any(running(pid) for pid in [cluster.hubs[0].pid])
        assert lease(ports, len(ports), lambda port: True) == [], "free for any pick while the hub is down"
        cluster.restart(0)
        assert cluster.ports_of(0).all() == ports


def test_a_leased_port_is_not_handed_out_again_by_another_process_until_its_lease_ends(tmp_path: Path) -> None:
    """Hubs bind their ports a second or more after the pick: a port picked for one must not be
    picked for another meanwhile, by this process or any other (another xdist worker)."""
    registry = tmp_path / "leases.json"
    assert lease([5001, 5002], 2, lambda port: True, registry=registry) == [5001, 5002]
    assert lease([5001, 5003], 2, lambda port: True, registry=registry) == [5003]
    other = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; from sdk.tools.port_leases import lease; "
         "print(lease([5001, 5002, 5003, 5004, 5005], 3, lambda p: p != 5005, registry=Path(sys.argv[1])))",
         str(registry)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert other.stdout.strip() == "[5004]"
    assert lease([5006], 1, lambda port: True, registry=registry, seconds=0.0) == [5006]
    assert lease([5006], 1, lambda port: True, registry=registry) == [5006], "an ended lease frees the port"
    registry.write_text('{"5007": ')  # cut short by a crash mid-write
    assert lease([5007], 1, lambda port: True, registry=registry) == [5007]
