"""``pub0sub auth``: make entries for a hub's users file (``--auth-file``, docs/security.md).

pub0sub auth password alice --publish 'orders.>' --subscribe 'orders.>' >> users.toml
pub0sub auth token ingest --publish 'metrics.>' --file users.toml     # prints the token once
pub0sub auth hash < secret.txt                                        # just the hash

The hub stores only argon2id hashes (a slow, salted hash): a stolen users file gives no
password away cheaply.  A token is a random secret made here, printed once as the whole
``USER:SECRET`` a client passes (``--token``, ``token=``): nothing keeps it but the client.
"""

from __future__ import annotations

import argparse
import getpass
import json
import secrets
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import argon2

from wire.credentials import USER_NAME, USER_NAME_RULE

from .support import usage_error

#: Random bytes in a token: 256 bits, as base64url (43 characters).
TOKEN_BYTES = 32


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Make entries for a hub's users file (--auth-file): a user with a hashed password or a "
        "random token, and the topics it may use. The hub reloads the file on SIGHUP.",
    )
    kinds = p.add_subparsers(dest="kind", required=True, metavar="password|token|hash")
    for kind, text in (("password", "a user with a password (asked twice on a terminal, else the first line "
                                    "of stdin)"),
                       ("token", "a user with a random token, printed once")):  # fmt: skip
        sub = kinds.add_parser(kind, help=text, description=text)
        sub.add_argument("user", help="user name: 1..64 of A-Z a-z 0-9 _ . @ + -")
        sub.add_argument("--publish", action="append", default=[], metavar="PATTERN", help="may publish (repeatable)")
        sub.add_argument("--subscribe", action="append", default=[], metavar="PATTERN",
                         help="may subscribe (repeatable)")  # fmt: skip
        sub.add_argument("--deny-publish", action="append", default=[], metavar="PATTERN",
                         help="may never publish, whatever is allowed (repeatable)")  # fmt: skip
        sub.add_argument("--deny-subscribe", action="append", default=[], metavar="PATTERN",
                         help="is never delivered, whatever is allowed (repeatable)")  # fmt: skip
        sub.add_argument("--durable", action="append", default=[], metavar="NAME",
                         help="durable name it may use; NAME* for a prefix (repeatable)")  # fmt: skip
        sub.add_argument("--group", action="append", default=[], metavar="NAME",
                         help="group it may join; NAME* for a prefix (repeatable)")  # fmt: skip
        status = sub.add_mutually_exclusive_group()
        status.add_argument("--status", action="store_true",
                            help="it may read the hub's STATUS (every client, user and topic on the hub)")
        status.add_argument("--status-topics", action="store_true",
                            help="it may read STATUS narrowed to the offsets of the topics it may subscribe to "
                                 "(what a Spark reader needs)")  # fmt: skip
        sub.add_argument("--file", type=Path, metavar="FILE",
                         help="append the entry to this users file instead of printing it")  # fmt: skip
    kinds.add_parser("hash", help="hash the first line of stdin (or a prompted secret) and print the hash")
    return p


def read_secret(prompt: str) -> str:
    if sys.stdin.isatty():
        first = getpass.getpass(f"{prompt}: ")
        if getpass.getpass(f"{prompt} again: ") != first:
            raise ValueError("the two entries differ")
        secret = first
    else:
        secret = sys.stdin.readline().rstrip("\r\n")
    if not secret:
        raise ValueError("empty secret")
    return secret


def rules(allow: list[str], deny: list[str]) -> str:
    if not deny:
        return json.dumps(allow)
    return f"{{ allow = {json.dumps(allow)}, deny = {json.dumps(deny)} }}"


def entry(user: str, hashed: str, args: argparse.Namespace) -> str:
    """A ``[users.NAME]`` table; TOML strings written as JSON ones (the same escapes)."""
    lines = [f"[users.{json.dumps(user)}]", f"secrets = [{json.dumps(hashed)}]"]
    lines.append(f"publish = {rules(args.publish, args.deny_publish)}")
    lines.append(f"subscribe = {rules(args.subscribe, args.deny_subscribe)}")
    if args.durable:
        lines.append(f"durables = {json.dumps(args.durable)}")
    if args.group:
        lines.append(f"groups = {json.dumps(args.group)}")
    if args.status:
        lines.append("status = true")
    elif args.status_topics:
        lines.append('status = "topics"')
    return "\n".join(lines) + "\n"


def append_entry(path: Path, user: str, text: str) -> None:
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    if user in tomllib.loads(existing).get("users", {}):
        raise ValueError(f"{path} already has a user {user!r}: edit its secrets there")
    path.write_text(existing + ("\n" if existing and not existing.endswith("\n\n") else "") + text, encoding="utf-8")


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub auth") -> int:
    args = build_parser(prog).parse_args(argv)
    hasher = argon2.PasswordHasher()
    try:
        if args.kind == "hash":
            print(hasher.hash(read_secret("secret")))
            return 0
        if not USER_NAME.fullmatch(args.user):
            return usage_error(prog, f"bad user name {args.user!r}: {USER_NAME_RULE}")
        secret = read_secret(f"password for {args.user}") if args.kind == "password" else secrets.token_urlsafe(
            TOKEN_BYTES)
        text = entry(args.user, hasher.hash(secret), args)
        if args.file is not None:
            append_entry(args.file, args.user, text)
            print(f"{prog}: added user {args.user!r} to {args.file}; SIGHUP the hub to load it", file=sys.stderr)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
        if args.kind == "token":
            # Shown once: only its hash is kept.  With --file, stdout holds nothing else.
            print(f"{args.user}:{secret}", file=sys.stdout if args.file is not None else sys.stderr)
    except (ValueError, OSError, tomllib.TOMLDecodeError) as exc:
        return usage_error(prog, str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
