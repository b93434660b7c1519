"""What the ``pub0sub pub|sub|status`` commands share: the hub option, error reporting, exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable

from ..errors import ConnectionLostError, InvalidTopicError, Pub0subError
from ..tools.stopping import run_until_stopped

#: Environment variable giving the default ``--hub``.
HUB_ENV = "PUB0SUB_HUB"
DEFAULT_HUB = "127.0.0.1:7420"


def add_hub_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hub",
        default=os.environ.get(HUB_ENV, DEFAULT_HUB),
        metavar="HOST:PORT",
        help=f"hub client address (default: ${HUB_ENV} or {DEFAULT_HUB})",
    )


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
