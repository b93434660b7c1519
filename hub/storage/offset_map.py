"""A bounded map from a key to the offset of its latest record: the memory of a compaction pass.

Kafka's log cleaner keeps an MD5 digest of each key and an offset in a fixed buffer
(``SkimpyOffsetMap``); this is the same idea in our layout.  A key is hashed to a 16-byte
keyed BLAKE2b digest; a slot holds the digest as two 8-byte halves and the offset plus one
(0: an empty slot), in three preallocated ``array``s, found by double hashing (a prime number
of slots; the start and the step from the digest's two halves).  Beside them, one byte per
slot of a filter (one bit per key, set from Python's own ``hash()``): a lookup of a key the
filter says is absent costs no digest, which is most of a pass's lookups (the clean part's
keys, few of them dirty).  25 bytes a slot, filled to at most :data:`LOAD_FACTOR` of its
slots (Kafka's ``log.cleaner.io.buffer.load.factor`` is 0.9; at 0.8 lookups stay short), so
about 31 bytes per key whatever the keys' length -- a ``dict`` of ``bytes`` keys to ``int``
takes over 100 (docs/compaction.md).

A collision (two keys with one digest) makes the map treat them as one key: the older key's
latest record would be removed.  With 128-bit digests the chance is about ``n**2 / 2**129``
for ``n`` distinct keys in one pass (1.5e-21 for a billion keys).  The digest is keyed with 16
random bytes drawn per map, so nobody who can choose keys can aim at a collision, and a
collision in one pass does not repeat in the next.  The filter only answers "absent" for keys
never put (``hash()`` is the same for equal keys within the process); its false "maybe"s just
cost a digest.
"""

from __future__ import annotations

import hashlib
import os
import struct
from array import array

DIGEST_BYTES = 16
#: the digest's two halves and the offset, 8 bytes each, and 8 bits of the filter
SLOT_BYTES = 25
#: at most this share of the slots is used: with double hashing a lookup of an absent key
#: probes about 1 / (1 - 0.8) = 5 slots, of a present one about 2
LOAD_FACTOR = 0.8
#: the smallest map: two slots, one entry (tests use tiny maps to force many rounds)
MIN_MAP_BYTES = 2 * SLOT_BYTES
#: what :meth:`OffsetMap.put` returns for a new key: there was no offset before
NEW = -1
#: what :meth:`OffsetMap.put` returns when a new key does not fit
FULL = -2

_halves = struct.Struct("<QQ").unpack


class OffsetMap:
    """At most :attr:`capacity` keys, each with one offset, in ``map_bytes`` bytes (rounded down
    to a prime number of slots).  :meth:`put` refuses a new key once the map is full."""

    def __init__(self, map_bytes: int) -> None:
        if map_bytes < MIN_MAP_BYTES:
            raise ValueError(f"an offset map needs at least {MIN_MAP_BYTES} bytes (two slots), got {map_bytes}")
        self.slots = slots = _prime_at_most(map_bytes // SLOT_BYTES)
        #: double hashing: the probe step is 1 .. slots - 1, from the digest's other half
        self._steps = max(1, slots - 1)
        self.capacity = max(1, int(slots * LOAD_FACTOR))  # as capacity_for
        self.entries = 0
        #: keyed with random bytes; each digest starts from a copy of this hasher (cheaper than keying anew)
        self._hasher = hashlib.blake2b(digest_size=DIGEST_BYTES, key=os.urandom(16))
        self._hi = array("Q", [0]) * slots
        self._lo = array("Q", [0]) * slots
        self._offsets = array("q", [0]) * slots  # offset + 1; 0: empty
        self._filter = bytearray(slots)
        self._filter_bits = 8 * slots

    @staticmethod
    def bytes_for(entries: int) -> int:
        """The bytes of a map that can hold ``entries`` keys."""
        slots = max(2, int(entries / LOAD_FACTOR) + 1)
        while not _is_prime(slots) or int(slots * LOAD_FACTOR) < entries:
            slots += 1
        return slots * SLOT_BYTES

    @staticmethod
    def capacity_for(map_bytes: int) -> int:
        """The keys a map of ``map_bytes`` holds."""
        return max(1, int(_prime_at_most(map_bytes // SLOT_BYTES) * LOAD_FACTOR))

    @property
    def nbytes(self) -> int:
        return self.slots * SLOT_BYTES

    def put(self, key: bytes, offset: int) -> int:
        """Set ``key``'s offset.  Returns the offset it replaced, :data:`NEW` for a new key, or
        :data:`FULL` (nothing changed) if ``key`` is new and the map is full."""
        i, hi, lo = self._slot(key)
        held = self._offsets[i]
        if held == 0:
            if self.entries >= self.capacity:
                return FULL
            self._hi[i], self._lo[i] = hi, lo
            self.entries += 1
            bit = hash(key) % self._filter_bits
            self._filter[bit >> 3] |= 1 << (bit & 7)
        self._offsets[i] = offset + 1
        return held - 1  # NEW when the slot was empty

    def get(self, key: bytes) -> int:
        """``key``'s offset, or -1 if the map does not hold it."""
        bit = hash(key) % self._filter_bits
        if not self._filter[bit >> 3] & (1 << (bit & 7)):
            return -1
        return self._offsets[self._slot(key)[0]] - 1

    def _slot(self, key: bytes) -> tuple[int, int, int]:
        """The slot holding ``key``'s digest, or the empty one where it would go; and the digest's
        halves.  An empty slot always exists: the map fills at most LOAD_FACTOR of them."""
        hasher = self._hasher.copy()
        hasher.update(key)
        hi, lo = _halves(hasher.digest())
        his, los, offsets, slots = self._hi, self._lo, self._offsets, self.slots
        i = hi % slots
        step = 1 + lo % self._steps
        while offsets[i] and (his[i] != hi or los[i] != lo):
            i = (i + step) % slots
        return i, hi, lo


def _is_prime(n: int) -> bool:
    return n == 2 or (n > 2 and n % 2 == 1 and all(n % d for d in range(3, int(n**0.5) + 1, 2)))


def _prime_at_most(n: int) -> int:
    """The largest prime <= ``n`` (n >= 2): a prime number of slots makes every step of double
    hashing visit every slot."""
    while not _is_prime(n):
        n -= 1
    return n
