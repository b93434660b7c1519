"""Compacted topics and the KV view (issue 21, item 5): scenarios KV1, KV2 and KV3.

* KV1 -- compaction throughput and the compacted size: ``python -m hub.tools.compaction_bench``
  in a child process (the hub's storage code; sdk never imports hub), ``--messages`` records
  (default 1,000,000) over 10,000 keys in random order, 64-byte data.  Figures: records
  compacted per second of the pass, and the topic's bytes after compaction as a percentage of
  its bytes before.
* KV2 -- ``get`` and ``put`` latency on a KV view of a compacted topic holding 10,000 keys
  (one hub, ``--compact kv.>``): ``--messages`` gets of random keys on a caught-up async view
  (answered from memory), and 1,000 puts (published, acknowledged, and applied by the view
  before ``put`` returns).  Method ``blocking``: the same with the blocking client's view,
  whose ``get`` also reads the socket (one non-blocking poll) before answering.
* KV3 -- appends while compaction runs: one SDK publisher (blocking client, batches of
  1,000, keys over 10,000) to a hub with 1 MiB segments, with ``--compact`` checking every
  0.1 s (so passes run throughout) and without; figure: messages stored per second
  (first publish to the final acknowledgement), with the passes that ran meanwhile.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import anyio

import sdk

from .peers import Server
from .procs import python_module, spawn, stop_process
from .pub0sub import Pub0subHub
from .registry import Method, Params, Scenario, register_method, register_scenario, register_server, with_defaults
from .results import FigureSpec, Measurement

KEYS = 10_000
PUTS = 1_000
TOPIC = "kv.bench"


# -- KV1: the compaction pass, in a child process ------------------------------------


def measure_compaction(server: Server | None, p: Params) -> Measurement:
    proc = spawn(python_module("hub.tools.compaction_bench", "--records", str(p.messages), "--keys", str(KEYS),
                               "--size", str(p.size), "--json"))  # fmt: skip
    try:
        assert proc.stdout is not None
        out, _ = proc.communicate(timeout=max(p.timeout, 600))
    finally:
        stop_process(proc)
    if proc.returncode:
        raise RuntimeError(f"hub.tools.compaction_bench exited with {proc.returncode}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return Measurement(figures={"compact": result["records_per_s"], "size": result["size_pct"]}, details=result)


# -- KV2: get and put latency on a view -------------------------------------------------


def _address(server: Server) -> str:
    host, port = server.address
    return f"{host}:{port}"


def _fill(address: str) -> None:
    with sdk.connect_blocking(address) as client:
        for start in range(0, KEYS, 1_000):
            for k in range(start, start + 1_000):
                client.publish(TOPIC, b"v%d" % k, key=b"k%05d" % k)
            client.flush()
        client.publish_acked(TOPIC, b"end", key=b"end")


def _percentiles(samples: list[float]) -> tuple[float, float]:
    samples.sort()
    return samples[len(samples) // 2], samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def _figures(gets: list[float], puts: list[float], **details: Any) -> Measurement:
    g50, g99 = _percentiles(gets)
    p50, p99 = _percentiles(puts)
    figures = {"get-p50": g50 * 1e6, "get-p99": g99 * 1e6, "put-p50": p50 * 1e3, "put-p99": p99 * 1e3}
    return Measurement(figures=figures, details={"gets": len(gets), "puts": len(puts), **details})


def _filled(server: Server | None, p: Params) -> tuple[str, list[bytes]]:
    """The hub's address once the topic holds every key, and the keys to ``get`` (random, fixed seed)."""
    assert server is not None
    address = _address(server)
    _fill(address)
    rng = random.Random(5)
    return address, [b"k%05d" % rng.randrange(KEYS) for _ in range(p.messages or 1)]


def measure_async_view(server: Server | None, p: Params) -> Measurement:
    address, keys = _filled(server, p)

    async def run() -> Measurement:
        gets: list[float] = []
        puts: list[float] = []
        clock = time.perf_counter
        async with sdk.connect(address) as client, client.kv(TOPIC) as kv:
            await kv.wait_caught_up()
            for key in keys:
                t0 = clock()
                value = await kv.get(key)
                gets.append(clock() - t0)
                assert value is not None
            for i in range(PUTS):
                t0 = clock()
                await kv.put(keys[i % len(keys)], b"p%d" % i)
                puts.append(clock() - t0)
        return _figures(gets, puts)

    return anyio.run(run)


