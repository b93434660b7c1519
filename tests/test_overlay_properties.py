"""The overlay core's promise, over any interleaving of faults (hypothesis drives the simulator).

Whatever order hubs join, leave, crash, restart, and links are cut or black-holed in (their ends
suspecting each other and routing round: hub/core/overlay/routes.py), once everything has
healed every set an up hub published reaches every hub that wanted its topic the whole time:
exactly once, and in order per origin and topic.  Hubs that subscribed or unsubscribed during
the run are held to "at most once, in order" only (their start is whatever JOINED said).

The world is small on purpose (6 hubs, degree 2, at most 3 links each), so most sends take
more than one hop and every fault changes routes.  The second test gives each hub room for one
shortcut (hub/core/overlay/shortcuts.py), so sends also switch between relays and direct links,
and shortcuts open, break and go idle in the middle of streams.  The third gives hubs degree 4
and trial links (hub/core/overlay/links.py), so links are also replaced by faster ones.
"""

from __future__ import annotations

import os
from collections import defaultdict

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from hub.core.mesh.interest import InterestTable
from hub.core.overlay.config import OverlayConfig
from hub.tools.sim.holes import BlackHoles
from hub.tools.sim.world import World

HUBS = 6
TOPICS = ("a.x", "a.y", "b.x", "c.z")
PATTERNS = ("a.x", "a.*", "b.>", "*.z", "c.z")
CONFIG = OverlayConfig(degree=2, max_peers=3, give_up_after=1e9)
#: max_peers - degree - 2 = 1 shortcut per hub; idle ones close within the run
WITH_SHORTCUTS = OverlayConfig(degree=2, max_peers=5, give_up_after=1e9, shortcut_idle=3.0)
#: Degree 4 of 6 hubs, each trying a link every second or so (doubling while none is faster):
#: links are replaced by faster ones in the middle of streams (hub/core/overlay/links.py).
WITH_TRIALS = OverlayConfig(degree=4, max_peers=6, give_up_after=1e9, link_trials=1.0)

#: ``PUB0SUB_OVERLAY_WORLDS=1500 python -m pytest -n 0 tests/test_overlay_properties.py``: that
#: many random worlds per test, drawn afresh each run, instead of the suite's fixed few -- how
#: most explicit examples below were found (it stops at the first failing world and prints it).
WORLDS = int(os.environ.get("PUB0SUB_OVERLAY_WORLDS", "0"))


def worlds(suite: int) -> settings:
    return settings(max_examples=WORLDS or suite, derandomize=not WORLDS, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow], phases=[Phase.explicit, Phase.generate])  # fmt: skip


hub_index = st.integers(0, HUBS - 1)
event = st.one_of(
    st.tuples(st.just("publish"), hub_index, st.sampled_from(TOPICS)),
    st.tuples(st.just("burst"), hub_index, st.sampled_from(TOPICS)),
    st.tuples(st.just("crash"), hub_index, st.floats(0.2, 6.0)),
    st.tuples(st.just("cut"), hub_index, hub_index, st.floats(0.5, 8.0)),
    # a link that drops everything while both hubs run; each end suspects the other after the
    # second float, and it heals, or ends at the heartbeat bound (hub/tools/sim/holes.py)
    st.tuples(st.just("hole"), hub_index, hub_index, st.floats(0.3, 5.0), st.floats(0.2, 1.0)),
    st.tuples(st.just("subscribe"), hub_index, st.sampled_from(PATTERNS)),
    st.tuples(st.just("unsubscribe"), hub_index, st.sampled_from(PATTERNS)),
)
schedule = st.lists(st.tuples(st.floats(0.0, 0.8), event), min_size=1, max_size=25)
standing = st.lists(st.tuples(hub_index, st.sampled_from(PATTERNS)), min_size=1, max_size=8)


