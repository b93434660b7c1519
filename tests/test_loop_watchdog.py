"""The event loop's watchdog (hub/shell/watchdog.py): a step that never yields is reported with
the stack it is stuck in, and its end with how long it lasted; an idle loop is not a stall."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

import pytest
import trio

from hub.core.stats import HubStats
from hub.shell.watchdog import PAUSED, STALL_ENDED, STALLED, LoopWatchdog, run_loop_watchdog
from tests.support.client_protocol import FakeClock
from tests.support.cluster import Cluster, stall_report
from tests.support.waiting import wait_until


def a_step_that_never_yields(seconds: float) -> None:
    time.sleep(seconds)  # stands for any loop over a backlog that holds the trio loop


def run(body: object, stats: HubStats) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_loop_watchdog, LoopWatchdog(stats, stall_seconds=0.4, beat_seconds=0.1))
            await trio.sleep(0.3)
            await body()  # type: ignore[operator]
            await trio.sleep(0.5)  # the thread sees the loop run again
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_blocked_loop_is_reported_with_where_it_is_and_for_how_long(caplog: pytest.LogCaptureFixture) -> None:
    stats = HubStats()

    async def block() -> None:
        a_step_that_never_yields(1.5)

    with caplog.at_level(logging.WARNING, logger="pub0sub.hub"):
        run(block, stats)
    started = [r for r in caplog.records if getattr(r, "event", None) == STALLED]
    ended = [r for r in caplog.records if getattr(r, "event", None) == STALL_ENDED]
    assert len(started) == 1 and len(ended) == 1, [r.getMessage() for r in caplog.records]
    assert "a_step_that_never_yields" in started[0].getMessage()
    assert "time.sleep(seconds)" in started[0].getMessage()  # the very line it is stuck on
    assert stats.loop_stalls == 1
    # Blocked 1.5 s from a beat at most 0.1 s before it: the end says so, within the beat.
    assert 1.3 <= stats.loop_stall_seconds <= 1.8, stats.loop_stall_seconds


def test_an_idle_loop_and_short_steps_are_not_stalls(caplog: pytest.LogCaptureFixture) -> None:
    stats = HubStats()

    async def idle_then_busy() -> None:
        await trio.sleep(1.2)  # idle: waiting in the kernel is the loop running
        for _ in range(10):
            a_step_that_never_yields(0.1)  # steps shorter than the bound, yielding between them
            await trio.lowlevel.checkpoint()

    with caplog.at_level(logging.WARNING, logger="pub0sub.hub"):
        run(idle_then_busy, stats)
    assert not [r for r in caplog.records if getattr(r, "event", None) in (STALLED, STALL_ENDED)]
    assert stats.loop_stalls == 0 and stats.loop_stall_seconds == 0.0


def events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "event", "") for r in caplog.records]


def test_the_process_stopped_whole_is_not_blamed_on_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    """SIGSTOP stops the watching thread too: it wakes 6 s late with the beat 6 s old, and says
    the process did not run, with no stack and no stall counted (a test bed's SIGSTOP of a hub
    was reported as a 5.2 s stall 'at get_events' before)."""
    clock, stats = FakeClock(), HubStats()
    clock.now = 0.0
    dog = LoopWatchdog(stats, clock=clock)
    with caplog.at_level(logging.WARNING, logger="pub0sub.hub"):
        clock.now = 1.0
        dog.look()
        clock.now = 7.0  # stopped from 1.0 to 7.0: no look, no beat
        dog.look()
        clock.now = 7.2
        dog.beat()  # the loop gets its turn
        clock.now = 8.0
        dog.look()
    assert events(caplog) == [PAUSED]
    assert "did not run for 6.0 s" in caplog.records[0].getMessage()
    assert stats.loop_stalls == 0 and stats.loop_stall_seconds == 0.0


def test_a_stall_is_reported_once_and_its_end_with_the_beats_between(caplog: pytest.LogCaptureFixture) -> None:
    """The thread looks every second while the loop beats at 0 and then not until 7.5."""
    clock, stats = FakeClock(), HubStats()
    clock.now = 0.0
    dog = LoopWatchdog(stats, clock=clock)
    with caplog.at_level(logging.WARNING, logger="pub0sub.hub"):
        for second in range(1, 8):
            clock.now = float(second)
            dog.look()
        clock.now = 7.5
        dog.beat()
        clock.now = 8.0
        dog.look()
    assert events(caplog) == [STALLED, STALL_ENDED]
    assert "has not run for 4.0 s" in caplog.records[0].getMessage()  # first seen at 4 s (> 3)
    assert stats.loop_stalls == 1 and stats.loop_stall_seconds == 7.5


def test_a_real_hub_stopped_whole_says_so_and_a_failed_tests_report_shows_it(tmp_path: Path) -> None:
    """A hub process SIGSTOPped for 4.5 s logs process_paused once SIGCONT wakes it, and the
    cluster harness's report (printed when a test fails) carries that line."""
    with Cluster(tmp_path) as cl:
        (hub,) = cl.start(1)
        hub.signal(signal.SIGSTOP)
        time.sleep(4.5)
        hub.signal(signal.SIGCONT)
        wait_until(lambda: any("event=process_paused" in line for line in hub.loop_reports()), timeout=10,
                   what=lambda: f"process_paused in the hub's log: {hub.log_tail()}")  # fmt: skip
        report = stall_report([hub])
        assert report.startswith(f"{hub.name}: ") and "did not run for" in report
        assert "event=loop_stalled" not in report  # the loop is not blamed for the process's pause
