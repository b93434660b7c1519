"""The one buffer operation both mesh read paths need."""

from __future__ import annotations


def take_front(buffer: bytearray, n: int | None) -> bytes:
    """Remove and return the first ``n`` bytes of ``buffer`` (all of it if ``n`` is None or more)."""
    if n is None or n >= len(buffer):
        data = bytes(buffer)
        buffer.clear()
    else:
        data = bytes(buffer[:n])
        del buffer[:n]
    return data