def run_world(
    seed: int, subscriptions: list[tuple[int, str]], events: list[tuple[float, tuple]], config: OverlayConfig = CONFIG
) -> tuple:
    world = World(hubs=HUBS, seed=seed, config=config)
    holes = BlackHoles(world)
    ids = world.order
    for index, hub in enumerate(ids):
        world.loop.at(0.3 * index, lambda hub=hub, index=index: world.start(hub, ids[max(0, index - 2) : index]))
    for index, pattern in subscriptions:
        world.loop.at(0.1, world.subscribe, ids[index], pattern)
    world.loop.run_until(15.0)  # formed, interest known everywhere
    changed: set[tuple[int, str]] = set()  # (hub, pattern) touched during the run
    published: list[tuple[int, int, str, float]] = []
    down_until: dict[int, float] = {}

    def publish(hub: int, topic: str) -> None:
        seq = world.publish(hub, topic, b"m")
        if seq is not None:
            published.append((hub, seq, topic, world.clock.now))

    t = world.clock.now
    for gap, ev in events:
        t += gap
        kind = ev[0]
        if kind == "publish":
            world.loop.at(t, publish, ids[ev[1]], ev[2])
        elif kind == "burst":
            for k in range(5):
                world.loop.at(t + 0.01 * k, publish, ids[ev[1]], ev[2])
        elif kind == "crash":
            hub, downtime = ids[ev[1]], ev[2]
            if down_until.get(hub, 0.0) < t:  # not while it is already down
                down_until[hub] = t + downtime
                world.loop.at(t, world.crash, hub)
                world.loop.at(t + downtime, lambda hub=hub: world.start(hub, [h for h in ids if h != hub][:2]))
        elif kind == "cut" and ev[1] != ev[2]:
            world.loop.at(t, world.cut, ids[ev[1]], ids[ev[2]], ev[3])
        elif kind == "hole" and ev[1] != ev[2]:
            world.loop.at(t, holes.open, ids[ev[1]], ids[ev[2]], ev[3], ev[4])
        elif kind == "subscribe":
            changed.add((ids[ev[1]], ev[2]))
            world.loop.at(t, world.subscribe, ids[ev[1]], ev[2])
        elif kind == "unsubscribe":
            changed.add((ids[ev[1]], ev[2]))
            world.loop.at(t, world.unsubscribe, ids[ev[1]], ev[2])
    world.loop.run_until(t + 10.0)  # every crashed hub is back, every cut has healed
    world.loop.run_until(t + 60.0)  # and repair has had time
    return world, ids, published, changed


