"""The delivering side's stream state (hub/core/overlay/streams.py) driven directly: chains,
hold-back, gaps, and what HEADS and REPAIRED from the origin do to them; and the origin's answer.

The simulator and the real-hub tests reach these states only under particular timings (a
HEADS that lands while a repair is under way took a loaded machine and a publisher's hub
restart); here each is set up exactly.
"""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

import wire
from hub.core.mesh.overlay_store import OverlayLogStore
from hub.core.overlay.after_changes import HeadsRounds
from hub.core.overlay.origin import OriginSide
from hub.core.overlay.stream_state import Held, HeldSets, RepairAsk
from hub.core.overlay.streams import SHORT_ANSWERS_MAX, Streams
from wire.frames.mesh_v3 import routed_sets_frame, routed_sets_payload

ORIGIN = 0x0A
TOPIC = "ov.b"
KEY = "ov"


def streams() -> Streams:
    s = Streams(stored_position=lambda origin, topic: 0, save_since=lambda since: None, hold_max_bytes=1 << 20)
    s.joined(ORIGIN, KEY, 0, now=0.0)
    return s


def a_set(first: int, count: int, prev: int) -> wire.RoutedSet:
    messages = wire.MessageSet.build([TOPIC], [(b"", b"m%d" % n) for n in range(first, first + count)])
    return wire.RoutedSet(origin_seq=first, timestamp=0, messages=messages, prevs=(prev,))


def wants(topic: str) -> bool:
    return topic == TOPIC


def delivered(s: Streams) -> list[int]:
    return [f.origin_seq for _, f in s.take_ready()]


def test_a_gap_is_asked_and_its_repair_releases_what_waited() -> None:
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0),), wants, now=1.0)
    s.receive(ORIGIN, (a_set(5, 2, 4),), wants, now=1.0)  # 3..4 lost
    assert delivered(s) == [1]
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 2, 4)]
    s.receive(ORIGIN, (a_set(3, 2, 2),), wants, now=1.5)
    assert delivered(s) == [3, 5]
    assert s.open_gaps() == 0 and s.take_asks() == []


def test_heads_while_a_gap_is_open_still_bring_the_tail() -> None:
    """The origin says its topic ends at 10 while 3..4 are being repaired: once they are, the
    tail 7..10 (lost with nothing after it) is asked for too, not forgotten."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(5, 2, 4)), wants, now=1.0)
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 2, 4)]
    s.heads(ORIGIN, (wire.Head(topic=TOPIC, last=10),), wants, now=1.2)
    s.receive(ORIGIN, (a_set(3, 2, 2),), wants, now=1.5)  # the repair
    assert delivered(s) == [1, 3, 5]
    assert [(a.after, a.upto) for a in s.take_asks()][-1] == (6, 10)
    s.receive(ORIGIN, (a_set(7, 4, 6),), wants, now=2.0)
    assert delivered(s) == [7]
    assert s.open_gaps() == 0


def test_heads_while_a_gap_is_open_are_kept_when_the_repair_comes_back_empty() -> None:
    """The gap 3..4 is given up (the origin no longer had it), the head 10 still stands."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(5, 2, 4)), wants, now=1.0)
    s.take_asks()
    s.heads(ORIGIN, (wire.Head(topic=TOPIC, last=10),), wants, now=1.2)
    s.repaired(ORIGIN, TOPIC, upto=4, missing=2, now=1.5)
    assert delivered(s) == [1, 5]
    assert [(a.after, a.upto) for a in s.take_asks()][-1] == (6, 10)
    assert s.counters.messages_lost == 2


