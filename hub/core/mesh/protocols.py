"""Mesh protocol versions and the byte-level helpers the hot path needs.

``/pub0sub/mesh/1.0.0`` is exactly the seed design (opcodes 1-6);
``/pub0sub/mesh/2.0.0`` adds MESH_HELLO, FORWARD_BATCH and FORWARD_ACK;
``/pub0sub/mesh/2.1.0`` is v2 plus FORWARD_BATCH_HEADERS, for sets that carry headers (a v2
peer gets headered sets as plain FORWARD_BATCH sets, without their headers);
``/pub0sub/mesh/3.0.0`` is the overlay (``hub/core/overlay/``), registered by every hub that
may run it (``--mesh-overlay``, or ``--mesh-overlay-from N``, the default) but offered only once
it runs it (hub/core/mesh/switch.py); ``/pub0sub/mesh/3.1.0`` is 3.0 whose LINK_STATEs carry each
link's latency (a 3.0 peer is sent them without).  The dialer offers ``[v3.1, v3,] v2.1, v2, v1``
(and only ``v3.1, v3`` to invite a v2 peer to switch) and multistream-select picks the newest
both speak.  ``/pub0sub/mesh/3.1.0-shortcut`` is a 3.1
session opened as a shortcut (``hub/core/overlay/shortcuts.py``): only offered alone, by a hub
that asks for a shortcut, so both ends know from the protocol id that the link is not advertised.

The encoders here build the same bytes as ``wire.ForwardBatch`` /
``wire.Forward`` (the tests prove it) but from pieces encoded *once* per
publish and shared by every peer, instead of re-encoding per peer.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from enum import Enum
from functools import lru_cache

import wire
from wire.headers import EMPTY_BLOCK
from wire.limits import DEFAULT_MAX_PEER_BODY
from wire.records import RECORD_HEADER, REGION_HEADER

from .window import WindowEntry

_HEADER = struct.Struct(">BI")
_SET_HEAD = struct.Struct(">QQ")
_BATCH_HEAD = struct.Struct(">BIQH")
_u32 = struct.Struct(">I")
MAX_SETS_PER_BATCH = 0xFFFF
#: A FORWARD_BATCH body stays well under the peer limit (4 MiB) so that one
#: batch never makes the receiver buffer much before it can parse it.
MAX_BATCH_BODY = min(1 << 20, DEFAULT_MAX_PEER_BODY // 2)


class MeshVersion(Enum):
    V1 = "/pub0sub/mesh/1.0.0"
    V2 = "/pub0sub/mesh/2.0.0"
    V2_1 = "/pub0sub/mesh/2.1.0"
    V3 = "/pub0sub/mesh/3.0.0"
    V3_1 = "/pub0sub/mesh/3.1.0"
    V3_1_SHORTCUT = "/pub0sub/mesh/3.1.0-shortcut"

    @property
    def protocol_id(self) -> str:
        return self.value

    @property
    def sequenced(self) -> bool:
        """v2 and v2.1: MESH_HELLO, sequenced FORWARD_BATCHes in a window, cumulative acks (v3, the
        overlay, has its own session: ``overlay_peer.py``)."""
        return self is MeshVersion.V2 or self is MeshVersion.V2_1

    @property
    def overlay(self) -> bool:
        """The overlay's link session (``overlay_peer.py``): 3.0 and 3.1, links and shortcuts."""
        return self is MeshVersion.V3 or self is MeshVersion.V3_1 or self is MeshVersion.V3_1_SHORTCUT

    @property
    def shortcut(self) -> bool:
        """A 3.1 session that is a shortcut (hub/core/overlay/shortcuts.py), not an overlay link."""
        return self is MeshVersion.V3_1_SHORTCUT

    @property
    def headers(self) -> bool:
        """The peer reads FORWARD_BATCH_HEADERS (v2.1)."""
        return self is MeshVersion.V2_1

    @property
    def opcodes(self) -> frozenset[wire.Opcode]:
        return _OPCODES[self]

    @property
    def label(self) -> str:
        return self.value.rsplit("/", 1)[1]

    @classmethod
    def from_protocol(cls, protocol: str) -> MeshVersion:
        return cls(str(protocol))


