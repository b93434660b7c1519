"""The hub's Prometheus metrics, read from the counters the hub keeps anyway, at scrape time.

Nothing here runs on the traffic's path: every figure is a counter or a size the core,
the storage and the mesh already keep for ``status``, read when Prometheus asks.  The
families are plain data (:class:`Family`); the shell turns them into prometheus-client's
(``hub/shell/metrics_http.py``), so the core imports no metrics library.

Naming follows Prometheus' conventions: the ``pub0sub_`` prefix, ``_total`` on counters,
seconds and bytes as units.  Labels have bounded values: reasons and codes are enums,
peers at most ``--max-peers``, users those of the users file (unknown names are one user);
topics only for the ``top_topics`` busiest (by messages
stored), consumers only the ``LISTED`` most lagging.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .clients import SUBSCRIPTION_KINDS
from .connect_rate import ADDRESS_CLASSES
from .histogram import Histogram

if TYPE_CHECKING:
    from ..storage.compaction_policy import CompactionPolicy
    from .hub import HubCore
    from .mesh.core import MeshCore
    from .overlay.core import Overlay

#: Consumers (durable subscriptions, groups) given their own lag series: the most lagging.
LISTED = 100

Labels = Mapping[str, str]


@dataclass
class Family:
    """One metric family: ``kind`` is ``counter``, ``gauge`` or ``histogram``.

    ``name`` is the family's name without ``_total`` (prometheus-client adds it to counters).
    Samples are ``(labels, value)``; a histogram's are ``(labels, Histogram)``.
    """

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    samples: list[tuple[Labels, Any]] = field(default_factory=list)

    def add(self, value: Any, **labels: str) -> Family:
        self.samples.append((labels, value))
        return self


def counter(name: str, help: str, value: float | None = None, labels: tuple[str, ...] = ()) -> Family:
    family = Family(name, "counter", help, labels)
    return family.add(value) if value is not None else family


def gauge(name: str, help: str, value: float | None = None, labels: tuple[str, ...] = ()) -> Family:
    family = Family(name, "gauge", help, labels)
    return family.add(value) if value is not None else family


def by_label(family: Family, label: str, counts: Mapping[str, int], every: Iterable[str] = ()) -> Family:
    """One sample per key of ``counts`` (and 0 for each of ``every`` not in it)."""
    for key in sorted(set(counts) | set(every)):
        family.samples.append(({label: key}, counts.get(key, 0)))
    return family


@dataclass(frozen=True)
class MetricsSources:
    """What the metrics read: the core, the mesh's core (None: no mesh), the fsync timings."""

    core: HubCore
    mesh: MeshCore | None = None
    fsync_seconds: Histogram | None = None
    #: Topics with their own series: the busiest by messages stored (0: none).
    top_topics: int = 20
    #: The overlay, once the hub runs it (it starts when the cluster outgrows a full mesh).
    overlay: Callable[[], Overlay | None] = lambda: None


def collect(src: MetricsSources) -> list[Family]:
    overlay = src.overlay()
    return [*_hub_families(src.core), *_auth_families(src.core), *_topic_families(src.core, src.top_topics),
            *_storage_families(src.core, src.fsync_seconds), *_consumer_families(src.core),
            *(_mesh_families(src.mesh, src.core) if src.mesh is not None else []),
            *(_overlay_families(overlay) if overlay is not None else [])]  # fmt: skip


