"""The one wait-until of the test suite (tests/support/waiting.py) keeps its promises."""

from __future__ import annotations

import itertools
import time

import anyio
import pytest

from tests.support.waiting import await_until, wait_until


def test_returns_the_first_truthy_result() -> None:
    calls = itertools.count()
    assert wait_until(lambda: next(calls) >= 3 and "ready", timeout=5, what="the third call") == "ready"


def test_at_the_deadline_names_what_it_awaited_and_the_last_retried_error() -> None:
    def refused() -> bool:
        raise ConnectionRefusedError("hub restarting")

    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"waiting for hub 2 .*ConnectionRefusedError\('hub restarting'\)") as info:
        wait_until(refused, timeout=0.1, what="hub 2", retry_on=(OSError,))
    assert 0.1 <= time.monotonic() - started < 2
    assert isinstance(info.value.__cause__, ConnectionRefusedError)


def test_an_error_not_retried_fails_at_once_as_itself() -> None:
    def broken() -> bool:
        raise KeyError("peers")

    started = time.monotonic()
    with pytest.raises(KeyError):
        wait_until(broken, timeout=30, what="never", retry_on=(OSError,))
    assert time.monotonic() - started < 1


def test_a_function_what_describes_the_state_at_the_deadline() -> None:
    state = {"acked": 0}

    def progressed() -> bool:
        state["acked"] += 1
        return False

    with pytest.raises(AssertionError) as info:
        wait_until(progressed, timeout=0.05, what=lambda: f"acks (saw {state['acked']})")
    assert f"acks (saw {state['acked']})" in str(info.value)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
@pytest.mark.parametrize("in_thread", [False, True])
def test_await_until_polls_on_either_loop(backend: str, in_thread: bool) -> None:
    async def scenario() -> None:
        flag = anyio.Event()

        async def set_later() -> None:
            await anyio.sleep(0.05)
            flag.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(set_later)
            assert await await_until(flag.is_set, timeout=5, what="the flag", in_thread=in_thread)
        with pytest.raises(AssertionError, match="waiting for nothing"):
            await await_until(lambda: False, timeout=0.05, what="nothing", in_thread=in_thread)

    anyio.run(scenario, backend=backend)