_OPCODES = {
    MeshVersion.V1: wire.MESH_V1_OPCODES,
    MeshVersion.V2: wire.MESH_V2_OPCODES,
    MeshVersion.V2_1: wire.MESH_V2_1_OPCODES,
    MeshVersion.V3: wire.MESH_V3_OPCODES,
    MeshVersion.V3_1: wire.MESH_V3_1_OPCODES,
    MeshVersion.V3_1_SHORTCUT: wire.MESH_V3_1_OPCODES,
}

#: What a hub offers when it dials, newest first (v3 is added in front once it runs the overlay).
ALL_VERSIONS = (MeshVersion.V2_1, MeshVersion.V2, MeshVersion.V1)
#: With it, a shortcut's stream id too: registered, but offered only alone (``Mesh._open_stream``).
OVERLAY_VERSIONS = (MeshVersion.V3_1, MeshVersion.V3, *ALL_VERSIONS, MeshVersion.V3_1_SHORTCUT)


def make_decoder(version: MeshVersion) -> wire.FrameDecoder:
    return wire.FrameDecoder(accept=version.opcodes, limits=wire.Limits(max_body=DEFAULT_MAX_PEER_BODY))


@lru_cache(maxsize=4096)
def _encoded_topics(topics: tuple[str, ...]) -> bytes:
    # A hub publishes to few distinct topic lists: encode each once, not once per set.
    return wire.encode_topic_list(topics)


def encode_stored_set(origin_seq: int, timestamp: int, topics: tuple[str, ...], count: int, records: bytes) -> bytes:
    """One forward set as it appears inside a FORWARD_BATCH body, from its parts (already valid).

    The layout is ``wire.ForwardSet``'s: origin_seq, timestamp, then the MessageSet.
    """
    head = _SET_HEAD.pack(origin_seq, timestamp)
    return b"".join((head, _encoded_topics(topics), REGION_HEADER.pack(count, len(records)), records))


def encode_forward_set(origin_seq: int, timestamp: int, messages: wire.MessageSet) -> bytes:
    """One forward set of a live publish (the parts of a set read back from a log: :func:`encode_stored_set`)."""
    return encode_stored_set(origin_seq, timestamp, messages.topics, messages.count, messages.records)


def encode_forward_batch(origin: int, encoded_sets: Sequence[bytes], *, headers: bool = False) -> bytes:
    """A whole FORWARD_BATCH frame from sets made by :func:`encode_forward_set`.

    ``headers``: a FORWARD_BATCH_HEADERS, from sets made by :func:`headered_set`.
    """
    body_len = 10 + sum(map(len, encoded_sets))
    opcode = wire.Opcode.FORWARD_BATCH_HEADERS if headers else wire.Opcode.FORWARD_BATCH
    return b"".join((_BATCH_HEAD.pack(opcode, body_len, origin, len(encoded_sets)), *encoded_sets))


def forward_frame(origin: int, entries: Sequence[WindowEntry], *, headers: bool) -> bytes:
    """The window entries as one FORWARD_BATCH, or a FORWARD_BATCH_HEADERS when one of them has
    headers and the peer reads them (``headers``: a v2.1 link).

    A v2 peer cannot read headers: it gets every set, without them (docs/protocol.md §11).
    """
    if headers and any(e.headers for e in entries):
        return encode_forward_batch(origin, [headered_set(e.encoded, e.headers) for e in entries], headers=True)
    return encode_forward_batch(origin, [e.encoded for e in entries])


def headered_set(encoded: bytes, headers: bytes) -> bytes:
    """A set as FORWARD_BATCH_HEADERS carries it, from its FORWARD_BATCH form and its headers block."""
    return b"".join((encoded[:_SET_HEAD.size], headers or EMPTY_BLOCK, encoded[_SET_HEAD.size :]))


def encode_v1_forwards(messages: wire.MessageSet) -> tuple[bytes, int]:
    """``(frames, count)``: one seed FORWARD frame per record (keys do not exist in v1)."""
    topics = wire.encode_topic_list(messages.topics)
    records = messages.records
    unpack = RECORD_HEADER.unpack_from
    parts: list[bytes] = []
    pos = 0
    end = len(records)
    while pos < end:
        key_len, data_len = unpack(records, pos)
        start = pos + 6 + key_len
        pos = start + data_len
        parts.append(_HEADER.pack(wire.Opcode.FORWARD, len(topics) + 4 + data_len))
        parts.append(topics)
        parts.append(_u32.pack(data_len))
        parts.append(records[start:pos])
    return b"".join(parts), len(parts) // 4
