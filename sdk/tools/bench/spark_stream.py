"""S2: a Structured Streaming query from a topic to another topic, end-to-end rows/s and latency.

The query (:class:`sdk.tools.spark_runs.pipeline.Streams`, without its Parquet half) reads topic
``bench`` from the hub with the ``pub0sub`` source, stamps each value with its input timestamp,
and writes it with the ``pub0sub`` sink to a fresh output topic on the same hub, micro-batch after
micro-batch (no trigger interval).  Once it runs and a warm-up burst went through, the raw
publisher sends ``messages`` records as fast as it can.  Measured from the hub's own timestamps:

* ``rows``: messages / (last output append time - first input publish time);
* ``p50``/``p99``: publish-to-output latency per message (output append time minus the input's
  timestamp carried in the value).  With an unpaced publisher this is mostly queueing: what waits
  for the next micro-batch while the current one runs.

The ``-narrow`` methods read only the columns the query uses (``key,value,timestamp``) with the
source's option ``columns``; the others read all seven.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from ..spark_runs.pipeline import QUERY_COLUMNS, Streams, latency_percentiles, next_offsets, read_topic
from .peers import Server
from .registry import Method, Params, Scenario, register_method, register_scenario, with_defaults
from .results import FigureSpec, Measurement
from .spark import TOOLING, columns_tooling, hub_address, master_of, publish_raw, session_for, unavailable, variants
from .wireproto import CHANNEL

WARM_UP_MESSAGES = 10_000
POLL = 0.05


def _wait_for(address: str, topic: str, count: int, timeout: float, streams: Streams) -> None:
    deadline = time.monotonic() + timeout
    while next_offsets(address).get(topic, 0) < count:
        streams.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"S2: {topic} has {next_offsets(address).get(topic, 0)} of {count} after {timeout:g}s")
        time.sleep(POLL)


def _s2(which: str, columns: str | None) -> Callable[[Server | None, Params], Measurement]:
    def measure(server: Server | None, p: Params) -> Measurement:
        assert p.messages is not None
        address, master = hub_address(server), master_of(server, which)
        spark = session_for(master, "pub0sub-bench-S2")
        # Start at the input's current end: earlier repeats' messages are not this one's.
        topic = CHANNEL
        start = next_offsets(address).get(topic, 0)
        out = f"bench.out.{uuid.uuid4().hex[:8]}"
        root = Path(tempfile.mkdtemp(prefix="pub0sub-bench-s2-"))
        streams = Streams(spark, address, address, out, root, {"processingTime": "0 seconds"},
                          topics=("subscribe", topic), starting=json.dumps({topic: start}),
                          parquet_too=False, columns=columns)  # fmt: skip
        try:
            streams.start()
            publish_raw(address, WARM_UP_MESSAGES, p.size, p.timeout)  # executors' Python workers start here
            _wait_for(address, out, WARM_UP_MESSAGES, p.timeout * 3, streams)
            _, first, last = publish_raw(address, p.messages, p.size, p.timeout)
            _wait_for(address, out, WARM_UP_MESSAGES + p.messages, p.timeout * 3, streams)
        finally:
            streams.stop()
            shutil.rmtree(root, ignore_errors=True)
        rows = read_topic(address, out)[WARM_UP_MESSAGES:]
        stamps = [int(value.rpartition(b"@")[2]) for _, value, _ in rows]
        seconds = (max(ts for _, _, ts in rows) - min(stamps)) / 1e6
        latency = latency_percentiles([ts - stamp for (_, _, ts), stamp in zip(rows, stamps, strict=True)])
        if len(rows) != last - first:
            raise RuntimeError(f"S2: {len(rows)} rows came out for {last - first} published")
        figures = {"rows": len(rows) / seconds}
        for name in ("p50", "p99"):
            value = latency[f"latency_{name}_ms"]
            if value is not None:
                figures[name] = value
        details = {"rows": len(rows), "seconds": round(seconds, 3), "master": master,
                   "batches": len(streams.batches.get(f"{out}-topic", [])), "columns": columns or "all"}  # fmt: skip
        return Measurement(figures=figures, details=details)

    return measure


S2 = register_scenario(Scenario(
    id="S2", title="Spark streaming topic -> pub0sub sink, end-to-end rows/s and publish-to-output latency",
    figures=(FigureSpec(name="rows", unit="rows/s"), FigureSpec(name="p50", unit="ms", higher_is_better=False),
             FigureSpec(name="p99", unit="ms", higher_is_better=False)),
    defaults=with_defaults(messages=1_000_000, quick_messages=20_000),
))  # fmt: skip
for _suffix, _which, _narrow in variants():
    _columns = QUERY_COLUMNS if _narrow else None
    register_method("S2", Method(
        system="pub0sub", method=f"spark-{_suffix}", server="pub0sub-log+spark", measure=_s2(_which, _columns),
        unavailable=unavailable,
        tooling=f"raw PUBLISH frames -> hub -> readStream.format('pub0sub') ({columns_tooling(_columns)}) -> "
                f"writeStream.format('pub0sub') -> same hub; {TOOLING[_which]}, one micro-batch after another",
    ))  # fmt: skip
