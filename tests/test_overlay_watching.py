"""The publisher's side of the rendezvous (hub/core/overlay/watching.py) driven directly: a
key's two owners each answer and push changes, and sets go to every hub either names."""

from __future__ import annotations

import wire
from hub.core.overlay.membership import Membership, keys_of_topic
from hub.core.overlay.watching import Watching

ME, O1, O2, SUB = 1, 2, 3, 4
TOPIC = "orders.eu"


def watching() -> tuple[Watching, str, tuple[int, int]]:
    """This hub linked to three others, all reachable; watching ``TOPIC``'s first key."""
    membership = Membership(ME)
    hubs = (ME, O1, O2, SUB)
    for hub in hubs:
        others = tuple(h for h in hubs if h != hub) if hub == ME else (ME,)
        membership.offer(wire.LinkState(hub_id=hub, boot=1, seq=1, peer_key=f"k{hub}", addrs=(), neighbors=others))
    membership.settle()
    w = Watching(membership)
    w.ensure(TOPIC, 0, now=0.0)
    key = keys_of_topic(TOPIC)[0]
    owners = membership.owners(key)
    assert len(owners) == 2
    return w, key, (owners[0], owners[1])


def full(key: str, hubs: dict[int, tuple[str, ...]], version: int = 10) -> wire.InterestSet:
    entries = tuple(wire.InterestEntry(hub=h, patterns=p) for h, p in sorted(hubs.items()))
    return wire.InterestSet(key=key, full=True, version=version, entries=entries)


def change(key: str, hub: int, patterns: tuple[str, ...], version: int) -> wire.InterestSet:
    entry = wire.InterestEntry(hub=hub, patterns=patterns)
    return wire.InterestSet(key=key, full=False, version=version, entries=(entry,))


def test_a_hub_only_the_second_owner_names_is_a_destination() -> None:
    """Maps that differ for a while: the subscriber told only the owner its map gives."""
    w, key, (first, second) = watching()
    w.answer(first, full(key, {}), 0, now=1.0)
    assert w.destinations(TOPIC) == frozenset()
    answer = w.answer(second, full(key, {SUB: (TOPIC,)}), 0, now=1.0)
    assert [n.hub for n in answer.joined] == [SUB]
    assert w.destinations(TOPIC) == {SUB}


def test_a_hub_has_left_only_once_no_owner_names_it() -> None:
    w, key, (first, second) = watching()
    w.answer(first, full(key, {SUB: (TOPIC,)}), 0, now=1.0)
    w.answer(second, full(key, {SUB: (TOPIC,)}), 0, now=1.0)
    left = w.answer(first, change(key, SUB, (), 11), 0, now=2.0).left
    assert left == [] and w.destinations(TOPIC) == {SUB}  # the second owner's change is on its way
    left = w.answer(second, change(key, SUB, (), 11), 0, now=2.1).left
    assert left == [SUB] and w.destinations(TOPIC) == frozenset()


def test_recheck_asks_every_owner_whose_answer_is_in_use() -> None:
    w, key, (first, second) = watching()
    w.answer(first, full(key, {}, version=10), 0, now=1.0)
    w.answer(second, full(key, {}, version=20), 0, now=1.0)
    checks = {dests: frame.version for dests, frame in w.recheck(now=5.0) if frame.key == key}
    assert checks == {(first,): 10, (second,): 20}


def _alone_then_linked(linked_at: float) -> tuple[list[tuple[str, int | None]], list[int], str]:
    """This hub watches ``TOPIC``'s key while its map holds only itself, publishes up to 5, then
    finds the others at ``linked_at``; the owners' answers name SUB.  (calls to on_watch, the
    JOINED start SUB is given, and the key)."""
    membership = Membership(ME)
    sent = [0]
    starts: list[tuple[str, int | None]] = []
    w = Watching(membership, sent_upto=lambda: sent[0], on_watch=lambda key, since: starts.append((key, since)))
    w.ensure(TOPIC, 0, now=0.0)
    key = keys_of_topic(TOPIC)[0]
    assert membership.owners(key) == (ME,)
    w.answer(ME, full(key, {}), 0, now=0.0)  # its own answer: the only owner it knows
    sent[0] = 5
    hubs = (ME, O1, O2, SUB)
    for hub in hubs:
        others = tuple(h for h in hubs if h != hub) if hub == ME else (ME,)
        membership.offer(wire.LinkState(hub_id=hub, boot=1, seq=1, peer_key=f"k{hub}", addrs=(), neighbors=others))
    membership.settle()
    w.refresh(now=linked_at)
    answers = [w.answer(owner, full(key, {SUB: (TOPIC,)}), 5, linked_at + 0.1) for owner in membership.owners(key)]
    return starts, [notice.since for answer in answers for notice in answer.joined], key


def test_a_hub_alone_in_its_map_owes_what_it_published_to_hubs_named_once_it_is_not() -> None:
    """Just started or cut off, its own answer names nobody: that is not the cluster's answer.
    The hub named once the map holds others starts at the watch's start (property world 150)."""
    starts, since, key = _alone_then_linked(linked_at=5.0)
    assert since == [0]
    assert (key, None) not in starts  # never settled while alone: its start outlives a crash


def test_a_hub_alone_past_alone_keep_was_a_cluster_of_its_own() -> None:
    """Alone for longer than ALONE_KEEP: what it published meanwhile is owed to nobody, and the
    start kept across restarts moves to where it stood when it found the others."""
    starts, since, key = _alone_then_linked(linked_at=61.0)
    assert since == [5]
    mine = [start for start in starts if start[0] == key]
    assert mine == [(key, 0), (key, None), (key, 5)]
