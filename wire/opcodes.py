"""Every opcode of every pub0sub frame, in one table.

All protocols share one opcode space so that ``pub0sub decode`` can read any
capture or log segment without being told which protocol it holds:

* 1-6      mesh v1, exactly as in the seed design (``/pub0sub/mesh/1.0.0``);
           opcode 1 (heartbeat) is also used on client connections.
* 0x0E     mesh v3.1's addition (``/pub0sub/mesh/3.1.0``): ROUTED_SETS_HEADERS.
* 0x0F     mesh v2.1's addition (``/pub0sub/mesh/2.1.0``): FORWARD_BATCH_HEADERS.
* 0x10-12  mesh v2 additions (``/pub0sub/mesh/2.0.0``).
* 0x13-1D  mesh v3 additions (``/pub0sub/mesh/3.0.0``, the overlay).
* 0x1E-1F  the hubs' mesh admission handshake (ADMIT_NONCE, ADMIT_PROOF), before any mesh
           frame of a stream; not decoded here (docs/protocol.md, "Mesh admission").
* 0x20-3F  client <-> hub protocol.
* 0x40-4F  on-disk log segments.
"""

from __future__ import annotations

from enum import IntEnum


class Opcode(IntEnum):
    #: Liveness check, body ``ping`` or ``pong`` (mesh and client links).
    HEARTBEAT = 1
    #: Mesh interest announcement: the sender wants these topics forwarded.
    SUBSCRIBE = 2
    #: Answer to SUBSCRIBE: 1 = noted, 0 = refused.
    SUBSCRIBE_ACK = 3
    #: Mesh interest withdrawal for these topics.
    UNSUBSCRIBE = 4
    #: Answer to UNSUBSCRIBE: 1 = removed, 0 = failure.
    UNSUBSCRIBE_ACK = 5
    #: Mesh v1 forward of one message to one or more topics.
    FORWARD = 6

    #: Mesh v3.1 routed data whose sets each carry a headers block.
    ROUTED_SETS_HEADERS = 0x0E
    #: Mesh v2.1 batched forward whose sets each carry a headers block.
    FORWARD_BATCH_HEADERS = 0x0F

    #: Mesh v2 greeting: who I am and, per origin, the last sequence I stored.
    MESH_HELLO = 0x10
    #: Mesh v2 batched forward: message sets with origin sequence and timestamp.
    FORWARD_BATCH = 0x11
    #: Mesh v2 cumulative ack: everything from ``origin`` up to ``seq`` is stored.
    FORWARD_ACK = 0x12

    #: Mesh v3 link-state advertisement: a hub, where to dial it, its live links.
    LINK_STATE = 0x13
    #: Mesh v3 data: message sets of one origin, the hubs they are for, per-topic chains.
    ROUTED_SETS = 0x14
    #: Mesh v3 envelope: one control frame on its way between hubs, hop by hop.
    ROUTED = 0x15
    #: (routed) A hub's patterns under one rendezvous key.
    INTEREST = 0x16
    #: (routed) A publishing hub asks a rendezvous for a key's interest and its changes.
    WATCH = 0x17
    #: (routed) A rendezvous tells a watcher the hubs' patterns under a key.
    INTEREST_SET = 0x18
    #: (routed) An origin tells a hub where its sets for a key start.
    JOINED = 0x19
    #: (routed) An origin's last sequence per topic.
    HEADS = 0x1A
    #: (routed) A hub asks an origin for HEADS of the topics it wants.
    SYNC = 0x1B
    #: (routed) A hub asks an origin to resend a range of its sets on one topic.
    REPAIR = 0x1C
    #: (routed) An origin has resent what it still has of a REPAIR's range.
    REPAIRED = 0x1D

    #: Client greeting: protocol version, client name, optional token.
    HELLO = 0x20
    #: Hub answer to HELLO: hub id, limits, heartbeat interval.
    WELCOME = 0x21
    #: Batched publish: message sets, producer id and batch sequence.
    PUBLISH = 0x22
    #: Hub acknowledgement of one PUBLISH batch, with assigned offsets.
    PUBLISH_ACK = 0x23
    #: Open a subscription: topics/patterns, start, group, ack mode, credit.
    SUB = 0x24
    #: Hub confirmation of SUB or SUB_UPDATE, with start offsets.
    SUB_OK = 0x25
    #: Close a subscription.
    UNSUB = 0x26
    #: Add or remove topics/patterns on a live subscription.
    SUB_UPDATE = 0x27
    #: Hub push: one record batch for one subscription.
    DELIVER = 0x28
    #: Consumer acknowledgement of offset ranges.
    ACK = 0x29
    #: Flow control: the subscriber grants more messages.
    CREDIT = 0x2A
    #: Hub notice: messages were dropped for a drop-oldest subscription.
    GAP = 0x2B
    #: Hub notice: a subscription ended, with code and reason.
    SUB_END = 0x2C
    #: An error with code, reference and reason (either direction).
    ERROR = 0x2D
    #: Ask the hub for its status document.
    STATUS = 0x2E
    #: The hub's status document (UTF-8 JSON).
    STATUS_REPLY = 0x2F
    #: Ask for the hub's word that a subscription's acknowledged position is on disk.
    COMMIT = 0x30
    #: Hub answer to COMMIT: the position is durable.
    COMMITTED = 0x31
    #: Hub push of a batch whose set carried headers (client protocol 3).
    DELIVER_HEADERS = 0x32
    #: Add, remove or set the keys a live subscription delivers (client protocol 3).
    KEY_FILTER = 0x33

    #: First frame of a log segment file: format, topic, base offset.
    SEGMENT_HEADER = 0x40
    #: One checksummed record batch in a log segment.
    LOG_BATCH = 0x41
    #: LOG_BATCH of a set that carried headers (segment version 2).
    LOG_BATCH_HEADERS = 0x42


