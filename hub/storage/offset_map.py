"""A bounded map from a key to the offset of its latest record: the memory of a compaction pass.

Kafka's log cleaner keeps an MD5 digest of each key and an offset in a fixed buffer
(``SkimpyOffsetMap``); this is the same idea in our layout.  A key is hashed to a 16-byte
keyed BLAKE2b digest; a slot holds the digest as two 8-byte halves and the offset plus one
(0: an empty slot), in three preallocated ``array``s, found by linear probing.  24 bytes a
slot, and the table is filled to at most :data:`LOAD_FACTOR` of its slots (as Kafka's
``log.cleaner.io.buffer.load.factor``), so about 27 bytes per entry whatever the keys'
length -- a ``dict`` of ``bytes`` keys to ``int`` takes over 100 (docs/compaction.md).

A collision (two keys with one digest) makes the map treat them as one key: the older key's
latest record would be removed.  With 128-bit digests the chance is about ``n**2 / 2**129``
for ``n`` distinct keys in one pass (1e-21 for a billion keys).  The digest is keyed with 16
random bytes drawn per map, so nobody who can choose keys can aim at a collision, and a
collision in one pass does not repeat in the next.
"""

from __future__ import annotations

import hashlib
import os
import struct
from array import array

DIGEST_BYTES = 16
#: the digest's two halves and the offset, 8 bytes each
SLOT_BYTES = 24
#: at most this share of the slots is used: linear probing stays short
LOAD_FACTOR = 0.9
#: the smallest map: two slots, one entry (tests use tiny maps to force many rounds)
MIN_MAP_BYTES = 2 * SLOT_BYTES

_halves = struct.Struct("<QQ").unpack


class OffsetMap:
    """At most :attr:`capacity` keys, each with one offset, in ``map_bytes`` bytes (rounded down
    to whole slots).  :meth:`put` refuses a new key once the map is full."""

    def __init__(self, map_bytes: int) -> None:
        slots = map_bytes // SLOT_BYTES
        if slots < 2:
            raise ValueError(f"an offset map needs at least {MIN_MAP_BYTES} bytes (two slots), got {map_bytes}")
        self.slots = slots
        self.capacity = max(1, int(slots * LOAD_FACTOR))
        self.entries = 0
        #: keyed with random bytes; each digest starts from a copy of this hasher (cheaper than keying anew)
        self._hasher = hashlib.blake2b(digest_size=DIGEST_BYTES, key=os.urandom(16))
        self._hi = array("Q", [0]) * slots
        self._lo = array("Q", [0]) * slots
        self._offsets = array("q", [0]) * slots  # offset + 1; 0: empty

    @staticmethod
    def bytes_for(entries: int) -> int:
        """The bytes of a map that can hold ``entries`` keys."""
        return max(MIN_MAP_BYTES, (int(entries / LOAD_FACTOR) + 2) * SLOT_BYTES)

    @property
    def nbytes(self) -> int:
        return self.slots * SLOT_BYTES

    @property
    def full(self) -> bool:
        return self.entries >= self.capacity

    def _digest(self, key: bytes) -> tuple[int, int]:
        hasher = self._hasher.copy()
        hasher.update(key)
        hi, lo = _halves(hasher.digest())
        return hi, lo

    def put(self, key: bytes, offset: int) -> bool:
        """Set ``key``'s offset; False (nothing changed) if ``key`` is new and the map is full."""
        hi, lo = self._digest(key)
        his, los, offsets, slots = self._hi, self._lo, self._offsets, self.slots
        i = hi % slots
        while True:
            held = offsets[i]
            if held == 0:
                if self.entries >= self.capacity:
                    return False
                his[i], los[i], offsets[i] = hi, lo, offset + 1
                self.entries += 1
                return True
            if his[i] == hi and los[i] == lo:
                offsets[i] = offset + 1
                return True
            i = i + 1 if i + 1 < slots else 0

    def get(self, key: bytes) -> int:
        """``key``'s offset, or -1 if the map does not hold it."""
        hi, lo = self._digest(key)
        his, los, offsets, slots = self._hi, self._lo, self._offsets, self.slots
        i = hi % slots
        while True:
            held = offsets[i]
            if held == 0:
                return -1
            if his[i] == hi and los[i] == lo:
                return held - 1
            i = i + 1 if i + 1 < slots else 0
