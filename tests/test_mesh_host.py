"""Mesh identity (stable peer id) and transport security (Noise only)."""

from __future__ import annotations

import stat
from pathlib import Path

import multiaddr
import pytest
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.security.insecure.transport import PLAINTEXT_PROTOCOL_ID, InsecureTransport

from hub.mesh import Mesh, MeshVersion, load_or_create_identity
from hub.mesh.identity import IDENTITY_FILE, IdentityError
from tests.support.mesh import FAST, Store, start_mesh


def test_identity_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    first = load_or_create_identity(tmp_path)
    path = tmp_path / IDENTITY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = load_or_create_identity(tmp_path)
    assert again.public_key.to_bytes() == first.public_key.to_bytes()


def test_corrupt_identity_is_refused(tmp_path: Path) -> None:
    (tmp_path / IDENTITY_FILE).write_bytes(b"short")
    with pytest.raises(IdentityError):
        load_or_create_identity(tmp_path)


async def test_peer_id_is_stable_across_restarts(tmp_path: Path) -> None:
    from dataclasses import replace

    ids = []
    for _ in range(2):
        async with trio.open_nursery() as nursery:
            mesh = Mesh(replace(FAST, data_dir=tmp_path), hub_id=1, on_forward=Store().on_forward)
            await nursery.start(mesh.run)
            ids.append(str(mesh.peer_id))
            assert mesh.listen_addrs[0].endswith(f"/p2p/{mesh.peer_id}")
            nursery.cancel_scope.cancel()
    assert ids[0] == ids[1]


async def test_plaintext_dialer_is_refused() -> None:
    async with trio.open_nursery() as nursery:
        mesh = await start_mesh(nursery)
        kp = create_new_key_pair()
        # What py-libp2p's default host would happily accept: a dialer offering plaintext only.
        intruder = new_host(key_pair=kp, sec_opt={TProtocol(PLAINTEXT_PROTOCOL_ID): InsecureTransport(kp)})
        listen = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")
        try:
            async with intruder.run(listen_addrs=[listen]):
                info = info_from_p2p_addr(multiaddr.Multiaddr(mesh.listen_addrs[0]))
                with pytest.raises(Exception), trio.fail_after(15):  # noqa: B017 - libp2p raises SwarmException
                    await intruder.connect(info)
                    await intruder.new_stream(info.peer_id, [MeshVersion.V2.protocol_id])
                assert not mesh.connected_peers()
        finally:
            await intruder.close()
        nursery.cancel_scope.cancel()
