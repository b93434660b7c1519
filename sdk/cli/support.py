"""What the ``pub0sub pub|sub|status`` commands share: the hub and security options, error reporting, exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import ConnectionLostError, InvalidTopicError, Pub0subError
from ..tools.stopping import run_until_stopped

#: Environment variable giving the default ``--hub``.
HUB_ENV = "PUB0SUB_HUB"
DEFAULT_HUB = "127.0.0.1:7420"
#: Environment variables for credentials and TLS: a secret in one stays out of ``ps`` and shell history.
USER_ENV, PASSWORD_ENV, TOKEN_ENV = "PUB0SUB_USER", "PUB0SUB_PASSWORD", "PUB0SUB_TOKEN"
CA_FILE_ENV = "PUB0SUB_CA_FILE"


def add_hub_option(parser: argparse.ArgumentParser) -> None:
    """``--hub`` and what connecting to it may take: credentials (docs/security.md) and TLS."""
    parser.add_argument(
        "--hub",
        default=os.environ.get(HUB_ENV, DEFAULT_HUB),
        metavar="HOST:PORT",
        help=f"hub client address (default: ${HUB_ENV} or {DEFAULT_HUB})",
    )
    group = parser.add_argument_group("credentials and TLS (for a hub with --auth-file or --tls-cert)")
    group.add_argument("--user", default=os.environ.get(USER_ENV), help=f"user name (default: ${USER_ENV})")
    group.add_argument("--password", default=os.environ.get(PASSWORD_ENV),
                       help=f"the user's password; better in ${PASSWORD_ENV}, out of ps and history")  # fmt: skip
    group.add_argument("--token", default=os.environ.get(TOKEN_ENV),
                       help=f"USER:SECRET as `pub0sub auth` printed it, instead of --user/--password "
                       f"(default: ${TOKEN_ENV})")  # fmt: skip
    group.add_argument("--tls", action="store_true",
                       help="connect with TLS, verifying the hub's certificate (any file below turns it on too)")
    group.add_argument("--ca-file", default=os.environ.get(CA_FILE_ENV), metavar="FILE",
                       help=f"CA (PEM) that signed the hub's certificate (default: ${CA_FILE_ENV}, else the "
                       "system's CAs)")  # fmt: skip
    group.add_argument("--cert", metavar="FILE", help="client certificate (PEM) for a hub that asks for one")
    group.add_argument("--cert-key", metavar="FILE", help="private key (PEM) of --cert, if not in that file")


def connect_options(args: argparse.Namespace) -> dict[str, Any]:
    """The credentials and TLS options of :func:`add_hub_option`, as ``connect_blocking`` keywords."""
    if args.token and (args.user or args.password):
        raise ValueError("give --token, or --user and --password, not both")
    if (args.user is None) != (args.password is None) and not args.token:
        raise ValueError("--user and --password go together (or PUB0SUB_USER and PUB0SUB_PASSWORD)")
    return {
        "token": args.token or b"",
        "user": args.user if args.password is not None else None,
        "password": args.password if args.user is not None else None,
        "tls": args.tls or None,
        "ca_file": args.ca_file,
        "cert_file": args.cert,
        "key_file": args.cert_key,
    }


def usage_error(prog: str, message: str) -> int:
    """A usage error found after parsing: one line on stderr, exit status 2."""
    print(f"{prog}: {message}", file=sys.stderr)
    return 2


def topic_usage_error(prog: str, names: Iterable[str], *, pattern: bool = False) -> int:
    """Check names against the topic rule before connecting: 2 after a one-line message, else 0.

    The message is the one the SDK raises and the hub sends (``wire.topics``).
    """
    try:
        for name in names:
            InvalidTopicError.check(name, pattern=pattern)
    except InvalidTopicError as exc:
        return usage_error(prog, str(exc))
    return 0


def run(prog: str, body: Callable[[], int], *, summary: Callable[[], str] | None = None) -> int:
    """Run a command body: 1 with a one-line message on hub/connection errors, 2 on bad values, no tracebacks.

    Ctrl-C, SIGTERM and SIGHUP are a clean stop (:mod:`sdk.tools.stopping`): exit 0, and
    ``summary()``, if given, printed to stderr as ``PROG: stopped on SIGINT: <summary>``.
    """
    try:
        outcome = run_until_stopped(body)
        if not outcome.stopped:
            return outcome.value or 0
        if summary is not None:
            print(f"{prog}: stopped on {outcome.signal}: {summary()}", file=sys.stderr)
        return 0
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, and keep Python from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except ConnectionLostError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except (Pub0subError, TimeoutError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
