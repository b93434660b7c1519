"""``Client.publish_encoded`` (the async client) sends the frames per-message ``publish`` sends.

Records already in the wire layout go through the same buffer code as in the blocking client
(``PublishBuffer.add_encoded``, tests/test_spark_sink.py compares it with ``add`` byte for byte);
here the async client's own path is compared on the wire: two clients publish the same runs of
records to a real hub through recording relays, one message at a time and as encoded regions,
and the frames each sent must be equal but for the producer id, each client's own (hypothesis
picks the records, the runs, the headers and where frames fill).  The hub stores both: the acked
publish that ends each run is answered with an offset only once every frame before it was
accepted.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sdk
import wire
from tests.support.client_protocol import frames_of
from tests.support.hubprocess import HubProcess
from tests.support.recorder import Recorder

Record = tuple[bytes | None, bytes]
Run = tuple[str, dict[str, str] | None, list[Record]]
MAX_BODY = 6000


@pytest.fixture(scope="module")
def small_frames_hub() -> Iterator[HubProcess]:
    """A hub whose frame limit is small enough that records meet it as well as ``flush_bytes``."""
    hub = HubProcess("--max-body", str(MAX_BODY))
    yield hub
    hub.stop()


records = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from([b"", b"k1", b"key-22"])),
        st.sampled_from([0, 1, 7, 300, 1500]).flatmap(lambda n: st.binary(min_size=n, max_size=n)),
    ),
    min_size=0,
    max_size=30,
)
runs = st.lists(
    st.tuples(st.sampled_from(["a", "b", "orders.eu"]), st.sampled_from([None, {"trace": "4bf9"}]), records),
    min_size=1,
    max_size=5,
)


def sent_by(recorder: Recorder) -> list[Any]:
    """The frames the client sent, PUBLISH with its producer id left out."""
    frames = frames_of(b"".join(data for from_client, data in recorder.close() if from_client))
    return [dataclasses.replace(f, producer_id=0) if isinstance(f, wire.Publish) else f for f in frames]


async def publish_runs(hub: HubProcess, runs: list[Run], flush: int, *, encoded: bool) -> list[Any]:
    recorder = Recorder((hub.host, hub.port))
    # A fresh producer id each time: the hub would take a repeated one's frames for resends.
    producer_id = int.from_bytes(os.urandom(7)) + 1
    address = f"127.0.0.1:{recorder.port}"
    async with sdk.connect(address, producer_id=producer_id, flush_bytes=flush, reconnect=None) as client:
        for topic, headers, batch in runs:
            if encoded:
                count, region = wire.encode_records((key or b"", data) for key, data in batch)
                ends = [0]
                for key, data in batch:
                    ends.append(ends[-1] + 6 + len(key or b"") + len(data))
                assert await client.publish_encoded(topic, region, ends, headers=headers) == count
            else:
                for key, data in batch:
                    await client.publish(topic, data, key=key, headers=headers)
        # The tail still buffered goes now, on both paths alike: left to the background flusher it
        # may or may not join the acked publish's frame, as the tasks happen to be scheduled (a
        # hub that answered sooner made the two paths differ there, and only there).
        await client.flush()
        ack = await client.publish_acked("a", b"end")
        assert not ack.duplicate and ack.offsets["a"] >= 0
    return sent_by(recorder)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=runs, flush=st.sampled_from([1, 700, 4096, 65536]))
# A tail left after a full frame, then another run: the flusher woken by the first run's tail
# must not frame the second run's tail while the second run's frames are being written.
@example(runs=[("a", None, [(None, bytes(1500)), (None, b"")])] * 8, flush=700)
def test_publish_encoded_sends_the_frames_publish_sends(
    small_frames_hub: HubProcess, runs: list[Run], flush: int
) -> None:
    async def both() -> tuple[list[Any], list[Any]]:
        one_by_one = await publish_runs(small_frames_hub, runs, flush, encoded=False)
        encoded = await publish_runs(small_frames_hub, runs, flush, encoded=True)
        return one_by_one, encoded

    one_by_one, encoded = anyio.run(both, backend="trio")
    assert encoded == one_by_one
    publishes = [f for f in encoded if isinstance(f, wire.Publish)]
    assert sum(s.count for p in publishes for s in p.sets) == sum(len(b) for _, _, b in runs) + 1
