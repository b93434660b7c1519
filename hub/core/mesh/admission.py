"""Who may join the mesh: the peer-id allow-list, the cluster-secret handshake, mesh v1.

Noise already proves *which* key is at the other end of a mesh connection (the peer id);
it says nothing about whether that key belongs to this cluster.  Admission adds that, before
the session's first frame is read:

* an allow-list of peer ids (``--mesh-allow``): any other peer's stream is reset;
* a cluster secret (``--cluster-secret-file``): both hubs prove they hold it with an HMAC over
  both peer ids and a fresh nonce from each side, so a proof is good for this pair, this
  stream and this direction only -- it cannot be replayed, reflected or relayed, and the
  secret itself never crosses the wire (docs/protocol.md, "Mesh admission", has the bytes).
  During a rotation the file holds two secrets: a hub proves with the first and accepts a
  proof made with either, so hubs that have and have not yet taken the new one still link
  (docs/security.md, "Rotating the cluster secret"); SIGHUP reads the file again;
* the seed protocol (``/pub0sub/mesh/1.0.0``) has no handshake to prove anything in, so its
  streams are refused unless the operator allows them (``--allow-mesh-v1``).

:class:`AdmissionHandshake` is the handshake as a state machine without I/O: the shell
(``hub.mesh.admit``) writes what it says, reads exactly the bytes it asks for, and starts the
mesh session only once it is ``done``.  :class:`AdmissionPolicy` holds the rules and the
refusal counters that status shows.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import struct
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..events import ev
from .protocols import MeshVersion

log = logging.getLogger("hub.mesh.admission")

#: The two admission frames, in the mesh's frame layout (u8 opcode, u32 body length, body).
#: At the top of the mesh range, clear of v1/v2 opcodes and of what a later version adds.
ADMIT_NONCE = 0x1E
ADMIT_PROOF = 0x1F
NONCE_BYTES = 32
PROOF_BYTES = 32  # HMAC-SHA256
HEADER = struct.Struct(">BI")
#: Domain separation: these MACs mean nothing to any other protocol that uses the same secret.
MAC_LABEL = b"pub0sub mesh admission v1\x00"
DIALER = b"D"
LISTENER = b"L"
#: A secret shorter than this is refused at start: the HMAC is only as strong as the secret.
MIN_SECRET_BYTES = 16
#: Secrets one file may hold: the one proved, and during a rotation the other one accepted.
MAX_SECRETS = 2
#: Refusals remembered for status (the counters keep the totals).
RECENT_REFUSALS = 16

_FRAME_NAMES = {ADMIT_NONCE: "ADMIT_NONCE", ADMIT_PROOF: "ADMIT_PROOF", 0x10: "MESH_HELLO"}


class AdmissionSetupError(ValueError):
    """The admission settings cannot be used (a secret file, an allow-list entry); names which."""


class AdmissionRefused(Exception):
    """The peer did not prove it belongs; ``reason`` says how, in words for the log."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.reason = reason
        #: A short key for the counters: ``wrong_secret``, ``no_secret``, ``not_allowed``, ``v1``...
        self.kind = kind


def read_secrets(path: Any) -> tuple[bytes, ...]:
    """The cluster secrets in the file at ``path``, one a line without surrounding whitespace
    (blank lines and ``#`` comments skipped): the first is proved, each one is accepted.

    Raises :class:`AdmissionSetupError` (naming the file) when it is missing, holds no secret,
    more than :data:`MAX_SECRETS`, or one too short.
    """
    try:
        with open(path, "rb") as f:
            text = f.read()
            stat = os.fstat(f.fileno())
    except OSError as exc:
        raise AdmissionSetupError(f"cluster secret file {path}: {exc.strerror or exc}") from exc
    mode = stat.st_mode & 0o777
    # Readable by others, or by a group that is not the hub's own (Kubernetes gives a secret
    # volume the pod's fsGroup, which is the hub's group there).
    if mode & 0o007 or (mode & 0o070 and stat.st_gid != os.getgid()):
        log.warning("cluster secret file %s is readable by other users (mode %o): chmod 600 it", path, mode,
                    extra=ev("cluster_secret_file_open", x_path=str(path), x_mode=oct(mode)))
    secrets = tuple(line for line in (raw.strip() for raw in text.splitlines()) if line and not line.startswith(b"#"))
    if not secrets:
        raise AdmissionSetupError(f"cluster secret file {path}: no secret in it "
                                  "(`pub0sub cluster secret` writes one of 64 random hex digits)")  # fmt: skip
    if len(secrets) > MAX_SECRETS:
        raise AdmissionSetupError(
            f"cluster secret file {path}: {len(secrets)} secrets; at most {MAX_SECRETS} (during a rotation: "
            "the one to prove first, the one still accepted second)")  # fmt: skip
    for number, secret in enumerate(secrets, 1):
        if len(secret) < MIN_SECRET_BYTES:
            which = f"secret {number} of {len(secrets)}: " if len(secrets) > 1 else ""
            raise AdmissionSetupError(
                f"cluster secret file {path}: {which}{len(secret)} bytes; at least {MIN_SECRET_BYTES} are needed "
                "(`pub0sub cluster secret` writes one of 64 random hex digits)")  # fmt: skip
    return secrets


