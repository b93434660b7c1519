"""Typed frames: frozen, keyword-only dataclasses validated when constructed.

One module per protocol, so each reads on its own:

* :mod:`.base` -- the 5-byte header, :class:`Frame` and the construct-driven codec;
* :mod:`.mesh_v1` -- the seed's opcodes 1-6 (HEARTBEAT serves client links too);
* :mod:`.mesh_v2` -- MESH_HELLO, FORWARD_BATCH, FORWARD_ACK (and v2.1's FORWARD_BATCH_HEADERS);
* :mod:`.mesh_v3` -- the overlay: LINK_STATE, ROUTED_SETS, the ROUTED envelope and
  the control frames it carries;
* :mod:`.client_session`, :mod:`.client_publish`, :mod:`.client_subscribe`,
  :mod:`.client_commit` -- the client protocol: the connection itself, publishing,
  subscriptions and delivery, durable positions;
* :mod:`.log_segment` -- SEGMENT_HEADER and LOG_BATCH, the on-disk log.

This package holds :data:`FRAME_TYPES`, the one table from opcode to frame type
that the decoder dispatches on.  Import frames from :mod:`wire` itself.
"""

from __future__ import annotations

from ..opcodes import Opcode
from .base import HEADER, HEADER_SIZE, Frame
from .client_commit import Commit, Committed
from .client_publish import Publish, PublishAck
from .client_session import Error, Hello, Status, StatusReply, Welcome
from .client_subscribe import (
    Ack,
    Credit,
    Deliver,
    DeliverHeaders,
    Gap,
    KeyFilterUpdate,
    Sub,
    SubEnd,
    SubOk,
    SubUpdate,
    Unsub,
)
from .log_segment import SEGMENT_MAGIC, LogBatch, LogBatchHeaders, SegmentHeader, log_batch_head
from .mesh_v1 import Forward, Heartbeat, Subscribe, SubscribeAck, Unsubscribe, UnsubscribeAck
from .mesh_v2 import ForwardAck, ForwardBatch, ForwardBatchHeaders, MeshHello
from .mesh_v3 import ROUTED_CONTROL_TYPES, LinkState, Routed, RoutedSets, RoutedSetsHeaders

_FRAME_CLASSES: tuple[type[Frame], ...] = (
    Heartbeat,
    Subscribe,
    SubscribeAck,
    Unsubscribe,
    UnsubscribeAck,
    Forward,
    MeshHello,
    ForwardBatch,
    ForwardBatchHeaders,
    ForwardAck,
    LinkState,
    RoutedSets,
    RoutedSetsHeaders,
    Routed,
    *ROUTED_CONTROL_TYPES,
    Hello,
    Welcome,
    Publish,
    PublishAck,
    Sub,
    SubOk,
    Unsub,
    SubUpdate,
    Deliver,
    Ack,
    Credit,
    Gap,
    SubEnd,
    Error,
    Status,
    StatusReply,
    Commit,
    Committed,
    DeliverHeaders,
    KeyFilterUpdate,
    SegmentHeader,
    LogBatch,
    LogBatchHeaders,
)
FRAME_TYPES: dict[Opcode, type[Frame]] = {cls.OPCODE: cls for cls in _FRAME_CLASSES}
assert set(FRAME_TYPES) == set(Opcode), "every opcode needs a frame type"

# What importers take from the package itself (the frames come through ``wire``).
__all__ = ["FRAME_TYPES", "HEADER", "HEADER_SIZE", "SEGMENT_MAGIC", "Frame", "log_batch_head"]