def _hub_families(core: HubCore) -> list[Family]:
    stats = core.stats
    sessions = core.sessions.values()
    subs = [s for c in sessions for s in c.subs.values()]
    kinds = dict.fromkeys(SUBSCRIPTION_KINDS, 0)
    for sub in subs:
        kinds[sub.kind] += 1
    info = gauge("pub0sub_hub_info", "This hub's identity (value 1).", labels=("hub_id", "name"))
    info.add(1, hub_id=f"{core.hub_id:016x}", name=core.settings.name)
    return [
        info,
        gauge("pub0sub_uptime_seconds", "Seconds since the hub started serving.",
              round(core.clock.monotonic() - core.started, 3)),
        gauge("pub0sub_connections", "Client connections open now.", len(core.sessions)),
        counter("pub0sub_connections_opened", "Client connections accepted since start.", stats.connections_total),
        counter("pub0sub_connections_refused", "Client connections refused (max_connections reached).",
                stats.connections_refused),
        by_label(counter("pub0sub_connections_rate_limited", "Client connections refused at accept for coming too "
                         "often from one address (--max-connects-per-second-per-address), by address class.",
                         labels=("address_class",)), "address_class", core.connect_rate.refused_by_class,
                 every=ADDRESS_CLASSES),
        counter("pub0sub_connections_failed_charged", "Client connections that ended before they were welcomed and "
                "cost their address more of its rate (--failed-connect-cost).", core.connect_rate.failed_charged),
        counter("pub0sub_accept_waits", "Times the accept loop waited for the accept budget "
                "(--max-accepts-per-second).", core.connect_rate.accept_waits),
        by_label(counter("pub0sub_connections_closed", "Client connections that ended, by close reason.",
                         labels=("reason",)), "reason", stats.connections_closed),
        by_label(gauge("pub0sub_subscriptions", "Open subscriptions by kind.", labels=("kind",)), "kind", kinds),
        counter("pub0sub_publish_frames", "PUBLISH frames received from clients.", stats.publish_frames),
        counter("pub0sub_duplicate_publishes", "PUBLISH frames answered DUPLICATE (idempotent retries).",
                stats.duplicate_batches),
        counter("pub0sub_messages_in", "Messages stored in a topic here, local and from peers (once per topic).",
                stats.messages_in),
        counter("pub0sub_message_bytes_in", "Bytes of those messages' records (data, key, 6 bytes of lengths).",
                stats.bytes_in),
        counter("pub0sub_deliveries", "Messages delivered to subscribers.", core.deliveries()),
        counter("pub0sub_client_received_bytes", "Bytes read from client connections.",
                stats.bytes_in_closed + sum(c.bytes_in for c in sessions)),
        counter("pub0sub_client_sent_bytes", "Bytes written to client connections.",
                stats.bytes_out_closed + sum(c.bytes_out for c in sessions)),
        by_label(counter("pub0sub_dropped_messages", "Messages not delivered, by reason (never silent: each "
                         "drop-oldest drop is a GAP the subscriber sees).", labels=("reason",)), "reason", {
            "drop_oldest": stats.dropped_messages,
            "discarded_on_cancel": stats.discarded_on_cancel,
            "discarded_on_close": stats.discarded_on_close,
        }),
        by_label(counter("pub0sub_slow_consumer_cancels", "Subscriptions cancelled for not keeping up, by reason "
                         "(queue_full: the connection's queue; held_full: batches waiting for credit).",
                         labels=("reason",)), "reason", stats.cancels, every=("queue_full", "held_full")),
        by_label(counter("pub0sub_errors_sent", "ERROR frames sent to clients, by error code.", labels=("code",)),
                 "code", stats.errors_sent),
        counter("pub0sub_acks_refused", "ACKs refused (offsets not delivered).", stats.acks_refused),
        counter("pub0sub_heartbeat_timeouts", "Clients closed for silence.", stats.heartbeat_timeouts),
        counter("pub0sub_hello_timeouts", "Clients closed for not being welcomed within hello_timeout.",
                stats.hello_timeouts),
        counter("pub0sub_read_pauses", "Times a client connection was not read from while its replies went unread.",
                stats.read_pauses),
        counter("pub0sub_read_pause_closes", "Client connections closed for staying unread past "
                "slow_consumer_deadline.", stats.read_pause_closes),
        counter("pub0sub_loop_stalls", "Times the hub's event loop ran no task for seconds (the stack is logged).",
                stats.loop_stalls),
        counter("pub0sub_loop_stall_seconds", "Seconds the hub's event loop ran no task, in all.",
                stats.loop_stall_seconds),
        counter("pub0sub_tls_handshake_failures", "TLS handshakes that failed or did not finish in time.",
                stats.tls_handshake_failures),
    ]


#: Per user of the users file (docs/security.md): (family name without _total, UserCounters field, help).
USER_COUNTERS = (
    ("pub0sub_user_authenticated", "authenticated", "HELLOs welcomed with the user's credentials."),
    ("pub0sub_user_auth_failures", "auth_failures", "HELLOs refused: bad or missing credentials."),
    ("pub0sub_user_publish_refused", "publish_refused", "PUBLISHes refused: no grant for the topic."),
    ("pub0sub_user_subscribe_refused", "subscribe_refused", "SUBSCRIBEs refused: no grant for the topic."),
    ("pub0sub_user_revoked", "revoked", "Subscriptions ended or connections closed by a reload's lost grant."),
    ("pub0sub_user_topics_created", "topics_created", "Topics created by the user's publishes."),
    ("pub0sub_user_topic_limit_refused", "topic_limit_refused",
     "PUBLISHes refused: they would create more topics than max_new_topics_per_user."),
    ("pub0sub_user_status_refused", "status_refused", "STATUS requests refused: the user has no status grant."),
)