def test_a_resent_set_held_behind_a_start_that_moved_earlier_is_delivered() -> None:
    """The origin said the stream starts after 1, then (a second JOINED) after 0.  Its repair of
    1..2 resends set 2 chained from 1; by then the gap is 0..1, so the set waits; the REPAIRED
    that follows it neither skips it nor delivers it over set 1: set 1 is asked for, and set 2
    follows it."""
    s = Streams(stored_position=lambda origin, topic: 0, save_since=lambda since: None, hold_max_bytes=1 << 20)
    s.joined(ORIGIN, KEY, 1, now=0.0)
    s.heads(ORIGIN, (wire.Head(topic=TOPIC, last=2),), wants, now=0.1)
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 1, 2)]
    s.joined(ORIGIN, KEY, 0, now=0.2)
    s.receive(ORIGIN, (a_set(2, 1, 1),), wants, now=0.3)  # the repair's set, chained from 1
    assert delivered(s) == [] and s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 0, 1)]
    s.repaired(ORIGIN, TOPIC, upto=2, missing=0, now=0.3)
    assert delivered(s) == [] and s.open_gaps() == 1
    s.receive(ORIGIN, (a_set(1, 1, 0),), wants, now=0.4)  # the second ask's answer
    s.repaired(ORIGIN, TOPIC, upto=1, missing=0, now=0.4)
    assert delivered(s) == [1, 2] and s.open_gaps() == 0 and s.counters.messages_lost == 0


def test_a_repaired_that_overtook_its_sets_skips_nothing() -> None:
    """REPAIRED comes while its gap is still open and the origin said nothing was missing (its
    resent sets were lost on the way, or are on a slower path): the set held past the gap is
    not delivered over it (that lost 27,900 acknowledged messages in a ten-hub run whose
    publisher's hub was killed mid-repair); the gap is asked again, and the resent sets, when
    they come, go first."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(51, 10, 50)), wants, now=1.0)  # 3..50 lost
    assert delivered(s) == [1] and s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 2, 50)]
    s.repaired(ORIGIN, TOPIC, upto=50, missing=0, now=1.1)
    assert delivered(s) == [] and s.open_gaps() == 1 and s.counters.gaps_lost == 0
    assert s.counters.repairs_short == 1
    s.tick(2.0, reachable=lambda origin: True, retry=1.0, retry_max=8.0, give_up=60.0)
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 2, 50)]
    s.receive(ORIGIN, (a_set(3, 20, 2),), wants, now=2.1)  # part of the answer ...
    assert delivered(s) == [3] and s.open_gaps() == 1
    s.tick(4.1, reachable=lambda origin: True, retry=1.0, retry_max=8.0, give_up=60.0)
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 22, 50)]  # ... so the next ask is for the rest
    s.receive(ORIGIN, (a_set(23, 28, 22),), wants, now=4.2)
    assert delivered(s) == [23, 51] and s.open_gaps() == 0
    assert s.counters.gaps_lost == 0 and s.counters.messages_lost == 0


def test_what_the_origin_lacks_is_counted_when_its_resent_sets_already_closed_the_gap() -> None:
    """The origin's log lost 23..32: it resends 3..22 and 33..50 chained across the hole, which
    closes the gap before its REPAIRED (missing 10) arrives.  The 10 are counted lost once, also
    when a retried ask's answer says so again."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(51, 10, 50)), wants, now=1.0)  # 3..50 lost
    s.take_asks()
    s.receive(ORIGIN, (a_set(3, 20, 2), a_set(33, 18, 22)), wants, now=1.1)
    s.repaired(ORIGIN, TOPIC, upto=50, missing=10, now=1.1)
    s.repaired(ORIGIN, TOPIC, upto=50, missing=10, now=2.1)
    assert delivered(s) == [1, 3, 33, 51] and s.open_gaps() == 0
    assert s.counters.messages_lost == 10 and s.counters.gaps_lost == 0


