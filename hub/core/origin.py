"""This hub's origin numbering: every message it accepts gets the next origin sequence.

(origin hub id, origin sequence) names a message on every hub of the mesh: it is
what deduplicates forwards, resumes broken links and replays from the logs
(docs/protocol.md, mesh v2).  The numbering continues after the highest sequence
the logs hold, so it survives restarts.
"""

from __future__ import annotations


class OriginSequence:
    def __init__(self, hub_id: int, *, last_stored: int = 0) -> None:
        if not 0 < hub_id < 1 << 64:
            raise ValueError("a hub id is a non-zero u64")
        self.hub_id = hub_id
        #: the sequence the next accepted message will take
        self.upcoming = last_stored + 1

    def take(self, count: int) -> int:
        """Reserve ``count`` consecutive sequences; the first."""
        first = self.upcoming
        self.upcoming += count
        return first
