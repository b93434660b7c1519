"""docs/protocol.md cannot drift from the code: every hex example in it is decoded here.

An example is a fenced block with language ``hex``.  Its first line names what it holds:

* ``# NAME`` (an opcode name): the block is exactly one NAME frame, and that frame encodes back
  to exactly the same bytes;
* ``# invalid: CODE at byte N``: decoding the block (then ``close()``) fails with ``ErrorCode.CODE``
  at stream offset ``N``.

Everything after a ``#`` on a line is a comment; whitespace between hex digits is ignored.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wire import ErrorCode, FrameDecoder, Opcode, RemoteProtocolError

DOC = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"
_BLOCK = re.compile(r"^```hex\n(.*?)^```$", re.S | re.M)
_INVALID = re.compile(r"^invalid: ([A-Z_]+) at byte (\d+)$")

# The seed's worked examples, byte for byte (the brief's PROTOCOL.md).
GOLDEN = {
    "02 00000010 07 746f7069635f31 07 746f7069635f32",
    "06 0000001a 02 07 746f7069635f31 07 746f7069635f32 00000005 68656c6c6f",
}


def _blocks() -> list[tuple[int, str, bytes, str]]:
    """``(line number, label, bytes, raw text)`` of every hex block in the doc."""
    text = DOC.read_text(encoding="utf-8")
    found = []
    for m in _BLOCK.finditer(text):
        lineno = text.count("\n", 0, m.start()) + 1
        lines = m.group(1).splitlines()
        assert lines and lines[0].startswith("# "), f"docs/protocol.md:{lineno}: hex block needs a '# NAME' line"
        label = lines[0][2:].strip()
        digits = "".join(line.split("#", 1)[0] for line in lines[1:])
        digits = re.sub(r"\s+", "", digits)
        assert re.fullmatch(r"(?:[0-9a-f]{2})*", digits), f"docs/protocol.md:{lineno}: not lowercase hex: {digits!r}"
        found.append((lineno, label, bytes.fromhex(digits), m.group(1)))
    return found


BLOCKS = _blocks()
FRAMES = [b for b in BLOCKS if not b[1].startswith("invalid:")]
INVALID = [b for b in BLOCKS if b[1].startswith("invalid:")]


def _decode_all(data: bytes, *, bytewise: bool = False) -> list:
    decoder = FrameDecoder()
    frames = []
    chunks = [data[i : i + 1] for i in range(len(data))] if bytewise else [data]
    for chunk in chunks:
        decoder.feed(chunk)
        frames.extend(decoder)
    decoder.close()
    return frames


@pytest.mark.parametrize(("lineno", "label", "data", "raw"), FRAMES, ids=[f"L{b[0]}-{b[1]}" for b in FRAMES])
def test_frame_example_decodes_to_one_frame_and_reencodes(lineno: int, label: str, data: bytes, raw: str) -> None:
    assert label in Opcode.__members__, f"line {lineno}: {label!r} is not an opcode name"
    for bytewise in (False, True):
        frames = _decode_all(data, bytewise=bytewise)
        assert len(frames) == 1, f"line {lineno}: expected one frame, got {frames}"
        (frame,) = frames
        assert frame.name == label
        assert frame.encode() == data


@pytest.mark.parametrize(("lineno", "label", "data", "raw"), INVALID, ids=[f"L{b[0]}-{b[1]}" for b in INVALID])
def test_invalid_example_fails_as_documented(lineno: int, label: str, data: bytes, raw: str) -> None:
    m = _INVALID.match(label)
    assert m, f"line {lineno}: expected '# invalid: CODE at byte N', got {label!r}"
    code, offset = ErrorCode[m.group(1)], int(m.group(2))
    with pytest.raises(RemoteProtocolError) as info:
        _decode_all(data)
    assert info.value.code == code, f"line {lineno}: {info.value}"
    assert info.value.offset == offset, f"line {lineno}: {info.value}"


def test_every_opcode_has_an_example() -> None:
    shown = {label for _, label, _, _ in FRAMES}
    missing = sorted(op.name for op in Opcode if op.name not in shown)
    assert not missing, f"docs/protocol.md has no example of {missing}"


def test_golden_vectors_appear_verbatim() -> None:
    lines = {line.strip() for _, _, _, raw in FRAMES for line in raw.splitlines()}
    for vector in GOLDEN:
        assert vector in lines, f"golden vector missing from docs/protocol.md: {vector}"


def test_every_opcode_is_in_the_opcode_map() -> None:
    text = DOC.read_text(encoding="utf-8")
    for op in Opcode:
        row = f"| {int(op)} | 0x{int(op):02X} | {op.name} |"
        assert row in text, f"opcode map lacks the row {row!r}"


def test_error_code_table_matches_wire() -> None:
    text = DOC.read_text(encoding="utf-8")
    for code in ErrorCode:
        assert f"| {int(code)} | {code.name} |" in text, f"error table lacks {code.name}"


def test_body_bounds_table_matches_decoder() -> None:
    from wire import BODY_BOUNDS

    text = DOC.read_text(encoding="utf-8")
    for op, (low, high) in BODY_BOUNDS.items():
        shown_high = "limit" if high is None else f"{high:,}".replace(",", " ")
        assert re.search(rf"\| {op.name} \| {low} \| {shown_high} \|", text), f"bounds row for {op.name} is wrong"


def test_the_page_is_its_template_rendered() -> None:
    """docs/protocol.md is generated: ``python docs/tools/protocol_examples.py --render`` fills
    docs/tools/protocol.md.tmpl with real encoder output.  An edit made to one file only fails here."""
    import subprocess
    import sys

    rendered = subprocess.run(
        [sys.executable, str(DOC.parent / "tools" / "protocol_examples.py"), "--render"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert rendered == DOC.read_text(encoding="utf-8"), (
        "docs/protocol.md differs from its template: edit docs/tools/protocol.md.tmpl, then "
        "python docs/tools/protocol_examples.py --render > docs/protocol.md"
    )