def test_a_repaired_with_messages_missing_that_overtook_its_resent_sets_skips_nothing() -> None:
    """The origin lacks 23..32 and resent the rest, but its REPAIRED comes first (the resent sets
    are on a slower path): the gap has not moved since it was asked, so the held set is not
    delivered over the resent sets; they come, in order, and the 10 are counted lost once."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(51, 10, 50)), wants, now=1.0)
    assert delivered(s) == [1] and s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 2, 50)]
    s.repaired(ORIGIN, TOPIC, upto=50, missing=10, now=1.1)
    assert delivered(s) == [] and s.open_gaps() == 1 and s.counters.repairs_short == 1
    s.receive(ORIGIN, (a_set(3, 20, 2), a_set(33, 18, 22)), wants, now=1.2)
    assert delivered(s) == [3, 33, 51] and s.open_gaps() == 0
    assert s.counters.messages_lost == 10 and s.counters.gaps_lost == 0


def test_a_repaired_with_messages_missing_that_came_between_its_resent_sets_skips_nothing() -> None:
    """The origin lacks 23..32; its resent 3..22 came, but 33..50 are on a slower path than its
    REPAIRED: the gap moved (to 22) and is still open.  The held set is not delivered over the
    late sets: the rest is asked again, and they come first."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(51, 10, 50)), wants, now=1.0)
    s.take_asks()
    s.receive(ORIGIN, (a_set(3, 20, 2),), wants, now=1.1)
    s.repaired(ORIGIN, TOPIC, upto=50, missing=10, now=1.1)
    assert delivered(s) == [1, 3] and s.open_gaps() == 1 and s.counters.gaps_lost == 0
    s.tick(2.1, reachable=lambda origin: True, retry=1.0, retry_max=8.0, give_up=60.0)
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 22, 50)]
    s.receive(ORIGIN, (a_set(33, 18, 22),), wants, now=2.2)
    assert delivered(s) == [33, 51] and s.open_gaps() == 0
    assert s.counters.messages_lost == 10 and s.counters.gaps_lost == 0


def test_an_origin_that_lacks_the_end_of_a_range_has_it_given_up_once_it_says_so() -> None:
    """The origin lacks 43..50 (the end of the range): its resent 3..42 came, the gap stays
    open at 42, and the rest is asked again; its answer says all of that is missing, so the gap
    is given up at once and the held set goes."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(51, 10, 50)), wants, now=1.0)
    s.take_asks()
    s.receive(ORIGIN, (a_set(3, 40, 2),), wants, now=1.1)
    s.repaired(ORIGIN, TOPIC, upto=50, missing=8, now=1.1)
    assert delivered(s) == [1, 3] and s.open_gaps() == 1
    s.tick(2.1, reachable=lambda origin: True, retry=1.0, retry_max=8.0, give_up=60.0)
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 42, 50)]
    s.repaired(ORIGIN, TOPIC, upto=50, missing=8, now=2.2)
    assert delivered(s) == [51] and s.open_gaps() == 0
    assert s.counters.messages_lost == 8 and s.counters.gaps_lost == 1


def test_a_repaired_saying_the_whole_range_is_missing_gives_the_gap_up_at_once() -> None:
    """Nothing could have been resent (missing covers every sequence of the range): the held
    sets go at once, the gap is given up, counted."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(51, 10, 50)), wants, now=1.0)
    delivered(s)
    s.repaired(ORIGIN, TOPIC, upto=50, missing=48, now=1.1)
    assert delivered(s) == [51] and s.open_gaps() == 0
    assert s.counters.gaps_lost == 1 and s.counters.messages_lost == 48 and s.counters.repairs_short == 0


def test_an_origin_that_keeps_answering_short_has_the_gap_given_up_counted() -> None:
    """An origin whose log lost a stretch without knowing it answers "nothing missing" each time
    and resends nothing: after SHORT_ANSWERS_MAX such answers the gap is given up, and counted."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(51, 10, 50)), wants, now=1.0)
    delivered(s)
    for n in range(SHORT_ANSWERS_MAX - 1):
        s.repaired(ORIGIN, TOPIC, upto=50, missing=0, now=2.0 + n)
        assert delivered(s) == [] and s.open_gaps() == 1
    s.repaired(ORIGIN, TOPIC, upto=50, missing=0, now=9.0)
    assert delivered(s) == [51] and s.open_gaps() == 0 and s.counters.gaps_lost == 1


def test_an_answer_in_parts_is_asked_on_from_at_once_and_each_part_once() -> None:
    """The origin answers 3..50 in parts: 3..22 came and its REPAIRED says upto 22.  The rest is
    asked at once (not at the next retry, which doubles: a long range would take minutes),
    once, however often that REPAIRED is repeated (an answer to a retried ask)."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(51, 10, 50)), wants, now=1.0)
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 2, 50)]
    s.receive(ORIGIN, (a_set(3, 20, 2),), wants, now=1.1)
    s.repaired(ORIGIN, TOPIC, upto=22, missing=0, now=1.1)
    s.repaired(ORIGIN, TOPIC, upto=22, missing=0, now=1.2)
    assert delivered(s) == [1, 3] and s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 22, 50)]
    s.receive(ORIGIN, (a_set(23, 28, 22),), wants, now=1.3)
    s.repaired(ORIGIN, TOPIC, upto=50, missing=0, now=1.3)
    assert delivered(s) == [23, 51] and s.open_gaps() == 0 and s.take_asks() == []
    assert s.counters.gaps_lost == 0 and s.counters.repairs_short == 0