# The example is the smallest world that once lost sets: a subscriber's INTEREST re-sent by a
# timer sat in the simulator's outbox until the hub's next event (the driver took the outbox
# before running the timers), so one owner did not know the subscriber and the origin's first
# sets went to nobody.  Drivers now run the timers first (hub/tools/sim/world.py, pump).
# Shrinking a failing world takes minutes: the failure is reported as generated.
@worlds(40)
@example(
    seed=361778,
    subscriptions=[(1, "c.z")],
    events=[(0.0, ("unsubscribe", 4, "a.*")), (0.05, ("burst", 0, "c.z")), (0.0, ("burst", 2, "b.x"))],
)
# The next two lost sets until watches were kept across restarts (hub/core/overlay/joins.py):
# the publisher's hub is one of its key's two owners, so its own answer comes at once and its
# sets leave for the hubs that answer names (none); the other owner's answer, naming a
# subscriber hub, is still on its way when the publisher crashes, and once restarted it never
# asked again.  The subscriber's hub was down at the time (1704), or the crash came at once (495).
@example(
    seed=495,
    subscriptions=[(3, "*.z"), (5, "a.*"), (0, "*.z"), (1, "a.x"), (4, "b.>"), (1, "a.x"), (2, "*.z"), (4, "a.*")],
    events=[(0.6, ("crash", 1, 2.18)), (0.42, ("subscribe", 1, "a.x")), (0.28, ("publish", 2, "b.x")),
            (0.09, ("cut", 2, 4, 4.83)), (0.55, ("publish", 4, "c.z")), (0.41, ("publish", 3, "a.y")),
            (0.0, ("cut", 0, 3, 4.06)), (0.38, ("subscribe", 1, "b.>")), (0.0, ("burst", 3, "a.y")),
            (0.33, ("cut", 2, 3, 5.22)), (0.13, ("crash", 1, 0.2)), (0.42, ("publish", 5, "b.x")),
            (0.0, ("crash", 5, 1.5)), (0.64, ("subscribe", 2, "b.>")), (0.0, ("crash", 3, 2.64))],
)  # fmt: skip
@example(
    seed=1704,
    subscriptions=[(5, "a.*"), (5, "c.z"), (4, "b.>"), (0, "a.x"), (3, "c.z"), (1, "*.z"), (2, "a.*"), (3, "c.z")],
    events=[(0.53, ("subscribe", 0, "a.x")), (0.51, ("crash", 0, 5.29)), (0.03, ("crash", 4, 5.3)),
            (0.74, ("publish", 0, "a.x")), (0.25, ("publish", 0, "b.x")), (0.49, ("burst", 3, "b.x")),
            (0.42, ("crash", 3, 0.5))],
)  # fmt: skip
# And the next two until a restarted publisher greeted the destinations it had told JOINED
# (1072: its map, filled afresh, never saw them come back) and sent them HEADS for every topic
# under the key when, restarted, it held no answer naming their patterns (1172429).
@example(
    seed=1072,
    subscriptions=[(5, "a.x"), (2, "*.z"), (1, "c.z"), (1, "b.>"), (4, "b.>")],
    events=[(0.23077152428931727, ("subscribe", 0, "c.z")), (2.225073858507e-311, ("cut", 2, 0, 5.333551467683543)),
            (0.3321440191436271, ("burst", 3, "b.x")), (0.4206539146289143, ("crash", 1, 0.5)),
            (0.4274795376654269, ("unsubscribe", 0, "c.z")), (6.625024379894185e-24, ("publish", 0, "c.z")),
            (0.01, ("cut", 2, 0, 5.333551467683543)), (4.977882710569972e-74, ("publish", 5, "b.x")),
            (0.08, ("burst", 1, "b.x")), (0.05, ("publish", 0, "b.x")), (0.32980453873511445, ("subscribe", 4, "b.>")),
            (0.09340013184775915, ("publish", 2, "b.x")), (0.6586005697320252, ("publish", 2, "b.x")),
            (0.12707872776338242, ("publish", 5, "b.x")), (0.5198706282102433, ("burst", 4, "b.x")),
            (0.39507636433033194, ("crash", 0, 2.358287090801378))],
)  # fmt: skip
@example(
    seed=1172429,
    subscriptions=[(2, "*.z"), (3, "*.z"), (4, "*.z"), (1, "b.>"), (0, "b.>"), (1, "c.z")],
    events=[(0.6984955467497562, ("cut", 4, 2, 2.858733868987103)), (0.050382832868917954, ("unsubscribe", 2, "*.z")),
            (0.6269387860216776, ("crash", 1, 0.2)), (0.39392393440176604, ("burst", 1, "c.z")),
            (4.952467477759492e-31, ("cut", 0, 2, 5.248109003984809)),
            (0.7703458561334879, ("crash", 1, 1.144273958523222)),
            (0.7611716958648463, ("burst", 2, "a.y")), (0.6186357360730455, ("subscribe", 1, "c.z"))],
)  # fmt: skip
# And these two until hubs named during a change of owners started where the publisher stood
# before it (hub/core/overlay/watching.py, CUT_SHORT_KEEP): an owner that left before answering
# (37263), a hub just restarted that was its keys' only owner for a moment (166501017).
@example(
    seed=37263,
    subscriptions=[(0, "*.z"), (1, "b.>"), (0, "a.*"), (1, "b.>"), (2, "b.>")],
    events=[
        (0.5060515468140214, ("cut", 3, 2, 3.9757400205812665)), (0.3198482153077346, ("unsubscribe", 4, "*.z")),
        (0.5993680590690837, ("cut", 0, 2, 1.9146315269566938)), (0.12920058300482842, ("burst", 0, "b.x")),
        (0.25, ("crash", 5, 3.3108838697237903)), (1.0065833198659311e-205, ("subscribe", 0, "a.x")),
        (0.4126662670060676, ("burst", 3, "a.y")), (0.6035729762369999, ("crash", 3, 3.8332566960686645)),
        (2.5468760312769374e-295, ("cut", 3, 5, 3.3191799335490355)), (0.08531713281426952, ("burst", 3, "b.x")),
        (0.09476183952792623, ("cut", 5, 4, 1.9345740608388489)), (0.5191307905118892, ("subscribe", 3, "b.>")),
        (0.49482586921648786, ("crash", 2, 0.2)), (0.5, ("crash", 1, 3.0)),
        (0.4493739462712536, ("burst", 2, "b.x"))
    ],
)  # fmt: skip
@example(
    seed=166501017,
    subscriptions=[(2, "b.>")],
    events=[
        (0.47544544565712843, ("crash", 0, 0.7397806681710892)),
        (0.7630529486989078, ("cut", 0, 5, 3.1020142951859517)), (0.6102697120737182, ("publish", 0, "b.x")),
        (8.109844971473899e-91, ("crash", 1, 5.638247498302313)), (0.25, ("publish", 4, "a.y")),
        (1e-05, ("cut", 2, 3, 1.2139281393827899)), (0.024636903455837363, ("unsubscribe", 3, "c.z")),
        (0.14500730089504812, ("crash", 0, 3.888161378273384)), (0.5139823005419769, ("unsubscribe", 3, "c.z"))
    ],
)  # fmt: skip
# And this one until a restarted publisher's HEADS after changes also went to the hubs of its
# kept JOINED (it watches nothing yet), and a JOINED that found no route was told again later.
@example(
    seed=317987929,
    subscriptions=[(5, "a.*"), (0, "c.z"), (3, "c.z"), (5, "c.z"), (2, "c.z"), (0, "b.>"), (2, "b.>"), (3, "b.>")],
    events=[
        (1.1125369292536007e-308, ("cut", 2, 3, 5.291610807522813)),
        (0.041756365380783415, ("unsubscribe", 5, "*.z")), (0.6088026515384958, ("burst", 1, "c.z")),
        (0.0, ("cut", 2, 4, 2.36382628582997)), (0.6343398465029475, ("cut", 0, 4, 3.0)),
        (0.5025558288490408, ("crash", 1, 1.2982097516879525)),
        (5.94434685581532e-154, ("cut", 0, 5, 2.7312537622609754)), (0.6472166591191926, ("publish", 5, "a.y"))
    ],
)  # fmt: skip
# And this one until a hub named before its origin's watch was settled started at the watch's
# start, not where the origin stood: the origin, restarted and cut off from every other hub for
# seconds, was its keys' only owner, published, and its own answer named nobody (150).
@example(
    seed=150,
    subscriptions=[(0, '*.z'), (2, 'a.*'), (4, '*.z'), (5, 'b.>'), (0, 'b.>'), (3, '*.z'), (4, 'c.z'), (4, '*.z')],
    events=[
        (0.42476564040954934, ('crash', 1, 2.2222876003011356)),
        (0.3975343592456517, ('crash', 2, 3.610091128029033)),
        (2.3347519200408416e-132, ('subscribe', 1, '*.z')),
        (0.47921545489427325, ('crash', 4, 2.052981626768335)),
        (0.2819851806592269, ('unsubscribe', 1, '*.z')),
        (0.0, ('cut', 4, 3, 2.5247972040977196)),
        (0.0, ('crash', 0, 5.6227755995695)),
        (0.3138843505439046, ('burst', 3, 'b.x')),
        (0.36502936546507575, ('cut', 2, 3, 3.9227688018472295)),
        (0.6580640727483141, ('crash', 1, 0.6790987594622373)),
        (0.3975343592456517, ('crash', 2, 3.610091128029033)),
        (0.5274283321347487, ('crash', 1, 2.2222876003011356)),
        (0.2555431546456554, ('publish', 4, 'a.y')),
        (0.07957705888605048, ('crash', 5, 1.5)),
        (1.1754943508222875e-38, ('burst', 5, 'b.x')),
        (0.6493995040474968, ('subscribe', 4, 'a.x')),
        (0.6661059074778326, ('burst', 3, 'b.x')),
        (0.08903202666460877, ('burst', 3, 'c.z')),
        (0.5, ('crash', 1, 1.0)),
        (0.779664360401595, ('burst', 0, 'b.x'))
    ],
)  # fmt: skip
# And this one, with no fault at all, until a watch made while its hub's map held only itself
# was not settled by its own answer: the hub had not found the others in 15 s (its first dials
# failed), published, and the hubs named once it found them got its position then (613147216).
@example(
    seed=613147216,
    subscriptions=[(3, 'b.>'), (0, 'a.x')],
    events=[
        (0.0, ('publish', 1, 'b.x'))
    ],
)  # fmt: skip
@given(seed=st.integers(0, 2**32), subscriptions=standing, events=schedule)
def test_every_steady_subscriber_gets_every_set_once_in_order(seed, subscriptions, events) -> None:
    check_world(subscriptions, *run_world(seed, subscriptions, events))


