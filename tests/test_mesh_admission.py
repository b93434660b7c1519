"""Mesh admission: the cluster-secret handshake as bytes, then between real libp2p hosts.

The handshake (hub/core/mesh/admission.py) is driven by hand first -- right secret, wrong
secret, a replayed, reflected or relayed proof, a peer that sends mesh frames instead -- and
then on real meshes in this process: the right secret links, a wrong one is refused and
counted on both sides, the allow-list admits only its peer ids, and mesh v1 only when allowed.
Rogue peers against real hub processes are in tests/test_mesh_admission_hubs.py.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from pathlib import Path

import multiaddr
import pytest
import trio
from libp2p.peer.peerinfo import info_from_p2p_addr

import wire
from hub.core.mesh.admission import (
    ADMIT_NONCE,
    ADMIT_PROOF,
    AdmissionHandshake,
    AdmissionRefused,
    AdmissionRules,
    AdmissionSetupError,
    frame,
    proof,
    read_secrets,
)
from hub.mesh import Mesh
from hub.mesh.admit import parse_allow_list
from tests.support.mesh import interest_of, start_mesh
from tests.support.roguepeer import RoguePeer
from tests.support.waiting import await_until

SECRET = b"0123456789abcdef0123456789abcdef"
OTHER_SECRET = b"fedcba9876543210fedcba9876543210"
DIALER_ID = b"\x00\x24dialer-peer-id"
LISTENER_ID = b"\x00\x24listener-peer-id"


def counting_nonces(start: int) -> Callable[[int], bytes]:
    counter = itertools.count(start)
    return lambda n: bytes([next(counter) % 256]) * n


Pair = tuple[AdmissionHandshake, AdmissionHandshake]


def pair(dialer_secret: bytes = SECRET, listener_secret: bytes = SECRET) -> Pair:
    dialer = AdmissionHandshake(dialer_secret, dialer=True, own_id=DIALER_ID, peer_id=LISTENER_ID,
                                random_bytes=counting_nonces(1))  # fmt: skip
    listener = AdmissionHandshake(listener_secret, dialer=False, own_id=LISTENER_ID, peer_id=DIALER_ID,
                                  random_bytes=counting_nonces(2))  # fmt: skip
    return dialer, listener


def deliver(data: bytes, to: AdmissionHandshake) -> None:
    """Feed ``data`` the way the shell does: exactly the bytes asked for, frame by frame."""
    pos = 0
    while pos < len(data):
        want = to.wanted()
        assert want, "the handshake asked for nothing more"
        to.receive(data[pos : pos + want])
        pos += want


# -- the handshake, by hand --------------------------------------------------------------------


def test_the_right_secret_completes_in_three_messages_with_the_documented_bytes() -> None:
    dialer, listener = pair()
    first = dialer.take_output()
    assert first == frame(ADMIT_NONCE, b"\x01" * 32) == bytes([0x1E, 0, 0, 0, 32]) + b"\x01" * 32
    deliver(first, listener)
    second = listener.take_output()
    listener_proof = proof(SECRET, b"L", LISTENER_ID, DIALER_ID, b"\x01" * 32, b"\x02" * 32)
    assert second == frame(ADMIT_NONCE, b"\x02" * 32) + frame(ADMIT_PROOF, listener_proof)
    assert not listener.done
    deliver(second, dialer)
    assert dialer.done and dialer.wanted() == 0
    third = dialer.take_output()
    assert third == frame(ADMIT_PROOF, proof(SECRET, b"D", DIALER_ID, LISTENER_ID, b"\x01" * 32, b"\x02" * 32))
    deliver(third, listener)
    assert listener.done and listener.take_output() == b""


def test_a_different_secret_is_refused_by_both_sides() -> None:
    dialer, listener = pair(dialer_secret=OTHER_SECRET)
    deliver(dialer.take_output(), listener)
    with pytest.raises(AdmissionRefused) as at_dialer:
        deliver(listener.take_output(), dialer)
    assert at_dialer.value.kind == "wrong_secret" and not dialer.done
    # The dialer still says its proof, so the listener's operator reads the same reason.
    with pytest.raises(AdmissionRefused) as at_listener:
        deliver(dialer.take_output(), listener)
    assert at_listener.value.kind == "wrong_secret" and not listener.done


def handshake_between(dialer_secrets: tuple[bytes, ...], listener_secrets: tuple[bytes, ...]) -> str:
    """``ok``, or which side refused the other's proof."""
    dialer = AdmissionHandshake(dialer_secrets, dialer=True, own_id=DIALER_ID, peer_id=LISTENER_ID)
    listener = AdmissionHandshake(listener_secrets, dialer=False, own_id=LISTENER_ID, peer_id=DIALER_ID)
    deliver(dialer.take_output(), listener)
    try:
        deliver(listener.take_output(), dialer)
    except AdmissionRefused:
        return "dialer refused"
    try:
        deliver(dialer.take_output(), listener)
    except AdmissionRefused:
        return "listener refused"
    assert dialer.done and listener.done
    return "ok"