def test_holes_counted_once_when_the_gap_grows_before_its_resent_sets_arrive() -> None:
    """The origin answered 2..50 lacking 21..30 (counted: 10), but its resent sets were lost on
    the way; a later set makes the gap reach 70 before they are sent again (asked for nothing at
    once: the retry asks).  That is asked up to 50 first (its REPAIRED repeats the 10, not counted
    again), then on from there at once: 10 lost in all, not 20 (one ask over 2..70 would count
    21..30 twice)."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(51, 10, 50)), wants, now=1.0)
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 2, 50)]
    s.repaired(ORIGIN, TOPIC, upto=50, missing=10, now=1.1)  # the resent 3..20 and 31..50: lost
    assert s.counters.messages_lost == 10 and s.open_gaps() == 1
    s.receive(ORIGIN, (a_set(71, 5, 70),), wants, now=1.2)  # 61..70 is owed too now
    assert s.take_asks() == []
    s.tick(2.1, reachable=lambda origin: True, retry=1.0, retry_max=8.0, give_up=60.0)
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 2, 50)]
    s.receive(ORIGIN, (a_set(3, 18, 2), a_set(31, 20, 20)), wants, now=1.3)
    s.repaired(ORIGIN, TOPIC, upto=50, missing=10, now=1.3)
    assert delivered(s) == [1, 3, 31, 51] and s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 60, 70)]
    s.receive(ORIGIN, (a_set(61, 10, 60),), wants, now=1.4)
    s.repaired(ORIGIN, TOPIC, upto=70, missing=0, now=1.4)
    assert delivered(s) == [61, 71] and s.open_gaps() == 0
    assert s.counters.messages_lost == 10 and s.counters.gaps_lost == 0


def test_sets_that_arrive_behind_an_open_gap_ask_nothing_more() -> None:
    """Live sets keep coming while a gap is repaired: they wait, the one ask under way stands
    (each used to ask again from the gap's start, and the origin read and resent the same range
    once per set), and its answer releases them all; what a bounded answer left is asked on."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(11, 1, 10)), wants, now=1.0)  # 3..10 lost
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 2, 10)]
    for first in range(12, 1012):
        s.receive(ORIGIN, (a_set(first, 1, first - 1),), wants, now=1.1)
    assert s.take_asks() == [] and delivered(s) == [1]
    s.receive(ORIGIN, (a_set(3, 4, 2),), wants, now=1.2)  # a bounded answer: 3..6 of 3..10
    s.repaired(ORIGIN, TOPIC, upto=6, missing=0, now=1.2)
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 6, 1010)]  # on from there, up to what waits
    s.receive(ORIGIN, (a_set(7, 4, 6),), wants, now=1.3)
    assert delivered(s) == [3, 7, *range(11, 1012)]
    assert s.open_gaps() == 0 and s.counters.repairs_asked == 2


def test_a_part_whose_sets_are_still_on_the_way_is_asked_again_at_the_retry() -> None:
    """A part's REPAIRED overtook its sets: nothing is asked at once (the sets may still come),
    the retry asks from where the chain is."""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(51, 10, 50)), wants, now=1.0)
    s.take_asks()
    s.repaired(ORIGIN, TOPIC, upto=22, missing=0, now=1.1)
    assert s.take_asks() == [] and s.open_gaps() == 1 and s.counters.repairs_short == 1
    s.tick(2.1, reachable=lambda origin: True, retry=1.0, retry_max=8.0, give_up=60.0)
    assert s.take_asks() == [RepairAsk(ORIGIN, TOPIC, 2, 50)]


