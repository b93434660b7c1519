"""The ``pub0sub`` console script: one command, many subcommands.

Each subcommand lives in the package that owns it and is imported only when
called, so ``pub0sub decode`` never pays for trio or libp2p.  The hub is a
program of its own: the SDK never imports it, so ``pub0sub hub`` becomes
``python -m hub`` (:func:`exec_hub`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..tools import stopping

#: subcommand -> one-line help, in the order ``pub0sub --help`` lists them
SUBCOMMANDS: dict[str, str] = {
    "decode": "decode frames from hex, a capture file, a log segment or stdin",
    "hub": "run a hub",
    "pub": "publish messages",
    "sub": "subscribe and print messages",
    "status": "show a hub's status",
    "auth": "make entries for a hub's users file: hashed passwords, tokens, grants",
    "bench": "run benchmark scenarios beside Redis and NATS",
    "cluster": "N meshed hubs on loopback: pub0sub cluster up|status|down|secret",
    "testbed": "N overlay hubs on loopback with traffic, crashes and stalls, and what they did",
    "demo": "start a local demo with traffic you can watch",
    "analyze": "Spark job: per-topic counts, rates and latency from hub data directories",
    "spark": "a local Spark cluster and the runs on it: pub0sub spark up|exactly-once|scale",
}
#: subcommand -> the module whose ``main(argv, prog=...) -> int`` runs it in this process
#: (every subcommand but ``hub``)
MODULES: dict[str, str] = {
    "decode": "wire.cli",
    "pub": "sdk.cli.pub",
    "sub": "sdk.cli.sub",
    "status": "sdk.cli.status",
    "auth": "sdk.cli.auth",
    "bench": "sdk.tools.bench.cli",
    "cluster": "sdk.cli.cluster",
    "testbed": "sdk.cli.testbed",
    "demo": "sdk.tools.demo",
    "analyze": "sdk.spark.analyze.cli",
    "spark": "sdk.cli.spark",
}


def usage() -> str:
    lines = ["usage: pub0sub COMMAND [ARGS...]", "       pub0sub --version", "", "commands:"]
    lines += [f"  {name:<8} {text}" for name, text in SUBCOMMANDS.items()]
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
    Ctrl-C waits for the cleanup).  ``pub0sub hub`` is replaced by the hub before this runs:
    the hub installs its own handlers."""
    stopping.stop_signals_as_ctrl_c()


def exec_hub(argv: Sequence[str]) -> NoReturn:
    """``pub0sub hub ARGS``: replace this process with ``python -m hub ARGS``.

    ``exec`` keeps the PID, so a supervisor's signals (systemd, ``docker stop``, Ctrl-C) reach
    the hub itself and its exit status is the command's.  ``-P`` keeps the working directory
    off ``sys.path``, as it is for the console script: a ``hub.py`` there must not stand in
    for the hub.
    """
    command = [sys.executable, "-P", "-m", "hub", *argv]
    os.execve(command[0], command, {**os.environ, "PUB0SUB_PROG": "pub0sub hub"})


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; its exit status.  ``hub`` does not return: see :func:`exec_hub`."""
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
    if name == "hub":
        exec_hub(rest)
    module = importlib.import_module(MODULES[name])
    if argv is None:
        _stop_on_sigterm_as_on_ctrl_c()  # only as the console script, not when called as a function
    result: int = module.main(rest, prog=f"pub0sub {name}")
    if argv is None:
        stopping.ignore_stop_signals()
    return result