def measure_blocking_view(server: Server | None, p: Params) -> Measurement:
    address, keys = _filled(server, p)
    gets: list[float] = []
    puts: list[float] = []
    clock = time.perf_counter
    with sdk.connect_blocking(address) as client, client.kv(TOPIC) as kv:
        kv.keys()  # caught up
        for key in keys:
            t0 = clock()
            value = kv.get(key)
            gets.append(clock() - t0)
            assert value is not None
        for i in range(PUTS):
            t0 = clock()
            kv.put(keys[i % len(keys)], b"p%d" % i)
            puts.append(clock() - t0)
    return _figures(gets, puts)


# -- KV3: appends while compaction runs ---------------------------------------------------


def measure_appends(server: Server | None, p: Params) -> Measurement:
    assert server is not None
    address = _address(server)
    n = p.messages or 1
    rng = random.Random(7)
    keys = [b"k%05d" % rng.randrange(KEYS) for _ in range(min(n, 100_000))]
    data = b"x" * p.size
    with sdk.connect_blocking(address) as client:
        before = client.status()["storage"].get("compaction", {}).get("passes", 0)
        started = time.perf_counter()
        for i in range(n):
            client.publish(TOPIC, data, key=keys[i % len(keys)])
            if i % 1_000 == 999:
                client.flush()
        client.publish_acked(TOPIC, data, key=b"end")
        seconds = time.perf_counter() - started
        after = client.status()["storage"].get("compaction", {}).get("passes", 0)
    details = {"messages": n, "seconds": round(seconds, 3), "passes_during": after - before}
    return Measurement(figures={"stored": n / seconds}, details=details)


_COMPACTING = ("--segment-bytes", str(1 << 20), "--compact", "kv.>", "--compact-check-seconds", "0.1",
               "--compact-tombstone-seconds", "0")  # fmt: skip
register_server("pub0sub-kv", lambda: Pub0subHub(*_COMPACTING, data_dir=True))
register_server("pub0sub-log-1mib", lambda: Pub0subHub("--segment-bytes", str(1 << 20), data_dir=True))

KV1 = register_scenario(Scenario(
    id="KV1", title=f"compaction: records/s of one pass over N records on {KEYS:,} keys, size after (% of before)",
    figures=(FigureSpec(name="compact", unit="records/s"), FigureSpec(name="size", unit="%", higher_is_better=False)),
    defaults=with_defaults(messages=1_000_000, quick_messages=20_000),
))  # fmt: skip
register_method("KV1", Method(system="pub0sub", method="storage", measure=measure_compaction,
                              tooling="python -m hub.tools.compaction_bench (the hub's storage code)"))  # fmt: skip

KV2 = register_scenario(Scenario(
    id="KV2", title=f"KV view on a compacted topic of {KEYS:,} keys: get latency (µs), put latency (ms)",
    figures=(FigureSpec(name="get-p50", unit="µs", higher_is_better=False),
             FigureSpec(name="get-p99", unit="µs", higher_is_better=False),
             FigureSpec(name="put-p50", unit="ms", higher_is_better=False),
             FigureSpec(name="put-p99", unit="ms", higher_is_better=False)),
    defaults=with_defaults(messages=100_000, quick_messages=2_000),
))  # fmt: skip
register_method("KV2", Method(system="pub0sub", method="async", server="pub0sub-kv", measure=measure_async_view,
                              tooling="sdk.connect + client.kv(topic)"))  # fmt: skip
register_method("KV2", Method(system="pub0sub", method="blocking", server="pub0sub-kv", measure=measure_blocking_view,
                              tooling="sdk.connect_blocking + client.kv(topic)"))  # fmt: skip

KV3 = register_scenario(Scenario(
    id="KV3", title="appends while compaction runs: msgs/s stored by one SDK publisher, 1 MiB segments",
    figures=(FigureSpec(name="stored", unit="msgs/s"),),
    defaults=with_defaults(messages=1_000_000, quick_messages=20_000),
))  # fmt: skip
register_method("KV3", Method(system="pub0sub", method="compacting", server="pub0sub-kv", measure=measure_appends,
                              tooling="blocking client publish, --compact kv.> every 0.1 s"))  # fmt: skip
register_method("KV3", Method(system="pub0sub", method="plain", server="pub0sub-log-1mib", measure=measure_appends,
                              tooling="blocking client publish, no --compact"))  # fmt: skip
