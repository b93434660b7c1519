"""``pub0sub decode`` / ``python -m wire``: print the frames in hex, a file or stdin.

A thin shell around :class:`~wire.decoder.FrameDecoder` (the hub's own
decoder, never a second parser) and :mod:`wire.format`.  Exit statuses:
0 all input decoded, 1 malformed or truncated input (after printing the frames
before it), 2 usage error, 141 stdout closed early (as if killed by SIGPIPE).
See ``docs/decoder.md``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import BinaryIO, NoReturn, TextIO

from .decoder import FrameDecoder
from .errors import ProtocolError
from .format import BYTES_STYLES, BytesStyle, frame_json, frame_line, frame_verbose
from .frames import Frame
from .limits import DEFAULT_MAX_DECODE_BODY, MAX_U32, Limits

#: Input is read and fed in chunks of this size, so a multi-gigabyte log
#: segment never has to fit in memory (only its largest frame does).
CHUNK_SIZE = 64 * 1024
#: Bytes shown either side of an error offset in the hex snippet.
SNIPPET_CONTEXT = 8
#: Conventional status of a process killed by SIGPIPE (128 + 13).
EXIT_BROKEN_PIPE = 141
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")

#: ``(frame, offset, body length) -> output lines`` for the chosen mode.
Formatter = Callable[[Frame, int, int], Iterable[str]]


class UsageError(Exception):
    """Bad arguments: reported argparse-style with exit status 2."""


class MalformedInput(Exception):
    """The input is not valid frames: the decoder's error plus the bytes around it."""

    def __init__(self, error: ProtocolError, snippet: str) -> None:
        super().__init__(f"error {error} [{snippet}]")
        self.error = error


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Decode pub0sub frames (mesh, client and log-segment) from hex, a file or stdin.",
        epilog=(
            "Exit status: 0 ok, 1 malformed or truncated input, 2 usage error, 141 output closed early."
            " See docs/decoder.md."
        ),
    )
    parser.add_argument("path", nargs="?", help="capture or log segment file to read; '-' reads stdin")
    parser.add_argument(
        "--hex", nargs="+", metavar="HEX", help="frame bytes as hex; spaces and 0x prefixes allowed, tokens are joined"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("-v", "--verbose", action="store_true", help="every field and every record, one per line")
    mode.add_argument("--json", action="store_true", help="one JSON object per frame, one per line")
    parser.add_argument(
        "--bytes",
        choices=BYTES_STYLES,
        default="text",
        dest="style",
        help="how binary values are shown: escaped ASCII text (default), hex or base64",
    )
    parser.add_argument(
        "--max-body",
        type=int,
        default=DEFAULT_MAX_DECODE_BODY,
        metavar="N",
        help=f"largest frame body accepted, in bytes (default {DEFAULT_MAX_DECODE_BODY})",
    )
    return parser


def parse_hex(tokens: Sequence[str]) -> bytes:
    """The bytes spelled by ``tokens``; a bad digit is named with its position.

    Tokens are joined; whitespace between digits is ignored and each
    whitespace-separated word may start with ``0x``, so ``xxd -p`` output and
    the spaced vectors of the protocol docs paste as they are.  Positions count
    characters of the tokens joined by single spaces, from 0, as
    :meth:`bytes.fromhex` does.

    >>> parse_hex(["0x06 ff", "00"]).hex()
    '06ff00'
    """
    text = " ".join(tokens)
    digits: list[str] = []
    for word in re.finditer(r"\S+", text):
        skip = 2 if word[0][:2].lower() == "0x" else 0
        for i in range(word.start() + skip, word.end()):
            if text[i] not in _HEX_DIGITS:
                raise UsageError(f"argument --hex: invalid hex digit {text[i]!r} at position {i} of {text!r}")
            digits.append(text[i])
    if not digits:
        raise UsageError("argument --hex: no hex digits given")
    if len(digits) % 2:
        raise UsageError(f"argument --hex: odd number of hex digits ({len(digits)}) in {text!r}")
    return bytes.fromhex("".join(digits))


class InputWindow:
    """The input bytes from just before the frame being decoded onwards.

    The decoder only reports an offset; this keeps the bytes around it so the
    error line can show them, whether the input came from a pipe or a file.
    It holds at most the unfinished frame plus a few bytes before it.
    """

    def __init__(self) -> None:
        self.base = 0
        self.buf = bytearray()

    def append(self, data: bytes) -> None:
        self.buf += data

    def forget_before(self, offset: int) -> None:
        drop = min(offset - SNIPPET_CONTEXT - self.base, len(self.buf))
        if drop > 0:
            del self.buf[:drop]
            self.base += drop

    def snippet(self, offset: int) -> str:
        """``bytes A-B: hh hh ...`` around ``offset`` (inclusive byte range)."""
        start = max(offset - SNIPPET_CONTEXT, self.base)
        stop = min(offset + SNIPPET_CONTEXT, self.base + len(self.buf))
        if stop <= start:
            return f"no bytes at {offset}"
        chunk = self.buf[start - self.base : stop - self.base]
        return f"bytes {start}-{stop - 1}: {chunk.hex(' ')}"


def read_chunks(stream: BinaryIO) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK_SIZE):
        yield chunk


