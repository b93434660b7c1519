"""Client protocol, durable positions: COMMIT asks for the hub's word, COMMITTED gives it.

An ACK moves a durable subscription's or group's position in the hub's memory; the
hub writes positions to disk within a fraction of a second, so a hub crash can
deliver acknowledged messages again.  COMMIT is the acknowledgement a client can
wait on (Kafka's ``commitSync``): COMMITTED comes back once the positions, with
every ACK sent before the COMMIT, are on disk (written, fsync'ed, renamed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..opcodes import Opcode
from .base import SchemaFrame
from .client_subscribe import TopicOffset


@dataclass(frozen=True, kw_only=True, slots=True)
class Commit(SchemaFrame):
    """Make subscription ``sub_id``'s acknowledged position durable; ``ref`` comes back in COMMITTED."""

    OPCODE: ClassVar[Opcode] = Opcode.COMMIT
    sub_id: int
    ref: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Committed(SchemaFrame):
    """The position of ``sub_id`` at the COMMIT ``ref`` is on disk: ``positions`` per topic, each the
    first offset not acknowledged (everything below it is)."""

    OPCODE: ClassVar[Opcode] = Opcode.COMMITTED
    sub_id: int
    ref: int
    positions: tuple[TopicOffset, ...] = ()
