"""Mesh v3 (``/pub0sub/mesh/3.0.0`` and ``3.1.0``): the overlay -- link state, routed data, rendezvous interest.

v3 keeps MESH_HELLO (with no positions) and HEARTBEAT from v2 and adds:

* LINK_STATE, flooded hop by hop: a hub's id, boot, where to dial it, its live links
  (and in 3.1 each link's measured latency).  Every hub computes shortest paths and
  rendezvous owners from these.
* ROUTED_SETS, the data: message sets of one origin with the hubs they are still for;
  each hop delivers what is for itself and splits the rest by next hop, so each hub
  gets one copy.  Each set names, per topic, the origin's previous set on the topic
  (``prevs``): the hub that delivers sees a gap and pulls it from the origin.
* ROUTED, an envelope that carries one control frame to some hubs (``dests``) from
  one hub (``src``), hop by hop: INTEREST, WATCH, INTEREST_SET (rendezvous interest),
  JOINED, HEADS, SYNC, REPAIR and REPAIRED (delivery state between an origin and
  the hubs it sends to).  These are never sent bare on a link.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import LocalProtocolError, RemoteProtocolError
from ..limits import MAX_U64
from ..opcodes import ROUTED_CONTROL_OPCODES, Opcode
from ..records import MessageSet
from .base import HEADER, HEADER_SIZE, Frame, SchemaFrame, check_uint, plain
from .mesh_v2 import forward_set_problem

_ROUTE_HEAD = struct.Struct(">BH")
_ORIGIN_COUNT = struct.Struct(">QH")
_SET_HEAD = struct.Struct(">QQ")
_U64 = struct.Struct(">Q")
_LS_HEAD = struct.Struct(">QQQB")
#: Hops a routed frame may take before it is dropped: longer than any shortest path of a
#: bounded-degree overlay of thousands of hubs, short enough to end a loop of stale routes.
DEFAULT_TTL = 32


def _check_hub(name: str, value: int) -> None:
    check_uint(name, value, MAX_U64, minimum=1)


def _check_dests(dests: tuple[int, ...]) -> None:
    if not 1 <= len(dests) <= 0xFFFF:
        raise LocalProtocolError(f"a routed frame names 1..65535 destinations, got {len(dests)}")
    for hub in dests:
        _check_hub("destination", hub)


# -- link state -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkState(Frame):
    """A hub's link-state advertisement, flooded to every hub of the overlay.

    Hot: every change of a link reaches every hub, so it has a struct codec.
    """

    OPCODE: ClassVar[Opcode] = Opcode.LINK_STATE
    hub_id: int
    #: When this incarnation of the hub started (µs since the epoch): a new boot means state
    #: kept about the hub (rendezvous registrations, delivery positions) must be checked again.
    boot: int
    #: Grows with every new advertisement of this hub, across restarts too.
    seq: int
    peer_key: str
    addrs: tuple[str, ...] = ()
    neighbors: tuple[int, ...] = ()
    #: Mesh v3.1: the one-way latency to each neighbour (same order), in units of
    #: ``COST_UNIT_US`` µs, 0 = not measured yet; empty in a 3.0 advertisement (and whenever
    #: ``neighbors`` is empty: the two versions then encode alike).
    costs: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _check_hub("hub_id", self.hub_id)
        check_uint("boot", self.boot, MAX_U64)
        check_uint("seq", self.seq, MAX_U64)
        if not 1 <= len(self.peer_key.encode()) <= 255:
            raise LocalProtocolError("LINK_STATE peer_key is 1..255 bytes")
        if len(self.addrs) > 255 or len(self.neighbors) > 0xFFFF:
            raise LocalProtocolError("LINK_STATE holds at most 255 addresses and 65535 neighbors")
        for addr in self.addrs:
            if len(addr.encode()) > 255:
                raise LocalProtocolError("a LINK_STATE address is at most 255 bytes")
        for hub in self.neighbors:
            _check_hub("neighbor", hub)
        if self.hub_id in self.neighbors or len(set(self.neighbors)) != len(self.neighbors):
            raise LocalProtocolError("LINK_STATE neighbors are distinct and never the hub itself")
        if self.costs and len(self.costs) != len(self.neighbors):
            raise LocalProtocolError("LINK_STATE has one cost per neighbor, or none")
        for cost in self.costs:
            check_uint("cost", cost, 0xFFFF)

    def encode_body(self) -> bytes:
        key = self.peer_key.encode()
        parts = [_LS_HEAD.pack(self.hub_id, self.boot, self.seq, len(key)), key, bytes((len(self.addrs),))]
        for addr in self.addrs:
            raw = addr.encode()
            parts.append(bytes((len(raw),)) + raw)
        parts.append(struct.pack(f">H{len(self.neighbors)}Q", len(self.neighbors), *self.neighbors))
        if self.costs:
            parts.append(struct.pack(f">{len(self.costs)}H", *self.costs))
        return b"".join(parts)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        end = len(body)
        if end < 29:
            raise RemoteProtocolError("link state needs at least 29 bytes", offset=0)
        hub_id, boot, seq, nkey = _LS_HEAD.unpack_from(body, 0)
        if hub_id == 0:
            raise RemoteProtocolError("link state of hub 0 (no hub has that id)", offset=0)
        pos = 25
        peer_key, pos = _read_str(body, pos, end, nkey, "peer key", minimum=1)
        if pos >= end:
            raise RemoteProtocolError("link state ends before its address count", offset=pos)
        naddrs = body[pos]
        pos += 1
        addrs = []
        for _ in range(naddrs):
            if pos >= end:
                raise RemoteProtocolError("link state ends inside its addresses", offset=pos)
            addr, pos = _read_str(body, pos + 1, end, body[pos], "address", minimum=0)
            addrs.append(addr)
        if end - pos < 2:
            raise RemoteProtocolError("link state ends before its neighbor count", offset=pos)
        (nn,) = struct.unpack_from(">H", body, pos)
        pos += 2
        # 8 bytes per neighbour (3.0), or 10: the ids, then a u16 cost each (3.1).
        if end - pos not in (8 * nn, 10 * nn):
            raise RemoteProtocolError(f"link state has {end - pos} bytes for {nn} neighbors", offset=pos)
        neighbors = struct.unpack_from(f">{nn}Q", body, pos)
        if 0 in neighbors or hub_id in neighbors or len(set(neighbors)) != nn:
            raise RemoteProtocolError("link state neighbors are hubs, distinct, never the hub itself", offset=pos)
        costs = struct.unpack_from(f">{nn}H", body, pos + 8 * nn) if end - pos == 10 * nn else ()
        return cls(hub_id=hub_id, boot=boot, seq=seq, peer_key=peer_key, addrs=tuple(addrs), neighbors=neighbors,
                   costs=costs)  # fmt: skip


#: The unit of LINK_STATE costs: 100 µs (a u16 then spans 6.5 s; loopback links are one unit).
COST_UNIT_US = 100


def link_state_for_v30(frame: bytes) -> bytes:
    """A LINK_STATE frame as a 3.0 hub reads it: without costs (``frame`` itself if it has none)."""
    state = LinkState.decode_body(frame[HEADER_SIZE:])
    assert isinstance(state, LinkState)
    if not state.costs:
        return frame
    return LinkState(hub_id=state.hub_id, boot=state.boot, seq=state.seq, peer_key=state.peer_key,
                     addrs=state.addrs, neighbors=state.neighbors).encode()  # fmt: skip


def link_state_head(body: bytes) -> tuple[int, int]:
    """``(hub_id, seq)`` of a LINK_STATE body, read without decoding the rest: a hub drops the
    repeats of a flood (most of what it receives) before paying for a full decode."""
    if len(body) < 29:
        raise RemoteProtocolError("link state needs at least 29 bytes", offset=0)
    hub_id, _boot, seq, _nkey = _LS_HEAD.unpack_from(body, 0)
    return hub_id, seq


def _read_str(body: bytes, pos: int, end: int, n: int, what: str, *, minimum: int) -> tuple[str, int]:
    if n < minimum:
        raise RemoteProtocolError(f"empty {what}", offset=pos - 1)
    if pos + n > end:
        raise RemoteProtocolError(f"{what} of {n} bytes runs past the end of the body", offset=pos - 1)
    try:
        return body[pos : pos + n].decode("utf-8"), pos + n
    except UnicodeDecodeError:
        raise RemoteProtocolError(f"{what} is not UTF-8", offset=pos) from None


# -- routed data ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutedSet:
    """One origin message set in a ROUTED_SETS frame, with its per-topic chain."""

    origin_seq: int
    timestamp: int
    messages: MessageSet
    #: Per topic of ``messages`` (same order): the last origin sequence of the origin's
    #: previous set on that topic (0: none).  A hub that holds a different one has a gap.
    prevs: tuple[int, ...]

    @property
    def last_seq(self) -> int:
        return self.origin_seq + self.messages.count - 1


def routed_set_problem(s: RoutedSet, previous_last: int) -> str | None:
    """Why a routed set breaks the rules (None: it does not)."""
    problem = forward_set_problem(s.origin_seq, s.messages.count, previous_last)
    if problem is not None:
        return problem
    if len(s.prevs) != len(s.messages.topics):
        return f"a routed set needs one prev per topic ({len(s.messages.topics)}), got {len(s.prevs)}"
    if any(p >= s.origin_seq for p in s.prevs):
        return f"a routed set's prevs come before its origin_seq {s.origin_seq}"
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class _RoutedSetsBody(Frame):
    """Message sets of one origin, and the hubs they are still for (ROUTED_SETS and
    ROUTED_SETS_HEADERS: one layout but for the headers block of each set)."""

    ttl: int
    dests: tuple[int, ...]
    origin: int
    sets: tuple[RoutedSet, ...]

    def __post_init__(self) -> None:
        check_uint("ttl", self.ttl, 0xFF)
        _check_dests(self.dests)
        _check_hub("origin", self.origin)
        if not 1 <= len(self.sets) <= 0xFFFF:
            raise LocalProtocolError(f"ROUTED_SETS holds 1..65535 sets, got {len(self.sets)}")
        last = 0
        for s in self.sets:
            problem = routed_set_problem(s, last)
            if problem is not None:
                raise LocalProtocolError(problem)
            last = s.last_seq

    #: Sets carry a headers block before their MessageSet (ROUTED_SETS_HEADERS, mesh 3.1).
    HEADERED: ClassVar[bool]

    def encode_body(self) -> bytes:
        return route_head(self.ttl, self.dests) + self.payload()

    def payload(self) -> bytes:
        """The bytes after the destinations (origin and sets): what a relay passes on unchanged."""
        parts = [_ORIGIN_COUNT.pack(self.origin, len(self.sets))]
        for s in self.sets:
            body = s.messages.encode_headered() if self.HEADERED else s.messages.encode()
            parts.append(encode_routed_set(s.origin_seq, s.timestamp, body, s.prevs))
        return b"".join(parts)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        ttl, dests, pos = read_route_head(body, minimum_rest=10)
        end = len(body)
        origin, nsets = _ORIGIN_COUNT.unpack_from(body, pos)
        if origin == 0:
            raise RemoteProtocolError("routed sets from origin 0 (no hub has that id)", offset=pos)
        if nsets == 0:
            raise RemoteProtocolError("routed sets with 0 sets", offset=pos + 8)
        pos += 10
        sets = []
        last = 0
        for _ in range(nsets):
            if end - pos < 16:
                raise RemoteProtocolError("routed set header needs 16 bytes", offset=pos)
            at = pos
            origin_seq, timestamp = _SET_HEAD.unpack_from(body, pos)
            read = MessageSet.read_headered if cls.HEADERED else MessageSet.read
            messages, pos = read(body, pos + 16, end)
            ntopics = len(messages.topics)
            if end - pos < 8 * ntopics:
                raise RemoteProtocolError("routed set ends inside its prevs", offset=pos)
            prevs = struct.unpack_from(f">{ntopics}Q", body, pos)
            pos += 8 * ntopics
            routed = RoutedSet(origin_seq=origin_seq, timestamp=timestamp, messages=messages, prevs=prevs)
            problem = routed_set_problem(routed, last)
            if problem is not None:
                raise RemoteProtocolError(problem, offset=at)
            last = routed.last_seq
            sets.append(routed)
        if pos != end:
            raise RemoteProtocolError(f"{end - pos} trailing bytes after the last set", offset=pos)
        return cls(ttl=ttl, dests=dests, origin=origin, sets=tuple(sets))


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutedSets(_RoutedSetsBody):
    """Message sets of one origin, and the hubs they are still for."""

    OPCODE: ClassVar[Opcode] = Opcode.ROUTED_SETS
    HEADERED: ClassVar[bool] = False


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutedSetsHeaders(_RoutedSetsBody):
    """ROUTED_SETS whose sets each carry a headers block (``/pub0sub/mesh/3.1.0`` only).

    The same fields and rules; every set's layout is ``origin_seq, timestamp, headers block,
    MessageSet, prevs``.  An origin sends it for sets that have headers, so a headerless stream
    looks exactly as on a 3.0 link; a 3.0 neighbour is sent the sets without their headers
    (:func:`routed_sets_for_v30`).
    """

    OPCODE: ClassVar[Opcode] = Opcode.ROUTED_SETS_HEADERS
    HEADERED: ClassVar[bool] = True

    def _plain(self) -> dict[str, Any]:
        sets = [
            {"origin_seq": s.origin_seq, "timestamp": s.timestamp, "messages": s.messages.plain_headered(),
             "prevs": list(s.prevs)}
            for s in self.sets
        ]  # fmt: skip
        return {"ttl": self.ttl, "dests": list(self.dests), "origin": self.origin, "sets": sets}


#: Both data frames (isinstance checks take either), and their kinds' names (counters, reports).
ROUTED_SETS_TYPES = (RoutedSets, RoutedSetsHeaders)
ROUTED_SETS_KINDS = tuple(t.OPCODE.name for t in ROUTED_SETS_TYPES)


def routed_sets_for_v30(frame: bytes) -> bytes:
    """A ROUTED_SETS_HEADERS frame as a 3.0 hub reads it: ROUTED_SETS, the sets without headers
    (as a 2.0.0 peer gets FORWARD_BATCH_HEADERS' sets: withholding them would leave holes)."""
    f = RoutedSetsHeaders.decode_body(frame[HEADER_SIZE:])
    assert isinstance(f, RoutedSetsHeaders)
    sets = tuple(dataclasses.replace(s, messages=dataclasses.replace(s.messages, headers=b"")) for s in f.sets)
    return RoutedSets(ttl=f.ttl, dests=f.dests, origin=f.origin, sets=sets).encode()


def route_head(ttl: int, dests: tuple[int, ...] | list[int]) -> bytes:
    """The start of a ROUTED_SETS or ROUTED body: the hop budget and the destinations."""
    return _ROUTE_HEAD.pack(ttl, len(dests)) + struct.pack(f">{len(dests)}Q", *dests)


def read_route_head(body: bytes, *, minimum_rest: int) -> tuple[int, tuple[int, ...], int]:
    """``(ttl, dests, position after them)`` of a routed body, checked."""
    end = len(body)
    if end < 3:
        raise RemoteProtocolError("a routed frame starts with 3 bytes (ttl, destination count)", offset=0)
    ttl, ndest = _ROUTE_HEAD.unpack_from(body, 0)
    if ndest == 0:
        raise RemoteProtocolError("a routed frame with 0 destinations", offset=1)
    if end - 3 < 8 * ndest + minimum_rest:
        raise RemoteProtocolError("a routed frame ends inside its destinations", offset=3)
    dests = struct.unpack_from(f">{ndest}Q", body, 3)
    if 0 in dests:
        raise RemoteProtocolError("a routed frame for hub 0 (no hub has that id)", offset=3)
    return ttl, dests, 3 + 8 * ndest


def routed_payload(body: bytes) -> bytes:
    """What follows the destinations in a routed body (already checked by the decoder)."""
    (ndest,) = struct.unpack_from(">H", body, 1)
    return body[3 + 8 * ndest :]


def encode_routed_set(origin_seq: int, timestamp: int, message_set: bytes, prevs: tuple[int, ...]) -> bytes:
    """One set's bytes, from an already encoded MessageSet (encoded once, sent to every hop)."""
    return _SET_HEAD.pack(origin_seq, timestamp) + message_set + struct.pack(f">{len(prevs)}Q", *prevs)


def routed_sets_frame(
    ttl: int, dests: tuple[int, ...] | list[int], payload: bytes, opcode: Opcode = Opcode.ROUTED_SETS
) -> bytes:
    """A whole ROUTED_SETS (or ROUTED_SETS_HEADERS) frame around a payload (origin and sets) kept as bytes."""
    body = route_head(ttl, dests) + payload
    return HEADER.pack(opcode, len(body)) + body


def routed_set_first(encoded_set: bytes) -> int:
    """The origin sequence a set made by :func:`encode_routed_set` starts at."""
    origin_seq: int = _SET_HEAD.unpack_from(encoded_set, 0)[0]
    return origin_seq


def routed_sets_payload(origin: int, encoded_sets: list[bytes]) -> bytes:
    """The origin-and-sets part of a ROUTED_SETS body, from sets made by :func:`encode_routed_set`."""
    return _ORIGIN_COUNT.pack(origin, len(encoded_sets)) + b"".join(encoded_sets)


# -- routed control -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Routed(Frame):
    """One control frame (``inner``) on its way from hub ``src`` to the hubs ``dests``."""

    OPCODE: ClassVar[Opcode] = Opcode.ROUTED
    ttl: int
    dests: tuple[int, ...]
    src: int
    inner: Frame

    def __post_init__(self) -> None:
        check_uint("ttl", self.ttl, 0xFF)
        _check_dests(self.dests)
        _check_hub("src", self.src)
        if self.inner.OPCODE not in ROUTED_CONTROL_OPCODES:
            raise LocalProtocolError(f"{self.inner.OPCODE.name} is not a routed control frame")

    def encode_body(self) -> bytes:
        return route_head(self.ttl, self.dests) + _U64.pack(self.src) + self.inner.encode()

    def _plain(self) -> dict[str, Any]:
        frame = {"opcode": int(self.inner.OPCODE), "body": plain(self.inner)}
        return {"ttl": self.ttl, "dests": list(self.dests), "src": self.src, "frame": frame}

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        from . import FRAME_TYPES  # the table lives in the package that imports this module

        ttl, dests, pos = read_route_head(body, minimum_rest=8 + HEADER_SIZE)
        (src,) = _U64.unpack_from(body, pos)
        if src == 0:
            raise RemoteProtocolError("a routed frame from hub 0 (no hub has that id)", offset=pos)
        pos += 8
        opcode, length = HEADER.unpack_from(body, pos)
        if opcode not in ROUTED_CONTROL_OPCODES:
            raise RemoteProtocolError(f"opcode {opcode} (0x{opcode:02x}) is not a routed control frame",
                                      offset=pos)  # fmt: skip
        if length != len(body) - pos - HEADER_SIZE:
            raise RemoteProtocolError(
                f"the routed frame's length {length} is not the {len(body) - pos - HEADER_SIZE} bytes left",
                offset=pos + 1,
            )
        try:
            inner = FRAME_TYPES[Opcode(opcode)].decode_body(body[pos + HEADER_SIZE :])
        except RemoteProtocolError as exc:
            inner_offset = pos + HEADER_SIZE + (exc.offset or 0)
            raise RemoteProtocolError(f"routed {Opcode(opcode).name}: {exc.reason}", code=exc.code,
                                      offset=inner_offset) from None  # fmt: skip
        return cls(ttl=ttl, dests=dests, src=src, inner=inner)


def _check_key(key: str) -> None:
    if not 1 <= len(key.encode()) <= 255:
        raise LocalProtocolError("a rendezvous key is 1..255 bytes")


@dataclass(frozen=True, kw_only=True, slots=True)
class Interest(SchemaFrame):
    """To a rendezvous: every pattern the sender wants under ``key`` (none: nothing any more)."""

    OPCODE: ClassVar[Opcode] = Opcode.INTEREST
    key: str
    patterns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_key(self.key)


@dataclass(frozen=True, kw_only=True, slots=True)
class Watch(SchemaFrame):
    """To a rendezvous: the sender publishes under ``key``; send it the key's interest and its changes.

    ``version`` is the version of the key's interest the sender holds from this rendezvous
    (0: none); the rendezvous answers with every hub's patterns unless it holds that version.
    """

    OPCODE: ClassVar[Opcode] = Opcode.WATCH
    key: str
    on: bool = True
    version: int = 0

    def __post_init__(self) -> None:
        _check_key(self.key)
        check_uint("version", self.version, 0xFFFFFFFF)


@dataclass(frozen=True, kw_only=True, slots=True)
class InterestEntry:
    hub: int
    patterns: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class InterestSet(SchemaFrame):
    """From a rendezvous to a watcher: hubs' patterns under ``key`` (``full``: every hub's, else changes)."""

    OPCODE: ClassVar[Opcode] = Opcode.INTEREST_SET
    key: str
    full: bool
    #: The rendezvous's count of changes to the key's interest, after these entries (a watcher
    #: that misses one sees the jump and asks again).
    version: int
    entries: tuple[InterestEntry, ...] = ()

    def __post_init__(self) -> None:
        _check_key(self.key)
        check_uint("version", self.version, 0xFFFFFFFF)
        hubs = [e.hub for e in self.entries]
        for hub in hubs:
            _check_hub("entry hub", hub)
        if len(set(hubs)) != len(hubs):
            raise LocalProtocolError("INTEREST_SET names each hub at most once")


@dataclass(frozen=True, kw_only=True, slots=True)
class Joined(SchemaFrame):
    """From an origin: you are one of my destinations for ``key`` after my sequence ``since``."""

    OPCODE: ClassVar[Opcode] = Opcode.JOINED
    key: str
    since: int

    def __post_init__(self) -> None:
        _check_key(self.key)
        check_uint("since", self.since, MAX_U64)


@dataclass(frozen=True, kw_only=True, slots=True)
class Head:
    topic: str
    last: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Heads(SchemaFrame):
    """From an origin: the last origin sequence of my last set on each of these topics."""

    OPCODE: ClassVar[Opcode] = Opcode.HEADS
    heads: tuple[Head, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.heads) <= 0xFFFF:
            raise LocalProtocolError(f"HEADS holds 1..65535 heads, got {len(self.heads)}")
        for head in self.heads:
            check_uint("last", head.last, MAX_U64, minimum=1)


@dataclass(frozen=True, kw_only=True, slots=True)
class Sync(SchemaFrame):
    """To an origin: send me HEADS for your topics that match these patterns of mine under ``key``."""

    OPCODE: ClassVar[Opcode] = Opcode.SYNC
    key: str
    patterns: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_key(self.key)
        if not 1 <= len(self.patterns) <= 0xFFFF:
            raise LocalProtocolError("SYNC names 1..65535 patterns")


@dataclass(frozen=True, kw_only=True, slots=True)
class Repair(SchemaFrame):
    """To an origin: resend your sets on ``topic`` whose sequences fall in ``after < seq <= upto``."""

    OPCODE: ClassVar[Opcode] = Opcode.REPAIR
    topic: str
    after: int
    upto: int

    def __post_init__(self) -> None:
        check_uint("after", self.after, MAX_U64)
        check_uint("upto", self.upto, MAX_U64)
        if self.upto <= self.after:
            raise LocalProtocolError("REPAIR asks for an empty range (upto <= after)")


@dataclass(frozen=True, kw_only=True, slots=True)
class Repaired(SchemaFrame):
    """From an origin: every set on ``topic`` up to ``upto`` that I still have was sent; ``missing``
    messages in the range are gone (retention, a damaged log, a hub without logs)."""

    OPCODE: ClassVar[Opcode] = Opcode.REPAIRED
    topic: str
    upto: int
    missing: int = 0

    def __post_init__(self) -> None:
        check_uint("upto", self.upto, MAX_U64, minimum=1)
        check_uint("missing", self.missing, MAX_U64)


ROUTED_CONTROL_TYPES: tuple[type[Frame], ...] = (Interest, Watch, InterestSet, Joined, Heads, Sync, Repair, Repaired)
