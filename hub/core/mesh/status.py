"""Why a peer session ended, and the per-peer counters ``peers_status()`` reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum


class CloseReason(Enum):
    #: The peer closed or reset the stream, or the connection broke.
    PEER_CLOSED = "peer_closed"
    #: Nothing arrived from the peer for ``heartbeat_misses`` heartbeat intervals.
    HEARTBEAT_TIMEOUT = "heartbeat_timeout"
    #: A SUBSCRIBE stayed unacknowledged after every resend (seed: drop the peer).
    SUBSCRIBE_UNACKED = "subscribe_unacked"
    #: The peer sent bytes that are not a valid frame, or a frame out of place.
    PROTOCOL_ERROR = "protocol_error"
    #: The peer did not send MESH_HELLO first on a v2 stream in time.
    HELLO_TIMEOUT = "hello_timeout"
    #: A newer stream to the same peer took this one's place.
    REPLACED = "replaced"
    #: The v1 outbound buffer hit its bound: the peer does not keep up.
    SLOW_PEER = "slow_peer"
    #: This hub is shutting down.
    SHUTDOWN = "shutdown"
    #: The peer claimed a hub id that is not its own (another hub's, or this hub's).
    REFUSED = "refused"
    #: A FORWARD_BATCH spoke for an origin other than the peer's own hub id.
    FORGED_ORIGIN = "forged_origin"
    #: The overlay (mesh v3) closed a link it does not need (both ends hold more than
    #: ``degree``, a trial link that was no faster, or the slower link a trial replaced), or had
    #: no room left for it (``--max-peers``).
    PRUNED = "pruned"
    #: A reload of the admission rules (SIGHUP) no longer admits the peer: off --mesh-allow, or
    #: the cluster secret it proved was retired.
    NOT_ADMITTED = "not_admitted"
    #: The peer is reached through the overlay now (both ends switched, hub/core/mesh/switch.py):
    #: this v2 link is no longer needed, and neither end dials it again.
    MOVED = "moved"
    #: Handling the peer's input failed unexpectedly; only this session ends (the hub logs why).
    INTERNAL_ERROR = "internal_error"


@dataclass(slots=True)
class PeerCounters:
    """Cumulative over every session with the peer."""

    frames_sent: int = 0
    frames_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    #: libp2p ``write()`` calls: each costs ~200-350 µs, so this should stay far below frames_sent.
    writes: int = 0
    #: Writes that went straight to the socket (hub/mesh/fastwrite.py); the rest took libp2p's path.
    writes_fast: int = 0
    #: Reads of the mesh stream, and those taken straight from yamux's buffer (hub/mesh/fastread.py).
    reads: int = 0
    reads_fast: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    #: Messages not sent to this peer because it announced no matching interest (lazy push).
    messages_skipped_no_interest: int = 0
    #: Forwards from this peer that nobody here wants: dropped and answered with UNSUBSCRIBE.
    forwards_dropped_no_interest: int = 0
    #: Messages from this peer at or below the stored position of their origin.
    duplicates_dropped: int = 0
    #: v1 messages dropped because the peer's outbound buffer was full.
    messages_dropped_overflow: int = 0
    subscribe_resends: int = 0
    subscribes_refused: int = 0
    acks_sent: int = 0
    acks_received: int = 0
    sessions: int = 0
    #: Replays from this hub's logs to the peer (hub/core/mesh/replay.py), the messages they sent,
    #: and stretches of log they could not read any more (retention, corruption).
    replays: int = 0
    messages_replayed: int = 0
    replay_holes: int = 0
    #: Sessions refused at MESH_HELLO (a hub id that is not the peer's) or for a forged origin.
    refused: int = 0
    #: On the overlay: times the peer left a probe unanswered for ``suspect_after`` while sent
    #: frames, and was routed around until it answered (hub/core/overlay/routes.py).
    suspected: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