def proof(
    secret: bytes, role: bytes, sender: bytes, receiver: bytes, dialer_nonce: bytes, listener_nonce: bytes
) -> bytes:
    """HMAC-SHA256 of one side's proof (the exact bytes are in docs/protocol.md)."""
    message = b"".join((
        MAC_LABEL, role,
        struct.pack(">H", len(sender)), sender,
        struct.pack(">H", len(receiver)), receiver,
        dialer_nonce, listener_nonce,
    ))  # fmt: skip
    return hmac.new(secret, message, hashlib.sha256).digest()


def frame(opcode: int, body: bytes) -> bytes:
    return HEADER.pack(opcode, len(body)) + body


def fingerprint(secret: bytes) -> bytes:
    """What the hub remembers of the secret a link proved: enough to tell whether a reload still
    accepts it, nothing that would prove it (a hash under a label of its own)."""
    return hashlib.sha256(b"pub0sub cluster secret fingerprint\x00" + secret).digest()


class AdmissionHandshake:
    """One side of the cluster-secret handshake on a fresh mesh stream, without I/O.

    The dialer speaks first::

        dialer -> listener   ADMIT_NONCE(n_d)
        listener -> dialer   ADMIT_NONCE(n_l) ADMIT_PROOF(HMAC(K, "L", id_l, id_d, n_d, n_l))
        dialer -> listener   ADMIT_PROOF(HMAC(K, "D", id_d, id_l, n_d, n_l))   then its mesh frames

    The shell loops: write :meth:`take_output`, read exactly :meth:`wanted` bytes, give them to
    :meth:`receive` (which raises :class:`AdmissionRefused`), until :attr:`done` -- then writes
    :meth:`take_output` once more.  Only whole fixed-size frames are asked for, so no byte of the
    peer's first mesh frame is read here.
    """

    def __init__(
        self,
        secret: bytes | tuple[bytes, ...],
        *,
        dialer: bool,
        own_id: bytes,
        peer_id: bytes,
        random_bytes: Callable[[int], bytes] = os.urandom,
    ) -> None:
        #: The first is proved; a peer's proof made with any of them is accepted (a rotation).
        self._secrets = (secret,) if isinstance(secret, bytes) else secret
        self.dialer = dialer
        self._own = own_id
        self._peer = peer_id
        self._nonce = random_bytes(NONCE_BYTES)
        self._peer_nonce = b""
        self._out = bytearray()
        #: What the next frame must be, in order.
        self._expect: list[int] = [ADMIT_NONCE, ADMIT_PROOF]
        self._header: tuple[int, int] | None = None
        self.done = False
        #: The :func:`fingerprint` of the secret the peer's proof matched, once ``done``.
        self.proved: bytes | None = None
        if dialer:
            self._out += frame(ADMIT_NONCE, self._nonce)

    def _nonces(self) -> tuple[bytes, bytes]:
        return (self._nonce, self._peer_nonce) if self.dialer else (self._peer_nonce, self._nonce)

    def _own_proof(self) -> bytes:
        role = DIALER if self.dialer else LISTENER
        return proof(self._secrets[0], role, self._own, self._peer, *self._nonces())

    def _proves_a_secret(self, peer_proof: bytes) -> bool:
        role = LISTENER if self.dialer else DIALER
        nonces = self._nonces()
        # Every secret is tried (no early exit): the time taken does not say which one matched.
        matched = [hmac.compare_digest(peer_proof, proof(secret, role, self._peer, self._own, *nonces))
                   for secret in self._secrets]  # fmt: skip
        self.proved = next((fingerprint(s) for s, ok in zip(self._secrets, matched, strict=True) if ok), None)
        return self.proved is not None

    def take_output(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def wanted(self) -> int:
        """How many bytes to read next: a frame header, then its body."""
        if self.done:
            return 0
        if self._header is None:
            return HEADER.size
        return self._header[1]

    def receive(self, data: bytes) -> None:
        """Exactly :meth:`wanted` bytes from the peer."""
        if len(data) != self.wanted():
            raise ValueError(f"receive() takes exactly {self.wanted()} bytes, got {len(data)}")
        if self._header is None:
            opcode, length = HEADER.unpack(data)
            expected = self._expect[0]
            size = NONCE_BYTES if expected == ADMIT_NONCE else PROOF_BYTES
            if opcode != expected:
                name = _FRAME_NAMES.get(opcode, f"opcode 0x{opcode:02x}")
                raise AdmissionRefused(
                    f"sent {name} where {_FRAME_NAMES[expected]} was due: it does not prove a cluster secret "
                    "(a hub without --cluster-secret-file, or not a hub)", "no_secret")  # fmt: skip
            if length != size:
                raise AdmissionRefused(f"{_FRAME_NAMES[opcode]} of {length} bytes, not {size}", "malformed")
            self._header = (opcode, length)
            return
        opcode, _ = self._header
        self._header = None
        self._expect.pop(0)
        if opcode == ADMIT_NONCE:
            if hmac.compare_digest(data, self._nonce):
                raise AdmissionRefused("echoed this hub's own nonce", "malformed")
            self._peer_nonce = data
            if not self.dialer:
                self._out += frame(ADMIT_NONCE, self._nonce) + frame(ADMIT_PROOF, self._own_proof())
            return
        matches = self._proves_a_secret(data)
        if self.dialer:
            # Sent even when the listener's proof failed, so that hub's operator reads "a different
            # cluster secret" too, not just a closed stream.  It reveals no more than a good proof.
            self._out += frame(ADMIT_PROOF, self._own_proof())
        if not matches:
            raise AdmissionRefused("its ADMIT_PROOF does not match: a different cluster secret", "wrong_secret")
        self.done = True


@dataclass(frozen=True, kw_only=True, slots=True)
class AdmissionRules:
    """The operator's rules (``--mesh-allow``, ``--cluster-secret-file``, ``--allow-mesh-v1``)."""

    #: Peer ids (text form) that may link; None: any peer (that passes the secret, if one is set).
    allowed_peers: frozenset[str] | None = None
    #: The secrets of ``--cluster-secret-file`` (the first is proved); empty: no secret asked.
    cluster_secrets: tuple[bytes, ...] = field(default=(), repr=False)
    allow_v1: bool = False

    @property
    def open(self) -> bool:
        return self.allowed_peers is None and not self.cluster_secrets

    def describe(self) -> str:
        parts = []
        if self.allowed_peers is not None:
            parts.append(f"{len(self.allowed_peers)} allowed peer id(s)")
        if len(self.cluster_secrets) > 1:
            parts.append(f"cluster secret ({len(self.cluster_secrets)} accepted: a rotation)")
        elif self.cluster_secrets:
            parts.append("cluster secret")
        if self.allow_v1:
            parts.append("mesh v1 allowed (no proof)")
        return ", ".join(parts) or "open: any peer that reaches the mesh port"


class AdmissionPolicy:
    """The rules and what they refused (for status and metrics)."""

    def __init__(self, rules: AdmissionRules) -> None:
        self.rules = rules
        self.refused = 0
        self.refused_by_kind: Counter[str] = Counter()
        self.admitted = 0
        self.secret_reloads = 0
        #: Links closed because a reload of the rules no longer admits their peer.
        self.unlinked_by_reload = 0
        #: Per peer: the fingerprint of the secret its last admitted stream proved (absent:
        #: admitted without a proof), so that a reload can tell which links a retired secret let in.
        self._proved: dict[str, bytes] = {}
        #: The last refusals: peer id, address, reason (bounded).
        self.recent: deque[dict[str, str]] = deque(maxlen=RECENT_REFUSALS)

    def versions_to_offer(self, versions: Iterable[MeshVersion]) -> tuple[MeshVersion, ...]:
        """The versions a dial offers: v1 only when allowed."""
        return tuple(v for v in versions if v is not MeshVersion.V1 or self.rules.allow_v1)

    def may_dial(self, key: str) -> bool:
        """A peer found by discovery or configured: dial it only if it could be admitted."""
        allowed = self.rules.allowed_peers
        return allowed is None or key in allowed

    def check_stream(self, key: str, version: MeshVersion) -> AdmissionRefused | None:
        """What can be judged before any byte: the peer id and the protocol version."""
        allowed = self.rules.allowed_peers
        if allowed is not None and key not in allowed:
            return AdmissionRefused("its peer id is not on --mesh-allow", "not_allowed")
        if version is MeshVersion.V1 and not self.rules.allow_v1:
            return AdmissionRefused(
                "it speaks mesh v1, which has no handshake to prove anything; --allow-mesh-v1 admits it", "v1"
            )
        return None

    def handshake(
        self, version: MeshVersion, *, dialer: bool, own_id: bytes, peer_id: bytes
    ) -> AdmissionHandshake | None:
        """The cluster-secret handshake this stream must pass first (None: none, it is admitted)."""
        secrets = self.rules.cluster_secrets
        if not secrets or version is MeshVersion.V1:
            return None  # v1 was allowed explicitly: it cannot prove a secret
        return AdmissionHandshake(secrets, dialer=dialer, own_id=own_id, peer_id=peer_id)

    def admit(self, key: str, proved: bytes | None) -> None:
        """A stream of ``key`` was admitted, having proved the secret of fingerprint ``proved``."""
        self.admitted += 1
        if proved is None:
            self._proved.pop(key, None)
        else:
            self._proved[key] = proved

    def use_secrets(self, secrets: tuple[bytes, ...]) -> None:
        """A reloaded secret file (SIGHUP): new streams are judged by it, and links whose peer
        proved a secret it no longer holds are closed (:meth:`no_longer_admitted`)."""
        self.rules = replace(self.rules, cluster_secrets=secrets)
        self.secret_reloads += 1

    def use_allowed_peers(self, allowed: frozenset[str]) -> None:
        """A reloaded ``--mesh-allow`` (its files read again on SIGHUP)."""
        self.rules = replace(self.rules, allowed_peers=allowed)

    def no_longer_admitted(self, key: str) -> str | None:
        """Why the rules in force would not admit ``key``'s live link now, or None."""
        allowed = self.rules.allowed_peers
        if allowed is not None and key not in allowed:
            return "its peer id is no longer on --mesh-allow"
        proved = self._proved.get(key)
        if proved is not None and proved not in {fingerprint(s) for s in self.rules.cluster_secrets}:
            return "the cluster secret it proved is no longer in --cluster-secret-file"
        return None

    def refuse(self, key: str, address: str, refusal: AdmissionRefused, *, outbound: bool) -> None:
        """Count and log a refused peer (the shell resets its stream)."""
        self.refused += 1
        self.refused_by_kind[refusal.kind] += 1
        self.recent.append({"peer_id": key, "address": address, "reason": refusal.reason})
        direction = "outbound link to" if outbound else "inbound link from"
        # A stream that ends mid-handshake is what the loser of a simultaneous dial, or a peer
        # that crashed, looks like: counted, but no warning (the 50-hub test bed printed 14).
        level = logging.INFO if refusal.kind == "closed" else logging.WARNING
        log.log(level, "mesh peer %s refused (%s %s): %s", key, direction, address, refusal.reason,
                extra=ev("mesh_peer_refused", peer=key, reason=refusal.kind, x_address=address,
                         x_detail=refusal.reason, x_outbound=outbound))  # fmt: skip

    def status(self) -> dict[str, Any]:
        rules = self.rules
        return {
            "rules": rules.describe(),
            "allowed_peers": None if rules.allowed_peers is None else len(rules.allowed_peers),
            "cluster_secret": bool(rules.cluster_secrets),
            "cluster_secrets_accepted": len(rules.cluster_secrets),
            "secret_reloads": self.secret_reloads,
            "allow_v1": rules.allow_v1,
            "admitted": self.admitted,
            "unlinked_by_reload": self.unlinked_by_reload,
            "refused": self.refused,
            "refused_by_kind": dict(self.refused_by_kind),
            "recent_refusals": list(self.recent),
        }
