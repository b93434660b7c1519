"""The hub's counters: plain integers the core bumps as it goes, read by status (and metrics)."""

from __future__ import annotations

from dataclasses import dataclass


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
