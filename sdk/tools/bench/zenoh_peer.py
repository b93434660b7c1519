"""Zenoh beside pub0sub: T1, T2, L1 on one router, M1 on three routers in a line, L2 on two.

Zenoh (eclipse-zenoh on PyPI: Rust inside, a Python API) routes like pub0sub's mesh:
routers propagate subscriber interest and forward only where it is wanted.  Each
router is its own process (``python -m sdk.tools.bench.zenoh_clients``), the routers
of a cluster in a line (router i connects to router i-1), publishers and subscribers
are client sessions in processes of their own (:mod:`sdk.tools.bench.zenoh_clients`),
all on 127.0.0.1, every process stopped by its PID.  Zenoh has no raw-socket tooling
to compare with here: its Python API is both its usual client and its fastest.

Two ways of publishing: ``block`` (``CongestionControl.BLOCK``: nothing is dropped;
the figure compared with pub0sub's) and ``drop`` (Zenoh's default for ``put``: a full
transmit queue drops messages silently; its details say how many of the expected
arrived).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from .orchestrate import latency_measurement, latency_workers, paced_latency, run_pubsub, throughput, worker
from .peers import FirstAddress, Server
from .procs import HOST, LineReader, free_ports, python_module, spawn, stop_process
from .registry import Method, Params, register_method, register_server
from .results import Measurement

READY_TIMEOUT = 20.0


def _zenoh_missing() -> str | None:
    try:
        import zenoh  # noqa: F401
    except ImportError:
        return "eclipse-zenoh not installed (pip install 'pub0sub[bench]')"
    return None


class ZenohRouters(FirstAddress):
    """``count`` Zenoh routers in a line on loopback; ``start()`` returns once each is linked
    to its neighbours.  A publisher waits for its own matching status, so ``wait_interest``
    has nothing to wait for."""

    def __init__(self, count: int = 1) -> None:
        self.name = f"zenoh-routers{count}"
        self.count = count
        self._procs: list[Any] = []
        self._ports: list[int] = []

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [(HOST, p) for p in self._ports] if self._procs else []

    def start(self) -> None:
        self._ports = free_ports(self.count)
        try:
            readers = []
            for i, port in enumerate(self._ports):
                args = ["--listen", str(port)]
                if i:
                    args += ["--connect", str(self._ports[i - 1])]
                # Inner routers link to two neighbours, the ends to one.
                neighbours = (i > 0) + (i < self.count - 1)
                proc = spawn(python_module("sdk.tools.bench.zenoh_clients", *args, "--neighbours", str(neighbours)))
                self._procs.append(proc)
                readers.append(LineReader(proc))
            for i, reader in enumerate(readers):
                line = reader.next_line(timeout=READY_TIMEOUT, what=f"{self.name}[{i}]")
                if line != "ready":
                    raise RuntimeError(f"{self.name}[{i}] said {line!r}")
        except BaseException:
            self.stop()
            raise

    def wait_interest(self, at: int, of: int) -> None:
        """The publisher waits for its matching status itself (zenoh_clients._publisher)."""

    def stop(self) -> None:
        procs, self._procs = self._procs, []
        for proc in reversed(procs):
            with contextlib.suppress(Exception):
                stop_process(proc)


register_server("zenoh", lambda: ZenohRouters(1))
register_server("zenoh-routers2", lambda: ZenohRouters(2))
register_server("zenoh-routers3", lambda: ZenohRouters(3))


def _at(server: Server | None, index: int) -> dict[str, Any]:
    assert isinstance(server, ZenohRouters)
    host, port = server.addresses[index]
    return {"host": host, "port": port}


def _throughput(figure: str, congestion: str, *, subscribers: int = 1,
                processes: int = 1) -> Callable[[Server | None, Params], Measurement]:  # fmt: skip
    """Publisher on the first router, ``subscribers`` sessions over ``processes`` on the last."""

    def measure(server: Server | None, p: Params) -> Measurement:
        assert isinstance(server, ZenohRouters)
        last = server.count - 1
        shares = [subscribers // processes + (i < subscribers % processes) for i in range(processes)]
        subs = [worker("sub-zenoh", **_at(server, last), messages=p.messages, size=p.size, connections=n,
                       timeout=p.timeout) for n in shares if n]  # fmt: skip
        pub = worker("pub-zenoh", **_at(server, 0), messages=p.messages, size=p.size, congestion=congestion)
        t = throughput(run_pubsub(subs, pub, timeout=p.timeout))
        t["lost"] = t["expected"] - t["received"]
        return Measurement(figures={figure: t.pop("rate")}, details=t)

    return measure


def _across(server: Server | None, p: Params) -> Measurement:
    assert isinstance(server, ZenohRouters)
    sub, pub = latency_workers("lat-sub-zenoh", "lat-pub-zenoh", p, sub_at=_at(server, server.count - 1),
                               pub_at=_at(server, 0))  # fmt: skip
    [result] = run_pubsub([sub], pub, timeout=(p.seconds or 0) + p.timeout)
    return latency_measurement(result)


_PUT = "Zenoh Python API, publisher.put() per message"
_BLOCK = ", CongestionControl.BLOCK"
_DROP = ", CongestionControl.DROP (Zenoh's default; lost messages in details)"
_SUB = " -> callback subscriber"
for _scenario, _method in (
    ("T1", Method(system="zenoh", method="block", server="zenoh", unavailable=_zenoh_missing,
                  measure=_throughput("delivered", "block"), tooling=_PUT + _BLOCK + " -> router ->" + _SUB)),
    ("T1", Method(system="zenoh", method="drop", server="zenoh", unavailable=_zenoh_missing,
                  measure=_throughput("delivered", "drop"), tooling=_PUT + _DROP + " -> router ->" + _SUB)),
    ("T2", Method(system="zenoh", method="block", server="zenoh", unavailable=_zenoh_missing,
                  measure=_throughput("deliveries", "block", subscribers=100, processes=2),
                  tooling=_PUT + _BLOCK + " -> router -> 100 callback subscriber sessions in 2 processes")),
    ("L1", Method(system="zenoh", method="python", server="zenoh", unavailable=_zenoh_missing,
                  measure=paced_latency("lat-sub-zenoh", "lat-pub-zenoh"),
                  tooling="Zenoh paced publisher (put per message, BLOCK) -> router -> callback subscriber")),
    ("M1", Method(system="zenoh", method="block", server="zenoh-routers3", unavailable=_zenoh_missing,
                  measure=_throughput("delivered", "block"),
                  tooling=_PUT + _BLOCK + " on router A -> B -> C ->" + _SUB)),
    ("M1", Method(system="zenoh", method="drop", server="zenoh-routers3", unavailable=_zenoh_missing,
                  measure=_throughput("delivered", "drop"), tooling=_PUT + _DROP + " on router A -> B -> C ->" + _SUB)),
    ("L2", Method(system="zenoh", method="python", server="zenoh-routers2", unavailable=_zenoh_missing,
                  measure=_across,
                  tooling="Zenoh paced publisher (put per message, BLOCK) on router A -> B -> callback subscriber")),
):  # fmt: skip
    register_method(_scenario, _method)