MESH_V1_OPCODES = frozenset(
    {
        Opcode.HEARTBEAT,
        Opcode.SUBSCRIBE,
        Opcode.SUBSCRIBE_ACK,
        Opcode.UNSUBSCRIBE,
        Opcode.UNSUBSCRIBE_ACK,
        Opcode.FORWARD,
    }
)
MESH_V2_OPCODES = MESH_V1_OPCODES | {
    Opcode.MESH_HELLO,
    Opcode.FORWARD_BATCH,
    Opcode.FORWARD_ACK,
}
#: Mesh v2.1: v2 plus forwards whose sets carry headers.
MESH_V2_1_OPCODES = MESH_V2_OPCODES | {Opcode.FORWARD_BATCH_HEADERS}
#: Control frames that travel inside a ROUTED envelope (never bare on a link).
ROUTED_CONTROL_OPCODES = frozenset(
    {
        Opcode.INTEREST,
        Opcode.WATCH,
        Opcode.INTEREST_SET,
        Opcode.JOINED,
        Opcode.HEADS,
        Opcode.SYNC,
        Opcode.REPAIR,
        Opcode.REPAIRED,
    }
)
#: Frames on a v3 link: v2's greeting and heartbeat, link state, routed data and control.
MESH_V3_OPCODES = frozenset(
    {Opcode.HEARTBEAT, Opcode.MESH_HELLO, Opcode.LINK_STATE, Opcode.ROUTED_SETS, Opcode.ROUTED}
)
#: Mesh v3.1: v3 plus routed data whose sets carry headers.
MESH_V3_1_OPCODES = MESH_V3_OPCODES | {Opcode.ROUTED_SETS_HEADERS}
#: Frames a client may send to a hub.
CLIENT_TO_HUB_OPCODES = frozenset(
    {
        Opcode.HEARTBEAT,
        Opcode.HELLO,
        Opcode.PUBLISH,
        Opcode.SUB,
        Opcode.UNSUB,
        Opcode.SUB_UPDATE,
        Opcode.ACK,
        Opcode.CREDIT,
        Opcode.ERROR,
        Opcode.STATUS,
        Opcode.COMMIT,
        Opcode.KEY_FILTER,
    }
)
#: Frames a hub may send to a client.
HUB_TO_CLIENT_OPCODES = frozenset(
    {
        Opcode.HEARTBEAT,
        Opcode.WELCOME,
        Opcode.PUBLISH_ACK,
        Opcode.SUB_OK,
        Opcode.DELIVER,
        Opcode.GAP,
        Opcode.SUB_END,
        Opcode.ERROR,
        Opcode.STATUS_REPLY,
        Opcode.COMMITTED,
        Opcode.DELIVER_HEADERS,
    }
)
LOG_OPCODES = frozenset({Opcode.SEGMENT_HEADER, Opcode.LOG_BATCH, Opcode.LOG_BATCH_HEADERS})
ALL_OPCODES = frozenset(Opcode)
