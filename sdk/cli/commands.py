"""The ``pub0sub`` console script: one command, many subcommands.

Each subcommand lives in the package that owns it and is imported only when
called, so ``pub0sub decode`` never pays for trio or libp2p, and the SDK
never imports the hub (``pub0sub hub`` is looked up by name).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Sequence

from ..tools import stopping

#: subcommand -> (module with ``main(argv) -> int``, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "decode": ("wire.cli", "decode frames from hex, a capture file, a log segment or stdin"),
    "hub": ("hub.cli", "run a hub"),
    "pub": ("sdk.cli.pub", "publish messages"),
    "sub": ("sdk.cli.sub", "subscribe and print messages"),
    "status": ("sdk.cli.status", "show a hub's status"),
    "bench": ("sdk.tools.bench.cli", "run benchmark scenarios beside Redis and NATS"),
    "cluster": ("sdk.cli.cluster", "N meshed hubs on loopback: pub0sub cluster up|status|down"),
    "demo": ("sdk.tools.demo", "start a local demo with traffic you can watch"),
    "analyze": ("sdk.spark.analyze.cli", "Spark job: per-topic counts, rates and latency from hub data directories"),
}


def usage() -> str:
    lines = ["usage: pub0sub COMMAND [ARGS...]", "       pub0sub --version", "", "commands:"]
    lines += [f"  {name:<8} {text}" for name, (_, text) in SUBCOMMANDS.items()]
    lines += ["", "pub0sub COMMAND --help for the options of one command."]
    return "\n".join(lines)


def version() -> str:
    """The installed distribution's version (what pip and ``pyproject.toml`` say)."""
    try:
        return importlib.metadata.version("pub0sub")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _stop_on_sigterm_as_on_ctrl_c() -> None:
    """Let SIGTERM (a supervisor, ``kill PID``, ``timeout``) and SIGHUP (a closed terminal) stop
    a command the way Ctrl-C does.

    By default they end the process at once and skip its ``finally`` blocks: the hubs of
    ``pub0sub cluster up`` or ``demo`` and the servers of ``bench`` are left running.  The
    long-running commands go further (:mod:`sdk.tools.stopping`: a clean stop, exit 0, a second
    Ctrl-C waits for the cleanup).  ``pub0sub hub`` installs its own handler."""
    stopping.stop_signals_as_ctrl_c()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"pub0sub {version()}")
        return 0
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"pub0sub: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    if argv is None:
        _stop_on_sigterm_as_on_ctrl_c()  # only as the console script, not when called as a function
    result: int = module.main(rest, prog=f"pub0sub {name}")
    if argv is None:
        stopping.ignore_stop_signals()
    return result
