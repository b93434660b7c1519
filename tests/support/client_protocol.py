"""Drive the SDK's sans-IO ``ClientProtocol`` with hand-built hub frames (no sockets).

>>> proto = ready()                               # HELLO sent, WELCOME received  # doctest: +SKIP
>>> proto.receive_data(deliver(1, batch("t", 0, b"x")))                            # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import wire
from sdk.protocol import ClientProtocol, State


class FakeClock:
    """A clock the test moves by hand (``clock.now += 1``): heartbeats and timeouts without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def frames_of(data: bytes) -> list[Any]:
    """The frames in bytes the client sent: whole frames, client-to-hub opcodes only."""
    decoder = wire.FrameDecoder(limits=wire.Limits(max_body=1 << 24), accept=wire.CLIENT_TO_HUB_OPCODES)
    decoder.feed(data)
    frames = list(decoder)
    assert decoder.buffered == 0
    return frames


def welcome(heartbeat_ms: int = 1000, max_body: int = 1 << 20, version: int = wire.CLIENT_PROTOCOL_VERSION) -> bytes:
    """A hub's WELCOME (hub id 42) at ``version`` (a hub answers with the version the client offered)."""
    return wire.Welcome(version=version, hub_id=42, max_body=max_body, heartbeat_ms=heartbeat_ms, hub_name="h").encode()


def ready(clock: FakeClock | None = None, **kwargs: object) -> ClientProtocol:
    """A client protocol past the handshake: HELLO sent and checked, WELCOME received."""
    proto = ClientProtocol(name="t", producer_id=9, clock=clock or FakeClock(), **kwargs)  # type: ignore[arg-type]
    proto.connection_made()
    (hello,) = frames_of(proto.data_to_send())
    assert hello == wire.Hello(client_name="t")
    proto.receive_data(welcome())
    assert proto.state == State.READY
    return proto


def batch(topic: str, base: int, *payloads: bytes, ts: int = 5) -> wire.RecordBatch:
    """A record batch of ``payloads`` (no keys) at offsets ``base``...; origin hub 42."""
    count, records = wire.encode_records((b"", p) for p in payloads)
    return wire.RecordBatch(
        topic=topic, base_offset=base, timestamp=ts, origin=42, origin_seq=1, count=count, records=records
    )


def deliver(sub_id: int, b: wire.RecordBatch) -> bytes:
    """The encoded DELIVER of ``b`` to subscription ``sub_id``."""
    return wire.Deliver(sub_id=sub_id, batch=b).encode()
