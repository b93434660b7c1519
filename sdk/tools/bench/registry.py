"""The scenario registry: scenario id -> the systems and methods it measures.

Extension point for pub0sub's own measurements (T1/T2/L1): register a server
factory and one :class:`Method` per scenario, e.g.::

    from sdk.tools.bench.peers import AnnouncedServer
    from sdk.tools.bench.procs import python_module
    from sdk.tools.bench.registry import Method, register_method, register_server

    register_server("pub0sub", lambda: AnnouncedServer("pub0sub", python_module("hub", "--listen", "127.0.0.1:0")))
    register_method("T1", Method(system="pub0sub", method="python", tooling="pub0sub SDK -> SDK",
                                 server="pub0sub", measure=measure_pub0sub_t1))

``measure(server, params)`` returns a :class:`~sdk.tools.bench.results.Measurement`
whose ``figures`` hold the scenario's figure names (``delivered`` for T1,
``deliveries`` for T2, ``p50``/``p99``/``p99.9`` for L1).  The runner starts
the server once per scenario (stopping it when the scenario ends), alternates it with
the peers K times, and fills the ratios.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .peers import Server
from .results import FigureSpec, Measurement


@dataclass(frozen=True, kw_only=True, slots=True)
class Params:
    """Run parameters; ``None`` means the scenario's default."""

    messages: int | None = None
    seconds: float | None = None
    size: int = 64
    timeout: float = 60.0
    quick: bool = False
    subscribers: int = 100
    rate: float = 10_000.0
    #: L1/L2 publishers' shortest sleep (sdk.tools.bench.latency.TICK); 0 sleeps exactly until the next is due.
    tick: float = 0.001

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class Method:
    """One way of measuring one system in one scenario."""

    system: str
    method: str
    tooling: str
    measure: Callable[[Server | None, Params], Measurement]
    #: key into the server registry, or None for in-process scenarios
    server: str | None = None
    #: primary figure name; the scenario's first figure when None
    figure: str | None = None
    #: returns why the method cannot run here (a binary missing...), or None
    unavailable: Callable[[], str | None] = lambda: None


@dataclass(kw_only=True, slots=True)
class Scenario:
    id: str
    title: str
    figures: tuple[FigureSpec, ...]
    #: fills the scenario's own defaults into the parameters given on the command line
    defaults: Callable[[Params], Params]
    methods: list[Method] = field(default_factory=list)

    def figure(self, name: str | None) -> FigureSpec:
        if name is None:
            return self.figures[0]
        return next(f for f in self.figures if f.name == name)


SCENARIOS: dict[str, Scenario] = {}
SERVERS: dict[str, Callable[[], Server]] = {}


def register_scenario(scenario: Scenario) -> Scenario:
    SCENARIOS[scenario.id] = scenario
    return scenario


def register_method(scenario_id: str, method: Method) -> None:
    SCENARIOS[scenario_id].methods.append(method)


def register_server(name: str, factory: Callable[[], Server]) -> None:
    SERVERS[name] = factory


def with_defaults(*, messages: int, quick_messages: int, seconds: float = 5.0,
                  quick_seconds: float = 1.0) -> Callable[[Params], Params]:  # fmt: skip
    def fill(p: Params) -> Params:
        return replace(
            p,
            messages=p.messages if p.messages is not None else (quick_messages if p.quick else messages),
            seconds=p.seconds if p.seconds is not None else (quick_seconds if p.quick else seconds),
        )

    return fill
