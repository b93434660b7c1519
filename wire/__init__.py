"""pub0sub's wire protocol, sans-IO: frames, opcodes, codecs and the decoder.

No sockets, trio, anyio or libp2p here: bytes in, frames out, frames in,
bytes out.  See ``docs/protocol.md`` for every byte.
"""

from __future__ import annotations

from .decoder import BODY_BOUNDS, FrameDecoder, check_header
from .errors import ErrorCode, LocalProtocolError, ProtocolError, RemoteProtocolError
from .frames import (
    CLIENT_PROTOCOL_VERSION,
    FRAME_TYPES,
    HEADER,
    HEADER_SIZE,
    PING,
    PONG,
    Ack,
    AckMode,
    AckRange,
    AckStatus,
    Credit,
    Deliver,
    Error,
    Forward,
    ForwardAck,
    ForwardBatch,
    ForwardSet,
    Frame,
    Heartbeat,
    Hello,
    LogBatch,
    MeshHello,
    OffsetRange,
    Publish,
    PublishAck,
    PublishFlags,
    ResumePosition,
    SegmentHeader,
    SlowConsumerPolicy,
    StartPosition,
    Status,
    StatusReply,
    Sub,
    SubEnd,
    Gap,
    SubOk,
    Subscribe,
    SubscribeAck,
    SubUpdate,
    TopicOffset,
    Unsub,
    Unsubscribe,
    UnsubscribeAck,
    UpdateOp,
    Welcome,
    deliver_prefix,
    plain,
)
from .limits import Limits
from .opcodes import (
    ALL_OPCODES,
    CLIENT_TO_HUB_OPCODES,
    HUB_TO_CLIENT_OPCODES,
    LOG_OPCODES,
    MESH_V1_OPCODES,
    MESH_V2_OPCODES,
    Opcode,
)
from .records import MessageSet, RecordBatch, encode_record, encode_records, encode_topic, iter_records

__all__ = [name for name in dir() if not name.startswith("_") and name != "annotations"]
