"""A task that counts how often it got to run: how a test proves that some code yields."""

from __future__ import annotations

import anyio
import anyio.lowlevel


class Ticker:
    """Start ``run`` in a task group; ``ticks`` grows each time the loop lets it in."""

    def __init__(self) -> None:
        self.ticks = 0

    async def run(self) -> None:
        while True:
            await anyio.lowlevel.checkpoint()
            self.ticks += 1
