"""Coverage-guided fuzzing (atheris, libFuzzer's engine) of the decoders and of the hub's core.

    python -m tests.support.fuzz_decoders -runs=200000              # a fixed number of inputs
    python -m tests.support.fuzz_decoders -max_total_time=600       # ten minutes (the long run)
    python -m tests.support.fuzz_decoders -max_total_time=600 CORPUS_DIR   # keep what it finds

Each input's first byte picks a target, the next one how the rest is cut into chunks:

* ``client``, ``hub-to-client``, ``mesh-v1``, ``mesh-v2``, ``log``: a ``wire.FrameDecoder`` with
  that link's accepted opcodes, fed chunk by chunk.  Only ``wire.ProtocolError`` may escape,
  and every frame it yields must encode back to bytes that decode to the same frame.
* ``core``: the bytes reach a hub core (``HubCore.receive_data``, no data directory) on a
  greeted session: nothing may escape at all -- a bad frame is an ERROR for that client.

libFuzzer stops at the first input that breaks a rule and writes it to ``crash-<sha1>``
(``-timeout=N`` makes an input slower than N seconds a failure too: no input may hang).
Beside the hypothesis properties (tests/test_wire_*.py): hypothesis builds inputs from the
frame layouts, this one mutates towards new branches of the decoding code.
tests/test_fuzz.py runs it for a few seconds in the suite.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["wire", "hub"]):
    import wire
    from hub.core.clients import ClientSession
    from hub.core.clock import ManualClock
    from hub.core.hub import CoreSettings, HubCore

TARGETS = ("client", "hub-to-client", "mesh-v1", "mesh-v2", "log", "core")
ACCEPT = {
    "client": wire.CLIENT_TO_HUB_OPCODES,
    "hub-to-client": wire.HUB_TO_CLIENT_OPCODES,
    "mesh-v1": wire.MESH_V1_OPCODES,
    "mesh-v2": wire.MESH_V2_OPCODES,
    "log": wire.LOG_OPCODES,
}
LIMITS = wire.Limits(max_body=1 << 20)


class _Sink:
    """A transport that throws output away (the core's output is not under test here)."""

    def flush_now(self) -> None:
        pass

    def wake_writer(self) -> None:
        pass

    def closing(self) -> None:
        pass


_core = HubCore(CoreSettings(max_body=1 << 16), hub_id=1, clock=ManualClock())
_HELLO = wire.Hello(client_name="fuzz").encode()


def _chunks(data: bytes, cut: int) -> list[bytes]:
    size = 1 + cut % 64 if cut & 0x80 else len(data) or 1
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


def decode_all(accept: frozenset[wire.Opcode], chunks: list[bytes]) -> None:
    decoder = wire.FrameDecoder(limits=LIMITS, accept=accept)
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            for frame in decoder:
                again = wire.FrameDecoder(limits=LIMITS, accept=accept)
                again.feed(frame.encode())
                assert list(again) == [frame], f"{frame!r} does not survive encode -> decode"
        decoder.close()
    except wire.ProtocolError:
        pass


def feed_core(chunks: list[bytes]) -> None:
    session = _core.open_session("fuzz")
    assert isinstance(session, ClientSession)
    session.transport = _Sink()
    try:
        _core.receive_data(session, _HELLO)
        for chunk in chunks:
            while _core.receive_data(session, chunk) and session.closing is None:
                chunk = b""
            if session.closing is not None:
                break
    finally:
        _core.session_ended(session)


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    target = TARGETS[data[0] % len(TARGETS)]
    chunks = _chunks(data[2:], data[1])
    if target == "core":
        feed_core(chunks)
    else:
        decode_all(ACCEPT[target], chunks)


def seeds() -> list[bytes]:
    """One valid frame of every opcode for every target that accepts it (a starting corpus)."""
    from tests.support.wire_strategies import minimal_frame

    out = []
    for i, target in enumerate(TARGETS):
        accept = ACCEPT.get(target, wire.CLIENT_TO_HUB_OPCODES)
        for op in sorted(accept):
            out.append(bytes([i, 0]) + minimal_frame(op).encode())
    return out


def main(argv: list[str]) -> None:
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
