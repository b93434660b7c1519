"""What the overlay shows in STATUS (``mesh.overlay``): its links, map, interest, streams and counters."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from .costs import LinkCosts
from .links import LinkPolicy
from .membership import Membership
from .outbox import Outbox
from .rendezvous import OwnedKeys, Registrations
from .shortcuts import Shortcuts
from .streams import Streams
from .watching import Watching


class _Parts(Protocol):
    """The overlay's parts this reads (hub/core/overlay/core.py's Overlay)."""

    hub_id: int
    policy: LinkPolicy
    costs: LinkCosts
    membership: Membership
    owned: OwnedKeys
    watching: Watching
    registrations: Registrations
    streams: Streams
    outbox: Outbox
    shortcuts: Shortcuts


def overlay_status(overlay: _Parts) -> dict[str, object]:
    """The overlay as STATUS shows it under ``mesh.overlay``."""
    streams, held = overlay.streams.state_size()
    return {
        "hub_id": f"{overlay.hub_id:016x}",
        "links": sorted(f"{h:016x}" for h in overlay.policy.links),
        "link_latency_ms": overlay.costs.status(),
        # links tried for speed (links.py): the one on trial, kept ones and closed ones
        "link_trials": {"trying": None if (t := overlay.policy.trial) is None else f"{t:016x}",
                        "kept": overlay.policy.trials_kept, "closed": overlay.policy.trials_closed},
        "shortcuts": sorted(f"{h:016x}" for h in overlay.shortcuts.live),
        # neighbours routed around while they answer nothing (routes.py, detours)
        "suspected": sorted(f"{h:016x}" for h in overlay.membership.suspected),
        "suspicions": overlay.membership.suspicions,  # times a neighbour was, since this hub started
        # routed frames sent again round a suspect, and round a link that went (outbox.py)
        "resent_round_suspects": overlay.outbox.resent["suspect"],
        "resent_round_lost_links": overlay.outbox.resent["link_down"],
        "shortcut_counts": overlay.shortcuts.status(),
        "members": len(overlay.membership.entries),
        # advertisements of hubs --mesh-allow does not name, left out of the map
        "refused_adverts": overlay.membership.refused_adverts,
        "reachable": len(overlay.membership.reachable()),
        "keys_owned": len(overlay.owned.keys),
        "keys_watched": len(overlay.watching.keys),
        "interest_unacked": len(overlay.registrations.unacked),
        "unreachable": [f"{h:016x}" for h in overlay.membership.unreachable()],
        "interest": overlay.registrations.status(),
        "owned": overlay.owned.status(),
        "watched": overlay.watching.status(),
        "streams": streams,
        "held_sets": held,
        "open_gaps": overlay.streams.open_gaps(),
        "counters": dataclasses.asdict(overlay.streams.counters),
        "sent_frames": dict(overlay.outbox.sent_frames),
        "sent_bytes": dict(overlay.outbox.sent_bytes),
        "dropped": dict(overlay.outbox.dropped),
    }