def test_a_set_of_several_topics_keeps_its_headers_on_the_topics_wanted() -> None:
    """A set published to two topics, one of them wanted here: it is stored for that topic alone,
    with its headers (they were dropped when the set was narrowed to the wanted topics)."""
    s = streams()
    block = wire.encode_headers({"trace": "4bf9"})
    messages = wire.MessageSet.build([TOPIC, "ov.other"], [(b"", b"m1")], headers=block)
    s.receive(ORIGIN, (wire.RoutedSet(origin_seq=1, timestamp=0, messages=messages, prevs=(0, 0)),), wants, now=1.0)
    [(_, stored)] = s.take_ready()
    assert stored.messages.topics == (TOPIC,) and stored.messages.headers == block


def test_heads_at_or_below_the_chain_ask_nothing() -> None:
    s = streams()
    s.receive(ORIGIN, (a_set(1, 4, 0),), wants, now=1.0)
    s.heads(ORIGIN, (wire.Head(topic=TOPIC, last=4),), wants, now=1.2)
    assert s.take_asks() == [] and s.open_gaps() == 0


# -- when the origin sends HEADS (hub/core/overlay/after_changes.py) -----------------------


def test_heads_go_once_the_graph_is_quiet_and_again_later() -> None:
    rounds = HeadsRounds(delay=1.0, window=10.0, again=6.0)
    assert rounds.poll(0.0) == (None, None)  # nothing changed: no HEADS
    rounds.changed(5.0)
    rounds.changed(5.5)  # still changing: the first send waits for a quiet second
    assert rounds.poll(6.0) == (None, 6.5)
    assert rounds.poll(6.5) == (-5.0, 12.5)  # topics published from 10 s before the first change
    assert rounds.poll(10.0) == (None, 12.5)
    assert rounds.poll(12.5) == (-5.0, None)  # the second send: the round is over
    assert rounds.poll(20.0) == (None, None)


def test_a_change_between_the_two_sends_starts_the_round_again() -> None:
    rounds = HeadsRounds(delay=1.0, window=10.0, again=6.0)
    rounds.changed(5.0)
    assert rounds.poll(6.0) == (-5.0, 12.0)
    rounds.changed(8.0)
    assert rounds.poll(9.0) == (-5.0, 15.0)  # the same round: its window still starts at 5 - 10
    assert rounds.poll(15.0) == (-5.0, None)
    rounds.changed(30.0)  # a new round
    assert rounds.poll(31.0) == (20.0, 37.0)


def test_changes_that_never_stop_delay_heads_by_a_bounded_time() -> None:
    """A change every half second: HEADS go ``again`` seconds after the first change since they
    last went, not never."""
    rounds = HeadsRounds(delay=1.0, window=10.0, again=6.0)
    sent = []
    t = 10.0
    while t < 30.0:
        rounds.changed(t)
        since, _ = rounds.poll(t)
        if since is not None:
            sent.append(t)
        t += 0.5
    assert sent[:3] == [16.0, 22.5, 29.0]


# -- the origin's answer (hub/core/overlay/origin.py) --------------------------------------------


def _memoryless_origin(sets: int, remembered: int) -> OriginSide:
    """The origin side of a hub without a data dir that stamped ``sets`` one-message sets on
    TOPIC (sequences 1..sets) and remembers the last ``remembered`` of them."""
    built = [wire.MessageSet.build([TOPIC], [(b"", b"m%d" % seq)]) for seq in range(1, sets + 1)]
    store = OverlayLogStore(cast(Any, None), None, hub_id=ORIGIN, data_dir=None)
    origin = OriginSide(store, recent_max_bytes=sum(len(m.records) for m in built[-remembered:]))
    for seq, messages in enumerate(built, 1):
        origin.stamp(seq, 0, messages, now=0.0)
    return origin


