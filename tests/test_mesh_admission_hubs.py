"""Mesh admission on real ``python -m hub`` processes, against a rogue libp2p peer with a fresh key.

Without admission, such a peer could link, subscribe to ``>`` and inject forwards
(tests/test_mesh_input.py shows what the hub checks once a session runs).  With a cluster
secret or an allow-list it gets no session at all: its stream is reset before any of its
frames is read, no frame of the hub reaches it, and the refusal is counted in status and
logged with its peer id and address -- while the hubs that belong keep their links.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair

import sdk
import wire
from hub.mesh.identity import IDENTITY_FILE, peer_id_of
from tests.support.cluster import HUB_POLL, Cluster, Hub, expect_nothing, next_data
from tests.support.roguepeer import RoguePeer, raw_forward_batch
from tests.support.waiting import await_until

HEARTBEAT = 0.5
CLOSE_WITHIN = 10.0


def write_secret(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


def status_command(hub: Hub) -> str:
    done = subprocess.run([sys.executable, "-m", "sdk.cli", "status", "--hub", hub.address], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parent.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@dataclass
class Attempt:
    peer_id: str
    closed: bool = False
    frames: list[wire.Frame] = field(default_factory=list)


async def attack(hub: Hub) -> Attempt:
    """A fresh key's best try: hello with a position for the hub's history, subscribe to
    everything, inject a forward -- all at once, as the independent harness does."""
    key_pair = create_new_key_pair()
    attempt = Attempt(str(peer_id_of(key_pair)))
    try:
        async with RoguePeer.dial(hub.multiaddr, key_pair=key_pair) as rogue:
            hello = wire.MeshHello(hub_id=rogue.hub_id,
                                   positions=(wire.ResumePosition(origin=int(hub.hub_id, 16), seq=1),))  # fmt: skip
            with contextlib.suppress(Exception):  # the hub may reset the stream while this is written
                await rogue.send(hello, wire.Subscribe(topics=(">",)), raw_forward_batch(rogue.hub_id, 1, "t", [b"x"]))
            attempt.closed = await rogue.wait_closed(CLOSE_WITHIN)
            attempt.frames = rogue.frames
    except Exception:  # reset while the protocol was still being negotiated: refused before any frame
        attempt.closed = True
    assert attempt.closed, "the hub kept a stranger's stream open"
    return attempt


async def refused(hub: Hub, rogue: Attempt, kind: str) -> None:
    mesh = await trio.to_thread.run_sync(hub.mesh)
    admission = mesh["admission"]
    assert admission["refused_by_kind"].get(kind, 0) >= 1, admission
    assert any(r["peer_id"] == str(rogue.peer_id) and r["address"].startswith("127.0.0.1:")
               for r in admission["recent_refusals"]), admission  # fmt: skip
    assert str(rogue.peer_id) not in {p["peer_id"] for p in mesh["peers"]}, "a refused peer got a link record"
    assert not rogue.frames, f"the hub sent a refused peer {rogue.frames!r}"
    assert f"mesh peer {rogue.peer_id} refused (inbound link from 127.0.0.1:" in hub.log_tail(300)


def identities(tmp_path: Path, names: list[str]) -> list[str]:
    """Peer ids chosen before start (the key file a hub would make), so allow-lists can name them."""
    ids = []
    for n, name in enumerate(names, 1):
        data_dir = tmp_path / name / "data"
        data_dir.mkdir(parents=True)
        (data_dir / IDENTITY_FILE).write_bytes(bytes([n]) * 32)
        ids.append(str(peer_id_of(create_new_key_pair(bytes([n]) * 32))))
    return ids


@pytest.mark.slow
async def test_a_rogue_without_the_secret_cannot_link_subscribe_or_inject(tmp_path: Path) -> None:
    secret = write_secret(tmp_path / "cluster.secret", "a3" * 32)
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, extra=["--cluster-secret-file", str(secret)]) as cl:
        h1, h2 = await trio.to_thread.run_sync(cl.start, 2)
        await cl.await_converged()  # the right secret links
        async with sdk.connect(h1.address) as client, client.subscribe("t") as sub:
            await cl.await_interest(h2, "t", h1)
            async with sdk.connect(h1.address) as publisher:
                await publisher.publish_acked("private.ledger", b"history a stranger asks to replay")
            rogue = await attack(h1)
            await refused(h1, rogue, "no_secret")
            shown = await trio.to_thread.run_sync(status_command, h1)
            line = f"mesh admission  cluster secret; 1 refused (1 no_secret), last {rogue.peer_id} at 127.0.0.1:"
            assert line in shown, shown
            await expect_nothing(sub, 0.5)  # the forged forward never reached a subscriber
            async with sdk.connect(h2.address) as pub:
                await pub.publish_acked("t", b"real")
            assert await next_data(sub) == b"real"
        assert h1.connected_peers() == {h2.peer_id}


@pytest.mark.slow
async def test_a_hub_with_a_wrong_secret_is_refused_and_counted(tmp_path: Path) -> None:
    secret = write_secret(tmp_path / "cluster.secret", "a3" * 32)
    wrong = write_secret(tmp_path / "other.secret", "5c" * 32)
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, extra=["--cluster-secret-file", str(secret)]) as cl:
        h1, h2 = await trio.to_thread.run_sync(cl.start, 2)
        await cl.await_converged()
        # The later --cluster-secret-file wins: this hub holds another cluster's secret.
        intruder = await trio.to_thread.run_sync(lambda: cl.add(h1, args=["--cluster-secret-file", str(wrong)]))

        def refused_wrong_secret() -> bool:
            # Both ends count it: the dialer only after its last words (its own proof, so that the
            # listener can judge it too) have been answered by the reset, up to a second later.
            return all(hub.mesh()["admission"]["refused_by_kind"].get("wrong_secret", 0) >= 1 for hub in (h1, intruder))

        await await_until(refused_wrong_secret, timeout=20, what="hub 1 and the intruder to refuse each other",
                          in_thread=True, **HUB_POLL)  # fmt: skip
        assert h1.connected_peers() == {h2.peer_id} and not intruder.connected_peers()
        assert f"mesh peer {intruder.peer_id} refused" in h1.log_tail(300)
        assert "a different cluster secret" in h1.log_tail(300)


@pytest.mark.slow
async def test_an_allow_list_admits_the_cluster_and_no_stranger(tmp_path: Path) -> None:
    ids = identities(tmp_path, ["hub0", "hub1"])
    allowed = tmp_path / "allowed-peers"
    allowed.write_text("".join(f"{peer}  # {name}\n" for peer, name in zip(ids, ("hub0", "hub1"), strict=True)))
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, extra=["--mesh-allow", str(allowed)]) as cl:
        h1, h2 = await trio.to_thread.run_sync(cl.start, 2)
        assert [h1.peer_id, h2.peer_id] == ids
        await cl.await_converged()
        rogue = await attack(h1)
        await refused(h1, rogue, "not_allowed")
        assert h1.connected_peers() == {h2.peer_id}


def test_unusable_admission_settings_stop_the_hub_with_one_line(tmp_path: Path) -> None:
    short = write_secret(tmp_path / "short.secret", "password")
    cases = [
        (["--cluster-secret-file", str(short)], f"cluster secret file {short}: 8 bytes; at least 16 are needed"),
        (["--cluster-secret-file", str(tmp_path / "none")], "No such file"),
        (["--mesh-allow", "12D3KooWnotapeerid"], "'12D3KooWnotapeerid' is not a libp2p peer id"),
        (["--mesh-allow", str(tmp_path / "no-list")], "neither a peer id nor a readable file"),
    ]
    for args, message in cases:
        done = subprocess.run(
            [sys.executable, "-m", "hub", "--listen", "127.0.0.1:0", "--mesh-listen", "/ip4/127.0.0.1/tcp/0", *args],
            capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
async def test_the_cluster_secret_rotates_by_sighup_without_a_refusal(tmp_path: Path) -> None:
    """docs/security.md, "Rotating the cluster secret": each hub's file goes (old) -> (old, new) ->
    (new, old) -> (new), one SIGHUP per hub and step; a hub one step behind still links, and after
    the last step a hub with only the old secret is refused.  The links stay up until the last
    step, where a link proved with the retired secret is closed and links again at once with the
    new one (never refused: every hub proves the new secret by then)."""
    old, new = "a3" * 32, "5c" * 32
    files = [tmp_path / f"hub{n}.secret" for n in range(3)]
    for file in files:
        write_secret(file, old)

    def secret_args(n: int) -> list[str]:
        return ["--cluster-secret-file", str(files[n])]

    async def step(hub: Hub, n: int, *secrets: str) -> None:
        reloads = hub.mesh()["admission"]["secret_reloads"]
        write_secret(files[n], "\n".join(secrets))
        hub.signal(signal.SIGHUP)

        def reloaded() -> bool:
            admission = hub.mesh()["admission"]
            return admission["secret_reloads"] == reloads + 1 and admission["cluster_secrets_accepted"] == len(secrets)

        await await_until(reloaded, timeout=20, what=f"{hub.name} to reload its secret", in_thread=True, **HUB_POLL)

    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT) as cl:
        (h0,) = await trio.to_thread.run_sync(lambda: cl.start(1, args=secret_args(0)))
        h1 = await trio.to_thread.run_sync(lambda: cl.add(h0, args=secret_args(1)))
        await cl.await_converged()
        await step(h0, 0, old, new)  # step 1 on hub 0 only: it proves the old, accepts both
        await step(h1, 1, old, new)
        await step(h0, 0, new, old)  # step 2 on hub 0 only: it proves the new
        # A hub joining now at step 1, one step behind hub 0, links with it: new handshakes
        # across neighbouring steps work both ways (hub 0 dials it back, and it dials hub 0).
        write_secret(files[2], f"{old}\n{new}")
        h2 = await trio.to_thread.run_sync(lambda: cl.add(h0, args=secret_args(2)))
        await cl.await_converged()
        for hub, n in ((h1, 1), (h2, 2)):
            await step(hub, n, new, old)
        for hub, n in ((h0, 0), (h1, 1), (h2, 2)):
            await step(hub, n, new)  # step 3: the old secret is retired
        await cl.await_converged()
        for hub in (h0, h1, h2):
            # No hub was turned away for what it proved.  (Both ends of a link closed at the last step
            # dial again at once; the stream that loses the tie-break may be reset mid-handshake, which
            # counts as a refusal of kind "closed".)
            admission = hub.mesh()["admission"]
            assert set(admission["refused_by_kind"]) <= {"closed"}, json.dumps(admission)
        # The links carry messages.
        async with sdk.connect(h0.address) as client, client.subscribe("rotated") as sub:
            await cl.await_interest(h2, "rotated", h0)
            async with sdk.connect(h2.address) as pub:
                await pub.publish_acked("rotated", b"after the rotation")
            assert await next_data(sub) == b"after the rotation"
        # A hub that still holds only the retired secret is refused.
        stale = write_secret(tmp_path / "stale.secret", old)
        intruder = await trio.to_thread.run_sync(lambda: cl.add(h0, args=["--cluster-secret-file", str(stale)]))

        def refused_stale() -> bool:
            return h0.mesh()["admission"]["refused_by_kind"].get("wrong_secret", 0) >= 1

        await await_until(refused_stale, timeout=20, what="hub 0 to refuse the retired secret", in_thread=True,
                          **HUB_POLL)  # fmt: skip
        assert intruder.peer_id not in h0.connected_peers() and not intruder.connected_peers()
        assert "cluster secret file" in h0.log_tail(300) and "reloaded: 1 secret(s) accepted" in h0.log_tail(300)


@pytest.mark.slow
async def test_a_reload_unlinks_a_peer_taken_off_the_allow_list_and_keeps_the_others(tmp_path: Path) -> None:
    """SIGHUP reads --mesh-allow's file again: a live link whose peer left it is closed at once
    (``not_admitted``) and its redials are refused; the links of peers still on it stay up."""
    ids = identities(tmp_path, ["hub0", "hub1", "hub2"])
    allowed = tmp_path / "allowed-peers"
    allowed.write_text("\n".join(ids) + "\n")
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, extra=["--mesh-allow", str(allowed)]) as cl:
        h0, h1, h2 = await trio.to_thread.run_sync(cl.start, 3)
        await cl.await_converged()
        allowed.write_text(f"{ids[0]}\n{ids[1]}\n")  # hub2 is no longer trusted (on hub0: the others keep the file)
        h0.signal(signal.SIGHUP)

        def unlinked() -> bool:
            admission = h0.mesh()["admission"]
            return admission["unlinked_by_reload"] == 1 and h2.peer_id not in h0.connected_peers()

        await await_until(unlinked, timeout=20, what="hub 0 to unlink hub 2", in_thread=True, **HUB_POLL)
        assert "its peer id is no longer on --mesh-allow (admission rules reloaded)" in h0.log_tail(300)
        assert h0.connected_peers() == {h1.peer_id}  # hub 1 kept its link throughout
        assert h0.mesh()["admission"]["unlinked_by_reload"] == 1
        # hub 2 still trusts hub 0 and dials it again: refused before any frame.
        await await_until(lambda: h0.mesh()["admission"]["refused_by_kind"].get("not_allowed", 0) >= 1,
                          timeout=30, what="hub 2's redial to be refused", in_thread=True, **HUB_POLL)  # fmt: skip
        assert h2.peer_id not in h0.connected_peers()
        async with sdk.connect(h0.address) as client, client.subscribe("kept") as sub:
            await cl.await_interest(h1, "kept", h0)
            async with sdk.connect(h1.address) as pub:
                await pub.publish_acked("kept", b"over the link that stayed")
            assert await next_data(sub) == b"over the link that stayed"


@pytest.mark.slow
async def test_a_reload_that_retires_a_secret_unlinks_the_peers_that_proved_it(tmp_path: Path) -> None:
    """A link proved with a secret that a reload removes is closed; the peer links again once it
    proves a secret still accepted (here: after its own file and SIGHUP move on)."""
    old, new = "a3" * 32, "5c" * 32
    files = [write_secret(tmp_path / f"hub{n}.secret", old) for n in range(2)]
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT) as cl:
        (h0,) = await trio.to_thread.run_sync(lambda: cl.start(1, args=["--cluster-secret-file", str(files[0])]))
        h1 = await trio.to_thread.run_sync(lambda: cl.add(h0, args=["--cluster-secret-file", str(files[1])]))
        await cl.await_converged()
        write_secret(files[0], new)  # hub 0 retires the old secret; hub 1 still proves it
        h0.signal(signal.SIGHUP)

        def unlinked() -> bool:
            admission = h0.mesh()["admission"]
            return admission["unlinked_by_reload"] == 1 and not h0.connected_peers()

        await await_until(unlinked, timeout=20, what="hub 0 to unlink hub 1", in_thread=True, **HUB_POLL)
        assert "the cluster secret it proved is no longer in --cluster-secret-file" in h0.log_tail(300)
        await await_until(lambda: h0.mesh()["admission"]["refused_by_kind"].get("wrong_secret", 0) >= 1,
                          timeout=30, what="the old secret to be refused", in_thread=True, **HUB_POLL)  # fmt: skip
        write_secret(files[1], f"{new}\n{old}")
        h1.signal(signal.SIGHUP)
        await cl.await_converged()
        assert h0.connected_peers() == {h1.peer_id}