# Found with shortcuts before hubs named during a change of owners started where the publisher
# stood before it (watching.py): an owner left before answering (10673), a subscriber's INTEREST
# was on its way to a new owner (172).
@worlds(25)
@example(
    seed=10673,
    subscriptions=[(0, "a.x"), (5, "a.x"), (5, "a.x"), (5, "a.*"), (4, "a.x"), (2, "a.x"), (3, "*.z"), (3, "a.x")],
    events=[
        (0.2533340875317033, ("publish", 0, "a.x")), (0.0005860737260484556, ("subscribe", 0, "*.z")),
        (0.18568071298465536, ("burst", 5, "c.z")), (0.27459852655782135, ("crash", 0, 0.5)),
        (5.6301874099232045e-229, ("unsubscribe", 3, "a.x")), (0.6178477892840937, ("crash", 5, 4.77942086646325)),
        (0.2, ("crash", 0, 0.5)), (7.231944822104919e-114, ("unsubscribe", 0, "a.x")),
        (1.0321688965155483e-140, ("unsubscribe", 0, "a.x")), (0.007027895820846554, ("subscribe", 2, "a.x")),
        (0.6584966004605871, ("unsubscribe", 4, "a.*")), (7.231944822104919e-114, ("burst", 5, "a.x")),
        (0.01, ("unsubscribe", 0, "*.z")), (1.192092896e-07, ("subscribe", 0, "*.z")),
        (0.2573619342983339, ("cut", 5, 3, 3.397622996150739)), (0.007027895820846554, ("subscribe", 2, "a.x")),
        (1.4376494182232174e-14, ("burst", 4, "a.x")), (0.5, ("cut", 5, 3, 3.397622996150739))
    ],
)  # fmt: skip
@example(
    seed=172,
    subscriptions=[(1, "*.z"), (2, "a.x"), (0, "b.>"), (5, "b.>"), (5, "b.>"), (5, "c.z"), (1, "*.z"), (5, "b.>")],
    events=[
        (0.05, ("publish", 1, "a.y")), (0.0, ("cut", 1, 1, 0.99999)),
        (5.960464477539063e-08, ("crash", 1, 1.8645712188215229)), (1.8169755260199808e-188, ("publish", 1, "a.y")),
        (3.5683374945240083e-34, ("subscribe", 3, "c.z")),
        (2.3825369536330796e-113, ("crash", 3, 3.3722077252199907)), (0.6277903640419947, ("publish", 0, "c.z")),
        (0.043021312203707945, ("burst", 2, "c.z")), (0.6277903640419947, ("publish", 0, "c.z"))
    ],
)  # fmt: skip
# And these until a stream waiting for its start asked the origin again every second (its
# SYNC found no route; 406) and the restarted publisher's HEADS reached the hubs of its kept
# JOINED (8711).
@example(
    seed=406,
    subscriptions=[(2, "c.z"), (3, "b.>"), (2, "a.x"), (1, "a.*"), (3, "a.x"), (1, "a.x"), (1, "a.*"), (4, "b.>")],
    events=[
        (0.544599537438104, ("publish", 5, "a.x")), (0.05764202376640776, ("unsubscribe", 2, "c.z")),
        (0.01, ("subscribe", 0, "a.x")), (0.7291566776002427, ("cut", 1, 1, 4.351148621722249)),
        (0.465084946886998, ("cut", 4, 3, 2.1058077371604043)), (0.6889781219698664, ("publish", 4, "c.z")),
        (0.4284270844693963, ("publish", 1, "a.x")), (0.5519391681027036, ("burst", 4, "a.x")),
        (0.5095536007203039, ("subscribe", 5, "*.z")), (0.5820040264544525, ("burst", 2, "b.x")),
        (0.5999230776822277, ("burst", 2, "c.z")), (0.18255425789397361, ("burst", 2, "a.x")),
        (0.6392024344407814, ("cut", 4, 2, 2.1058077371604043)), (1.175494351e-38, ("burst", 4, "a.x"))
    ],
)  # fmt: skip
@example(
    seed=8711,
    subscriptions=[(5, "c.z"), (3, "c.z"), (4, "c.z"), (2, "a.x"), (3, "b.>"), (5, "b.>")],
    events=[
        (0.22053043507244952, ("burst", 2, "a.x")), (0.4541958414062799, ("unsubscribe", 0, "c.z")),
        (0.42873865443644443, ("subscribe", 2, "a.*")), (6.103515625e-05, ("crash", 0, 2.00001)),
        (0.259275334515262, ("cut", 3, 5, 2.00001)), (0.36897941339645285, ("publish", 2, "a.x")),
        (7.78360192565136e-293, ("publish", 3, "c.z")), (1.175494351e-38, ("cut", 1, 3, 1.998280694277295)),
        (0.1705033461912795, ("cut", 3, 5, 2.00001)), (0.3536924525457239, ("cut", 3, 5, 2.00001))
    ],
)  # fmt: skip
# And these until the same (58455: owners crashing and restarting in turn while the origin,
# itself just restarted, sent its first set), and until a watch made before its hub had seen
# its ring at all (a publish at the instant of a restart) was no longer taken as settled by
# the hub's own answer, its start lost with the next crash (885).
@example(
    seed=58455,
    subscriptions=[(1, 'a.*'), (3, 'a.x'), (2, 'a.*'), (0, 'a.x'), (4, 'a.x'), (5, 'a.x'), (2, 'b.>'), (3, 'b.>')],
    events=[
        (0.047568449625305056, ('unsubscribe', 3, 'b.>')), (0.0, ('burst', 5, 'c.z')),
        (0.6021548891718571, ('burst', 3, 'a.x')), (0.46418168153891726, ('burst', 3, 'c.z')),
        (1.919971762240004e-299, ('burst', 3, 'c.z')), (0.6021548891718571, ('burst', 3, 'a.x')),
        (0.6803494051433978, ('crash', 3, 0.99999)), (0.37223647933172055, ('cut', 1, 4, 1.0)),
        (0.5338738530509454, ('burst', 2, 'a.y')), (1.7700043797296167e-101, ('crash', 0, 1.0)),
        (1.4866495080557426e-101, ('cut', 4, 1, 2.4767557848301474)),
        (0.49262083226947206, ('crash', 3, 4.7676144052072775)),
        (1.1149519220283285e-246, ('crash', 0, 3.3620275897546064)), (0.6862833327684789, ('publish', 0, 'a.x')),
        (0.37689154937579494, ('burst', 4, 'c.z')), (0.413135888458942, ('burst', 2, 'a.y')),
        (0.7050014023495405, ('crash', 1, 3.00710156999801)), (0.21449223740495343, ('cut', 5, 2, 7.502205968735107)),
        (0.43134383867089005, ('cut', 4, 0, 0.5))
    ],
)  # fmt: skip
@example(
    seed=885,
    subscriptions=[(1, 'b.>'), (5, '*.z'), (0, 'a.*'), (1, 'a.*'), (3, 'a.*'), (0, 'a.*')],
    events=[
        (0.6693406250761182, ('crash', 1, 0.5)),
        (0.5, ('publish', 1, 'a.y')),
        (0.22694395972269674, ('crash', 1, 0.5)),
        (0.30658062516957907, ('burst', 2, 'a.y')),
        (0.0, ('burst', 2, 'a.y'))
    ],
)  # fmt: skip
# And this one until the simulator dialled a hub's configured hubs again whenever it had no
# link, as the hub's seed_static does: a restarted hub dialled two hubs, both dropped their link
# to it at once as the surplus (judged on its advertisement from before the crash), and it
# stayed alone for good (31856).
@example(
    seed=31856,
    subscriptions=[(5, 'c.z'), (0, 'b.>'), (5, 'c.z')],
    events=[
        (0.7607835711830382, ('crash', 3, 3.0)),
        (0.22662672320853391, ('publish', 3, 'b.x')),
        (0.25, ('cut', 2, 0, 6.324914846907276)),
        (0.6738385803010614, ('burst', 5, 'a.x')),
        (0.15759331842011678, ('publish', 0, 'a.x')),
        (0.5468072324065868, ('unsubscribe', 1, 'b.>')),
        (0.767652617280079, ('publish', 0, 'a.y')),
        (5.960464477539063e-08, ('subscribe', 2, 'b.>')),
        (0.34283217870580307, ('unsubscribe', 2, 'a.*')),
        (0.19413936572222892, ('unsubscribe', 1, '*.z')),
        (0.20425813226652126, ('subscribe', 1, '*.z')),
        (0.3136920256676862, ('unsubscribe', 1, 'b.>')),
        (5e-324, ('unsubscribe', 1, 'a.*')),
        (5.3803975986095045e-45, ('cut', 2, 0, 6.324914846907276)),
        (0.35694758868749843, ('crash', 0, 6.0)),
        (0.25, ('cut', 4, 3, 0.99999)),
        (0.43297483563003136, ('burst', 5, 'b.x')),
        (0.13614943018785602, ('publish', 5, 'a.x')),
        (0.07495643634182764, ('burst', 3, 'a.x')),
        (0.6398926453445436, ('publish', 4, 'a.x')),
        (0.0, ('burst', 3, 'c.z')),
        (0.17755436113912215, ('burst', 1, 'a.x'))
    ],
)  # fmt: skip
# Formation left these 6 hubs split in two triangles for seconds (healing links pruned again as
# crowded, hub/core/overlay/links.py's surplus); the publisher's watch began while the subscriber
# was across the split, and its answer, arriving before the split healed, started that hub after
# the burst: all 5 sets lost.  A hub across a split is now owed the sets sent since it went
# (hub/core/overlay/watching.py, _use).  Found 2026-11-28 by a 3,000-world batch.
@example(
    seed=125,
    subscriptions=[(2, "a.x"), (5, "a.x"), (0, "a.x"), (0, "b.>"), (3, "b.>"), (2, "b.>"), (2, "a.*"), (1, "c.z")],
    events=[(0.05, ("unsubscribe", 3, "c.z")), (0.11946860328632225, ("burst", 2, "a.x"))],
)
@given(seed=st.integers(0, 2**32), subscriptions=standing, events=schedule)
def test_with_shortcuts_every_steady_subscriber_gets_every_set_once_in_order(seed, subscriptions, events) -> None:
    check_world(subscriptions, *run_world(seed, subscriptions, events, WITH_SHORTCUTS))


