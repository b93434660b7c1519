"""Mesh admission on a libp2p stream: the I/O around :mod:`hub.core.mesh.admission`.

The mesh (``hub.mesh.mesh``) calls :func:`admit` on every new stream, inbound and outbound,
before a :class:`~hub.core.mesh.peer.PeerProtocol` exists for it: no frame of a peer that is
refused is ever decoded, let alone acted on.  The allow-list, given as peer ids or files of
them, is read here too (its ids are checked with libp2p's own parser).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import multihash
import trio
from libp2p.peer.id import ID

from ..core.mesh.admission import AdmissionPolicy, AdmissionRefused, AdmissionSetupError
from ..core.mesh.protocols import MeshVersion


async def _read_exactly(stream: Any, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        try:
            chunk = await stream.read(size - len(data))
        except Exception as exc:  # StreamEOF, StreamReset...: the peer went away mid-handshake
            raise AdmissionRefused(f"closed the stream during the admission handshake ({exc!r})", "closed") from exc
        if not chunk:
            raise AdmissionRefused("closed the stream during the admission handshake", "closed")
        data += chunk
    return bytes(data)


async def admit(
    policy: AdmissionPolicy,
    stream: Any,
    version: MeshVersion,
    *,
    outbound: bool,
    own_id: ID,
    peer_id: ID,
    timeout: float,  # noqa: ASYNC109 -- the handshake's own deadline, from the mesh's hello_timeout
) -> AdmissionRefused | None:
    """Judge ``stream`` (None: admitted, the session may start, and the policy knows what it
    proved); a refusal is not counted here."""
    refusal = policy.check_stream(str(peer_id), version)
    if refusal is not None:
        return refusal
    handshake = policy.handshake(version, dialer=outbound, own_id=own_id.to_bytes(), peer_id=peer_id.to_bytes())
    if handshake is None:
        policy.admit(str(peer_id), None)
        return None
    with trio.move_on_after(timeout):
        try:
            while not handshake.done:
                out = handshake.take_output()
                if out:
                    await stream.write(out)
                handshake.receive(await _read_exactly(stream, handshake.wanted()))
            out = handshake.take_output()
            if out:
                await stream.write(out)
            policy.admit(str(peer_id), handshake.proved)
            return None
        except AdmissionRefused as exc:
            await _send_last_words(stream, handshake.take_output())
            return exc
        except Exception as exc:  # a write to a reset stream: libp2p raises several types
            return AdmissionRefused(f"the stream broke during the admission handshake ({exc!r})", "closed")
    return AdmissionRefused(f"no admission handshake within {timeout:g} s", "timeout")


async def _send_last_words(stream: Any, data: bytes) -> None:
    """A dialer's own proof after the listener's failed: best effort, the stream is reset next.

    A reset right behind the write can overtake it (yamux drops what the reader has not taken),
    so this half-closes and waits (a second at most) for the peer to judge the proof and reset.
    """
    if not data:
        return
    # The peer may have reset the stream already: nothing is lost if this fails.
    with trio.move_on_after(1.0), contextlib.suppress(Exception):
        await stream.write(data)
        await stream.close()
        while await stream.read(1 << 10):
            pass


def parse_allow_list(entries: Iterable[str]) -> frozenset[str]:
    """Peer ids from ``--mesh-allow`` values: each a peer id, a comma-separated list of them, or a
    file of them (one a line, ``#`` starts a comment).  Raises :class:`AdmissionSetupError` naming the bad entry."""
    ids: set[str] = set()
    for entry in entries:
        for item in filter(None, (part.strip() for part in entry.split(","))):
            if _looks_like_peer_id(item):
                ids.add(_checked(item, "--mesh-allow"))
                continue
            path = Path(item)
            try:
                lines = path.read_text().splitlines()
            except OSError as exc:
                why = f"neither a peer id nor a readable file ({exc.strerror})"
                raise AdmissionSetupError(f"--mesh-allow {item}: {why}") from exc
            for number, line in enumerate(lines, 1):
                text = line.split("#", 1)[0].strip()
                if text:
                    ids.add(_checked(text, f"{path}:{number}"))
    return frozenset(ids)


def _looks_like_peer_id(text: str) -> bool:
    # ed25519 ids start with 12D3KooW, RSA/older multihashes with Qm; a path has a / or a dot.
    return text.startswith(("12D3Koo", "Qm", "16Uiu2")) and "/" not in text and "." not in text


def _checked(text: str, where: str) -> str:
    try:
        peer_id = ID.from_base58(text)
        multihash.decode(peer_id.to_bytes())  # base58 alone accepts any text of its alphabet
        return str(peer_id)
    except Exception as exc:  # base58 and multihash errors of several types
        raise AdmissionSetupError(f"{where}: {text!r} is not a libp2p peer id ({exc})") from exc
