"""Which links a hub keeps and dials (hub/core/overlay/links.py, kept_places.py): a broken link's place."""

from __future__ import annotations

import random

import wire
from hub.core.overlay.config import OverlayConfig
from hub.core.overlay.links import LinkPolicy
from hub.core.overlay.membership import Membership

CONFIG = OverlayConfig(degree=3, max_peers=6, refill_after=10.0, redial_interval=5.0, link_trials=0)


def advert(hub: int, neighbors: tuple[int, ...], seq: int = 1) -> wire.LinkState:
    return wire.LinkState(hub_id=hub, boot=1, seq=seq, peer_key=f"k{hub}", addrs=(f"/ip4/127.0.0.1/tcp/{hub}",),
                          neighbors=neighbors)  # fmt: skip


def policy_of_hub_1() -> tuple[LinkPolicy, Membership]:
    """Hub 1 linked to 2, 3 and 4; hubs 5-9 linked among themselves, with room."""
    m = Membership(1)
    m.offer(advert(1, (2, 3, 4)))
    for hub, near in {2: (1, 5), 3: (1, 6), 4: (1, 7), 5: (2, 6), 6: (3, 5), 7: (4, 8), 8: (7, 9), 9: (8,)}.items():
        m.offer(advert(hub, near))
    policy = LinkPolicy(CONFIG, m, random.Random(1), links={2, 3, 4})
    return policy, m


def test_a_broken_link_keeps_its_place_while_its_hub_has_room_for_it() -> None:
    """2 stalled: its link ended at the heartbeat bound, and when it resumes it advertises fewer
    than ``degree`` links.  Its place is kept until ``refill_after``; then a hub is dialled."""
    policy, m = policy_of_hub_1()
    assert policy.link_down(2, 0.0, broke=True)
    assert policy.dials(1.0) == []
    m.offer(advert(2, (5,), seq=2))  # back, its links to 1 gone, room for it
    assert policy.dials(6.0) == []
    assert len(policy.dials(10.0)) == 1  # given up: one dialled in its place


def test_a_place_goes_at_once_when_its_hub_advertises_itself_full_without_this_one() -> None:
    """2 closed the link itself (a prune, a trial): the end here saw it end like a crash, but 2
    advertises ``degree`` links without 1, so 1 dials at its next look."""
    policy, m = policy_of_hub_1()
    assert policy.link_down(2, 0.0, broke=True)
    assert policy.dials(1.0) == []
    m.offer(advert(2, (5, 6, 7), seq=2))
    assert len(policy.dials(6.0)) == 1


def test_links_this_hub_closed_and_a_hub_left_with_few_links_are_refilled_at_once() -> None:
    policy, _ = policy_of_hub_1()
    assert policy.link_down(2, 0.0)  # pruned here: no place kept
    assert len(policy.dials(0.5)) == 1
    policy, _ = policy_of_hub_1()
    for hub in (2, 3):
        policy.link_down(hub, 0.0, broke=True)  # one link left of three: below half the degree
    assert len(policy.dials(0.5)) == 2
