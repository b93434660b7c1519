"""The overlay test bed's judge (sdk/tools/testbed_report.py): what it counts as lost, twice, out of order.

The test bed itself starts tens of hub processes (``pub0sub testbed``, a command); its summary
is a pure function of what publishers and subscribers recorded, checked here on records made
by hand.
"""

from __future__ import annotations

from sdk.tools.testbed_report import Publisher, Received, Settings, Subscriber, render, summarize


def _run(got: list[tuple[str, int]]) -> dict:
    pub = Publisher(index=0, hub=0, topics=["t.a", "t.b"], acked=[("t.a", 1, 10.0), ("t.b", 2, 10.1), ("t.a", 3, 10.2)])
    sub = Subscriber(hub=1, topics=["t.a"], subscribed_at=9.0)
    sub.got = [(topic, Received(at=10.5, publisher=0, seq=seq, sent=10.0)) for topic, seq in got]
    return summarize(Settings(hubs=3), {"traffic_started_at": 10.0}, [pub], [sub], [])


def test_every_acked_publish_of_a_subscribed_topic_is_expected_once_in_order() -> None:
    report = _run([("t.a", 1), ("t.a", 3)])
    d = report["delivery"]
    assert (d["expected"], d["delivered"], d["duplicates"], d["fifo_violations"]) == (2, 2, 0, 0)
    assert d["ratio"] == 1.0
    assert report["latency_ms"]["p50"] == 500.0
    assert "delivery 1.00000 (2/2" in render(report)


def test_a_lost_a_repeated_and_a_reordered_message_are_each_counted() -> None:
    assert _run([("t.a", 3)])["delivery"]["delivered"] == 1  # 1 lost
    assert _run([("t.a", 1), ("t.a", 1), ("t.a", 3)])["delivery"]["duplicates"] == 1
    assert _run([("t.a", 3), ("t.a", 1)])["delivery"]["fifo_violations"] == 1


def test_slow_deliveries_are_put_down_to_the_fault_their_publish_followed() -> None:
    pub = Publisher(index=0, hub=0, topics=["t"], acked=[("t", seq, 100.0 + seq) for seq in range(1, 5)])
    sub = Subscriber(hub=1, topics=["t"], subscribed_at=99.0)
    # sent at 101 (no fault yet), 102 and 103 (after the crash at 101.5), 104 (after the stall at 103.5);
    # taken: 20 ms, 300 ms, 50 ms, 900 ms
    sub.got = [("t", Received(at=100.0 + seq + took, publisher=0, seq=seq, sent=100.0 + seq))
               for seq, took in ((1, 0.02), (2, 0.3), (3, 0.05), (4, 0.9))]  # fmt: skip
    faults = [{"kind": "crash", "at": 101.5, "hub": "hub-3"}, {"kind": "stall", "at": 103.5, "hub": "hub-4"}]
    report = summarize(Settings(hubs=5), {"traffic_started_at": 100.0}, [pub], [sub], faults)
    late = report["slow_deliveries"]
    assert (late["slow"], late["of"], late["share"]) == (2, 4, 0.5)
    assert late["after"] == {"crash": {"count": 1, "p50_ms": 300.0}, "stall": {"count": 1, "p50_ms": 900.0}}
    assert "deliveries > 100 ms: 2 of 4 (50.00%; " in render(report)
    assert "1 after a crash (median 300 ms), 1 after a stall (median 900 ms)" in render(report)


def test_slow_seconds_say_how_busy_the_machine_was_then_and_otherwise() -> None:
    pub = Publisher(index=0, hub=0, topics=["t"], acked=[("t", seq, 100.0 + seq) for seq in range(1, 4)])
    sub = Subscriber(hub=1, topics=["t"], subscribed_at=99.0)
    sub.got = [("t", Received(at=100.0 + seq + took, publisher=0, seq=seq, sent=100.0 + seq))
               for seq, took in ((1, 0.5), (2, 0.01), (3, 0.01))]  # fmt: skip
    figures = {"traffic_started_at": 100.0, "machine_busy": [(1, 0.97), (2, 0.4), (3, 0.5)]}
    report = summarize(Settings(hubs=5), figures, [pub], [sub], [])
    assert [p["machine_busy"] for p in report["timeline"]] == [0.97, 0.4, 0.5]
    assert report["slow_seconds"]["machine_busy_median"] == {"slow": 0.97, "others": 0.5}
    assert "machine busy (its cores, median): 97% in slow seconds, 50% in the others" in render(report)
