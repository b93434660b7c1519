"""``pub0sub sub``: subscribe and print one line per message.

pub0sub sub --hub 127.0.0.1:7420 --topic 'orders.*' --count 10
pub0sub sub --topic logs.app --start earliest --json | jq .data
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Sequence
from typing import Any

from .blocking import connect_blocking
from .cli_support import add_hub_option, run, topic_usage_error
from .messages import Gap, Message


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
        help="latest (default: live only), earliest, or an OFFSET applied to every exact topic",
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
    return doc


def parse_start(text: str) -> str | int:
    if text in ("latest", "earliest"):
        return text
    if text.isdigit():
        return int(text)
    raise ValueError(f"--start must be latest, earliest or an offset, got {text!r}")


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub sub") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.count is not None and args.count < 1:
        parser.error("--count must be at least 1")
    try:
        start = parse_start(args.start)
    except ValueError as exc:
        parser.error(str(exc))
    if status := topic_usage_error(prog, args.topic, pattern=True):
        return status

    def body() -> int:
        out = sys.stdout
        seen = 0
        with (
            connect_blocking(args.hub, name=args.name, reconnect=None) as client,
            client.subscribe(args.topic, start=start, policy=args.policy) as sub,
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
                seen += 1
                if args.count is not None and seen >= args.count:
                    break
        return 0

    return run(prog, body)


if __name__ == "__main__":
    sys.exit(main())
