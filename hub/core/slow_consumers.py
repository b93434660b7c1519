"""What happens to a subscription whose connection cannot keep up: the slow-consumer policies.

A delivery that would push a connection's queue past its cap (``max_pending_bytes``)
meets the subscription's policy, chosen in its SUB:

* ``CANCEL``: the subscription ends with ``SUB_END OUT_OF_CAPACITY`` and a reason
  naming the bytes queued and the cap; nothing else on the connection is touched.
* ``DROP_OLDEST``: its oldest queued batches are replaced by GAP notices saying
  exactly which offsets were dropped, until the new batch fits (or the batch itself
  becomes a GAP).

Batches held for lack of credit count against the same cap.  Every drop is counted;
nothing is dropped silently.  Log followers and groups never meet these policies:
they read only while the queue has room, so a slow one lags on the log instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from wire import ErrorCode, SlowConsumerPolicy

from ..storage.batches import SharedBatch
from .clients import ClientSession, Subscription
from .events import ev
from .stats import HubStats, bump

log = logging.getLogger("pub0sub.hub.subscribing")


class SlowConsumerPolicies:
    """Implements :class:`hub.core.clients.SlowConsumers`; ``end`` ends a subscription with a SUB_END."""

    def __init__(self, stats: HubStats, end: Callable[[ClientSession, Subscription, ErrorCode, str], None]) -> None:
        self.stats = stats
        self._end = end

    def make_room(self, session: ClientSession, sub: Subscription, batch: SharedBatch, nbytes: int) -> bool:
        """Apply ``sub``'s policy because ``batch`` does not fit; True if it may be queued now."""
        if sub.policy is SlowConsumerPolicy.CANCEL:
            self.cancel_slow(session, sub, why="queue_full")
            return False
        dropped = session.out.drop_oldest(sub, nbytes)
        self.stats.dropped_messages += dropped
        if session.out.fits(nbytes):
            return True
        session.out.gap_instead(sub, batch)
        self.stats.dropped_messages += batch.count
        return False

    def held_overflow(self, session: ClientSession, sub: Subscription, batch: SharedBatch) -> None:
        """Batches waiting for credit exceed the cap."""
        if sub.policy is SlowConsumerPolicy.CANCEL:
            self.cancel_slow(session, sub, why="held_full")
            return
        oldest = sub.held_batches.pop(0)
        sub.queued_messages -= oldest.count
        session.out.gap_instead(sub, oldest)
        self.stats.dropped_messages += oldest.count
        sub.held_batches.append(batch)
        sub.queued_messages += batch.count

    def cancel_slow(self, session: ClientSession, sub: Subscription, *, why: str = "queue_full") -> None:
        """End ``sub``: its queue (``queue_full``) or its batches waiting for credit (``held_full``) hit the cap."""
        self.stats.cancelled_subscriptions += 1
        bump(self.stats.cancels, why)
        reason = (
            f"subscription {sub.sub_id} cannot keep up: {session.out.pending_bytes} bytes queued, "
            f"cap max_pending_bytes={session.out.cap}"
        )
        log.info("connection %d (%s): %s", session.conn_id, session.peer, reason,
                 extra=ev("slow_consumer_cancelled", conn=session.conn_id, peer=session.peer, reason=why))
        self._end(session, sub, ErrorCode.OUT_OF_CAPACITY, reason)
