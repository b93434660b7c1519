"""pub0sub's wire protocol, sans-IO: frames, opcodes, codecs and the decoder.

No sockets, trio, anyio or libp2p here: bytes in, frames out, frames in,
bytes out.  See ``docs/protocol.md`` for every byte.
"""

from __future__ import annotations

from .decoder import BODY_BOUNDS, FrameDecoder, check_header
from .errors import ErrorCode, LocalProtocolError, ProtocolError, RemoteProtocolError
from .frames import FRAME_TYPES
from .frames.base import HEADER, HEADER_SIZE, Frame, plain
from .frames.client_publish import AckStatus, OffsetRange, Publish, PublishAck, PublishFlags
from .frames.client_session import CLIENT_PROTOCOL_VERSION, Error, Hello, Status, StatusReply, Welcome
from .frames.client_subscribe import (
    Ack,
    AckMode,
    AckRange,
    Credit,
    Deliver,
    Gap,
    SlowConsumerPolicy,
    StartPosition,
    Sub,
    SubEnd,
    SubOk,
    SubUpdate,
    TopicOffset,
    Unsub,
    UpdateOp,
    deliver_prefix,
)
from .frames.log_segment import LogBatch, SegmentHeader
from .frames.mesh_v1 import PING, PONG, Forward, Heartbeat, Subscribe, SubscribeAck, Unsubscribe, UnsubscribeAck
from .frames.mesh_v2 import ForwardAck, ForwardBatch, ForwardSet, MeshHello, ResumePosition
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
from .topics import InvalidTopicError, check_topic, is_pattern

__all__ = [
    "ALL_OPCODES",
    "Ack",
    "AckMode",
    "AckRange",
    "AckStatus",
    "BODY_BOUNDS",
    "CLIENT_PROTOCOL_VERSION",
    "CLIENT_TO_HUB_OPCODES",
    "Credit",
    "Deliver",
    "Error",
    "ErrorCode",
    "FRAME_TYPES",
    "Forward",
    "ForwardAck",
    "ForwardBatch",
    "ForwardSet",
    "Frame",
    "FrameDecoder",
    "Gap",
    "HEADER",
    "HEADER_SIZE",
    "HUB_TO_CLIENT_OPCODES",
    "Heartbeat",
    "Hello",
    "InvalidTopicError",
    "LOG_OPCODES",
    "Limits",
    "LocalProtocolError",
    "LogBatch",
    "MESH_V1_OPCODES",
    "MESH_V2_OPCODES",
    "MeshHello",
    "MessageSet",
    "OffsetRange",
    "Opcode",
    "PING",
    "PONG",
    "ProtocolError",
    "Publish",
    "PublishAck",
    "PublishFlags",
    "RecordBatch",
    "RemoteProtocolError",
    "ResumePosition",
    "SegmentHeader",
    "SlowConsumerPolicy",
    "StartPosition",
    "Status",
    "StatusReply",
    "Sub",
    "SubEnd",
    "SubOk",
    "SubUpdate",
    "Subscribe",
    "SubscribeAck",
    "TopicOffset",
    "Unsub",
    "Unsubscribe",
    "UnsubscribeAck",
    "UpdateOp",
    "Welcome",
    "check_header",
    "check_topic",
    "deliver_prefix",
    "encode_record",
    "encode_records",
    "encode_topic",
    "is_pattern",
    "iter_records",
    "plain",
]
