"""Where in a topic log each origin hub's sequence numbers are: a sparse, in-memory index.

The mesh replays a hub's own publishes from its logs to a peer that missed
them (``hub/core/mesh_link.py``); it must start reading at the first batch after the
peer's position without scanning the log from the start.  Within one topic log
one origin's sequences only grow with the offset (own publishes are appended
in sequence order, forwards after dedup by (origin, seq)), so a sorted list of
``(origin_seq, offset)`` marks is enough: the last mark at or below the wanted
sequence is where the read starts.  A mark is taken at an origin's first batch
and then every ``BYTES_PER_MARK`` of its records or ``OFFSETS_PER_MARK`` offsets,
whichever comes first, so a read from a mark scans a bounded stretch.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

#: A mark every 64 KiB of one origin's records: ~16k marks (a few hundred KiB) per GiB.
BYTES_PER_MARK = 64 << 10
#: ... or once this many offsets passed since its last mark (its batches are rare).
OFFSETS_PER_MARK = 4096


@dataclass(slots=True)
class _Marks:
    seqs: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    bytes_since: int = 0
    #: Retention removed batches of this origin: the first mark's range may have lost some.
    cut: bool = False


class OriginIndex:
    """``(origin, origin_seq) -> offset`` lower bounds for one topic log.

    >>> index = OriginIndex()
    >>> index.note(origin=7, origin_seq=1, offset=0, size=10)
    >>> index.note(origin=7, origin_seq=2, offset=1, size=10)       # too close: no mark
    >>> index.start_offset(7, 2)                                     # read from offset 0
    0
    >>> index.start_offset(9, 1) is None                             # origin 9 never stored here
    True
    >>> index.forget_below(1)                                        # retention: offset 0 is gone
    >>> index.start_offset(7, 2), index.maybe_cut(7, 2)
    (1, True)
    """

    def __init__(self) -> None:
        self._by_origin: dict[int, _Marks] = {}

    def note(self, *, origin: int, origin_seq: int, offset: int, size: int) -> None:
        """A batch of ``origin`` starting at ``origin_seq`` was appended at ``offset``."""
        if not origin:
            return  # v1 forwards carry no origin sequence: nothing to find later
        marks = self._by_origin.get(origin)
        if marks is None:
            marks = self._by_origin[origin] = _Marks()
        if (
            not marks.seqs
            or marks.bytes_since >= BYTES_PER_MARK
            or offset - marks.offsets[-1] >= OFFSETS_PER_MARK
        ):
            marks.seqs.append(origin_seq)
            marks.offsets.append(offset)
            marks.bytes_since = 0
        marks.bytes_since += size

    def start_offset(self, origin: int, origin_seq: int) -> int | None:
        """An offset at or before the batch holding ``origin_seq`` (None: no batch of ``origin``).

        A sequence below the first mark gives the first mark: nothing older is indexed.
        """
        marks = self._by_origin.get(origin)
        if marks is None or not marks.seqs:
            return None
        i = bisect.bisect_right(marks.seqs, origin_seq) - 1
        return marks.offsets[max(i, 0)]

    def maybe_cut(self, origin: int, origin_seq: int) -> bool:
        """True if retention may have removed batches of ``origin`` around ``origin_seq``."""
        marks = self._by_origin.get(origin)
        if marks is None or not marks.cut:
            return False
        return len(marks.seqs) < 2 or origin_seq < marks.seqs[1]

    def forget_below(self, offset: int) -> None:
        """Retention removed everything below ``offset``: drop the marks that point there.

        The last such mark of an origin is kept, moved up to ``offset``: reads
        for a sequence in the removed part then start at the log's first offset.
        """
        for marks in self._by_origin.values():
            i = bisect.bisect_right(marks.offsets, offset)
            if i == 0:
                continue
            del marks.seqs[: i - 1], marks.offsets[: i - 1]
            if marks.offsets[0] < offset:
                marks.offsets[0] = offset
                marks.cut = True