def make_formatter(args: argparse.Namespace) -> Formatter:
    style: BytesStyle = args.style
    if args.json:
        # ensure_ascii: the line stays valid JSON whatever stdout's encoding is.
        return lambda f, off, n: [json.dumps(frame_json(f, offset=off, length=n, style=style))]
    if args.verbose:
        return lambda f, off, n: frame_verbose(f, offset=off, length=n, style=style)
    return lambda f, off, n: [frame_line(f, offset=off, length=n, style=style)]


def decode_stream(chunks: Iterable[bytes], decoder: FrameDecoder, fmt: Formatter, out: TextIO) -> None:
    """Feed every chunk, print every frame; raises :class:`MalformedInput` on bad input."""
    window = InputWindow()
    try:
        for chunk in chunks:
            window.append(chunk)
            decoder.feed(chunk)
            while (frame := decoder.next_frame()) is not None:
                for line in fmt(frame, decoder.frame_offset, decoder.frame_length):
                    out.write(line + "\n")
            window.forget_before(decoder.offset)
        decoder.close()
    except ProtocolError as exc:
        where = exc.offset if exc.offset is not None else decoder.offset
        raise MalformedInput(exc, window.snippet(where)) from None


def open_input(args: argparse.Namespace) -> tuple[Iterable[bytes], BinaryIO | None]:
    """The input as chunks, and the file to close afterwards (if we opened one)."""
    if args.hex is not None and args.path is not None:
        raise UsageError("give either --hex or a file path, not both")
    if args.hex is not None:
        return [parse_hex(args.hex)], None
    if args.path is None:
        raise UsageError("no input: give --hex HEX, a file path, or '-' for stdin")
    if args.path == "-":
        return read_chunks(sys.stdin.buffer), None
    try:
        stream = open(args.path, "rb")  # noqa: SIM115 -- closed by main after decoding
    except OSError as exc:
        raise UsageError(f"cannot open {args.path!r}: {exc.strerror or exc}") from None
    return read_chunks(stream), stream


def _usage_exit(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.error(message)  # prints usage + "prog: error: message" and exits 2


def _quiet_broken_pipe() -> int:
    # Python flushes stdout again at exit; pointing it at devnull keeps that
    # flush from failing with "Exception ignored ... BrokenPipeError".
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def _tolerant_stdout() -> None:
    # A non-ASCII topic must not crash the decoder on a non-UTF-8 terminal.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")


def run(args: argparse.Namespace, chunks: Iterable[bytes], prog: str) -> int:
    """Decode and print; the exit status for bad input or 0."""
    decoder = FrameDecoder(limits=Limits(max_body=args.max_body))
    try:
        decode_stream(chunks, decoder, make_formatter(args), sys.stdout)
    except MalformedInput as exc:
        # Frames before the error go out first, so the error line follows them.
        sys.stdout.flush()
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        print(f"{prog}: error reading {args.path!r}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    return 0


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub decode") -> int:
    """Run ``pub0sub decode`` with ``argv``; returns the exit status."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if not 0 <= args.max_body <= MAX_U32:
        _usage_exit(parser, f"argument --max-body: must be within 0..{MAX_U32}, got {args.max_body}")
    try:
        chunks, stream = open_input(args)
    except UsageError as exc:
        _usage_exit(parser, str(exc))
    _tolerant_stdout()
    try:
        return run(args, chunks, prog)
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except KeyboardInterrupt:
        return 130
    finally:
        if stream is not None:
            stream.close()
