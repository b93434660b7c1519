"""Sets the streams made ready (streams.py), handed to the store in runs of one origin's.

A store that kept less than it was given (a storage error: hub/core/overlay/core.py's
OverlayStore) says where it stopped, and the streams' chains go back there, so the rest is
asked for again rather than taken as delivered.
"""

from __future__ import annotations

from collections.abc import Callable

import wire

from .streams import Streams


def hand_over(streams: Streams, deliver: Callable[[int, list[wire.ForwardSet]], int | None]) -> None:
    """The sets ready, to ``deliver``: one call per run of the same origin's sets."""
    ready = streams.take_ready()
    i = 0
    while i < len(ready):
        origin = ready[i][0]
        j = i
        while j < len(ready) and ready[j][0] == origin:
            j += 1
        sets = [s for _, s in ready[i:j]]
        stored = deliver(origin, sets)
        if stored is not None:
            target = sets[-1].origin_seq + sets[-1].messages.count - 1
            if stored < target:
                streams.stored_less(origin, tuple({t for s in sets for t in s.messages.topics}), stored)
        i = j
