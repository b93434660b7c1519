"""Scenarios T1, T2, L1 for the peers (Redis, NATS, the raw relay) and the ``wire`` codec.

Importing this module fills :data:`sdk.tools.bench.registry.SCENARIOS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import wirebench
from .orchestrate import address_of as _addr
from .orchestrate import paced_latency, run_pubsub, throughput, worker
from .peers import NatsServer, RedisServer, Server, relay_server
from .peers import missing as _missing
from .registry import Method, Params, Scenario, register_method, register_scenario, register_server, with_defaults
from .results import FigureSpec, Measurement
from .wireproto import CHANNEL

#: subscriber connections per process in T2: two processes share the 100 sockets
T2_PROCESSES = 2

register_server("redis", RedisServer)
register_server("nats", NatsServer)
register_server("relay", relay_server)


def _redis_benchmark(server: Server | None, messages: int, size: int) -> list[str]:
    """redis-benchmark as the fastest Redis publisher: one connection, pipeline of 100."""
    host, port = _addr(server).values()
    return ["redis-benchmark", "-h", str(host), "-p", str(port), "-c", "1", "-P", "100", "-n", str(messages),
            "-q", "PUBLISH", CHANNEL, "x" * size]  # fmt: skip


def _measured(results: list[dict[str, Any]], figure: str) -> Measurement:
    t = throughput(results)
    return Measurement(figures={figure: t.pop("rate")}, details=t)


# -- T1: 1 publisher -> 1 subscriber -----------------------------------------------


def _t1(sub_role: str, pub: Callable[[Server | None, Params], list[str]], **sub_kw: Any) -> Callable[..., Measurement]:
    def measure(server: Server | None, p: Params) -> Measurement:
        assert p.messages is not None
        sub = worker(sub_role, **_addr(server), messages=p.messages, size=p.size, timeout=p.timeout, **sub_kw)
        return _measured(run_pubsub([sub], pub(server, p), timeout=p.timeout), "delivered")

    return measure


def _raw_pub(system: str) -> Callable[[Server | None, Params], list[str]]:
    return lambda server, p: worker("pub-raw", system=system, **_addr(server), messages=p.messages, size=p.size)


def _client_pub(role: str) -> Callable[[Server | None, Params], list[str]]:
    return lambda server, p: worker(role, **_addr(server), messages=p.messages, size=p.size)


T1 = register_scenario(Scenario(
    id="T1", title="1 publisher -> 1 subscriber, delivered msgs/s",
    figures=(FigureSpec(name="delivered", unit="msgs/s"),),
    defaults=with_defaults(messages=300_000, quick_messages=20_000),
))  # fmt: skip
_T1_METHODS = [
    Method(system="relay", method="raw", server="relay",
           tooling="raw socket publisher (pre-framed 5-byte-header batches) -> trio relay -> byte-counting subscriber",
           measure=_t1("sub-raw", _raw_pub("relay"), system="relay")),
    Method(system="redis", method="fastest", server="redis", unavailable=_missing("redis-server", "redis-benchmark"),
           tooling="redis-benchmark -c 1 -P 100 PUBLISH -> byte-counting raw-socket subscriber",
           measure=_t1("sub-raw", lambda s, p: _redis_benchmark(s, p.messages or 0, p.size), system="redis")),
    Method(system="redis", method="hiredis", server="redis", unavailable=_missing("redis-server", "redis-benchmark"),
           tooling="redis-benchmark -c 1 -P 100 PUBLISH -> raw-socket subscriber parsing with hiredis",
           measure=_t1("sub-raw", lambda s, p: _redis_benchmark(s, p.messages or 0, p.size), system="redis",
                       counter="hiredis")),
    Method(system="redis", method="python", server="redis", unavailable=_missing("redis-server"),
           tooling="redis-py pipelined publisher (100/pipeline) -> redis-py PubSub.get_message subscriber",
           measure=_t1("sub-redis-py", _client_pub("pub-redis-py"))),
    Method(system="nats", method="fastest", server="nats", unavailable=_missing("nats-server"),
           tooling="raw socket publisher (pre-framed PUB batches) -> byte-counting raw-socket subscriber",
           measure=_t1("sub-raw", _raw_pub("nats"), system="nats")),
    Method(system="nats", method="python", server="nats", unavailable=_missing("nats-server"),
           tooling="nats-py publish loop -> nats-py callback subscriber",
           measure=_t1("sub-nats-py", _client_pub("pub-nats-py"))),
]  # fmt: skip
for _m in _T1_METHODS:
    register_method("T1", _m)


# -- T2: 1 publisher -> 100 subscribers --------------------------------------------


def _t2(
    system: str, pub: Callable[[Server | None, Params], list[str]], counter: str = "bytes"
) -> Callable[..., Measurement]:
    def measure(server: Server | None, p: Params) -> Measurement:
        assert p.messages is not None
        shares = [p.subscribers // T2_PROCESSES + (i < p.subscribers % T2_PROCESSES) for i in range(T2_PROCESSES)]
        subs = [
            worker("sub-raw", system=system, **_addr(server), messages=p.messages, size=p.size, connections=n,
                   counter=counter, timeout=p.timeout)
            for n in shares if n
        ]  # fmt: skip
        return _measured(run_pubsub(subs, pub(server, p), timeout=p.timeout), "deliveries")

    return measure


T2 = register_scenario(Scenario(
    id="T2", title="1 publisher -> 100 subscribers, deliveries/s",
    figures=(FigureSpec(name="deliveries", unit="deliveries/s"),),
    defaults=with_defaults(messages=30_000, quick_messages=300),
))  # fmt: skip
_T2_METHODS = [
    Method(system="relay", method="raw", server="relay",
           tooling="raw socket publisher -> trio relay -> 100 byte-counting sockets in 2 processes",
           measure=_t2("relay", _raw_pub("relay"))),
    Method(system="redis", method="fastest", server="redis", unavailable=_missing("redis-server", "redis-benchmark"),
           tooling="redis-benchmark -c 1 -P 100 PUBLISH -> 100 byte-counting sockets in 2 processes",
           measure=_t2("redis", lambda s, p: _redis_benchmark(s, p.messages or 0, p.size))),
    Method(system="redis", method="hiredis", server="redis", unavailable=_missing("redis-server", "redis-benchmark"),
           tooling="redis-benchmark -c 1 -P 100 PUBLISH -> 100 hiredis-parsing sockets in 2 processes",
           measure=_t2("redis", lambda s, p: _redis_benchmark(s, p.messages or 0, p.size), counter="hiredis")),
    Method(system="nats", method="fastest", server="nats", unavailable=_missing("nats-server"),
           tooling="raw socket publisher (pre-framed PUB batches) -> 100 byte-counting sockets in 2 processes",
           measure=_t2("nats", _raw_pub("nats"))),
]  # fmt: skip
for _m in _T2_METHODS:
    register_method("T2", _m)


# -- L1: latency at a paced 10k msgs/s ---------------------------------------------


def _l1(system: str) -> Callable[..., Measurement]:
    return paced_latency(f"lat-sub-{system}", f"lat-pub-{system}")


L1 = register_scenario(Scenario(
    id="L1", title="paced 10k msgs/s, publish->deliver latency",
    figures=(FigureSpec(name="p50", unit="us", higher_is_better=False),
             FigureSpec(name="p99", unit="us", higher_is_better=False),
             FigureSpec(name="p99.9", unit="us", higher_is_better=False)),
    defaults=with_defaults(messages=0, quick_messages=0, seconds=5.0, quick_seconds=0.5),
))  # fmt: skip
_L1_METHODS = [
    Method(system="relay", method="raw", server="relay",
           tooling="paced raw socket publisher (one frame per send) -> trio relay -> raw-socket subscriber",
           measure=_l1("relay")),
    Method(system="redis", method="python", server="redis", unavailable=_missing("redis-server"),
           tooling="redis.asyncio paced publisher -> redis.asyncio PubSub subscriber", measure=_l1("redis")),
    Method(system="nats", method="python", server="nats", unavailable=_missing("nats-server"),
           tooling="nats-py paced publisher -> nats-py callback subscriber", measure=_l1("nats")),
]  # fmt: skip
for _m in _L1_METHODS:
    register_method("L1", _m)


# -- wire: the codec, in process ---------------------------------------------------

WIRE = register_scenario(Scenario(
    id="wire", title="pub0sub codecs vs a bare struct loop, records/s (batches of 1000 x 64 B)",
    figures=(FigureSpec(name="encode", unit="records/s"), FigureSpec(name="decode", unit="records/s"),
             FigureSpec(name="decode-mixed", unit="records/s")),
    defaults=with_defaults(messages=1_000_000, quick_messages=20_000),
))  # fmt: skip
for _figure, (_ours, _bare) in wirebench.MEASURES.items():
    register_method("wire", Method(system="pub0sub-wire", method=_figure, figure=_figure, tooling=_ours.__doc__ or "",
                                   measure=_ours))  # fmt: skip
    register_method("wire", Method(system="struct-loop", method=_figure, figure=_figure, tooling=_bare.__doc__ or "",
                                   measure=_bare))  # fmt: skip


# pub0sub's own methods (and its R1/D1 scenarios) register themselves on import.
from . import c1 as _c1  # noqa: E402, F401
from . import kvbench as _kvbench  # noqa: E402, F401
from . import mesh as _mesh  # noqa: E402, F401
from . import pub0sub as _pub0sub  # noqa: E402, F401
from . import spark as _spark  # noqa: E402, F401
from . import spark_stream as _spark_stream  # noqa: E402, F401
from . import zenoh_peer as _zenoh_peer  # noqa: E402, F401
