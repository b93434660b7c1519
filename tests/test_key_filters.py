"""Key filters (Ray's key subscriptions): the hub that delivers sends only the keys asked for.

The matcher against a plain per-record reference (hypothesis), then the hub's core with every
kind of subscription (live, replay, durable with acks, group), the refusals, and the SDK
against real hubs, across a 2-hub mesh too: the subscriber's hub filters.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import sdk
import wire
from hub.core.key_filters import KeyMatcher, matcher_of, segments
from hub.storage.batches import SharedBatch
from tests.support.cluster import Cluster, publish_until_linked
from tests.support.corehub import CoreHub
from tests.support.hubprocess import HubProcess

KEYS = [b"", b"a", b"ab", b"abc", b"b", b"ba", b"user-1", b"user-2"]

# -- the matcher against a reference -----------------------------------------------------------


def reference_runs(f: wire.KeyFilter, records: bytes) -> list[tuple[int, int]]:
    """(first record, count) of each run of selected records, one record at a time."""
    selected = [f.all or k in f.keys or any(k.startswith(p) for p in f.prefixes) for k, _ in wire.iter_records(records)]
    runs: list[tuple[int, int]] = []
    for i, hit in enumerate(selected):
        if hit:
            if runs and sum(runs[-1]) == i:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((i, 1))
    return runs




@st.composite
def uniform_regions(draw: st.DrawFn) -> list[tuple[bytes, bytes]]:
    """Every key of one length, every data of one length: the ``bytes.find`` path."""
    key_len = draw(st.integers(0, 3))
    data = b"x" * draw(st.integers(0, 3))
    same_length = [k for k in (*KEYS, b"aa", b"abz", b"zzz") if len(k) == key_len]
    return [(k, data) for k in draw(st.lists(st.sampled_from(same_length), min_size=1, max_size=40))]


regions = st.one_of(
    uniform_regions(),
    # varied sizes: the record-by-record path
    st.lists(st.tuples(st.sampled_from(KEYS), st.binary(max_size=3)), min_size=1, max_size=40),
)
filters = st.builds(
    wire.KeyFilter,
    all=st.booleans(),
    keys=st.lists(st.sampled_from(KEYS), max_size=10).map(tuple),
    prefixes=st.lists(st.sampled_from([b"", b"a", b"ab", b"user-", b"z"]), max_size=3).map(tuple),
)


@settings(max_examples=400, deadline=None)
@given(records=regions, f=filters)
def test_runs_equal_a_per_record_reference(records: list[tuple[bytes, bytes]], f: wire.KeyFilter) -> None:
    count, region = wire.encode_records(records)
    matcher = matcher_of(f)
    want = reference_runs(f, region)
    if matcher is None:
        assert f.all and want == [(0, count)]
        return
    got = matcher.runs(region)
    assert [(first, n) for first, n, _, _ in got] == want
    # the byte ranges are exactly those records
    for first, n, start, stop in got:
        assert list(wire.iter_records(region[start:stop])) == records[first : first + n]


def test_segments_cover_the_whole_batch_in_order() -> None:
    count, region = wire.encode_records([(k, b"d") for k in (b"a", b"b", b"a", b"a", b"c")])
    batch = SharedBatch("t", 10, 1, 7, 100, count, region, b"")
    got = [(None if run is None else (run.base_offset, run.count, run.origin_seq), end)
           for run, end in segments(KeyMatcher(frozenset({b"a"}), ()), batch)]  # fmt: skip
    assert got == [((10, 1, 100), 11), (None, 12), ((12, 2, 102), 14), (None, 15)]


def test_the_filter_follows_the_last_command_about_each_entry() -> None:
    f = wire.KeyFilter(keys=(b"a",))
    f = f.apply(wire.KeyOp.ADD, wire.KeyFilter(keys=(b"b",), prefixes=(b"u-",)))
    f = f.apply(wire.KeyOp.REMOVE, wire.KeyFilter(keys=(b"a", b"zz")))
    assert (f.all, f.keys, f.prefixes) == (False, (b"b",), (b"u-",))
    f = f.apply(wire.KeyOp.ADD, wire.KeyFilter(all=True))
    assert matcher_of(f) is None  # every key
    f = f.apply(wire.KeyOp.REMOVE, wire.KeyFilter(all=True))
    assert (f.all, f.keys) == (False, (b"b",))  # the entries added before "every key" are still there
    assert f.apply(wire.KeyOp.SET, wire.KeyFilter()) == wire.KeyFilter()


# -- the hub's core ----------------------------------------------------------------------------------


def publish_keys(client: object, topic: str, keys: list[bytes], sequence: int = 0) -> None:
    mset = wire.MessageSet.build((topic,), [(k, k + b"!") for k in keys])
    client.send(wire.Publish(sequence=sequence, sets=(mset,)))  # type: ignore[attr-defined]


def keys_of(client: object) -> list[tuple[int, bytes]]:
    out = []
    for frame in client.take():  # type: ignore[attr-defined]
        if isinstance(frame, wire.Deliver):
            out += [(off, key) for off, key, _ in frame.batch.messages()]
    return out


def test_a_live_subscription_gets_only_its_keys_and_changes_them_live() -> None:
    hub = CoreHub()
    sub = hub.connect()
    sub.send(wire.Sub(sub_id=1, patterns=("t",), key_filter=wire.KeyFilter(keys=(b"a",))))
    sub.expect(wire.SubOk)
    pub = hub.connect()
    publish_keys(pub, "t", [b"a", b"b", b"a", b"c", b"", b"a"])
    assert keys_of(sub) == [(0, b"a"), (2, b"a"), (5, b"a")]
    sub.send(wire.KeyFilterUpdate(sub_id=1, op=wire.KeyOp.ADD, filter=wire.KeyFilter(keys=(b"",), prefixes=(b"c",))))
    sub.expect(wire.SubOk)
    publish_keys(pub, "t", [b"a", b"b", b"cc", b""])
    assert keys_of(sub) == [(6, b"a"), (8, b"cc"), (9, b"")]
    sub.send(wire.KeyFilterUpdate(sub_id=1, op=wire.KeyOp.REMOVE, filter=wire.KeyFilter(keys=(b"a", b""))))
    sub.expect(wire.SubOk)
    publish_keys(pub, "t", [b"a", b"c1", b""])
    assert keys_of(sub) == [(11, b"c1")]
    sub.send(wire.KeyFilterUpdate(sub_id=1, op=wire.KeyOp.SET, filter=wire.KeyFilter(all=True)))
    sub.expect(wire.SubOk)
    publish_keys(pub, "t", [b"x", b"y"])
    assert keys_of(sub) == [(13, b"x"), (14, b"y")]
    assert sub.session.subs[1].status()["keys"] == {"all": True, "keys": 0, "prefixes": 0}


def test_replay_and_a_durable_subscription_skip_what_they_filter_and_move_past_it(tmp_path: Path) -> None:
    hub = CoreHub(tmp_path)
    pub = hub.connect()
    publish_keys(pub, "t", [b"a", b"b", b"b", b"a", b"b"])
    reader = hub.connect()
    reader.send(wire.Sub(sub_id=1, patterns=("t",), start=wire.StartPosition.EARLIEST, durable="d",
                         ack_mode=wire.AckMode.EXPLICIT, key_filter=wire.KeyFilter(keys=(b"a",))))  # fmt: skip
    reader.expect(wire.SubOk)
    hub.pump()
    assert keys_of(reader) == [(0, b"a"), (3, b"a")]
    reader.send(wire.Ack(sub_id=1, ranges=(wire.AckRange(topic="t", first_offset=0, last_offset=0),)))
    hub.pump()
    state = hub.core.consumers.get("durable", "d")  # type: ignore[union-attr]
    assert state.positions["t"].floor == 3  # 0 acked, 1-2 skipped (settled), 3 delivered and pending
    reader.send(wire.Ack(sub_id=1, ranges=(wire.AckRange(topic="t", first_offset=3, last_offset=3),)))
    hub.pump()
    assert state.positions["t"].floor == 5  # offset 4 (key b) was never delivered and counts as done
    hub.close()


def test_a_group_shares_its_filter_and_settles_what_it_skips(tmp_path: Path) -> None:
    hub = CoreHub(tmp_path)
    publish_keys(hub.connect(), "t", [b"a", b"b", b"a", b"b"])
    only_a = wire.KeyFilter(keys=(b"a",))
    first, second, other = hub.connect(), hub.connect(), hub.connect()
    for client in (first, second):
        client.send(wire.Sub(sub_id=1, patterns=("t",), group="g", start=wire.StartPosition.EARLIEST,
                             key_filter=only_a))  # fmt: skip
        client.expect(wire.SubOk)
    other.send(wire.Sub(sub_id=1, patterns=("t",), group="g", key_filter=wire.KeyFilter(keys=(b"b",))))
    end = other.expect(wire.SubEnd)
    assert end.code is wire.ErrorCode.UNEXPECTED_FRAME and "same key filter" in end.reason
    hub.pump()
    got = keys_of(first) + keys_of(second)
    assert sorted(got) == [(0, b"a"), (2, b"a")]
    for client, offsets in ((first, got), (second, got)):
        ranges = tuple(wire.AckRange(topic="t", first_offset=o, last_offset=o) for o, _ in offsets)
        client.send(wire.Ack(sub_id=1, ranges=ranges))
    hub.pump()
    state = hub.core.consumers.get("group", "g")  # type: ignore[union-attr]
    assert state.positions["t"].floor == 4
    first.send(wire.KeyFilterUpdate(sub_id=1, op=wire.KeyOp.ADD, filter=wire.KeyFilter(keys=(b"b",))))
    end = first.expect(wire.SubEnd)
    assert end.code is wire.ErrorCode.UNEXPECTED_FRAME
    hub.close()


def test_refusals() -> None:
    hub = CoreHub()
    new = hub.connect()
    new.send(wire.KeyFilterUpdate(sub_id=9, op=wire.KeyOp.ADD, filter=wire.KeyFilter()))
    assert new.expect(wire.SubEnd).code is wire.ErrorCode.UNKNOWN_SUBSCRIPTION
    for frame, code in (
        (wire.Sub(sub_id=1, patterns=("t",), key_filter=wire.KeyFilter(keys=(b"a",))), wire.ErrorCode.MALFORMED_FRAME),
        (wire.KeyFilterUpdate(sub_id=1, op=wire.KeyOp.ADD, filter=wire.KeyFilter()), wire.ErrorCode.UNEXPECTED_FRAME),
    ):
        old = hub.connect(greet=False)
        old.send(wire.Hello(version=2, client_name="v2"))
        old.expect(wire.Welcome)
        old.send(frame)
        assert old.expect(wire.Error).code is code


# -- the SDK and real hubs ---------------------------------------------------------------------------


def test_sdk_keys_live_from_the_log_and_changed_live(start_hub: object, tmp_path: Path) -> None:
    hub: HubProcess = start_hub("--data-dir", str(tmp_path / "data"))  # type: ignore[operator]

    async def scenario() -> None:
        async with sdk.connect(hub.address) as client, client.subscribe("actors", keys=[b"actor-7"]) as live:
            for i in range(20):
                await client.publish("actors", b"%d" % i, key=b"actor-%d" % (i % 10))
            await client.flush()
            got = [await live.__anext__() for _ in range(2)]
            assert [(m.key, m.data) for m in got] == [(b"actor-7", b"7"), (b"actor-7", b"17")]
            await live.add_keys("actor-1", prefixes=["zz-"])
            await live.remove_keys(b"actor-7")
            await client.publish("actors", b"x", key=b"actor-7")
            await client.publish("actors", b"y", key=b"actor-1")
            await client.publish("actors", b"z", key=b"zz-top")
            got = [await live.__anext__() for _ in range(2)]
            assert [(m.key, m.data) for m in got] == [(b"actor-1", b"y"), (b"zz-top", b"z")]

    anyio.run(scenario, backend="trio")
    with (
        sdk.connect_blocking(hub.address) as client,
        client.subscribe("actors", start="earliest", key_prefixes=["actor-3"]) as sub,
    ):
        got = [sub.next(timeout=10) for _ in range(2)]
        assert [(m.offset, m.data) for m in got] == [(3, b"3"), (13, b"13")]
        sub.set_keys(b"zz-top")
        client.publish("actors", b"again", key=b"zz-top")
        client.publish("actors", b"not this", key=b"actor-3")
        client.flush()
        assert sub.next(timeout=10).data == b"again"
        assert sub.next(timeout=0.5) is None


@pytest.mark.slow
def test_across_a_two_hub_mesh_the_subscribers_hub_filters(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        a, b = cluster.start(2)
        cluster.wait_converged(timeout=30)

        async def scenario() -> None:
            async with (
                sdk.connect(b.address) as sub_client,
                sub_client.subscribe("ray.actors", keys=[b"actor-42"]) as sub,
                sdk.connect(a.address) as pub,
            ):
                await publish_until_linked(pub, sub, "ray.actors", key=b"actor-42")
                for i in range(10_000):
                    await pub.publish("ray.actors", b"%d" % i, key=b"actor-%d" % i)
                await pub.publish_acked("ray.actors", b"last", key=b"actor-42")
                got = [await sub.__anext__() for _ in range(2)]
                assert [(m.key, m.data) for m in got] == [(b"actor-42", b"42"), (b"actor-42", b"last")]
                with trio.move_on_after(0.5):
                    extra = await sub.__anext__()
                    raise AssertionError(f"a message the filter refuses arrived: {extra}")

        trio.run(scenario)
        # Every message crossed to b and was stored there; only two left b for the subscriber.
        topics = {t["topic"]: t for t in b.status()["topic_list"]}
        assert topics["ray.actors"]["next_offset"] >= 10_002