def _auth_families(core: HubCore) -> list[Family]:
    users = sorted(core.auth.counters.items())
    families = []
    for name, field_name, help in USER_COUNTERS:
        family = counter(name, help, labels=("user",))
        for user, counts in users:
            family.add(getattr(counts, field_name), user=user)
        families.append(family)
    return families


def _topics(core: HubCore) -> dict[str, Any]:
    store = core.store
    return store.logs if store is not None else core.publisher.memory_topics


def busiest_topics(core: HubCore, n: int) -> list[tuple[str, Any]]:
    """The ``n`` topics with the most messages stored (status page and metrics)."""
    return heapq.nlargest(n, _topics(core).items(), key=lambda item: item[1].messages_appended)


def subscriber_count(core: HubCore, topic: str) -> int:
    """Client subscriptions that get ``topic`` (standing interests of absent consumers not counted)."""
    return sum(1 for sub in core.router.match(topic) if hasattr(sub, "session"))


def _topic_families(core: HubCore, top: int) -> list[Family]:
    topics = _topics(core)
    families = [gauge("pub0sub_topics", "Topics this hub stores (or, without a data dir, has seen).", len(topics))]
    if top <= 0:
        return families
    msgs = counter("pub0sub_topic_messages", "Messages stored per topic (the busiest topics only).",
                   labels=("topic",))  # fmt: skip
    size = counter("pub0sub_topic_message_bytes", "Record bytes stored per topic (the busiest topics only).",
                   labels=("topic",))  # fmt: skip
    subs = gauge("pub0sub_topic_subscribers", "Client subscriptions getting the topic (the busiest only).",
                 labels=("topic",))  # fmt: skip
    log_bytes = gauge("pub0sub_topic_log_bytes", "Bytes on disk of the topic's log (the busiest only).",
                      labels=("topic",))  # fmt: skip
    for name, t in busiest_topics(core, top):
        msgs.add(t.messages_appended, topic=name)
        size.add(t.bytes_appended, topic=name)
        subs.add(subscriber_count(core, name), topic=name)
        if core.store is not None:
            log_bytes.add(t.size_bytes, topic=name)
    return [*families, msgs, size, subs, *([log_bytes] if core.store is not None else [])]


def _storage_families(core: HubCore, fsync_seconds: Histogram | None) -> list[Family]:
    store = core.store
    if store is None:
        return []
    logs = store.logs.values()
    families = [
        gauge("pub0sub_log_bytes", "Bytes of every topic log on disk.", sum(t.size_bytes for t in logs)),
        gauge("pub0sub_log_segments", "Segment files of every topic log.", sum(len(t.segments) for t in logs)),
        gauge("pub0sub_storage_healthy", "1 while the storage accepts writes; 0 after a write or fsync failed "
              "(publishes are refused).", 0 if store.storage_error else 1),
        counter("pub0sub_fsyncs", "Group commits (each one fsync per dirty segment).", store.fsyncs),
        gauge("pub0sub_recovery_repairs", "Segments repaired at start-up (torn tails, bad ranges).",
              sum(1 for r in store.reports if r.truncated_bytes or r.bad_ranges or r.corrupt_copy)),
    ]  # fmt: skip
    if fsync_seconds is not None:
        families.append(Family("pub0sub_fsync_duration_seconds", "histogram",
                               "Time one group commit's fsyncs took.").add(fsync_seconds))  # fmt: skip
    if store.compaction is not None:
        families.extend(_compaction_families(store.compaction))
    return families


def _compaction_families(policy: CompactionPolicy) -> list[Family]:
    """docs/compaction.md: what passes read, how full their offset map was, where topics are clean."""
    clean_end = gauge("pub0sub_compaction_clean_end_offset", "Where a compacted topic's clean part ends: its "
                      "checkpoint after the last pass (the first topics only).", labels=("topic",))  # fmt: skip
    for topic, offset in itertools.islice(policy.checkpoints().items(), LISTED):
        clean_end.add(offset, topic=topic)
    return [
        counter("pub0sub_compaction_passes", "Compaction passes finished.", policy.passes),
        counter("pub0sub_compaction_failures", "Compaction passes that failed or were refused.", policy.failures),
        counter("pub0sub_compaction_bytes_read", "Bytes compaction passes read from segment files.",
                policy.bytes_read),
        gauge("pub0sub_compaction_map_entries", "Keys the last pass's offset map held.", policy.last_map_entries),
        gauge("pub0sub_compaction_map_capacity", "Keys the last pass's offset map could hold "
              "(--compaction-map-bytes, or less for a small dirty part).", policy.last_map_capacity),
        clean_end,
    ]  # fmt: skip


