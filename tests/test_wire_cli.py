"""``pub0sub decode`` / ``python -m wire``, run as real subprocesses.

The CLI's promises are about processes (exit statuses, what lands on stdout
versus stderr, no traceback, a quiet closed pipe), so most tests run it the
way a user does; a few check :mod:`wire.format` directly.
"""

from __future__ import annotations

import codecs
import doctest
import json
import subprocess
import sys
from pathlib import Path

import pytest

import wire.cli
import wire.format
from wire import (
    Deliver,
    ErrorCode,
    Forward,
    Frame,
    LogBatch,
    MessageSet,
    Publish,
    PublishFlags,
    RecordBatch,
    SegmentHeader,
    SubEnd,
    Subscribe,
)
from wire.format import frame_json, frame_line, render_bytes

PUB0SUB = str(Path(sys.executable).parent / "pub0sub")
PYTHON_M_WIRE = [sys.executable, "-m", "wire"]
INTEREST_HEX = ["0200000010", "07746f7069635f31", "07746f7069635f32"]
FORWARD_HEX = "06 0000001a 02 07 746f7069635f31 07 746f7069635f32 00000005 68656c6c6f"
TIMEOUT = 60


def decode(*args: str, module: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the decoder with ``args``; ``module`` picks ``python -m wire`` over the script."""
    command = PYTHON_M_WIRE if module else [PUB0SUB, "decode"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=TIMEOUT, check=False)


def decode_bytes(*args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([PUB0SUB, "decode", *args], input=stdin, capture_output=True, timeout=TIMEOUT, check=False)


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def batch(topic: str, base_offset: int, messages: list[tuple[bytes, bytes]]) -> RecordBatch:
    s = MessageSet.build([topic], messages)
    return RecordBatch(
        topic=topic,
        base_offset=base_offset,
        timestamp=1_700_000_000_000_000,
        origin=7,
        origin_seq=40,
        count=s.count,
        records=s.records,
    )


def log_batch(b: RecordBatch, seq: int = 1) -> LogBatch:
    return LogBatch.create(append_ts=1_700_000_000_000_001, producer_id=5, producer_seq=seq, batch=b)


@pytest.fixture
def mixed() -> tuple[bytes, list[str], list[int]]:
    """Several frame types back to back: (bytes, names, offsets)."""
    frames = [
        Subscribe(topics=("orders",)),
        Publish(
            producer_id=5,
            sequence=1,
            flags=PublishFlags.ACK,
            sets=(MessageSet.build(["orders", "audit"], [(b"k1", b"first"), (b"", b"second")]),),
        ),
        Deliver(sub_id=3, batch=batch("orders", 10, [(b"", b"m10"), (b"", b"m11"), (b"k", b"m12")])),
        Forward(topics=("topic_1",), data=b"hello"),
        SubEnd(sub_id=3, code=ErrorCode.OUT_OF_CAPACITY, reason="slow"),
    ]
    encoded = [f.encode() for f in frames]
    offsets = [sum(len(e) for e in encoded[:i]) for i in range(len(encoded))]
    return b"".join(encoded), [f.name for f in frames], offsets


def segment(batches: list[RecordBatch]) -> tuple[bytes, list[int]]:
    """A log segment file: header + one LOG_BATCH per batch; also each frame's offset."""
    frames: list[Frame] = [
        SegmentHeader(topic="orders", base_offset=batches[0].base_offset, created=1_700_000_000_000_000)
    ]
    frames += [log_batch(b, seq=i) for i, b in enumerate(batches)]
    encoded = [f.encode() for f in frames]
    return b"".join(encoded), [sum(len(e) for e in encoded[:i]) for i in range(len(encoded))]


# -- the acceptance checks ---------------------------------------------------------------


def test_golden_interest_json() -> None:
    result = decode("--hex", *INTEREST_HEX, "--json")
    assert result.returncode == 0, result.stderr
    (obj,) = json_lines(result.stdout)
    assert obj == {"offset": 0, "opcode": 2, "name": "SUBSCRIBE", "length": 16, "topics": ["topic_1", "topic_2"]}
    assert result.stderr == ""


@pytest.mark.parametrize("module", [False, True], ids=["pub0sub", "python-m-wire"])
def test_golden_forward_json(module: bool) -> None:
    result = decode("--hex", *FORWARD_HEX.split(), "--json", module=module)
    assert result.returncode == 0, result.stderr
    (obj,) = json_lines(result.stdout)
    assert obj["opcode"] == 6 and obj["length"] == 26 and obj["name"] == "FORWARD"
    assert obj["topics"] == ["topic_1", "topic_2"]
    assert obj["data"] == "hello"


def test_golden_forward_line_and_hex_as_one_argument() -> None:
    result = decode("--hex", FORWARD_HEX)
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert line.split()[:4] == ["0", "0x06", "FORWARD", "len=26"]
    assert 'topics=["topic_1", "topic_2"] data="hello"' in line


def test_oversized_length_is_one_line_error() -> None:
    result = decode("--hex", "06ffffffff00")
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert "error at byte 1:" in line and "FRAME_TOO_LARGE" in line
    assert "[bytes 0-5: 06 ff ff ff ff 00]" in line
    assert "Traceback" not in result.stderr


# -- input forms -----------------------------------------------------------------------------


def test_file_with_several_frame_types(tmp_path: Path, mixed: tuple[bytes, list[str], list[int]]) -> None:
    data, names, offsets = mixed
    path = tmp_path / "capture.bin"
    path.write_bytes(data)
    result = decode(str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[2] for line in lines] == names
    assert [int(line.split()[0]) for line in lines] == offsets
    assert "offsets=10..12 count=3" in lines[2] and 'first="m10"' in lines[2]
    assert "code=OUT_OF_CAPACITY" in lines[4]


def test_stdin_json(mixed: tuple[bytes, list[str], list[int]]) -> None:
    data, names, offsets = mixed
    result = decode_bytes("--json", "-", stdin=data)
    assert result.returncode == 0, result.stderr
    objs = json_lines(result.stdout.decode())
    assert [o["name"] for o in objs] == names
    assert [o["offset"] for o in objs] == offsets
    publish, deliver, sub_end = objs[1], objs[2], objs[4]
    assert publish["flags"] == 1 and publish["flags_name"] == "ACK"
    assert publish["sets"] == [
        {
            "topics": ["orders", "audit"],
            "count": 2,
            "records": [{"key": "k1", "data": "first"}, {"key": "", "data": "second"}],
        }
    ]
    assert deliver["batch"]["records"] == [  # type: ignore[index]
        {"offset": 10, "key": "", "data": "m10"},
        {"offset": 11, "key": "", "data": "m11"},
        {"offset": 12, "key": "k", "data": "m12"},
    ]
    assert sub_end["code"] == ErrorCode.OUT_OF_CAPACITY and sub_end["code_name"] == "OUT_OF_CAPACITY"


def test_verbose_shows_every_record(tmp_path: Path) -> None:
    messages = [(b"", f"message {i}".encode()) for i in range(40)]
    data, _ = segment([batch("orders", 100, messages)])
    path = tmp_path / "00000000000000000100.log"
    path.write_bytes(data)
    result = decode("-v", str(path))
    assert result.returncode == 0, result.stderr
    for i in range(40):
        assert f'offset {100 + i}: key="" data="message {i}" ' in result.stdout
    assert '  magic: "P0SL" (4 bytes)' in result.stdout


def test_bytes_styles() -> None:
    hex_result = decode("--hex", FORWARD_HEX, "--json", "--bytes", "hex")
    assert json_lines(hex_result.stdout)[0]["data"] == "68656c6c6f"
    b64_result = decode("--hex", FORWARD_HEX, "--bytes", "base64")
    assert 'data="aGVsbG8="' in b64_result.stdout


def test_frame_larger_than_a_read_chunk(tmp_path: Path) -> None:
    big = bytes(range(256)) * 1024  # 256 KiB: spans several 64 KiB reads
    first_frame = Forward(topics=("t",), data=big).encode()
    data = first_frame + Forward(topics=("t",), data=b"after").encode()
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    result = decode("--json", "--bytes", "hex", str(path))
    assert result.returncode == 0, result.stderr
    first, second = json_lines(result.stdout)
    assert bytes.fromhex(str(first["data"])) == big
    assert second["offset"] == len(first_frame) and second["data"] == b"after".hex()


# -- malformed input ---------------------------------------------------------------------------


def test_truncated_file(tmp_path: Path, mixed: tuple[bytes, list[str], list[int]]) -> None:
    data, names, offsets = mixed
    path = tmp_path / "cut.bin"
    path.write_bytes(data[:-3])
    result = decode(str(path))
    assert result.returncode == 1
    assert len(result.stdout.splitlines()) == len(names) - 1
    (line,) = result.stderr.splitlines()
    assert f"error at byte {offsets[-1]}:" in line and "TRUNCATED" in line
    assert "Traceback" not in result.stderr


def test_corrupted_log_batch(tmp_path: Path) -> None:
    batches = [batch("orders", 10 * i, [(b"", b"payload %d" % i)] * 3) for i in range(3)]
    data, offsets = segment(batches)
    corrupt = bytearray(data)
    corrupt[offsets[2] + 60] ^= 0x01  # a byte inside the second LOG_BATCH's body
    path = tmp_path / "corrupt.log"
    path.write_bytes(bytes(corrupt))
    result = decode("--json", str(path))
    assert result.returncode == 1
    objs = json_lines(result.stdout)  # only valid JSON on stdout
    assert [o["name"] for o in objs] == ["SEGMENT_HEADER", "LOG_BATCH"]
    (line,) = result.stderr.splitlines()
    # The checksum covers the body after the crc field: the error names the body's start.
    assert f"error at byte {offsets[2] + 5}:" in line
    assert "CHECKSUM_MISMATCH" in line
    assert f"[bytes {offsets[2] + 5 - 8}-{offsets[2] + 5 + 7}: " in line


def test_corruption_in_a_frame_spanning_chunks(tmp_path: Path) -> None:
    big = batch("orders", 0, [(b"", b"z" * 100_000), (b"", b"y" * 100_000)])
    data, offsets = segment([big])
    corrupt = bytearray(data)
    corrupt[-1] ^= 0xFF
    path = tmp_path / "corrupt-big.log"
    path.write_bytes(bytes(corrupt))
    result = decode(str(path))
    assert result.returncode == 1
    body = offsets[1] + 5
    expected = " ".join(f"{b:02x}" for b in corrupt[body - 8 : body + 8])
    assert result.stderr.strip().endswith(f"[bytes {body - 8}-{body + 7}: {expected}]")


def test_max_body_option() -> None:
    result = decode("--hex", FORWARD_HEX, "--max-body", "10")
    assert result.returncode == 1
    assert "exceeds the limit of 10 bytes (FRAME_TOO_LARGE)" in result.stderr


# -- usage errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hex", "06ff", "zz00"], "invalid hex digit 'z' at position 5"),
        (["--hex", "0x06 0xfg"], "invalid hex digit 'g' at position 8"),
        (["--hex", "06f"], "odd number of hex digits (3)"),
        ([], "no input"),
        (["--hex", "0600", "--", "some.log"], "either --hex or a file path"),
        (["/nonexistent/dir/seg.log"], "cannot open '/nonexistent/dir/seg.log': No such file or directory"),
        (["--json", "-v", "-"], "not allowed with argument"),
        (["--max-body", "-1", "-"], "--max-body"),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    result = decode(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_hex_prefixes_and_whitespace() -> None:
    result = decode("--hex", "0x02 0x00000010", "0x07746f7069635f31\n07746f7069635f32", "--json")
    assert result.returncode == 0, result.stderr
    assert json_lines(result.stdout)[0]["topics"] == ["topic_1", "topic_2"]


# -- a closed pipe -------------------------------------------------------------------------------


@pytest.mark.parametrize("from_stdin", [False, True], ids=["file", "stdin"])
def test_closed_stdout_is_quiet(tmp_path: Path, from_stdin: bool) -> None:
    frame = Forward(topics=("t",), data=b"x" * 200).encode()
    path = tmp_path / "many.bin"
    path.write_bytes(frame * 20_000)  # ~2 MB of output: far more than a pipe buffer
    with path.open("rb") as source:
        proc = subprocess.Popen(
            [PUB0SUB, "decode", "-" if from_stdin else str(path)],
            stdin=source if from_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # like `| head -1`
        stderr = proc.stderr.read()
        status = proc.wait(timeout=TIMEOUT)
    assert b"FORWARD" in first
    assert stderr == b""
    assert status == wire.cli.EXIT_BROKEN_PIPE


# -- the library part ------------------------------------------------------------------------------


def test_text_bytes_round_trip_through_escape_decode() -> None:
    every = bytes(range(256))
    text = render_bytes(every)
    assert text.isascii() and text.isprintable()
    assert codecs.escape_decode(text.encode("ascii"))[0] == every


def test_one_line_summary_shortens_long_data() -> None:
    frame = Forward(topics=("t",), data=b"a" * 1000)
    line = frame_line(frame, offset=0, length=1010)
    assert line.endswith('data="' + "a" * wire.format.PREVIEW_BYTES + '"...(1000 bytes)')
    assert frame_json(frame, offset=0, length=1010)["data"] == "a" * 1000


def test_doctests() -> None:
    for module in (wire.format, wire.cli):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0


def test_cli_imports_no_network_stack() -> None:
    code = "import sys, wire.cli; print(sorted({'trio', 'anyio', 'asyncio', 'socket', 'libp2p'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, check=True)
    assert result.stdout.strip() == "[]"
