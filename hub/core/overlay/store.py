"""What the overlay needs from the hub's data dir (the hub's logs, or a simulation's stand-in)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import wire

from .origin import OwnLog


class OverlayStore(OwnLog, Protocol):
    """Where delivered sets go and what the overlay reads back (the hub's logs, or a simulation's)."""

    def deliver(self, origin: int, sets: list[wire.ForwardSet]) -> int | None:
        """Store ``sets`` of ``origin``; the last origin sequence stored (None: all of them)."""
        ...

    def stored_position(self, origin: int, topic: str) -> int:
        """The last sequence of ``origin`` stored on ``topic`` (0: none)."""
        ...

    def save_since(self, since: Mapping[tuple[int, str], int]) -> None:
        """Keep the stream starts (JOINED) across restarts."""
        ...

    def save_joins(self, joins: Mapping[tuple[int, str], int]) -> None:
        """Keep the starts this hub told its destinations (hub/core/overlay/joins.py) across restarts."""
        ...

    @property
    def floors(self) -> Mapping[tuple[int, str], int]:
        """The streams' floors as last saved (Streams.floors), read at start."""
        ...

    def save_floors(self, floors: Mapping[tuple[int, str], int]) -> None:
        """Keep the streams' floors (Streams.floors) across restarts."""
        ...