def consumer_lags(core: HubCore) -> list[tuple[str, str, int]]:
    """``(kind, name, messages behind)`` per durable subscription and group: the log's end
    minus the acknowledged position, summed over its topics; most lagging first."""
    if core.consumers is None:
        return []
    topics = _topics(core)
    lags = []
    for state in core.consumers.states.values():
        behind = 0
        for topic, tracker in state.positions.items():
            t = topics.get(topic)
            if t is not None:
                behind += max(0, t.next_offset - tracker.floor)
        lags.append((state.kind, state.name, behind))
    return heapq.nlargest(LISTED, lags, key=lambda lag: lag[2])


def _consumer_families(core: HubCore) -> list[Family]:
    lag = gauge("pub0sub_consumer_lag_messages", "Messages stored but not yet acknowledged, per durable "
                "subscription and group (the most lagging only).", labels=("kind", "name"))  # fmt: skip
    for kind, name, behind in consumer_lags(core):
        lag.add(behind, kind=kind, name=name)
    members = gauge("pub0sub_group_members", "Members attached to a consumer group.", labels=("group",))
    pending = gauge("pub0sub_group_pending_messages", "Messages delivered to a group, not yet acknowledged.",
                    labels=("group",))  # fmt: skip
    redelivered = counter("pub0sub_group_redelivered_messages", "Messages a group delivered again (ack deadline "
                          "passed or member gone).", labels=("group",))  # fmt: skip
    for name, group in core.subscriptions.groups.items():
        members.add(len(group.members), group=name)
        pending.add(group.pending_count(), group=name)
        redelivered.add(group.redelivered_messages, group=name)
    return [lag, members, pending, redelivered]


def peer_state(link: Any) -> str:
    """``linked``, ``dialing`` or ``down``: a peer link as an operator names it."""
    return "linked" if link.live else "dialing" if link.dialing or link.starting else "down"


PEER_STATES = ("linked", "dialing", "down")

#: Per-peer counters: (family name without _total, PeerCounters field, help).
PEER_COUNTERS = (
    ("pub0sub_mesh_peer_forwarded_messages", "messages_sent", "Messages forwarded to the peer."),
    ("pub0sub_mesh_peer_received_messages", "messages_received", "Messages the peer forwarded here."),
    ("pub0sub_mesh_peer_replayed_messages", "messages_replayed", "Messages re-sent to the peer from the logs."),
    ("pub0sub_mesh_peer_acks_received", "acks_received", "FORWARD_ACK frames from the peer."),
    ("pub0sub_mesh_peer_acks_sent", "acks_sent", "FORWARD_ACK frames to the peer."),
    ("pub0sub_mesh_peer_duplicates_dropped", "duplicates_dropped", "Messages from the peer already stored here."),
    ("pub0sub_mesh_peer_sent_bytes", "bytes_sent", "Bytes written to the peer."),
    ("pub0sub_mesh_peer_received_bytes", "bytes_received", "Bytes read from the peer."),
    ("pub0sub_mesh_peer_sessions", "sessions", "Sessions (streams) with the peer."),
    ("pub0sub_mesh_peer_refused", "refused", "Sessions refused (wrong hub id, forged origin)."),
    ("pub0sub_mesh_peer_overflow_dropped_messages", "messages_dropped_overflow",
     "v1 forwards dropped: the peer's buffer was full."),
)


