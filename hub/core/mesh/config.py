"""Mesh settings, each with the reason for its default."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .admission import AdmissionRules
from .protocols import ALL_VERSIONS, MeshVersion

#: No allow-list, no secret, no v1 (immutable, so one default serves every config).
OPEN_MESH = AdmissionRules()
#: Loopback, any free port: tests and a hub started without --mesh-listen set.
DEFAULT_LISTEN = "/ip4/127.0.0.1/tcp/0"


@dataclass(frozen=True, kw_only=True, slots=True)
class MeshConfig:
    #: ``--mesh-listen``: port 0 picks a free port (read it back from ``Mesh.listen_addrs``).
    listen: str = DEFAULT_LISTEN
    #: ``--mesh-announce``: what other hubs are told to dial instead of ``listen``'s address.
    announce: tuple[str, ...] = ()
    #: ``--bootstrap`` multiaddrs ending in ``/p2p/<peer id>``.
    bootstrap: tuple[str, ...] = ()
    #: Hubs provide and look up ``pub0sub-cluster:<cluster>`` in the DHT; clusters sharing a DHT stay apart.
    cluster: str = "default"
    #: Where the identity key lives; None = a fresh identity on every start.
    data_dir: Path | None = None
    #: Protocol versions this hub speaks, newest first (tests pin v1 to play a seed-only hub).
    #: v1 streams are admitted only with ``admission.allow_v1``.
    versions: tuple[MeshVersion, ...] = ALL_VERSIONS
    #: Who may link: ``--mesh-allow``, ``--cluster-secret-file``, ``--allow-mesh-v1``.
    admission: AdmissionRules = OPEN_MESH
    #: Run the Kademlia DHT and connect to what it finds.
    discovery: bool = True
    #: How often a hub looks the cluster up again, so late joiners are found (hub/mesh/discovery.py) ...
    discovery_interval: float = 2.0
    #: ... doubling up to this while its lookups find no new hub (a joiner dials the hubs it finds itself).
    discovery_interval_max: float = 30.0
    #: Full mesh: each hub links to every other, up to this many.
    max_peers: int = 64
    #: With the overlay among ``versions``: switch to it once this many hubs are known (this one
    #: included); 1: from the start, 0: never (hub/core/mesh/switch.py).
    overlay_from: int = 0
    heartbeat_interval: float = 1.0
    #: k missed beats = peer dead (liveness = any frame received; a ping forces a pong).
    heartbeat_misses: int = 3
    #: On the overlay: a neighbour sent frames that leaves a probe (a ping) unanswered this long
    #: is routed around by this hub until it answers (hub/core/overlay/routes.py); 0: never.
    suspect_after: float = 0.5
    #: On the overlay: a libp2p connection no stream or session used this long is closed
    #: (hub/mesh/idle.py); 0: kept until the peer goes.
    idle_close: float = 15.0
    #: SUBSCRIBE_ACK window; after ``subscribe_resends`` resends without an ack the peer is dropped.
    subscribe_ack_timeout: float = 1.0
    subscribe_resends: int = 3
    #: A v2 peer must send MESH_HELLO first, within this time; the admission handshake too.
    hello_timeout: float = 5.0
    #: Redial backoff after a link breaks (doubles up to the max), and how long to keep trying.
    reconnect_min: float = 0.1
    reconnect_max: float = 5.0
    #: A broken v2 link keeps the peer's interest and window this long, so forwards published
    #: while it reconnects are resent from its MESH_HELLO position (0 lost on a short break).
    resume_linger: float = 30.0
    #: Bounds of one peer's unacknowledged forward window (sets, bytes).
    window_max_sets: int = 1 << 18
    window_max_bytes: int = 256 << 20
    #: Bound of a v1 peer's outbound buffer: v1 has no acks, so beyond it messages are dropped (counted).
    v1_max_pending_bytes: int = 64 << 20
    #: Coalesce queued frames into writes of about this size: each libp2p write costs ~200-350 µs.
    #: Kept well under yamux's initial 256 KiB send window: a larger write cannot finish without
    #: window updates, and py-libp2p polls for those every 10 ms -- a hub that falls behind (and
    #: so writes ever bigger chunks) would stall on every write.
    write_chunk: int = 64 << 10
    #: After a write that was not a full chunk, the next one starts at least this long (seconds)
    #: after it started, so the frames queued meanwhile leave together (session.py's _writer).
    #: Every write wakes the receiving hub (and its subscribers); unpaced small writes at 10k
    #: msgs/s swamped it (L2 p99 43-310 ms unpaced).  0.5 ms rather than 1 ms: with the SDK,
    #: L2 p50 1.2-1.5 vs 1.8-2.1 ms and p99 4.1-4.7 vs 5.0-5.3 ms (docs/benchmarks.md).  An idle
    #: link still writes at once.
    write_interval: float = 0.0005
    #: Bytes asked of the stream per read.
    read_chunk: int = 1 << 20
    #: Use libp2p's own read and write path on every stream, never the fast paths that reach
    #: into its internals (hub/mesh/fastpath.py): slower, and as correct as libp2p itself.
    plain_io: bool = False
    #: ``--mesh-dump``: each session's plaintext, both directions, written to files here
    #: (hub/mesh/dump.py); None: no dump, and nothing of it on the mesh paths.
    dump_dir: Path | None = None
    #: UNSUBSCRIBE in answer to unwanted FORWARDs is repeated at most this often per topic.
    unwanted_reply_interval: float = 1.0

    def __post_init__(self) -> None:
        if not self.versions:
            raise ValueError("a mesh needs at least one protocol version")
        if self.write_interval < 0:
            raise ValueError("write_interval must be >= 0")
        if self.window_max_sets <= 0 or self.window_max_bytes <= 0:
            raise ValueError("window_max_sets and window_max_bytes must be positive")
        if self.suspect_after < 0 or self.idle_close < 0:
            raise ValueError("suspect_after and idle_close must be >= 0 (0: never)")
        if self.heartbeat_misses < 1 or self.subscribe_resends < 0:
            raise ValueError("heartbeat_misses must be >= 1 and subscribe_resends >= 0")