def test_a_rotation_links_hubs_at_neighbouring_steps_and_ends_the_old_secret() -> None:
    """docs/security.md's three steps: add the new secret second, put it first, drop the old."""
    old, new = SECRET, OTHER_SECRET
    steps = [(old,), (old, new), (new, old), (new,)]
    for n, (here, there) in enumerate(itertools.pairwise(steps)):
        # A hub one step ahead links with one not there yet, whichever side dials.
        assert handshake_between(here, there) == "ok", n
        assert handshake_between(there, here) == "ok", n
    # Two steps apart does not: why each step must reach every hub before the next.
    assert handshake_between((old,), (new, old)) == "dialer refused"
    assert handshake_between((new, old), (old,)) == "listener refused"
    # After the last step, a hub with the retired secret alone is refused both ways.
    assert handshake_between((old,), (new,)) == "dialer refused"
    assert handshake_between((new,), (old,)) == "dialer refused"


def test_a_recorded_proof_cannot_be_replayed_on_a_new_stream() -> None:
    dialer, listener = pair()
    deliver(dialer.take_output(), listener)
    deliver(listener.take_output(), dialer)
    recorded_nonce = frame(ADMIT_NONCE, b"\x01" * 32)
    recorded_proof = dialer.take_output()
    # The replayer knows the old messages, not the secret; the listener's nonce is fresh.
    fresh = AdmissionHandshake(SECRET, dialer=False, own_id=LISTENER_ID, peer_id=DIALER_ID,
                               random_bytes=counting_nonces(9))  # fmt: skip
    deliver(recorded_nonce, fresh)
    fresh.take_output()
    with pytest.raises(AdmissionRefused, match="different cluster secret"):
        deliver(recorded_proof, fresh)


def test_a_proof_cannot_be_reflected_or_relayed() -> None:
    # Reflected: a rogue dialer hands the listener's own proof back as its answer.
    dialer, listener = pair()
    deliver(dialer.take_output(), listener)
    listener_says = listener.take_output()
    reflected = frame(ADMIT_PROOF, listener_says[-32:])
    with pytest.raises(AdmissionRefused):
        deliver(reflected, listener)
    # Relayed: a hub that holds the secret but believes it talks to another peer id than the one
    # Noise shows the listener (a man in the middle passing the messages on) proves nothing to it.
    fooled = AdmissionHandshake(SECRET, dialer=True, own_id=DIALER_ID, peer_id=b"the-relay",
                                random_bytes=counting_nonces(1))  # fmt: skip
    listener2 = pair()[1]
    deliver(fooled.take_output(), listener2)
    with pytest.raises(AdmissionRefused):  # the listener's proof names the listener, not the relay
        deliver(listener2.take_output(), fooled)
    with pytest.raises(AdmissionRefused):  # and the fooled dialer's proof names the relay
        deliver(fooled.take_output(), listener2)


def test_mesh_frames_instead_of_the_handshake_are_refused_at_the_header() -> None:
    listener = pair()[1]
    hello = wire.MeshHello(hub_id=7).encode()
    with pytest.raises(AdmissionRefused, match="MESH_HELLO where ADMIT_NONCE was due") as refused:
        listener.receive(hello[:5])
    assert refused.value.kind == "no_secret"
    other = pair()[1]
    with pytest.raises(AdmissionRefused) as wrong_size:
        other.receive(bytes([ADMIT_NONCE, 0, 0, 0, 33]))
    assert wrong_size.value.kind == "malformed"


