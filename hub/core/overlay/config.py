"""Overlay settings, each with the reason for its default."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class OverlayConfig:
    #: Links each hub keeps (it dials until it has this many, inbound ones count).  A cluster of
    #: at most ``degree + 1`` hubs is therefore a full mesh and every send is one hop, as in
    #: mesh v2; past that the overlay is a random graph of about this degree, whose diameter
    #: grows with log N (4-5 hops at 1000 hubs).
    degree: int = 8
    #: ``--max-peers``: no hub ever holds more links than this, inbound and outbound.
    max_peers: int = 16
    #: Hops a routed frame may take.
    ttl: int = 32
    #: A gap not filled after this many seconds is asked for again (doubling up to the max).
    repair_retry: float = 1.0
    repair_retry_max: float = 8.0
    #: Routed frames sent to a neighbour in the last this many seconds, up to ``resend_max_bytes``,
    #: go again round it when it is suspected (outbox.py): a black-holed link is suspected 0.5-1 s
    #: after it failed (``--mesh-suspect-after``, twice over), and what it swallowed meanwhile is
    #: then sent round at once instead of waiting for its destinations' repairs.  0: never.
    resend_window: float = 2.0
    resend_max_bytes: int = 1 << 20
    #: A gap still open this long after its origin stopped being reachable is given up (counted).
    give_up_after: float = 60.0
    #: Bytes of sets held back behind gaps before the newest are dropped (they come back by
    #: repair once the gap closes): bounds the memory a lost set can pin.
    hold_max_bytes: int = 64 << 20
    #: Sets can only be lost in flight around a change of routes: a link or hub on their way
    #: fails, or hubs route on different maps while a change floods.  After such a change
    #: (once the graph has been quiet ``heads_delay`` seconds, and again ``heads_again``
    #: seconds later), an origin tells the hubs it sends to where each topic it published
    #: from ``heads_window`` seconds before the change ends (HEADS): a lost set with nothing
    #: after it is found that way.  No change, no HEADS.  ``heads_again`` outlasts other hubs'
    #: pacing (ADVERTISE_MAX 4 s to advertise a change, SETTLE_MAX 1 s to route on it).
    heads_delay: float = 1.0
    heads_window: float = 10.0
    heads_again: float = 6.0
    #: Interest changes pushed by an owner and lost in such a break are found the same way:
    #: once the graph is quiet, each hub asks the owner of each key it publishes under whether
    #: it holds that owner's latest version (WATCH).  A WATCH not answered within
    #: ``watch_retry`` seconds goes again.  (INTEREST needs no such check: it is acknowledged.)
    watch_retry: float = 2.0
    #: And every ``recheck_interval`` seconds whatever happened: a pushed change can also be
    #: lost without a break this hub sees (a relay that had no route yet while the overlay
    #: formed drops it, counted there), so watches are checked.  Costs two small routed frames
    #: per watched key per interval.
    recheck_interval: float = 60.0
    #: A publish under a key whose watch is not answered yet waits at most this long for the
    #: answer (then goes where the hubs known by then are; the others repair from JOINED).
    park_max: float = 1.0
    #: Own sets kept in memory to answer REPAIR without reading the logs (and the only source
    #: on a hub without logs).
    recent_max_bytes: int = 16 << 20
    #: Bytes of records one REPAIR's answer carries at most (at least one set): a long range
    #: is answered in parts, the asker asking on as each part arrives, so the origin never
    #: reads and queues a whole log in one turn of its loop, and never more than this per asker.
    repair_answer_max_bytes: int = 1 << 20
    #: A publisher stops watching a rendezvous key it has not published under for this long.
    watch_idle: float = 600.0
    #: Shortcuts (shortcuts.py): direct links, not advertised, that carry frames for a hub the
    #: overlay reaches only through relays.  At most this many per hub, and never more than
    #: ``max_peers - degree - 1``, one slot kept free (for a joining hub's link; a link past
    #: that, healing a split, closes the least recently used shortcut), so with the defaults a
    #: hub holds 8 overlay links + 7 shortcuts, or 9 + 6, and 16 with a joining hub's (0: none).
    shortcuts: int = 7
    #: Only sets of topics wanted by at most this many hubs ask for a shortcut: a topic many
    #: hubs want is best served by its tree, whose relays mostly want it themselves.
    shortcut_fanout: int = 8
    #: A shortcut nothing crossed either way for this long is closed by the hub that opened it.
    shortcut_idle: float = 60.0
    #: A hub whose links are all up tries one more link to a random hub about this often (seconds,
    #: randomised, doubled after each trial that found no faster link or found nothing to try,
    #: times hubs / 100 in a map of more than 100 hubs)
    #: and keeps it in place of its costliest link when that is much slower (links.py): links
    #: become faster than random, and so do routes.  0: never.
    link_trials: float = 10.0
    #: Seconds between dial attempts to the same hub.
    redial_interval: float = 5.0
    #: A link that broke keeps its place this long before another hub is dialled for it
    #: (links.py), while the hub holds at least half its degree: most links break because
    #: their far end crashed or stalled, and it comes back within seconds to find its
    #: neighbours with room for it.  0: refill at once.
    refill_after: float = 10.0
    #: Dials in flight at once.
    max_dialing: int = 4

    def __post_init__(self) -> None:
        if not 1 <= self.degree <= self.max_peers:
            raise ValueError("degree must be in 1..max_peers")
        if self.shortcuts < 0 or self.shortcut_fanout < 1:
            raise ValueError("shortcuts must be >= 0 and shortcut_fanout >= 1")
        if self.link_trials < 0 or self.refill_after < 0:
            raise ValueError("link_trials and refill_after must be >= 0")
        if not 1 <= self.ttl <= 255:
            raise ValueError("ttl must be in 1..255")
