"""The hub's status document (STATUS_REPLY, ``pub0sub status``): built from the core's state.

Everything here is read, never changed; lists are capped so a hub with many
connections or topics still answers with a document of bounded size.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from .acl import Permissions
from .clients import SUBSCRIPTION_KINDS, Subscription
from .hub import HubCore

#: Connections and topics listed in full; the counts cover all of them.
LISTED = 1000


def _topic_entry(name: str, t: Any) -> dict[str, Any]:
    return {
        "topic": name,
        "first_offset": t.first_offset,
        "next_offset": t.next_offset,
        "messages": t.messages_appended,
        "bytes": t.bytes_appended,
    }


def topics_status(core: HubCore, permissions: Permissions) -> dict[str, Any]:
    """STATUS narrowed to a user's subscribe grant (``status = "topics"``): the hub's id and name,
    and the offsets of each topic the user may subscribe to; ``storage.compaction.patterns``
    names those of them the hub compacts (as topics, not the hub's own patterns).  What the
    Spark source plans its reads from, and nothing about other users, clients or topics."""
    store = core.store
    topics: dict[str, Any] = store.logs if store is not None else core.publisher.memory_topics
    readable = [(name, t) for name, t in topics.items() if permissions.subscribe.permits(name)][:LISTED]
    doc: dict[str, Any] = {
        "hub_id": f"{core.hub_id:016x}",
        "name": core.settings.name,
        "narrowed_to": "topics",
        "topics": len(readable),
        "topic_list": [_topic_entry(name, t) for name, t in readable],
    }
    if store is not None and store.compaction is not None:
        compacted = [name for name, _ in readable if store.compaction.applies(name)]
        doc["storage"] = {"compaction": {"patterns": compacted}}
    return doc


def hub_status(core: HubCore, *, listen: str) -> dict[str, Any]:
    sessions = core.sessions
    subs = [s for c in sessions.values() for s in c.subs.values()]
    live_dropped = sum(c.out.dropped_messages for c in sessions.values())
    store = core.store
    topics: dict[str, Any] = store.logs if store is not None else core.publisher.memory_topics
    doc: dict[str, Any] = {
        "hub_id": f"{core.hub_id:016x}",
        "name": core.settings.name,
        "pid": os.getpid(),
        "listen": listen,
        "uptime_s": round(core.clock.monotonic() - core.started, 1),
        "connections": len(sessions),
        "subscriptions": len(subs),
        "subscriptions_by_kind": _count_kinds(subs),
        "topics": len(topics),
        "rates": dict(core.rates),
        "counters": {**asdict(core.stats), "deliveries": core.deliveries(), "dropped_messages_live": live_dropped},
        "topic_list": [_topic_entry(name, t) for name, t in list(topics.items())[:LISTED]],
        "connection_list": [
            {**c.status(), "subs": [s.status() for s in c.subs.values()]} for c in list(sessions.values())[:LISTED]
        ],
    }
    doc["auth"] = core.auth.status()
    doc["connect_rate"] = core.connect_rate.status()
    if store is not None:
        doc["storage"] = {
            "data_dir": str(store.root),
            "durability": store.durability,
            "fsyncs": store.fsyncs,
            "open_files": store.files.status(),
            "storage_error": str(store.storage_error) if store.storage_error else None,
            "recovery": [
                {
                    "segment": str(r.path),
                    "truncated_bytes": r.truncated_bytes,
                    "corrupted_ranges": [[b.position, b.end, b.reason] for b in r.bad_ranges],
                    "corrupt_copy": str(r.corrupt_copy) if r.corrupt_copy else None,
                }
                for r in store.reports
                if r.truncated_bytes or r.bad_ranges or r.corrupt_copy
            ],
        }
        if store.compaction is not None:
            doc["storage"]["compaction"] = store.compaction.status(store.logs, core.clock.wall_us())
    groups = core.subscriptions.groups
    if groups:
        doc["groups"] = [g.status() for g in groups.values()]
    if core.consumers is not None:
        doc["durables"] = [
            {"name": s.name, "attached": s.attached, "positions": {t: tr.floor for t, tr in s.positions.items()}}
            for s in core.consumers.states.values()
            if s.kind == "durable"
        ]
    return doc


def _count_kinds(subs: list[Subscription]) -> dict[str, int]:
    """Open subscriptions per kind (live, follower, durable, group), every kind present."""
    counts = dict.fromkeys(SUBSCRIPTION_KINDS, 0)
    for sub in subs:
        counts[sub.kind] += 1
    return counts
