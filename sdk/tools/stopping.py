"""How the long-running commands stop: Ctrl-C, SIGTERM and SIGHUP are one clean stop.

``pub0sub demo``, ``cluster up``, ``sub``, ``bench`` and ``analyze`` run until they are done
or asked to stop.  Asked to stop, each finishes its cleanup (hubs and servers stopped, clients
closed, Spark stopped), prints its summary and exits 0.  Three things stand in the way:

* Python raises ``KeyboardInterrupt`` wherever the main thread is, and trio delivers it
  inside an exception group (``BaseExceptionGroup[KeyboardInterrupt]``), which an
  ``except KeyboardInterrupt`` does not catch;
* a second Ctrl-C, pressed while the first one's cleanup runs, interrupts the cleanup itself;
* SIGTERM (a supervisor, ``kill PID``, ``timeout``) and SIGHUP (the terminal closed) end the
  process at once by default, skipping every ``finally``: child hubs are left running.

:func:`run_until_stopped` runs a command's main under one handler for the three signals: the
first raises ``KeyboardInterrupt`` once, later ones are only noted, and ``KeyboardInterrupt``,
bare or inside exception groups, ends the main as a stop, not an error.  :func:`run_trio` runs
a trio main inside it: there a stop signal cancels the main, so its own cleanup (SDK clients
closing) runs under trio's shields instead of being interrupted.  :func:`stop_softly` does the
same for calls an interrupt would break (py4j's, in ``analyze``): the signal cancels what they
wait for instead.  Signals that were ignored when the command started (``nohup``, a shell's
background job) stay ignored.

>>> def watch() -> int:                                         # doctest: +SKIP
...     cluster.start()
...     run_trio(show_traffic, state)       # returns None when a stop signal cancelled it
...     return 0
>>> outcome = run_until_stopped(watch, cleanup=cluster.stop)    # doctest: +SKIP
>>> print(summary(state))                   # after Ctrl-C too (outcome.signal == "SIGINT")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: The signals that stop a command: Ctrl-C, a supervisor's or ``kill``'s SIGTERM, a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """How a main ended: ``value`` when it returned, ``signal`` (e.g. ``"SIGINT"``) when stopped."""

    value: T | None
    signal: str | None = None

    @property
    def stopped(self) -> bool:
        return self.signal is not None


def is_interrupt(exc: BaseException) -> bool:
    """``exc`` is a ``KeyboardInterrupt``, or an exception group holding one (at any depth).

    Whatever else such a group holds happened because of the stop (a client cut off while
    its hub shut down): the stop is what to report.
    """
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.split(KeyboardInterrupt)[0] is not None


class _StopHandler:
    """The handler of :data:`STOP_SIGNALS` while a main runs: the first signal stops the main
    (``KeyboardInterrupt``, once), later ones and any during the cleanup are only noted."""

    def __init__(self) -> None:
        #: the first stop signal, and whether it came while the main still ran
        self.signum: int | None = None
        self.stopped_main = False
        #: true while the main runs: only then does a signal raise
        self.armed = True
        #: set by :func:`stop_softly`: what the first signal does instead of raising, and where
        self.soft: Callable[[], object] | None = None
        self.soft_inside = ""
        #: inside :func:`stop_deferred`: the first signal raises when the block ends
        self.defer = False
        self.deferred = False

    def note(self, signum: int) -> bool:
        """Record a stop signal; true for the first one while the main runs (it must stop)."""
        if self.signum is not None:
            return False
        self.signum = signum
        self.stopped_main = self.armed
        return self.armed

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.note(signum):
            if self.defer:
                self.deferred = True
                return
            if self.soft is not None and _runs_in(frame, self.soft_inside):
                self.soft()
                return
            raise KeyboardInterrupt


def _runs_in(frame: FrameType | None, package: str) -> bool:
    """The interrupted main thread is inside code of ``package`` (a directory name in its path)."""
    part = f"{os.sep}{package}{os.sep}"
    while frame is not None:
        if part in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


#: The handler of the main running now (signal handlers are process-wide, so is this).
_active: _StopHandler | None = None


def _wanted() -> list[signal.Signals]:
    return [s for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]


@contextlib.contextmanager
def _handlers(handler: Callable[[int, FrameType | None], Any], signums: list[signal.Signals]) -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in signums}
    for s in signums:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, previous in saved.items():
            signal.signal(s, previous)


def run_until_stopped(main: Callable[[], T], *, cleanup: Callable[[], object] | None = None) -> Outcome[T]:
    """Run ``main()``; a stop signal ends it as an :class:`Outcome` with ``signal`` set, not as an error.

    ``cleanup`` runs after ``main`` however it ended, with stop signals only noted.  Any other
    exception from ``main`` propagates after ``cleanup``.  Off the main thread (where Python
    cannot install signal handlers) ``main`` simply runs.
    """
    global _active
    if threading.current_thread() is not threading.main_thread():
        try:
            return Outcome(main())
        finally:
            if cleanup is not None:
                cleanup()
    handler, outer = _StopHandler(), _active
    value: T | None = None
    error: BaseException | None = None
    _active = handler
    try:
        with _handlers(handler, _wanted()):
            # The handler raises at most once, and never after ``armed`` is false: the one
            # KeyboardInterrupt lands inside this try, wherever main or its finally is.
            try:
                try:
                    value = main()
                finally:
                    handler.armed = False
            except BaseException as exc:
                if is_interrupt(exc) or handler.stopped_main:
                    # A KeyboardInterrupt, ours or raised by trio's or pyspark's handler in our
                    # place -- or whatever the unwinding it started raised instead (a py4j call
                    # in a ``finally`` on the connection the interrupt broke): the stop asked for.
                    handler.stopped_main = True
                else:
                    error = exc
            if cleanup is not None:
                cleanup()
    finally:
        _active = outer
    if error is not None:
        raise error
    if not handler.stopped_main:
        return Outcome(value)
    return Outcome(value, signal.Signals(handler.signum or signal.SIGINT).name)


def stop_requested() -> bool:
    """A stop signal came while the running main ran: it is unwinding (or cleaning up) now."""
    return _active is not None and _active.stopped_main


def stop_softly(cancel: Callable[[], object], *, inside: str) -> None:
    """While the main thread runs code of the package ``inside``, the first stop signal calls
    ``cancel`` instead of raising ``KeyboardInterrupt`` (elsewhere it raises as always).

    For calls an interrupt would break: a ``KeyboardInterrupt`` inside a py4j call leaves a dead
    connection behind (py4j logs tracebacks about it, and the JVM aborts the job with stack
    traces of its own).  ``cancel`` must return at once (start a thread); what it cancels makes
    the waiting call fail, and the main raises at its next :func:`check_stop` at the latest.
    """
    if _active is not None:
        _active.soft, _active.soft_inside = cancel, inside


@contextlib.contextmanager
def stop_deferred() -> Iterator[None]:
    """A stop signal that lands inside the block raises ``KeyboardInterrupt`` when the block
    ends, not inside it: for steps an interrupt must not cut in two.  ``pub0sub bench``'s
    ``spawn`` is one: an interrupt inside ``Popen`` (after the fork, before it returned) left a
    started child that no cleanup knew, which outlived its server and printed a traceback."""
    handler = _active
    if handler is None or handler.defer or threading.current_thread() is not threading.main_thread():
        yield
        return
    handler.defer = True
    try:
        yield
    finally:
        handler.defer = False
        if handler.deferred:
            handler.deferred = False
            raise KeyboardInterrupt


def check_stop() -> None:
    """A safe point of a main under :func:`stop_softly`: ``KeyboardInterrupt`` if a stop was asked for."""
    if stop_requested():
        raise KeyboardInterrupt


def run_trio(async_fn: Callable[..., Awaitable[T]], *args: Any) -> T | None:
    """``trio.run(async_fn, *args)``, cancelled by the first stop signal (then returns None).

    The cancellation reaches ``async_fn`` as trio's ``Cancelled`` at its next checkpoint, so
    its ``finally`` blocks and trio's shielded clean-ups (the SDK clients' goodbyes) run in
    full; later signals wait for them.  An exception from ``async_fn`` is raised as it is,
    not wrapped in an exception group.
    """
    import trio

    handler = _active if _active is not None else _StopHandler()
    wanted = _wanted()

    async def until_stop_signal() -> T | None:
        result: T | None = None
        error: Exception | None = None
        with trio.open_signal_receiver(*wanted) as signals:
            async with trio.open_nursery() as nursery:
                main = trio.CancelScope()

                async def watch() -> None:
                    async for signum in signals:
                        if handler.note(signum):
                            main.cancel()

                nursery.start_soon(watch)
                with main:
                    try:
                        result = await async_fn(*args)
                    except Exception as exc:  # raised below, outside the nursery's exception group
                        error = exc
                nursery.cancel_scope.cancel()
        if error is not None:
            raise error
        return result

    # trio installs its own (safe) KeyboardInterrupt handler only over Python's default one;
    # a handler raising at any bytecode inside trio's run loop could break it.  Until the
    # receiver above is in place, SIGTERM and SIGHUP go through that handler as SIGINT does.
    with (
        _handlers(signal.default_int_handler, [s for s in wanted if s == signal.SIGINT]),
        _handlers(_as_sigint, [s for s in wanted if s != signal.SIGINT]),
    ):
        return trio.run(until_stop_signal)


def _as_sigint(signum: int, frame: FrameType | None) -> None:
    """Treat a signal as Ctrl-C: call whatever handles SIGINT now (inside ``trio.run``, trio's)."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        signal.default_int_handler(signal.SIGINT, frame)


def stop_signals_as_ctrl_c() -> None:
    """Outside :func:`run_until_stopped` too, let SIGTERM and SIGHUP stop a command the way
    Ctrl-C does (SIGINT may be ignored, a shell's background job: they still interrupt)."""
    for s in STOP_SIGNALS[1:]:
        if signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, _as_sigint)


def ignore_stop_signals() -> None:
    """The command is over: a late Ctrl-C must not turn its exit into a traceback or status 130."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
