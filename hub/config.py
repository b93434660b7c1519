"""Hub configuration: defaults < TOML file < environment < command-line flags."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire import CLIENT_PROTOCOL_VERSION
from wire.limits import DEFAULT_MAX_CLIENT_BODY

from .core.connect_rate import ConnectRateLimits
from .storage.compaction_policy import parse_compact
from .storage.offset_map import MIN_MAP_BYTES

ENV_PREFIX = "PUB0SUB_HUB_"


@dataclass(kw_only=True)
class HubConfig:
    #: Client listener, ``HOST:PORT``; port 0 picks a free port (printed at start).
    listen: str = "127.0.0.1:7420"
    #: A name shown in WELCOME and status.
    name: str = ""
    #: Where topic logs live; None = memory only (live subscriptions only).
    data_dir: Path | None = None
    #: Largest frame body accepted from a client, checked at the header.
    max_body: int = DEFAULT_MAX_CLIENT_BODY
    #: Client connections beyond this are refused with LIMIT_EXCEEDED.  None: as many as the
    #: file descriptor limit leaves room for (hub/shell/fdlimit.py), which also caps a larger value.
    max_connections: int | None = None
    #: Connections a second one source address (an IPv6 /64) may open on average, after a burst
    #: of ``connect_burst_per_address``; beyond it a connection is refused with LIMIT_EXCEEDED and
    #: closed at once (hub/core/connect_rate.py).  0: no limit.  Loopback is limited too.
    max_connects_per_second_per_address: float = 100.0
    connect_burst_per_address: int = 200
    #: What a connection that ends before it is welcomed (bad frames, no HELLO in time, refused
    #: credentials, a failed TLS handshake) costs its address, in connections of that rate on
    #: top of its own: a client failing in a loop gets 1/(1 + N) of the rate.  0: no more.
    failed_connect_cost: float = 10.0
    #: Addresses and CIDRs the connection rate limit leaves alone (a load balancer, a test bed).
    connect_rate_exempt: tuple[str, ...] = ()
    #: Connections accepted a second from all addresses together, after a burst of
    #: ``accept_burst``; past it new connections wait in the kernel's backlog
    #: (hub/core/connect_rate.py, ``accept_wait``).  0: no budget.
    max_accepts_per_second: float = 0.0
    accept_burst: int = 1000
    #: Open subscriptions per connection.
    max_subscriptions: int = 1024
    #: Topics and patterns across all subscriptions of one connection.
    max_topics_per_connection: int = 10_000
    #: Topic logs the hub holds in all; a publish that would create more is refused (LIMIT_EXCEEDED).
    max_topics: int = 100_000
    #: Topics one connection may create over its life by publishing to names that did not exist.
    max_new_topics_per_connection: int = 10_000
    #: Topics one user of the users file may create over the hub's life, all its connections together.
    max_new_topics_per_user: int = 20_000
    #: Topics one PUBLISH frame may create (bounds the time the hub spends on one frame).
    max_new_topics_per_frame: int = 256
    #: Segment files kept open at once, the least recently used closed first (0: derived from
    #: the process's descriptor limit, see hub/storage/file_cache.py).
    max_open_files: int = 0
    #: Bytes queued for one connection before its slow-consumer policy applies.
    max_pending_bytes: int = 8 << 20
    #: Seconds a client may leave its replies unread (the hub then reads nothing from it) before it is closed.
    slow_consumer_deadline: float = 10.0
    #: Seconds between heartbeats on an idle connection.
    heartbeat_interval: float = 5.0
    #: Heartbeat intervals of silence before a client is declared dead.
    heartbeat_misses: int = 3
    #: Seconds from accept (TLS handshake included) until the hub must have welcomed the client.
    hello_timeout: float = 3.0
    #: The newest client protocol version the hub accepts (docs/operations.md, "Rolling upgrades"):
    #: a newer client is answered UNSUPPORTED_VERSION, and the SDK reconnects with this one.
    max_client_version: int = CLIENT_PROTOCOL_VERSION
    #: Users, hashed secrets and topic grants (docs/security.md); None = an open hub. SIGHUP reloads it.
    auth_file: Path | None = None
    #: Certificate chain and private key (PEM): with both, the client port speaks TLS only.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: CA (PEM) that must have signed every client's certificate (mutual TLS); needs tls_cert.
    tls_client_ca: Path | None = None
    #: Bytes the writer takes from the queue for one socket send.
    write_chunk: int = 256 << 10
    #: ``received``: ack once written to the OS; ``fsync``: ack once on disk (group commit).
    durability: str = "received"
    #: Roll topic log segments past this size.
    segment_bytes: int = 64 << 20
    #: Per-topic retention by size in bytes (0: unlimited).
    retention_bytes: int = 0
    #: Per-topic retention by age in seconds (0: unlimited).
    retention_seconds: float = 0.0
    #: Seconds between retention checks.
    retention_check_seconds: float = 30.0
    #: Compacted topics (docs/compaction.md): names or patterns whose logs keep only the latest
    #: record per key (Kafka's ``cleanup.policy=compact``); needs a data directory.  An entry may
    #: end with its own tombstone retention: ``"audit.> tombstone-seconds=600"``.
    compact: tuple[str, ...] = ()
    #: Seconds a tombstone (a deletion marker) is kept on a compacted topic after it was appended,
    #: for the ``compact`` entries that do not say.
    compact_tombstone_seconds: float = 24 * 3600.0
    #: The most bytes one compaction pass's offset map takes (about 31 per distinct key; a topic
    #: with more dirty keys is cleaned over several passes).
    compaction_map_bytes: int = 64 << 20
    #: Seconds between checks for compacted topics due for a pass.
    compact_check_seconds: float = 10.0
    #: Durable subscriptions and groups nobody attached to for this long are forgotten.
    consumer_expiry_seconds: float = 7 * 24 * 3600.0
    #: Default seconds a group waits for an ack before redelivering.
    ack_wait_seconds: float = 30.0
    #: libp2p listen multiaddr for the mesh (e.g. /ip4/0.0.0.0/tcp/7421); None = no mesh.
    mesh_listen: str | None = None
    #: Multiaddrs other hubs are told to dial instead of ``mesh_listen``'s (libp2p's announce
    #: addresses): a hub behind a port forward, a NAT or a proxy.  Empty: the addresses it listens on.
    mesh_announce: tuple[str, ...] = ()
    #: Multiaddrs of hubs to join through (ending in /p2p/<peer id>).
    bootstrap: tuple[str, ...] = ()
    #: Hubs of one cluster find each other under this name in the DHT.
    cluster: str = "default"
    #: Full mesh up to this many peers.
    max_peers: int = 64
    #: Mesh v3, the overlay (docs/scale.md): each hub keeps ``mesh_degree`` links (at most
    #: ``max_peers``), routes sets over shortest paths and finds interest by rendezvous, so a
    #: cluster can outgrow a full mesh.  Off: the v2 full mesh.  Either way v1/v2 peers link.
    mesh_overlay: bool = False
    #: Without --mesh-overlay: a hub switches to the overlay once it knows this many hubs (itself
    #: included), or is invited by one that has (hub/core/mesh/switch.py); 0: never.  10, because
    #: below it the overlay would be a full mesh anyway (``mesh_degree`` 8 links per hub) and v2's
    #: one-hop data path is the faster.
    mesh_overlay_from: int = 10
    mesh_degree: int = 8
    #: With the overlay: direct links (not advertised) to hubs this one sends to that the
    #: overlay reaches only through relays, at most this many (hub/core/overlay/shortcuts.py).
    mesh_shortcuts: int = 7
    #: With the overlay: a hub tries a link to a random hub about this often (doubling while none
    #: is faster; times hubs / 100 past 100 hubs) and keeps it in place of a much slower one
    #: (hub/core/overlay/links.py; 0: never).
    mesh_link_trials: float = 10.0
    #: Find hubs through the DHT (off: link only to --bootstrap hubs, e.g. behind a fixed proxy).
    discovery: bool = True
    #: Seconds between heartbeats on mesh links; ``mesh_heartbeat_misses`` missed = peer dead.
    mesh_heartbeat_interval: float = 1.0
    mesh_heartbeat_misses: int = 3
    #: On the overlay: a neighbour sent sets that answers nothing for this long is routed around
    #: by this hub until it answers (hub/core/overlay/routes.py, detours); 0: never.
    mesh_suspect_after: float = 0.5
    #: On the overlay: a libp2p connection no mesh stream used for this long is closed
    #: (hub/mesh/idle.py); 0: kept until the peer goes.
    mesh_idle_close: float = 15.0
    #: How long a dead v2 peer's interest is kept while its link heals: forwards published
    #: meanwhile wait in its window and are resent after reconnecting (0 lost on a short
    #: break).  0 withdraws the interest as soon as the peer is declared dead.
    mesh_resume_linger: float = 30.0
    #: Least seconds between the starts of two small writes on a mesh link, so the frames queued
    #: meanwhile leave together (0: no pacing).
    mesh_write_interval: float = 0.0005
    #: Bytes of forwards kept in memory per peer until it acknowledges them.  Beyond it the
    #: oldest go; a hub with a data directory sends them again from its logs.
    mesh_window_bytes: int = 256 << 20
    #: libp2p's own read/write path on every mesh stream (hub/mesh/fastpath.py).
    mesh_plain_io: bool = False
    #: Mesh admission (docs/security.md): peer ids, or files of them, that may link; empty: any.
    mesh_allow: tuple[str, ...] = ()
    #: A file holding the cluster secret every hub must prove in the mesh handshake.
    cluster_secret_file: Path | None = None
    #: Admit the seed protocol (mesh v1), which has no handshake to prove a secret in.
    allow_mesh_v1: bool = False
    #: Write each mesh stream's decrypted bytes here, one file per direction, for ``pub0sub decode``
    #: (hub/mesh/dump.py); None: off.  For debugging: the files hold the forwarded payloads.
    mesh_dump: Path | None = None
    #: Prometheus metrics, probes and the status page over HTTP, ``HOST:PORT`` (a bare port: on
    #: 127.0.0.1); None: off.  The page shows the hub's clients and topics: keep it private.
    metrics_listen: str | None = None
    #: Topics given their own metric series: the busiest by messages stored (0: none).
    metrics_topics: int = 20
    #: ``text`` (one line per event, for people) or ``json`` (one object per line, for log pipelines).
    log_format: str = "text"
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"listen address must be HOST:PORT, got {self.listen!r}")
        return host.strip("[]"), int(port)

    @property
    def metrics_host_port(self) -> tuple[str, int] | None:
        """``--metrics-listen`` as (host, port); a bare port listens on loopback only."""
        if self.metrics_listen is None:
            return None
        host, _, port = self.metrics_listen.rpartition(":")
        if not port.isdigit():
            raise ValueError(f"metrics listen address must be HOST:PORT or PORT, got {self.metrics_listen!r}")
        return (host.strip("[]") or "127.0.0.1"), int(port)

    def validate(self) -> None:
        self.host_port  # noqa: B018 - parses and raises on a bad address
        self.metrics_host_port  # noqa: B018 - likewise
        if self.mesh_dump is not None and self.mesh_listen is None:
            raise ValueError("mesh_dump needs a mesh: set mesh_listen too")
        if self.mesh_announce and self.mesh_listen is None:
            raise ValueError("mesh_announce needs a mesh: set mesh_listen too")
        for address in self.mesh_announce:
            if "/p2p/" in address or not address.startswith(("/ip4/", "/ip6/", "/dns")) or "/tcp/" not in address:
                raise ValueError(f"mesh_announce takes /ip4|ip6|dns/HOST/tcp/PORT multiaddrs (the hub adds its "
                                 f"/p2p/<peer id>), got {address!r}")
        if self.metrics_topics < 0:
            raise ValueError("metrics_topics must be >= 0")
        if self.mesh_shortcuts < 0:
            raise ValueError(f"mesh_shortcuts must be >= 0 (0: none), got {self.mesh_shortcuts}")
        if self.mesh_overlay_from < 0:
            raise ValueError(f"mesh_overlay_from must be >= 0 (0: never), got {self.mesh_overlay_from}")
        if self.mesh_link_trials < 0:
            raise ValueError(f"mesh_link_trials must be >= 0 (0: never), got {self.mesh_link_trials}")
        if self.mesh_suspect_after < 0:
            raise ValueError(f"mesh_suspect_after must be >= 0 (0: never), got {self.mesh_suspect_after}")
        if self.mesh_idle_close < 0:
            raise ValueError(f"mesh_idle_close must be >= 0 (0: never), got {self.mesh_idle_close}")
        if self.log_format not in ("text", "json"):
            raise ValueError(f"log_format must be 'text' or 'json', got {self.log_format!r}")
        for name in ("max_body", "max_connections", "max_subscriptions", "max_topics_per_connection",
                     "max_topics", "max_new_topics_per_connection", "max_new_topics_per_user",
                     "max_new_topics_per_frame", "max_pending_bytes", "heartbeat_misses", "write_chunk",
                     "mesh_window_bytes"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive")
        if self.heartbeat_interval <= 0:
            raise ValueError("heartbeat_interval must be positive")
        if self.hello_timeout <= 0:
            raise ValueError("hello_timeout must be positive")
        if not 1 <= self.max_client_version <= CLIENT_PROTOCOL_VERSION:
            raise ValueError(f"max_client_version must be 1..{CLIENT_PROTOCOL_VERSION}, got {self.max_client_version}")
        if self.slow_consumer_deadline <= 0:
            raise ValueError("slow_consumer_deadline must be positive")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both, or neither for plain TCP")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("tls_client_ca needs tls_cert and tls_key: client certificates are checked under TLS")
        if self.max_open_files < 0:
            raise ValueError("max_open_files must be >= 0 (0: derived from the descriptor limit)")
        if self.mesh_write_interval < 0:
            raise ValueError("mesh_write_interval must be >= 0")
        if self.compact and self.data_dir is None:
            raise ValueError("compact needs a data directory: a hub without one keeps no log to compact")
        for entry in self.compact:
            parse_compact(entry)
        if self.compaction_map_bytes < MIN_MAP_BYTES:
            raise ValueError(f"compaction_map_bytes must be >= {MIN_MAP_BYTES} (two slots of an offset map)")
        if self.compact_tombstone_seconds < 0 or self.compact_check_seconds <= 0:
            raise ValueError("compact_tombstone_seconds must be >= 0 and compact_check_seconds positive")
        if self.durability not in ("received", "fsync"):
            raise ValueError(f"durability must be 'received' or 'fsync', got {self.durability!r}")
        self.connect_rate  # noqa: B018 - checks the rate, the burst and every exempt CIDR

    @property
    def connect_rate(self) -> ConnectRateLimits:
        return ConnectRateLimits(per_second=self.max_connects_per_second_per_address,
                                 burst=self.connect_burst_per_address, exempt=self.connect_rate_exempt,
                                 accepts_per_second=self.max_accepts_per_second,
                                 accept_burst=self.accept_burst, failed_cost=self.failed_connect_cost)  # fmt: skip


def _coerce(f: dataclasses.Field[Any], raw: Any) -> Any:
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    kind = kind.replace(" ", "").removesuffix("|None")
    if raw is None:
        return None
    if "Path" in kind:
        return Path(raw)
    if kind.startswith("tuple"):
        if isinstance(raw, str):
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        return tuple(str(item) for item in raw)
    if kind == "bool":
        if isinstance(raw, str):
            return raw.strip().lower() in ("1", "true", "yes", "on")
        return bool(raw)
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    return str(raw)


def load_config(
    *, file: Path | None = None, env: dict[str, str] | None = None, overrides: dict[str, Any] | None = None
) -> HubConfig:
    """Merge the sources in order; unknown keys are an error, not a silent typo."""
    fields = {f.name: f for f in dataclasses.fields(HubConfig) if f.name != "extra"}
    values: dict[str, Any] = {}
    if file is not None:
        with open(file, "rb") as fh:
            data = tomllib.load(fh)
        section = data.get("hub", data)
        for key, raw in section.items():
            name = key.replace("-", "_")
            if name not in fields:
                raise ValueError(f"{file}: unknown setting {key!r}")
            values[name] = _coerce(fields[name], raw)
    for key, raw in (os.environ if env is None else env).items():
        if key.startswith(ENV_PREFIX):
            name = key[len(ENV_PREFIX) :].lower()
            if name not in fields:
                raise ValueError(f"environment: unknown setting {key}")
            values[name] = _coerce(fields[name], raw)
    for name, raw in (overrides or {}).items():
        if raw is not None:
            values[name] = _coerce(fields[name], raw)
    config = HubConfig(**values)
    config.validate()
    return config
