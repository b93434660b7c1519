"""Read-side backpressure: a connection that does not read its replies is not read from.

A client can make the hub work without limit by sending requests (pings, acked
publishes, status requests) and never reading the answers: 64 KiB of pings is 13,000
frames the hub decodes and answers, and the kernel alone takes ~4 MiB of answers from
a peer that never reads before a send would block.  Counting replies against
``max_pending_bytes`` bounds the memory, not the work: every connection gets its
turn, and four such clients took most of the hub's time from a healthy one
(``python -m hub.tools.bounds_bench attack``).

So the shell stops reading a connection while more than :func:`pause_threshold` bytes of
*replies to its own requests* are not yet taken by its peer -- queued here, taken by the
writer but not written, or written but still in the kernel's send queue (SIOCOUTQ) --
and reads again once they drain below it.  The frames it sent meanwhile wait in the
kernel's buffers, then the client's: its own sends block, nothing it sent is lost.
Deliveries do not count: a subscriber that lags behind a busy topic has its
slow-consumer policy (``hub.core.slow_consumers``), and its UNSUB, CREDIT and ACKs must
still be read.  (Envoy pauses reading a connection whose write buffer passes its
high-water mark, and Kafka mutes a connection until its answer is sent, alike.)

A connection paused longer than ``slow_consumer_deadline`` is closed with
``ERROR LIMIT_EXCEEDED`` (close reason ``not_reading``), as one whose replies pass
``max_pending_bytes`` is: it is not reading at all (:class:`ReadPauses`).  While paused,
its silence is the hub's doing: no heartbeat deadline, no pings.

:class:`ReplyBacklog` does the accounting without I/O: the shell tells it what it took
from the queue and what the socket accepted, and asks with the kernel's count.
"""

from __future__ import annotations

import logging

from wire import ErrorCode

from .clients import ClientSession, CloseReason
from .events import ev
from .stats import HubStats

log = logging.getLogger("pub0sub.hub.connection")

#: Unread reply bytes beyond which a connection is not read from (256 KiB: 20,000
#: acknowledgements; a client that far behind its own answers is not reading them).
READ_PAUSE_REPLY_BYTES = 256 << 10

#: Positions kept per connection; older ones merge into the next (the count then errs
#: on the side of "unread", for a moment).
_MAX_MARKS = 64


def pause_threshold(max_pending_bytes: int) -> int:
    """Below half the cap, so a connection is paused before its replies could close it."""
    return min(READ_PAUSE_REPLY_BYTES, max(1, max_pending_bytes // 2))


class ReplyBacklog:
    """Reply bytes of one connection its peer has not taken yet.

    The output stream is counted in bytes: ``_taken`` bytes left the queue, ``_written``
    of them reached the kernel, and the kernel holds ``outq`` of those unsent, so the peer
    has the first ``_written - outq``.  A mark (stream position, replies taken up to it) is
    kept per piece of output with replies in it; a mark the peer has passed confirms its
    replies.
    """

    __slots__ = ("_marks", "_replies_confirmed", "_replies_taken", "_taken", "_written")

    def __init__(self) -> None:
        self._taken = 0
        self._written = 0
        self._replies_taken = 0
        self._replies_confirmed = 0
        # A list, not a deque: an idle connection keeps its handshake's one mark, and an
        # empty deque alone is a 64-slot block (~600 B, 7% of an idle connection: C1).
        self._marks: list[tuple[int, int]] = []

    def taken(self, size: int, reply_bytes: int) -> None:
        """``size`` bytes left the queue, ``reply_bytes`` of them replies (the rest deliveries)."""
        self._taken += size
        if reply_bytes:
            self._replies_taken += reply_bytes
            marks = self._marks
            marks.append((self._taken, self._replies_taken))
            if len(marks) > _MAX_MARKS:
                del marks[0]  # its replies are confirmed with the next mark's

    def written(self, nbytes: int) -> None:
        """The kernel accepted ``nbytes`` more of what was taken."""
        self._written += nbytes

    def at_most(self, queued_replies: int) -> int:
        """An upper bound without asking the kernel: what was not confirmed at the last ask."""
        return queued_replies + self._replies_taken - self._replies_confirmed

    def unread(self, queued_replies: int, kernel_unsent: int) -> int:
        """Reply bytes the peer has not taken, the kernel holding ``kernel_unsent`` bytes unsent."""
        peer_has = self._written - kernel_unsent
        marks = self._marks
        passed = 0
        while passed < len(marks) and marks[passed][0] <= peer_has:
            passed += 1
        if passed:
            self._replies_confirmed = marks[passed - 1][1]
            del marks[:passed]
        return queued_replies + self._replies_taken - self._replies_confirmed


class ReadPauses:
    """Connections the shell stopped reading, and the deadline that closes them (see the module)."""

    def __init__(self, stats: HubStats, deadline: float) -> None:
        self.stats = stats
        self.deadline = deadline
        #: conn_id -> (session, when reading stopped, unread reply bytes then)
        self._paused: dict[int, tuple[ClientSession, float, int]] = {}

    def __contains__(self, session: ClientSession) -> bool:
        return session.conn_id in self._paused

    def __len__(self) -> int:
        return len(self._paused)

    def paused(self, session: ClientSession, now: float, unread: int) -> None:
        self._paused[session.conn_id] = (session, now, unread)
        self.stats.read_pauses += 1

    def resumed(self, session: ClientSession, now: float) -> None:
        if self._paused.pop(session.conn_id, None) is not None:
            # What it sent while paused waited in our buffers: it was not silent.
            session.last_received = now

    def close_overdue(self, now: float) -> None:
        """Close the connections paused for longer than the deadline."""
        for conn_id, (session, since, unread) in list(self._paused.items()):
            if session.closing is not None:
                del self._paused[conn_id]
            elif now - since > self.deadline:
                del self._paused[conn_id]
                self.stats.read_pause_closes += 1
                reason = (f"{unread} bytes of replies unread, connection not read for {now - since:.1f}s, "
                          f"limit slow_consumer_deadline={self.deadline:g}s")  # fmt: skip
                log.info("connection %d (%s): %s", session.conn_id, session.peer, reason,
                         extra=ev("read_pause_closed", conn=session.conn_id, peer=session.peer))
                session.fail(ErrorCode.LIMIT_EXCEEDED, reason, why=CloseReason.NOT_READING)
