"""How a test waits for state: poll a check with a deadline, never sleep for a fixed time.

:func:`wait_until` in plain tests, :func:`await_until` in async ones (trio or asyncio: it
sleeps through anyio).  Both return the check's first truthy result, so a wait can hand
over what it waited for::

    entry = wait_until(lambda: hub.peer(other), timeout=10, what="hub 1 to know hub 2")

At the deadline they raise AssertionError naming what was awaited (``what``, or what the
function ``what`` returns then: the state at the deadline) and the last exception the
check raised.  Only exceptions listed in ``retry_on`` mean "not yet" (a hub that is
restarting refuses connections); any other propagates at once, so a broken check fails as
itself rather than as a timeout.  Between checks they sleep ``interval``: a poll, short
so the wait ends soon after the state arrives.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

import anyio

T = TypeVar("T")

#: Seconds between two checks, unless a check is costly enough to ask for fewer.
POLL_INTERVAL = 0.01


def wait_until(
    check: Callable[[], T],
    *,
    timeout: float,
    what: str | Callable[[], str],
    retry_on: tuple[type[Exception], ...] = (),
    interval: float = POLL_INTERVAL,
) -> T:
    """Call ``check`` until it returns something truthy, and return that."""
    poll = _Poll(timeout, what, retry_on)
    while True:
        with poll:
            result = check()
            if result:
                return result
        poll.fail_if_late()
        time.sleep(interval)


async def await_until(
    check: Callable[[], T],
    *,
    # A cancel scope at the call site would end the wait without saying what it awaited.
    timeout: float,  # noqa: ASYNC109
    what: str | Callable[[], str],
    retry_on: tuple[type[Exception], ...] = (),
    interval: float = POLL_INTERVAL,
    in_thread: bool = False,
) -> T:
    """:func:`wait_until` for async tests; ``in_thread=True`` runs a blocking check (a socket
    round trip to a hub process) in a worker thread so the event loop keeps running."""
    poll = _Poll(timeout, what, retry_on)
    while True:
        with poll:
            result = await anyio.to_thread.run_sync(check) if in_thread else check()
            if result:
                return result
        poll.fail_if_late()
        await anyio.sleep(interval)


class _Poll:
    """What both waits keep between checks: the deadline and the last "not yet" exception.

    Used as ``with poll:`` around one check, it swallows (and remembers) the exceptions
    in ``retry_on``.
    """

    def __init__(self, timeout: float, what: str | Callable[[], str], retry_on: tuple[type[Exception], ...]) -> None:
        self.timeout = timeout
        self.what = what
        self.retry_on = retry_on
        self.deadline = time.monotonic() + timeout
        self.last_error: Exception | None = None

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        if isinstance(exc, self.retry_on):
            self.last_error = exc
            return True
        return False

    def fail_if_late(self) -> None:
        if time.monotonic() < self.deadline:
            return
        what = self.what() if callable(self.what) else self.what
        message = f"timed out after {self.timeout:g}s waiting for {what}"
        if self.last_error is not None:
            message += f" (last error: {self.last_error!r})"
        raise AssertionError(message) from self.last_error
