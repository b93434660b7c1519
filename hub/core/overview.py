"""What the status page shows, sampled once a second: the hub, its mesh, topics with rates.

:class:`Overview` reads the same counters as ``status`` and the metrics; rates are the
difference between two samples, so nothing is counted twice on the traffic's path.
The shell samples it on a timer and pushes each sample to the open pages
(``hub/shell/metrics_http.py``); the page (``hub/shell/static/``) draws it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .metrics import busiest_topics, consumer_lags, peer_state, subscriber_count

if TYPE_CHECKING:
    from .hub import HubCore
    from .mesh.core import MeshCore

#: Topics, connections and events the page lists (each list is bounded).
PAGE_TOPICS = 50
PAGE_SLOW = 20


class Overview:
    """Samples for the status page; ``recent`` gives the latest notable events (newest last)."""

    def __init__(self, core: HubCore, mesh: MeshCore | None, *, listen: Callable[[], str],
                 recent: Callable[[], list[dict[str, Any]]] = list) -> None:  # fmt: skip
        self.core = core
        self.mesh = mesh
        self.listen = listen
        self.recent = recent
        self._last_at: float | None = None
        self._last_topics: dict[str, int] = {}
        self._last_totals = (0, 0)

    def sample(self) -> dict[str, Any]:
        core = self.core
        now = core.clock.monotonic()
        span = None if self._last_at is None else max(now - self._last_at, 1e-6)

        def rate(current: int, before: int) -> float | None:
            return None if span is None else round(max(0, current - before) / span, 1)

        totals = (core.stats.messages_in, core.deliveries())
        topics = []
        counts: dict[str, int] = {}
        for name, t in busiest_topics(core, PAGE_TOPICS):
            counts[name] = t.messages_appended
            topics.append({
                "topic": name,
                "messages": t.messages_appended,
                "rate": rate(t.messages_appended, self._last_topics.get(name, t.messages_appended)),
                "subscribers": subscriber_count(core, name),
                "next_offset": t.next_offset,
            })  # fmt: skip
        doc = {
            "hub": {
                "hub_id": f"{core.hub_id:016x}",
                "name": core.settings.name,
                "listen": self.listen(),
                "uptime_s": round(now - core.started, 1),
                "connections": len(core.sessions),
                "messages_in": totals[0],
                "deliveries": totals[1],
                "messages_in_per_s": rate(totals[0], self._last_totals[0]),
                "deliveries_per_s": rate(totals[1], self._last_totals[1]),
                "dropped_messages": core.stats.dropped_messages,
                "cancelled_subscriptions": core.stats.cancelled_subscriptions,
                "storage_error": _storage_error(core),
            },
            "mesh": self._mesh(),
            "topics": topics,
            "slow_consumers": self._slow(),
            "groups": [_group(name, g) for name, g in sorted(core.subscriptions.groups.items())],
            "lags": [{"kind": k, "name": n, "lag": lag} for k, n, lag in consumer_lags(core)[:PAGE_SLOW]],
            "recent": self.recent(),
        }
        self._last_at = now
        self._last_topics = counts
        self._last_totals = totals
        return doc

    def _mesh(self) -> dict[str, Any] | None:
        mesh = self.mesh
        if mesh is None:
            return None
        peers = []
        for link in mesh.links.values():
            peers.append({
                "peer_id": link.key,
                "hub_id": None if link.remote_hub_id is None else f"{link.remote_hub_id:016x}",
                "state": peer_state(link),
                "direction": None if link.protocol is None else ("outbound" if link.protocol.outbound else "inbound"),
                "rtt_ms": None if link.rtt.last is None else round(link.rtt.last * 1000, 2),
                "last_close": None if link.last_close is None else link.last_close.value,
                "forwarded": link.counters.messages_sent,
                "received": link.counters.messages_received,
                "unacked": link.window.unacked,
            })  # fmt: skip
        return {"peers": peers, "refused_inbound": mesh.refused_inbound}

    def _slow(self) -> list[dict[str, Any]]:
        """Connections with queued output or drops, the fullest queue first."""
        rows = []
        for session in self.core.sessions.values():
            out = session.out
            if out.pending_bytes or out.dropped_messages:
                rows.append({
                    "conn": session.conn_id, "peer": session.peer, "name": session.client_name,
                    "pending_bytes": out.pending_bytes, "cap": out.cap, "dropped": out.dropped_messages,
                })  # fmt: skip
        rows.sort(key=lambda r: (r["pending_bytes"], r["dropped"]), reverse=True)
        return rows[:PAGE_SLOW]


def _group(name: str, group: Any) -> dict[str, Any]:
    return {"group": name, "members": len(group.members), "pending": group.pending_count(),
            "redelivered": group.redelivered_messages}  # fmt: skip


def _storage_error(core: HubCore) -> str | None:
    store = core.store
    return None if store is None or store.storage_error is None else str(store.storage_error)