def _mesh_families(mesh: MeshCore, core: HubCore) -> list[Family]:
    links = list(mesh.links.values())
    states = dict.fromkeys(PEER_STATES, 0)
    for link in links:
        states[peer_state(link)] += 1
    peer_labels = ("peer", "hub_id")
    up = gauge("pub0sub_mesh_peer_up", "1 while the link to the peer is up.", labels=peer_labels)
    acked = gauge("pub0sub_mesh_peer_acked_sequence", "Highest origin sequence of ours the peer acknowledged.",
                  labels=peer_labels)  # fmt: skip
    window = gauge("pub0sub_mesh_peer_window_unacked_sets", "Forward sets sent or queued, not yet acknowledged.",
                   labels=peer_labels)  # fmt: skip
    window_bytes = gauge("pub0sub_mesh_peer_window_bytes", "Bytes held in the peer's forward window.",
                         labels=peer_labels)  # fmt: skip
    evicted = counter("pub0sub_mesh_peer_window_evicted_messages", "Unsent forwards the full window evicted "
                      "(replayed from the logs when there are logs).", labels=peer_labels)  # fmt: skip
    closes = counter("pub0sub_mesh_link_closes", "Sessions with the peer that ended, by close reason.",
                     labels=(*peer_labels, "reason"))  # fmt: skip
    rtt = Family("pub0sub_mesh_heartbeat_rtt_seconds", "histogram", "Mesh heartbeat round trips (PING to PONG).",
                 peer_labels)  # fmt: skip
    per_peer = [counter(name, help, labels=peer_labels) for name, _field, help in PEER_COUNTERS]
    for link in links:
        ids = {"peer": link.key, "hub_id": "" if link.remote_hub_id is None else f"{link.remote_hub_id:016x}"}
        up.add(1 if link.live else 0, **ids)
        acked.add(link.window.acked_seq, **ids)
        window.add(link.window.unacked, **ids)
        window_bytes.add(link.window.bytes, **ids)
        evicted.add(link.window.evicted.unsent_messages, **ids)
        rtt.add(link.rtt, **ids)
        for reason, n in sorted(link.closes.items()):
            closes.add(n, **ids, reason=reason)
        for family, (_name, field_name, _help) in zip(per_peer, PEER_COUNTERS, strict=True):
            family.add(getattr(link.counters, field_name), **ids)
    return [
        by_label(gauge("pub0sub_mesh_peers", "Known mesh peers by link state.", labels=("state",)), "state", states),
        counter("pub0sub_mesh_messages_in", "Messages stored here that peers forwarded.",
                core.mesh.forwarded_messages_in),
        counter("pub0sub_mesh_refused_inbound", "Inbound links refused at max_peers.", mesh.refused_inbound),
        counter("pub0sub_mesh_admitted", "Mesh links admitted (allow-list and cluster secret passed).",
                mesh.admission.admitted),
        by_label(counter("pub0sub_mesh_admission_refused", "Mesh links refused by admission, by kind.",
                         labels=("kind",)), "kind", mesh.admission.refused_by_kind),
        up, acked, window, window_bytes, evicted, closes, rtt, *per_peer,
    ]  # fmt: skip


def _overlay_families(overlay: Overlay) -> list[Family]:
    """What the overlay's delivering side did (hub/core/overlay/streams.py): the figures to alert
    on are ``overlay_messages_lost_total`` and ``overlay_gaps_total{outcome="lost"}``."""
    c = overlay.streams.counters
    streams, held = overlay.streams.state_size()
    return [
        by_label(counter("pub0sub_overlay_sets", "Sets from other hubs: delivered here in order, dropped as "
                         "duplicates, held back behind a gap, not held (hold-back full), wanted by nobody here.",
                         labels=("kind",)), "kind",
                 {"delivered": c.delivered_sets, "duplicate": c.duplicate_sets, "held": c.held_sets,
                  "held_dropped": c.held_dropped, "unwanted": c.unwanted_sets}),
        by_label(counter("pub0sub_overlay_gaps", "Gaps in an origin's stream: opened, repaired, given up "
                         "(the origin no longer had them, or stayed away past the give-up time).",
                         labels=("outcome",)), "outcome",
                 {"opened": c.gaps_opened, "repaired": c.gaps_repaired, "lost": c.gaps_lost}),
        counter("pub0sub_overlay_messages_lost", "Messages their origin no longer had when asked to resend them.",
                c.messages_lost),
        by_label(counter("pub0sub_overlay_repairs", "REPAIR asked of origins; REPAIRED answers that left the gap "
                         "open with the resent sets unseen (asked again); REPAIR answered here.",
                         labels=("kind",)), "kind",
                 {"asked": c.repairs_asked, "short": c.repairs_short, "served": overlay.origin.repairs_served}),
        counter("pub0sub_overlay_starts_assumed", "Streams whose origin never said where they start.",
                c.starts_assumed),
        gauge("pub0sub_overlay_streams", "Origin streams this hub delivers.", streams),
        gauge("pub0sub_overlay_held_sets", "Sets held back behind gaps.", held),
        gauge("pub0sub_overlay_open_gaps", "Gaps being repaired.", overlay.streams.open_gaps()),
    ]  # fmt: skip
