"""Named protocol limits, each with the reason it exists."""

from __future__ import annotations

from dataclasses import dataclass

#: A topic is 1..255 bytes: its length travels in one unsigned byte (seed layout).
MAX_TOPIC_BYTES = 255
#: A message goes to at most 255 topics: the count travels in one byte (seed layout).
MAX_TOPICS_PER_MESSAGE = 255
#: Default maximum frame body a hub accepts from a client: big enough for a
#: 64 KiB-ish publish batch many times over, small enough that one connection
#: cannot make the hub allocate much before it is refused.
DEFAULT_MAX_CLIENT_BODY = 1 << 20
#: Default maximum body on mesh links and what a client accepts from a hub:
#: a DELIVER or FORWARD_BATCH carries a client-sized batch plus headers.
DEFAULT_MAX_PEER_BODY = 4 << 20
#: What ``pub0sub decode`` accepts by default: generous, but a bogus length
#: such as 0xFFFFFFFF is still refused at the header.
DEFAULT_MAX_DECODE_BODY = 64 << 20
#: The record key length travels in 16 bits.
MAX_KEY_BYTES = 0xFFFF
#: Any 32-bit length field.
MAX_U32 = 0xFFFFFFFF
MAX_U64 = 0xFFFFFFFFFFFFFFFF


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """Limits a :class:`~wire.decoder.FrameDecoder` enforces at the header."""

    #: Largest body accepted, checked as soon as the 5 header bytes arrive.
    max_body: int = DEFAULT_MAX_CLIENT_BODY

    def __post_init__(self) -> None:
        if not 0 <= self.max_body <= MAX_U32:
            raise ValueError(f"max_body must be within 0..{MAX_U32}, got {self.max_body}")
