"""``pub0sub pub``: publish messages from the command line or from stdin, one per line.

pub0sub pub --hub 127.0.0.1:7420 --topic orders "first" "second"
tail -f app.log | pub0sub pub --topic logs.app
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence

from ..blocking import BlockingClient, connect_blocking
from .support import add_hub_option, connect_options, run, topic_usage_error

_CHUNK = 64 * 1024


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Publish messages to a pub0sub hub. Without MESSAGE arguments, every line of stdin "
        "is one message (streamed: each chunk of input is sent as soon as it is read).",
    )
    add_hub_option(p)
    p.add_argument("--topic", "-t", action="append", required=True, help="topic to publish to (repeatable)")
    p.add_argument("--key", "-k", help="message key (UTF-8)")
    p.add_argument("--header", "-H", action="append", default=[], metavar="NAME=VALUE",
                   help="a header of every message (text; repeatable)")
    p.add_argument("--ack", action="store_true", help="wait for the hub to store each message; print its offsets")
    p.add_argument("--name", default="pub0sub-pub", help="client name shown in the hub's status")
    p.add_argument("message", nargs="*", help="messages to publish (default: lines of stdin)")
    return p


def stdin_chunks() -> Iterator[list[bytes]]:
    """Lines of stdin, grouped by what one ``read`` returned: batched when piped, prompt when interactive."""
    fd = sys.stdin.fileno()
    rest = b""
    while chunk := os.read(fd, _CHUNK):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        if lines:
            yield [line[:-1] if line.endswith(b"\r") else line for line in lines]
    if rest:
        yield [rest]


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub pub") -> int:
    args = build_parser(prog).parse_args(argv)
    topics = tuple(args.topic)
    if status := topic_usage_error(prog, topics):
        return status
    key = args.key.encode("utf-8") if args.key is not None else None
    headers: dict[str, str | bytes] = {}
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep or not name:
            print(f"{prog}: error: --header takes NAME=VALUE, got {item!r}", file=sys.stderr)
            return 2
        headers[name] = value

    def publish(client: BlockingClient, batch: list[bytes]) -> None:
        if args.ack:
            acks = client.publish_acked_many([(topics, data, key, headers) for data in batch], timeout=30.0)
            for ack in acks:
                offsets = " ".join(f"{t}@{o}" for t, o in ack.offsets.items())
                print(f"{offsets}{' (duplicate)' if ack.duplicate else ''}", flush=True)
        else:
            for data in batch:
                client.publish(topics, data, key=key, headers=headers)
            client.flush()

    def body() -> int:
        with connect_blocking(args.hub, name=args.name, reconnect=None, **connect_options(args)) as client:
            if args.message:
                publish(client, [m.encode("utf-8") for m in args.message])
            else:
                for batch in stdin_chunks():
                    publish(client, batch)
        return 0

    return run(prog, body)


if __name__ == "__main__":
    sys.exit(main())
