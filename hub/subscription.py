"""One client subscription's state on the hub."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wire import AckMode, SlowConsumerPolicy, StartPosition

if TYPE_CHECKING:
    from .connection import ClientConnection
    from .outbound import SharedBatch


@dataclass(eq=False, kw_only=True)
class Subscription:
    """Identity-hashed: the routing table keys on the object itself."""

    conn: ClientConnection
    sub_id: int
    patterns: list[str]
    start: StartPosition = StartPosition.LATEST
    policy: SlowConsumerPolicy = SlowConsumerPolicy.CANCEL
    ack_mode: AckMode = AckMode.NONE
    #: Messages the client still allows (None: no credit limit).
    credit: int | None = None
    closed: bool = False
    delivered_messages: int = 0
    delivered_batches: int = 0
    dropped_messages: int = 0
    gap_notices: int = 0
    #: Messages queued on the connection for this subscription, not yet written.
    queued_messages: int = 0
    #: Batches waiting for credit, oldest first.
    held_batches: list[SharedBatch] = field(default_factory=list)

    def status(self) -> dict[str, object]:
        return {
            "sub_id": self.sub_id,
            "patterns": list(self.patterns),
            "start": self.start.name.lower(),
            "policy": self.policy.name.lower().replace("_", "-"),
            "credit": self.credit,
            "delivered_messages": self.delivered_messages,
            "dropped_messages": self.dropped_messages,
            "gap_notices": self.gap_notices,
            "queued_messages": self.queued_messages,
        }
