"""``pub0sub sub``: subscribe and print one line per message.

pub0sub sub --hub 127.0.0.1:7420 --topic 'orders.*' --count 10
pub0sub sub --topic logs.app --start earliest --json | jq .data
pub0sub sub --topic jobs --group workers --ack manual
pub0sub sub --topic audit --durable auditor --start 2024-05-01T00:00:00Z
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import sys
from collections.abc import Sequence
from typing import Any

import wire

from ..blocking import connect_blocking
from ..messages import Gap, Message
from ..subscriptions import resolve_ack
from .support import add_hub_option, connect_options, run, topic_usage_error, usage_error


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Subscribe to topics or patterns ('*' one token, '>' the rest) and print "
        "one line per message: topic, offset, data.",
    )
    add_hub_option(p)
    p.add_argument("--topic", "-t", action="append", required=True, help="topic or pattern (repeatable)")
    p.add_argument("--count", "-n", type=int, help="exit after this many messages")
    p.add_argument("--json", action="store_true", help="one JSON object per message (and per gap)")
    p.add_argument(
        "--start",
        default="latest",
        metavar="latest|earliest|OFFSET|TIME",
        help="where to begin: latest (default: live only), earliest, an OFFSET of every exact topic (offsets "
        "are per topic: not with patterns), or an ISO 8601 TIME with a UTC offset, e.g. 2024-05-01T12:00:00Z "
        "(the first message the hub stored at or after it)",
    )
    p.add_argument(
        "--durable",
        metavar="NAME",
        default="",
        help="durable subscription: the hub keeps NAME's acknowledged position while this command is away; "
        "running it again with the same NAME resumes there",
    )
    p.add_argument(
        "--group", metavar="NAME", default="", help="consumer group: each message goes to one member of group NAME"
    )
    p.add_argument(
        "--ack",
        choices=("auto", "manual", "none"),
        help="auto (default with --durable or --group): a message is acknowledged once the command has moved "
        "past it; manual: each message is acknowledged right after its line is written; none (default "
        "otherwise): the hub counts delivery as acknowledgement",
    )
    p.add_argument("--policy", choices=("cancel", "drop-oldest"), default="cancel", help="slow-consumer policy")
    p.add_argument("--timeout", type=float, help="exit (status 0) after this many seconds without a message")
    p.add_argument("--name", default="pub0sub-sub", help="client name shown in the hub's status")
    return p


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "backslashreplace")


def message_json(msg: Message) -> dict[str, Any]:
    """A message as a JSON object; ``data``/``key`` are text when UTF-8, else ``data_base64``/``key_base64``."""
    doc: dict[str, Any] = {"topic": msg.topic, "offset": msg.offset, "timestamp": msg.timestamp}
    for name, raw in (("key", msg.key), ("data", msg.data)):
        if raw is None:
            doc[name] = None
            continue
        try:
            doc[name] = raw.decode("utf-8")
        except UnicodeDecodeError:
            doc[f"{name}_base64"] = base64.b64encode(raw).decode("ascii")
    doc["origin"] = f"{msg.origin:016x}"
    if msg.headers:  # text values as strings, bytes values as {"base64": ...}
        doc["headers"] = {
            name: value if isinstance(value, str) else {"base64": base64.b64encode(value).decode("ascii")}
            for name, value in msg.headers.items()
        }
    return doc


def parse_start(text: str) -> str | int | dt.datetime:
    """``--start``: latest, earliest, an offset, or an ISO 8601 time with a UTC offset (as the SDK takes it)."""
    if text in ("latest", "earliest"):
        return text
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--start must be latest, earliest, an offset or an ISO 8601 time such as "
            f"2024-05-01T12:00:00Z, got {text!r}"
        ) from None
    if when.tzinfo is None:
        raise ValueError(f"--start {text}: add a UTC offset (Z or +02:00): a time without one is ambiguous")
    return when


def offset_problem(start: object, topics: Sequence[str]) -> str | None:
    """Why an OFFSET start cannot apply to these topics (None if it can)."""
    patterns = [t for t in topics if wire.is_pattern(t)]
    if not isinstance(start, int) or not patterns:
        return None
    return (
        f"--start {start} cannot apply to the pattern {patterns[0]!r}: an offset is per topic (offset {start} "
        f"of one matching topic is unrelated to offset {start} of another); use earliest, latest or a time, "
        "or name exact topics"
    )


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub sub") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.count is not None and args.count < 1:
        parser.error("--count must be at least 1")
    if status := topic_usage_error(prog, args.topic, pattern=True):
        return status
    try:
        start = parse_start(args.start)
        resolve_ack(args.ack, durable=args.durable, group=args.group)  # the SDK's own check, before connecting
    except ValueError as exc:
        return usage_error(prog, str(exc))
    if problem := offset_problem(start, args.topic):
        return usage_error(prog, problem)
    manual = args.ack == "manual"

    seen = 0

    def body() -> int:
        nonlocal seen
        out = sys.stdout
        with (
            connect_blocking(args.hub, name=args.name, reconnect=None, **connect_options(args)) as client,
            client.subscribe(
                args.topic, start=start, policy=args.policy, durable=args.durable, group=args.group, ack=args.ack
            ) as sub,
        ):
            for item in sub.events(timeout=args.timeout):
                if isinstance(item, Gap):
                    note = {"gap": item.topic, "first_offset": item.first_offset, "dropped": item.dropped}
                    if args.json:
                        out.write(json.dumps({**note, "reason": item.reason}) + "\n")
                    print(f"{prog}: gap: {item.dropped} messages of {item.topic} from offset "
                          f"{item.first_offset} dropped ({item.reason})", file=sys.stderr)  # fmt: skip
                    continue
                if args.json:
                    out.write(json.dumps(message_json(item), ensure_ascii=False) + "\n")
                else:
                    out.write(f"{item.topic} {item.offset} {_text(item.data)}\n")
                out.flush()
                if manual:
                    item.ack()  # only once its line is out: a message is never acknowledged unseen
                seen += 1
                if args.count is not None and seen >= args.count:
                    break
        return 0

    return run(prog, body, summary=lambda: f"{seen} message{'' if seen == 1 else 's'}")


if __name__ == "__main__":
    sys.exit(main())
