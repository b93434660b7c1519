"""COMMIT: the acknowledgement a client can wait on (Kafka's ``commitSync``).

The hub answers COMMITTED once the subscription's acknowledged position, with every
ACK the connection sent before the COMMIT, is on disk.  The positions it reports
are those at the COMMIT: they only ever grow, so what the save holds is at least
that.  Saving is the consumer registry's group commit (``ConsumerRegistry.when_saved``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wire import Commit, Committed, ErrorCode, SubEnd, TopicOffset

from .clients import ClientSession

if TYPE_CHECKING:
    from .consumers import ConsumerRegistry
    from .stats import HubStats

#: The client protocol version that added COMMIT.
COMMIT_VERSION = 2


class Commits:
    def __init__(self, consumers: ConsumerRegistry | None, stats: HubStats) -> None:
        self.consumers = consumers
        self.stats = stats

    def on_commit(self, session: ClientSession, frame: Commit) -> None:
        if session.version < COMMIT_VERSION:
            session.fail(ErrorCode.UNEXPECTED_FRAME, f"COMMIT needs client protocol version {COMMIT_VERSION}")
            return
        sub = session.subs.get(frame.sub_id)
        if sub is None:
            # As for UNSUB: the client learns the subscription is gone, the connection stays.
            end = SubEnd(sub_id=frame.sub_id, code=ErrorCode.UNKNOWN_SUBSCRIPTION, reason="no such subscription")
            session.send_control(end.encode())
            return
        state = sub.group.state if sub.group is not None else sub.consumer
        consumers = self.consumers
        if state is None or consumers is None:
            session.fail(
                ErrorCode.INVALID_ACK,
                f"subscription {sub.sub_id} keeps no position to commit (only durable subscriptions and groups do)",
                ref=sub.sub_id,
            )
            return
        positions = tuple(TopicOffset(topic=t, offset=tr.floor) for t, tr in sorted(state.positions.items()))
        reply = Committed(sub_id=sub.sub_id, ref=frame.ref, positions=positions[:0xFFFF]).encode()
        self.stats.commits += 1

        def saved(error: OSError | None) -> None:
            if error is not None:
                session.fail(ErrorCode.STORAGE_ERROR, f"cannot save the position: {error}", ref=sub.sub_id)
            else:
                session.send_control(reply)

        consumers.when_saved(saved)