@worlds(20)
@given(seed=st.integers(0, 2**32), subscriptions=standing, events=schedule)
def test_with_trial_links_every_steady_subscriber_gets_every_set_once_in_order(seed, subscriptions, events) -> None:
    world, *rest = run_world(seed, subscriptions, events, WITH_TRIALS)
    check_world(subscriptions, world, *rest)
    # Not vacuous: links were tried (and some kept) while the world ran.
    tried = sum(h.overlay.policy.trials_kept + h.overlay.policy.trials_closed for h in world.up_hubs() if h.overlay)
    assert tried > 0


def check_world(
    subscriptions: list[tuple[int, str]], world: World, ids: list[int], published: list, changed: set
) -> None:
    steady: InterestTable[int] = InterestTable()
    touched = {hub for hub, _ in changed}
    for index, pattern in subscriptions:
        if ids[index] not in touched:
            steady.add(ids[index], [pattern])

    got: dict[tuple[int, int, str], list[int]] = defaultdict(list)
    for d in world.deliveries:
        got[(d.hub, d.origin, d.topic)].append(d.origin_seq)
    for stream, seqs in got.items():
        assert len(seqs) == len(set(seqs)), f"duplicates on {stream}: {seqs}"
        assert seqs == sorted(seqs), f"out of order on {stream}: {seqs}"
    for origin, seq, topic, _ in published:
        for hub in steady.peers_for((topic,)):
            if hub != origin:
                lacks = f"hub {ids.index(hub)} lacks {ids.index(origin)}:{seq} on {topic}"
                assert seq in got[(hub, origin, topic)], lacks
