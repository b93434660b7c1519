"""The hub's counters: plain integers the core bumps as it goes, read by status and metrics."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class HubStats:
    publish_frames: int = 0
    messages_in: int = 0
    bytes_in: int = 0
    deliveries: int = 0
    dropped_messages: int = 0
    cancelled_subscriptions: int = 0
    discarded_on_cancel: int = 0
    discarded_on_close: int = 0
    duplicate_batches: int = 0
    protocol_errors: int = 0
    #: ACKs refused because they named offsets not delivered (or a subscription without acks)
    acks_refused: int = 0
    connections_total: int = 0
    connections_refused: int = 0
    heartbeat_timeouts: int = 0
    #: Connections closed for sending no HELLO (or not being welcomed) within hello_timeout.
    hello_timeouts: int = 0
    #: HELLOs refused: bad or missing credentials (per user: status "auth").
    auth_failures: int = 0
    #: TLS connections whose handshake failed or did not finish within hello_timeout.
    tls_handshake_failures: int = 0
    #: Bytes read from and written to connections that have ended (the open ones keep their own).
    bytes_in_closed: int = 0
    bytes_out_closed: int = 0
    #: Per close reason (``clients.CloseReason`` values): connections that ended.
    connections_closed: dict[str, int] = field(default_factory=dict)
    #: Per error code name: ERROR frames this hub sent to clients.
    errors_sent: dict[str, int] = field(default_factory=dict)
    #: Per reason (``queue_full``, ``held_full``): slow subscriptions cancelled.
    cancels: dict[str, int] = field(default_factory=dict)

    #: topics created by client publishes, and publishes refused for creating too many
    topics_created: int = 0
    #: COMMIT frames answered or waiting (hub.core.commits)
    commits: int = 0
    topic_limit_refusals: int = 0
    #: times a connection was not read from for its unread replies, and those closed for it
    #: (hub.core.read_pause)
    read_pauses: int = 0
    read_pause_closes: int = 0
    #: times the event loop ran nothing for seconds, and those seconds in all (hub.shell.watchdog)
    loop_stalls: int = 0
    loop_stall_seconds: float = 0.0


def bump(counts: dict[str, int], key: str, by: int = 1) -> None:
    """One more ``key`` in a per-reason counter (never on a per-message path)."""
    counts[key] = counts.get(key, 0) + by
