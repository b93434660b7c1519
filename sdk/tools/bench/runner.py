"""Run scenarios: start each needed server once per scenario, alternate the systems K times, summarise."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from ..stopping import stop_requested
from .peers import Server
from .procs import children_stopped
from .registry import SCENARIOS, SERVERS, Method, Params, Scenario
from .results import FigureSpec, Measurement, Summary, fill_ratios

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


class ServerPool:
    """Servers started on first use and all stopped by :meth:`close` (even on error)."""

    def __init__(self) -> None:
        self._running: dict[str, Server] = {}

    def get(self, name: str) -> Server:
        if name not in self._running:
            server = SERVERS[name]()
            server.start()
            self._running[name] = server
        return self._running[name]

    def close(self) -> None:
        errors = []
        for server in reversed(list(self._running.values())):
            try:
                server.stop()
            except Exception as exc:  # keep stopping the others
                errors.append(exc)
        self._running.clear()
        if errors:
            raise errors[0]


def run(scenario_ids: Sequence[str], params: Params, *, repeat: int, progress: Progress = _quiet,
        into: list[Summary] | None = None) -> list[Summary]:  # fmt: skip
    """Every scenario, every available method, ``repeat`` rounds alternating the methods.

    ``into`` receives each summary as its scenario starts, its samples as they are measured:
    a run stopped half-way (Ctrl-C) still has what it measured there.
    """
    summaries: list[Summary] = [] if into is None else into
    for sid in scenario_ids:
        # A scenario's servers stop when it ends.  Idle servers are not free: M1's three meshed
        # hubs (heartbeats, discovery) took ~20% of a core all through L2 when they were kept
        # for the whole run, slowing every system measured after them.
        pool = ServerPool()
        try:
            _run_scenario(SCENARIOS[sid], params, repeat, pool, progress, summaries)
        finally:
            pool.close()
    fill_ratios(summaries)
    return summaries


def _run_scenario(scenario: Scenario, params: Params, repeat: int, pool: ServerPool,
                  progress: Progress, into: list[Summary]) -> None:  # fmt: skip
    p = scenario.defaults(params)
    methods: list[Method] = []
    for m in scenario.methods:
        reason = m.unavailable()
        if reason:
            progress(f"{scenario.id} {m.system}:{m.method}: skipped ({reason})")
        else:
            methods.append(m)
    summaries = {
        id(m): Summary(scenario=scenario.id, system=m.system, method=m.method, tooling=m.tooling,
                       primary=scenario.figure(m.figure), specs=_specs(scenario, m), samples=[],
                       params={**p.to_json(), "repeat": repeat})
        for m in methods
    }  # fmt: skip
    into.extend(summaries.values())
    for round_no in range(repeat):
        for m in methods:
            sample = _measure_once(m, p, pool)
            summaries[id(m)].samples.append(sample)
            shown = ", ".join(f"{k}={v:,.1f}" for k, v in sample.figures.items())
            progress(f"{scenario.id} round {round_no + 1}/{repeat} {m.system}:{m.method}: {shown or sample.details}")


def _specs(scenario: Scenario, m: Method) -> tuple[FigureSpec, ...]:
    # An in-process method reports only its own figure; a server method all of the scenario's.
    return (scenario.figure(m.figure),) if m.figure else scenario.figures


def _measure_once(m: Method, p: Params, pool: ServerPool) -> Measurement:
    try:
        server = pool.get(m.server) if m.server else None
        with children_stopped():  # the workers, before the pool stops the server
            return m.measure(server, p)
    except Exception as exc:
        if stop_requested():
            # The stop's KeyboardInterrupt, replaced by what the unwinding it started raised (a
            # server that would not stop): the stop, not a failed measurement to go on after.
            raise
        # One failed measurement is reported, not fatal: the other systems' figures still stand.
        print(f"bench: {m.system}:{m.method} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return Measurement(figures={}, details={"error": f"{type(exc).__name__}: {exc}"})
