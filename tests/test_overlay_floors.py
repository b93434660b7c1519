"""Where an overlay stream's store stopped (hub/core/overlay/streams.py, ``Streams.floors``), kept
across restarts, so that v2 -- which resumes each origin after the highest sequence stored on
*any* topic -- never steps over a gap one topic's stream still has open.

suite55 (2026-11-30) lost 1,908 acknowledged publishes of one topic at a hub that was killed
with such a gap open and came back on v2 (docs/scale.md, "What is left"): the gap, one topic
stored further on, then v2 storing past the gap, are each set up here.
"""

from __future__ import annotations

from pathlib import Path

import wire
from hub.app import HubServer
from hub.config import HubConfig
from hub.core.mesh.overlay_store import FLOORS_FILE, OverlayLogStore
from hub.core.overlay.streams import Streams

ORIGIN = 0x0A
TOPIC = "ov.b"
KEY = "ov"


def a_set(first: int, count: int, prev: int) -> wire.RoutedSet:
    messages = wire.MessageSet.build([TOPIC], [(b"", b"m%d" % n) for n in range(first, first + count)])
    return wire.RoutedSet(origin_seq=first, timestamp=0, messages=messages, prevs=(prev,))


def wants(topic: str) -> bool:
    return topic == TOPIC


class Stored:
    """The stored positions and the floors saved, as the hub's store would keep them."""

    def __init__(self) -> None:
        self.positions: dict[tuple[int, str], int] = {}
        self.saved: list[dict[tuple[int, str], int]] = []

    def streams(self, floors: dict[tuple[int, str], int] | None = None) -> Streams:
        return Streams(stored_position=lambda o, t: self.positions.get((o, t), 0), save_since=lambda since: None,
                       hold_max_bytes=1 << 20, floors=floors, save_floors=lambda f: self.saved.append(dict(f)))


def tick(s: Streams, now: float) -> None:
    s.tick(now, reachable=lambda origin: True, retry=0.5, retry_max=8.0, give_up=60.0)


def test_a_gap_keeps_a_floor_until_the_stream_is_stored_past_it_in_order() -> None:
    st = Stored()
    s = st.streams()
    s.joined(ORIGIN, KEY, 0, now=0.0)
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(5, 2, 4)), wants, now=1.0)  # 3..4 lost on the way
    st.positions[(ORIGIN, TOPIC)] = 2  # set 1 stored; set 5 waits behind the gap
    assert s.floors == {(ORIGIN, TOPIC): 2} and st.saved[-1] == s.floors
    tick(s, 1.2)
    assert s.floors == {(ORIGIN, TOPIC): 2}, "the gap is open: the floor stays"
    s.receive(ORIGIN, (a_set(3, 2, 2),), wants, now=1.5)  # the repair; 3 and 5 go in order
    st.positions[(ORIGIN, TOPIC)] = 6
    tick(s, 2.0)
    assert s.floors == {} and st.saved[-1] == {}


def test_sets_waiting_for_their_start_keep_a_floor_at_what_is_stored() -> None:
    st = Stored()
    st.positions[(ORIGIN, TOPIC)] = 7
    s = st.streams()  # its origin has not said where this hub's stream starts
    s.receive(ORIGIN, (a_set(9, 1, 8),), wants, now=1.0)
    assert s.floors == {(ORIGIN, TOPIC): 7}


def test_a_topic_no_longer_wanted_leaves_no_floor() -> None:
    """Else v2 would resume its origin at the floor in every session for good."""
    st = Stored()
    s = st.streams()
    s.joined(ORIGIN, KEY, 0, now=0.0)
    s.receive(ORIGIN, (a_set(1, 2, 0), a_set(5, 2, 4)), wants, now=1.0)
    assert s.floors
    s.forget_topics(lambda topic: False)
    assert s.floors == {} and st.saved[-1] == {}
    restarted = st.streams(floors={(ORIGIN, TOPIC): 2})  # one from before a restart, no stream yet
    restarted.forget_topics(lambda topic: False)
    assert restarted.floors == {}


def test_a_floor_from_before_a_restart_stays_until_the_topic_is_stored_past_it() -> None:
    st = Stored()
    st.positions[(ORIGIN, TOPIC)] = 4
    s = st.streams(floors={(ORIGIN, TOPIC): 4})
    tick(s, 1.0)
    assert s.floors == {(ORIGIN, TOPIC): 4}
    st.positions[(ORIGIN, TOPIC)] = 6  # v2 resumed at the floor and stored on from there
    tick(s, 2.0)
    assert s.floors == {} and st.saved[-1] == {}


def one(seq: int, topic: str) -> wire.ForwardSet:
    messages = wire.MessageSet.build([topic], [(b"", b"m%d" % seq)])
    return wire.ForwardSet(origin_seq=seq, timestamp=seq, messages=messages)


class StandingInterest:
    """A subscription that reads from the log (a durable one, detached): wanting is all it does."""

    live = False

    def wake(self) -> None:
        pass


def test_v2_resumes_an_origin_at_a_floor_and_stores_nothing_twice(tmp_path: Path) -> None:
    server = HubServer(HubConfig(listen="127.0.0.1:0", data_dir=tmp_path))
    core = server.core
    for topic in ("a", "b"):
        core.router.add(topic, StandingInterest())  # type: ignore[arg-type]
    link = core.mesh
    assert link.on_forward(ORIGIN, [one(1, "a"), one(2, "b"), one(3, "a"), one(4, "a")], None) == 4
    assert link.positions() == {ORIGIN: 4}
    # The overlay's stream of b stopped at 2 with a gap open (5, on b, lost on the way) when the
    # hub went down; its floor was saved, and the restarted hub's v2 link resumes there.
    overlay_store = OverlayLogStore(link, core.store, hub_id=1, data_dir=tmp_path)
    overlay_store.save_floors({(ORIGIN, "b"): 2})
    restarted = OverlayLogStore(link, core.store, hub_id=1, data_dir=tmp_path)
    assert (tmp_path / FLOORS_FILE).exists() and restarted.floors == {(ORIGIN, "b"): 2}
    assert link.resume_floors == {(ORIGIN, "b"): 2} and link.positions() == {ORIGIN: 2}
    # v2 sends everything after 2 again: a's 3 and 4 are not stored twice, b's 5 is stored.
    link.on_forward(ORIGIN, [one(3, "a"), one(4, "a"), one(5, "b"), one(6, "a")], None)
    logs = core.store.logs
    assert (logs["a"].next_offset, logs["b"].next_offset) == (4, 2)  # a: 1 3 4 6; b: 2 5
    assert (logs["a"].origins[ORIGIN], logs["b"].origins[ORIGIN]) == (6, 5)
    server.core.store.close()
