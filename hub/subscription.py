"""One client subscription's state on the hub."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wire import AckMode, SlowConsumerPolicy, StartPosition

if TYPE_CHECKING:
    from .connection import ClientConnection
    from .consumers import ConsumerState
    from .follower import LogFollower
    from .groups import ConsumerGroup
    from .storage.batches import SharedBatch

#: How a subscription is served: ``live`` (router -> queue), ``follower`` (reads the logs),
#: ``durable`` (a named follower whose position the hub keeps), ``group`` (a group member).
SUBSCRIPTION_KINDS = ("live", "follower", "durable", "group")


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
    #: True: the router delivers directly; False: a follower or group reads the log.
    live: bool = True
    follower: LogFollower | None = None
    group: ConsumerGroup | None = None
    #: durable state (named subscriptions)
    consumer: ConsumerState | None = None
    delivered_messages: int = 0
    dropped_messages: int = 0
    gap_notices: int = 0
    #: Messages queued on the connection for this subscription, not yet written.
    queued_messages: int = 0
    #: Batches waiting for credit, oldest first.
    held_batches: list[SharedBatch] = field(default_factory=list)

    def wake(self) -> None:
        """New data in a followed topic (or new credit): let the follower look."""
        if self.follower is not None:
            self.follower.wake()

    @property
    def kind(self) -> str:
        """One of :data:`SUBSCRIPTION_KINDS`: how the hub delivers to it (see hub/subscribing.py)."""
        return "group" if self.group else "durable" if self.consumer else "follower" if self.follower else "live"

    def status(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "group": self.group.name if self.group else None,
            "durable": self.consumer.name if self.consumer else None,
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