def test_secret_and_allow_list_files_are_checked(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("too short\n")
    with pytest.raises(AdmissionSetupError, match="at least 16"):
        read_secrets(short)
    with pytest.raises(AdmissionSetupError, match="No such file"):
        read_secrets(tmp_path / "missing")
    good = tmp_path / "good"
    good.write_text(SECRET.decode() + "\n")
    assert read_secrets(good) == (SECRET,)
    rotating = tmp_path / "rotating"
    rotating.write_text(f"# new first, then the old one until every hub has the new\n{'n' * 32}\n\n{SECRET.decode()}\n")
    assert read_secrets(rotating) == (b"n" * 32, SECRET)
    three = tmp_path / "three"
    three.write_text(f"{'a' * 32}\n{'b' * 32}\n{'c' * 32}\n")
    with pytest.raises(AdmissionSetupError, match="3 secrets; at most 2"):
        read_secrets(three)
    weak_second = tmp_path / "weak"
    weak_second.write_text(f"{'a' * 32}\nshort\n")
    with pytest.raises(AdmissionSetupError, match="secret 2 of 2: 5 bytes; at least 16"):
        read_secrets(weak_second)
    comments = tmp_path / "comments"
    comments.write_text("# nothing else\n")
    with pytest.raises(AdmissionSetupError, match="no secret in it"):
        read_secrets(comments)
    peer = "12D3KooWEMiLLDv79n3N2xD1qyhgEtNxEdZrjZDsMN6NriziCAq9"
    listed = tmp_path / "peers"
    listed.write_text(f"# hubs of the cluster\n{peer}  # hub-1\n\n")
    assert parse_allow_list([str(listed)]) == {peer}
    assert parse_allow_list([f"{peer},{peer}"]) == {peer}
    bad = tmp_path / "bad"
    bad.write_text("12D3KooWnotapeerid\n")
    with pytest.raises(AdmissionSetupError, match=f"{bad}:1: '12D3KooWnotapeerid' is not a libp2p peer id"):
        parse_allow_list([str(bad)])


# -- real libp2p hosts ------------------------------------------------------------------------


def secret_rules(secret: bytes = SECRET, **kw: object) -> AdmissionRules:
    return AdmissionRules(cluster_secrets=(secret,), **kw)  # type: ignore[arg-type]


def refusals(mesh: Mesh) -> dict[str, int]:
    return dict(mesh.core.admission.refused_by_kind)


async def test_the_right_secret_links_and_carries_forwards() -> None:
    async with trio.open_nursery() as nursery:
        a = await start_mesh(nursery, admission=secret_rules())
        b = await start_mesh(nursery, admission=secret_rules())
        with trio.fail_after(10):
            await b.connect(a.listen_addrs[0])
        b.announce(["t"])
        await await_until(lambda: interest_of(a, b) == {"t"}, timeout=5, what="b's interest at a")
        a.forward(1, 1, wire.MessageSet.build(["t"], [(b"", b"through")]))
        await await_until(lambda: b.store.messages == 1, timeout=5, what="the forward at b")  # type: ignore[attr-defined]
        assert a.status()["admission"]["admitted"] >= 1 and a.status()["admission"]["refused"] == 0
        assert a.status()["admission"]["cluster_secret"] is True
        nursery.cancel_scope.cancel()


async def test_a_wrong_secret_is_refused_and_counted_on_both_sides() -> None:
    async with trio.open_nursery() as nursery:
        a = await start_mesh(nursery, admission=secret_rules())
        b = await start_mesh(nursery, admission=secret_rules(OTHER_SECRET))
        b.add_peer(info_from_p2p_addr(multiaddr.Multiaddr(a.listen_addrs[0])))
        await await_until(lambda: refusals(a).get("wrong_secret", 0) >= 1 and refusals(b).get("wrong_secret", 0) >= 1,
                          timeout=10, what="both hubs to refuse the other's secret")  # fmt: skip
        b.announce(["t"])
        assert a.connected_peers() == [] and b.connected_peers() == []
        assert str(b.peer_id) not in a.links, "a refused peer must not even get a link record"
        recent = a.status()["admission"]["recent_refusals"][-1]
        assert recent["peer_id"] == str(b.peer_id) and recent["address"].startswith("127.0.0.1:")
        nursery.cancel_scope.cancel()


async def test_a_hub_without_the_secret_is_refused() -> None:
    async with trio.open_nursery() as nursery:
        a = await start_mesh(nursery, admission=secret_rules())
        b = await start_mesh(nursery)  # an open hub: it starts with MESH_HELLO
        b.add_peer(info_from_p2p_addr(multiaddr.Multiaddr(a.listen_addrs[0])))
        await await_until(lambda: refusals(a).get("no_secret", 0) >= 1, timeout=10, what="a to refuse b")
        assert a.connected_peers() == [] and not a.interest.patterns_of(str(b.peer_id))
        nursery.cancel_scope.cancel()


async def test_the_allow_list_admits_only_its_peer_ids() -> None:
    async with trio.open_nursery() as nursery:
        b = await start_mesh(nursery)
        c = await start_mesh(nursery)
        a = await start_mesh(nursery, admission=AdmissionRules(allowed_peers=frozenset({str(b.peer_id)})))
        with trio.fail_after(10):
            await b.connect(a.listen_addrs[0])
        c.add_peer(info_from_p2p_addr(multiaddr.Multiaddr(a.listen_addrs[0])))
        await await_until(lambda: refusals(a).get("not_allowed", 0) >= 1, timeout=10, what="a to refuse c")
        assert a.connected_peers() == [str(b.peer_id)]
        assert a.status()["admission"]["recent_refusals"][-1]["peer_id"] == str(c.peer_id)
        # a itself never dials a peer it would not admit (discovery may find one).
        a.add_peer(info_from_p2p_addr(multiaddr.Multiaddr(c.listen_addrs[0])))
        assert str(c.peer_id) not in a.links
        nursery.cancel_scope.cancel()


async def test_mesh_v1_is_refused_unless_allowed() -> None:
    async with trio.open_nursery() as nursery:
        refusing = await start_mesh(nursery)
        allowing = await start_mesh(nursery, admission=AdmissionRules(allow_v1=True))
        async with RoguePeer.dial(refusing.listen_addrs[0], "/pub0sub/mesh/1.0.0") as seed:
            # Seed opcodes only: a SUBSCRIBE for everything, which the refusing hub must never act on.
            with contextlib.suppress(Exception):  # the hub may have reset the stream already
                await seed.send(bytes([2, 0, 0, 0, 2, 1]) + b">")
            assert await seed.wait_closed(10), "the v1 stream stayed open"
        assert refusals(refusing) == {"v1": 1} and not refusing.interest.patterns_of(str(seed.peer_id))
        async with RoguePeer.dial(allowing.listen_addrs[0], "/pub0sub/mesh/1.0.0") as seed:
            await await_until(lambda: str(seed.peer_id) in allowing.connected_peers(), timeout=10,
                              what="the v1 peer linked")  # fmt: skip
        assert refusals(allowing) == {}
        nursery.cancel_scope.cancel()


def test_the_example_in_protocol_md_is_what_the_hub_sends() -> None:
    from libp2p.crypto.ed25519 import create_new_key_pair

    from hub.mesh.identity import peer_id_of

    doc = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()
    dialer_id = peer_id_of(create_new_key_pair(b"\x01" * 32))
    listener_id = peer_id_of(create_new_key_pair(b"\x02" * 32))
    secret = b"0123456789abcdef0123456789abcdef"
    dialer = AdmissionHandshake(secret, dialer=True, own_id=dialer_id.to_bytes(), peer_id=listener_id.to_bytes(),
                                random_bytes=lambda n: b"\x11" * n)  # fmt: skip
    listener = AdmissionHandshake(secret, dialer=False, own_id=listener_id.to_bytes(), peer_id=dialer_id.to_bytes(),
                                  random_bytes=lambda n: b"\x22" * n)  # fmt: skip
    step1 = dialer.take_output()
    deliver(step1, listener)
    step2 = listener.take_output()
    deliver(step2, dialer)
    step3 = dialer.take_output()
    deliver(step3, listener)
    assert dialer.done and listener.done
    assert str(dialer_id) in doc and dialer_id.to_bytes().hex() in doc and listener_id.to_bytes().hex() in doc

    def shown(frames: bytes) -> list[str]:
        return [f"{frames[i]:02x} {frames[i + 1 : i + 5].hex()} {frames[i + 5 : i + 37].hex()}"
                for i in range(0, len(frames), 37)]  # fmt: skip

    for line in shown(step1) + shown(step2) + shown(step3):
        assert line in doc, f"docs/protocol.md lacks {line!r}"
