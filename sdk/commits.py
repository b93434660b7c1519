"""COMMITs waiting for their COMMITTED: the SDK side of durable positions.

``sub.commit()`` sends the acknowledgements made so far, then a COMMIT; its ticket
completes with ``{topic: first offset not acknowledged}`` once the hub has those
positions on disk (docs/durability.md).  A lost connection or the subscription's end
fails the waiting tickets: the caller commits again (acks are resent on reconnect).
"""

from __future__ import annotations

from .batching import Ticket


class PendingCommits:
    def __init__(self) -> None:
        self._next_ref = 0
        #: ref -> (sub_id, ticket), in the order sent
        self._waiting: dict[int, tuple[int, Ticket]] = {}

    def add(self, sub_id: int) -> tuple[int, Ticket]:
        self._next_ref = (self._next_ref + 1) & 0xFFFFFFFF
        ticket = Ticket()
        self._waiting[self._next_ref] = (sub_id, ticket)
        return self._next_ref, ticket

    def committed(self, sub_id: int, ref: int, positions: dict[str, int]) -> bool:
        """COMMITTED arrived; False if no COMMIT waits for it (a protocol error)."""
        entry = self._waiting.get(ref)
        if entry is None or entry[0] != sub_id:
            return False
        del self._waiting[ref]
        entry[1].finish(positions)
        return True

    def fail_sub(self, sub_id: int, error: BaseException) -> None:
        for ref, (waiting_sub, ticket) in list(self._waiting.items()):
            if waiting_sub == sub_id:
                del self._waiting[ref]
                ticket.finish(error=error)

    def fail_all(self, error: BaseException) -> None:
        waiting, self._waiting = self._waiting, {}
        for _sub_id, ticket in waiting.values():
            ticket.finish(error=error)
