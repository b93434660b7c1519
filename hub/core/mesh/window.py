"""The v2 sender's window: forward sets queued for one peer until it acknowledges them.

Entries move ``unsent -> sent -> (acked, dropped)``.  After a reconnect the
peer's MESH_HELLO position says what it already stored: everything at or below
it is forgotten and the rest is sent again (:meth:`ForwardWindow.resume`).
The window is bounded in sets and bytes so a dead or slow peer cannot grow the
hub's memory; what the bound pushes out is counted, never silently lost, and
a hub with logs sends it again from there (``replay.py``): :attr:`lost_from`
says where the evicted unsent forwards start.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WindowEntry:
    first_seq: int
    last_seq: int
    count: int
    #: The set as it appears inside a FORWARD_BATCH (encoded once, shared by peers).
    encoded: bytes
    #: The set's headers block (``b""``: none); a v2.1 peer gets it in a FORWARD_BATCH_HEADERS.
    headers: bytes = b""


@dataclass(slots=True)
class Evicted:
    #: Sets that were sent but not yet acknowledged: they cannot be resent after a break.
    unacked_sets: int = 0
    #: Messages that never went out: lost for this peer.
    unsent_messages: int = 0


class ForwardWindow:
    """Bounded FIFO of forward sets for one peer, in origin-sequence order."""

    def __init__(self, *, max_sets: int, max_bytes: int) -> None:
        self.max_sets = max_sets
        self.max_bytes = max_bytes
        self._sent: deque[WindowEntry] = deque()
        self._unsent: deque[WindowEntry] = deque()
        self._bytes = 0
        self.acked_seq = 0
        self.evicted = Evicted()
        #: First origin seq of unsent forwards evicted since the last :meth:`clear_lost`.
        self.lost_from: int | None = None
        #: First origin seq of sent, unacknowledged forwards evicted (None once acknowledged past).
        self.evicted_from: int | None = None

    def push(self, entry: WindowEntry) -> None:
        self._unsent.append(entry)
        self._bytes += len(entry.encoded)
        while len(self) > self.max_sets or self._bytes > self.max_bytes:
            if self._sent:
                old = self._sent.popleft()
                self.evicted.unacked_sets += 1
                if self.evicted_from is None:
                    self.evicted_from = old.first_seq
            else:
                old = self._unsent.popleft()
                self.evicted.unsent_messages += old.count
                if self.lost_from is None:
                    self.lost_from = old.first_seq
            self._bytes -= len(old.encoded)

    def take_unsent(self, max_bytes: int, max_sets: int) -> list[WindowEntry]:
        """Move up to ``max_bytes``/``max_sets`` of unsent entries to sent and return them."""
        taken: list[WindowEntry] = []
        size = 0
        unsent = self._unsent
        while unsent and len(taken) < max_sets:
            entry = unsent[0]
            if taken and size + len(entry.encoded) > max_bytes:
                break
            unsent.popleft()
            self._sent.append(entry)
            taken.append(entry)
            size += len(entry.encoded)
        return taken

    def ack(self, seq: int) -> int:
        """Forget every entry the peer stored (cumulative ack); return how many."""
        if seq > self.acked_seq:
            self.acked_seq = seq
        if self.evicted_from is not None and self.evicted_from <= seq:
            self.evicted_from = None
        dropped = 0
        for queue in (self._sent, self._unsent):
            while queue and queue[0].last_seq <= seq:
                self._bytes -= len(queue.popleft().encoded)
                dropped += 1
        return dropped

    def resume(self, position: int) -> None:
        """A new session: the peer stored up to ``position``; send the rest again."""
        self._unsent.extendleft(reversed(self._sent))
        self._sent.clear()
        self.ack(position)

    def clear(self) -> int:
        """Forget every entry (a replay from the log covers them); return how many."""
        dropped = len(self)
        self._sent.clear()
        self._unsent.clear()
        self._bytes = 0
        self.lost_from = self.evicted_from = None
        return dropped

    def clear_lost(self) -> None:
        self.lost_from = None

    def owed_after(self) -> int | None:
        """The peer may lack sets queued for it after this origin sequence (None: it has them all)."""
        firsts = [queue[0].first_seq for queue in (self._sent, self._unsent) if queue]
        firsts += [seq for seq in (self.lost_from, self.evicted_from) if seq is not None]
        return min(firsts) - 1 if firsts else None

    @property
    def first_unsent_seq(self) -> int | None:
        return self._unsent[0].first_seq if self._unsent else None

    @property
    def has_unsent(self) -> bool:
        return bool(self._unsent)

    @property
    def unacked(self) -> int:
        return len(self._sent)

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._sent) + len(self._unsent)