def test_a_hub_without_logs_says_what_its_memory_no_longer_holds() -> None:
    """A hub without a data dir answers REPAIR from its memory of recent sets; past it, the
    range is said missing (so its destinations give it up at once, counted), not answered empty."""
    origin = _memoryless_origin(3, remembered=1)
    remembered = origin.repair(TOPIC, 2, 3, max_bytes=1 << 20)
    assert remembered.missing == 0 and len(remembered.sets) == 1 and remembered.upto == 3
    forgotten = origin.repair(TOPIC, 0, 2, max_bytes=1 << 20)  # only set 3 is remembered
    assert forgotten.sets == [] and forgotten.missing == 2 and forgotten.upto == 2


def test_a_hub_without_logs_resends_what_it_remembers_of_a_range_and_counts_the_rest() -> None:
    """A range that starts before the memory and ends in it: the remembered sets are resent,
    chained from the range's start (the receiver delivers them next), and only the forgotten
    part is counted missing -- not the whole range answered empty."""
    origin = _memoryless_origin(5, remembered=2)  # remembers sets 4 and 5
    answer = origin.repair(TOPIC, 1, 5, max_bytes=1 << 20)
    assert answer.missing == 2 and answer.upto == 5  # sets 2 and 3
    assert [(s.origin_seq, s.prevs) for s in _resent(answer.sets)] == [(4, (1,)), (5, (4,))]


def _resent(encoded: list[tuple[bytes, bool]]) -> tuple[wire.RoutedSet, ...]:
    frame = routed_sets_frame(8, (2,), routed_sets_payload(ORIGIN, [body for body, _ in encoded]))
    resent = wire.RoutedSets.decode_body(frame[5:])
    assert isinstance(resent, wire.RoutedSets)
    return resent.sets


def test_a_long_range_is_answered_in_parts_of_at_most_the_bound_each_chained_from_the_last() -> None:
    """Ten remembered sets, a bound of a little over two sets' records: each answer stops at the
    set that reaches the bound (at least one set) and says where it stopped, so the asker asks
    on from there; the parts chain into one another and end at the range's end."""
    origin = _memoryless_origin(10, remembered=10)
    bound = 2 * len(wire.MessageSet.build([TOPIC], [(b"", b"m1")]).records) + 1  # sets 1-9 are that size
    parts, after = [], 0
    while after < 10:
        answer = origin.repair(TOPIC, after, 10, max_bytes=bound)
        sets = _resent(answer.sets)
        assert answer.missing == 0 and sets[-1].last_seq == answer.upto
        parts.append([(s.origin_seq, s.prevs[0]) for s in sets])
        after = answer.upto
    assert parts == [[(1, 0), (2, 1), (3, 2)], [(4, 3), (5, 4), (6, 5)], [(7, 6), (8, 7), (9, 8)], [(10, 9)]]
    assert origin.repair(TOPIC, 0, 10, max_bytes=1).upto == 1  # one set, however small the bound


def test_a_repair_releases_thousands_of_held_sets_in_order() -> None:
    """20,000 live sets wait behind a gap; its repair releases every one of them, in order, once.
    (Before the held sets kept their prevs in order, this release took 45 s here.)"""
    s = streams()
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(11, 1, 10)), wants, now=1.0)
    for first in range(12, 20_011):
        s.receive(ORIGIN, (a_set(first, 1, first - 1),), wants, now=1.1)
    assert delivered(s) == [1] and s.state_size() == (1, 20_000)
    s.receive(ORIGIN, (a_set(3, 8, 2),), wants, now=1.2)
    assert delivered(s) == [3, *range(11, 20_011)]
    assert s.state_size() == (1, 0) and s.held_bytes == 0 and s.open_gaps() == 0


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=60))
def test_held_sets_give_the_lowest_prev_like_a_scan_would(ops: list[tuple[bool, int]]) -> None:
    """HeldSets (a dict and a heap of prevs) against a plain dict scanned for its minimum."""
    held, model = HeldSets(), {}
    for add, prev in ops:
        if add and prev not in held:
            h = Held(a_set(prev + 1, 1, prev), 0, 1)
            held.add(prev, h)
            model[prev] = h
        elif model:
            assert held.first() == min(model)
            assert held.pop_first() is model.pop(min(model))
        assert len(held) == len(model) and held.first() == (min(model) if model else None)
        assert all(p in held for p in model)
