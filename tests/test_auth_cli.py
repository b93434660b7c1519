"""``pub0sub auth``, the hub's --auth-file and SIGHUP, and the client commands' credentials, as
processes the way an operator runs them (docs/security.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import sdk
import wire
from tests.support.command import ROOT, pub0sub
from tests.support.hubprocess import HubProcess
from tests.support.security import user_entry
from tests.support.waiting import wait_until

StartHub = Callable[..., HubProcess]


def auth(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sdk.cli", "auth", *args], input=stdin, capture_output=True,
                          text=True, timeout=60, cwd=ROOT)  # fmt: skip


def test_auth_makes_entries_the_hub_accepts(tmp_path: Path, start_hub: StartHub) -> None:
    users = tmp_path / "users.toml"
    made = auth("password", "alice", "--publish", "orders.>", "--subscribe", "orders.>", "--deny-subscribe",
                "orders.secret", "--file", str(users), stdin="correct horse\n")  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = auth("token", "ingest", "--publish", "orders.>", "--status", "--file", str(users))
    reader = auth("token", "reader", "--subscribe", "orders.>", "--status-topics", "--file", str(users))
    assert reader.returncode == 0 and 'status = "topics"' in users.read_text(), reader.stderr
    assert token.returncode == 0, token.stderr
    secret = token.stdout.strip()
    assert secret.startswith("ingest:") and len(secret) > 40  # printed once: only its hash is in the file
    assert secret.split(":", 1)[1] not in users.read_text() and "correct horse" not in users.read_text()
    again = auth("token", "ingest", "--file", str(users))
    assert again.returncode == 2 and "already has a user 'ingest'" in again.stderr

    hub = start_hub("--auth-file", str(users), "--data-dir", str(tmp_path / "data"))
    published = pub0sub("pub", "--hub", hub.address, "--token", secret, "--topic", "orders.eu", "--ack", "hello")
    assert published.returncode == 0, published.stderr
    env = {**os.environ, "PUB0SUB_USER": "alice", "PUB0SUB_PASSWORD": "correct horse"}
    got = subprocess.run([sys.executable, "-m", "sdk.cli", "sub", "--hub", hub.address, "--topic", "orders.*",
                          "--start", "earliest", "--count", "1"], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env=env)  # fmt: skip
    assert got.returncode == 0 and got.stdout == "orders.eu 0 hello\n", got.stderr
    wrong = pub0sub("status", "--hub", hub.address, "--user", "alice", "--password", "wrong")
    assert wrong.returncode == 1 and "bad credentials (NOT_AUTHORIZED)" in wrong.stderr
    # --status granted ingest the status document; alice was not granted it.
    assert pub0sub("status", "--hub", hub.address, "--token", secret).returncode == 0
    narrowed = pub0sub("status", "--hub", hub.address, "--token", reader.stdout.strip())
    assert narrowed.returncode == 0 and "orders.eu" in narrowed.stdout, narrowed.stderr
    assert "narrowed_to" in narrowed.stdout and "connection" not in narrowed.stdout
    not_granted = pub0sub("status", "--hub", hub.address, "--user", "alice", "--password", "correct horse")
    assert not_granted.returncode == 1 and "STATUS is not granted to 'alice'" in not_granted.stderr
    denied = pub0sub("pub", "--hub", hub.address, "--token", secret, "--topic", "audit", "--ack", "x")
    assert denied.returncode == 1 and "publish to 'audit' is not allowed" in denied.stderr


def test_an_open_hub_says_so_and_a_hub_with_users_does_not(tmp_path: Path, start_hub: StartHub) -> None:
    assert "OPEN HUB: no --auth-file" in start_hub().stderr_text()
    users = tmp_path / "users.toml"
    users.write_text(user_entry("a", "pw", subscribe=[">"]))
    log = start_hub("--auth-file", str(users)).stderr_text()
    assert "OPEN HUB" not in log and "1 users, anonymous clients refused; SIGHUP reloads it" in log


def test_a_bad_users_file_stops_the_hub_with_one_line(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    users.write_text("[users.alice]\nsecrets = ['hunter2']\n")
    for args in (["--auth-file", str(users)], ["--auth-file", str(tmp_path / "missing.toml")],
                 ["--tls-cert", str(tmp_path / "missing.pem"), "--tls-key", str(tmp_path / "missing.key")],
                 ["--tls-cert", str(users)]):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "hub", "--listen", "127.0.0.1:0", *args], capture_output=True,
                              text=True, timeout=30)  # fmt: skip
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_sighup_reloads_the_users_file_and_ends_a_revoked_subscription(tmp_path: Path, start_hub: StartHub) -> None:
    users = tmp_path / "users.toml"
    users.write_text(user_entry("ops", "pw", publish=[">"], subscribe=[">"], status=True))
    hub = start_hub("--auth-file", str(users))
    with sdk.connect_blocking(hub.address, user="ops", password="pw", reconnect=None) as client:
        sub = client.subscribe("alerts.disk")
        users.write_text(user_entry("ops", "pw", publish=[">"], subscribe={"allow": [">"], "deny": ["alerts.>"]},
                                    status=True))
        hub.proc.send_signal(signal.SIGHUP)
        with pytest.raises(sdk.SubscriptionClosedError) as ended:
            sub.next(timeout=30)
        assert ended.value.code is wire.ErrorCode.NOT_AUTHORIZED and "grant revoked" in ended.value.reason
        doc = client.status()  # the connection itself carries on: ops is still allowed
        assert doc["auth"]["reloads"] == 1 and doc["auth"]["per_user"]["ops"]["revoked"] == 1
    users.write_text("not toml [")
    hub.proc.send_signal(signal.SIGHUP)

    def reload_failed() -> bool:
        with sdk.connect_blocking(hub.address, user="ops", password="pw", reconnect=None) as client:
            return client.status()["auth"]["reload_errors"] == 1

    wait_until(reload_failed, timeout=30, what="the failed reload to be counted")
    assert hub.proc.poll() is None and "users file NOT reloaded" in hub.stderr_text()
