"""Build the libp2p host of a hub: Noise only, yamux, one connection per peer.

py-libp2p's default host offers Noise, TLS, SECIO *and plaintext*, and accepts a
plaintext-only dialer; pinning ``sec_opt`` to Noise alone is what refuses it.
It also listens with ``SO_REUSEPORT``, so a port another process listens on is
refused here first (:func:`hub.shell.ports.check_port_free`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import multiaddr
from libp2p import new_host
from libp2p.abc import IHost
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.network.config import ConnectionConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux

from ..core.mesh.config import DEFAULT_LISTEN
from ..shell.ports import check_port_free

#: libp2p logs per frame and per DHT query at INFO/DEBUG; at scale that is most of the CPU.
NOISY_LOGGERS = ("libp2p", "multiaddr", "async_service", "libp2p.kad_dht", "libp2p.network", "libp2p.host")


#: These warn on every DHT stream a peer closes (an empty EOF message): routine, not a problem.
ROUTINE_WARNING_LOGGERS = ("libp2p.kad_dht.kad_dht",)


#: These log an ERROR for every dial that fails -- routine when a hub is down or restarting, and
#: already said by the mesh itself (its "dial ... failed" at DEBUG, event mesh_dial_failed).  The
#: 50-hub test bed's logs held 112 such lines, printed without our format.
ROUTINE_ERROR_LOGGERS = ("libp2p.transport.tcp.tcp",)


def quiet_libp2p_logs(level: int = logging.WARNING) -> None:
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(level)
    for name in ROUTINE_WARNING_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.ERROR))
    for name in ROUTINE_ERROR_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.CRITICAL))


def make_host(key_pair: KeyPair, listen: str = DEFAULT_LISTEN, *, announce: Sequence[str] = ()) -> IHost:
    """A host that speaks Noise only; run it with ``host.run(listen_addrs=[...])``.  ``announce``:
    the addresses it gives peers (identify, the DHT, the overlay's link state) instead of ``listen``.

    Raises :class:`hub.shell.ports.PortInUseError` when something already listens on ``listen``'s port.
    """
    check_mesh_port_free(listen)
    noise = NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)
    host = new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: noise},
        # yamux only: mplex (the default fallback) is 10-50x slower in bulk.
        muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux},
        # One connection per peer also skips the ~250 ms happy-eyeballs wait on the first dial.
        # No floor of connections to keep: see no_auto_dials.
        connection_config=ConnectionConfig(max_connections_per_peer=1, min_connections=0),
        listen_addrs=[multiaddr.Multiaddr(listen)],
        announce_addrs=[multiaddr.Multiaddr(a) for a in announce] or None,
    )
    no_auto_dials(host)
    return host


def no_auto_dials(host: IHost) -> None:
    """Stop py-libp2p dialling peers on its own.

    Its swarm's AutoConnector (0.8) dials up to 16-32 peers of the peerstore every 30 s, and on
    every disconnect, while it holds fewer than ``low_watermark`` connections (100; its target is
    midway to ``high_watermark``, so no watermark setting short of 0 / 0 turns it off, and a high
    watermark of 0 makes the pruner close idle connections on every new one).  Every hub ever
    heard of is in the peerstore: in the 50-hub test bed a hub held 20-49 connections for 8-15
    overlay links and shortcuts, and a connection closed for being idle (hub/mesh/idle.py) was
    dialled again.  Which hubs a hub connects to is the mesh's decision (discovery, v2 links, the
    overlay), so the connector is left with nothing to do."""

    async def never() -> None:
        return None

    host.get_network().auto_connector.maybe_connect = never  # type: ignore[attr-defined]


def check_mesh_port_free(listen: str) -> None:
    """Refuse a ``/ip4|ip6/ADDR/tcp/PORT`` multiaddr whose port something listens on (port 0: fine)."""
    address = multiaddr.Multiaddr(listen)
    protocols = {p.name for p in address.protocols()}
    if "tcp" not in protocols:
        return
    host = next((address.value_for_protocol(p) for p in ("ip4", "ip6") if p in protocols), None)
    if host is None:  # a DNS name: libp2p resolves it, and reports its own errors
        return
    check_port_free(host, int(address.value_for_protocol("tcp")), what="mesh address")


async def open_stream_to(host: IHost, peer_id: ID, addrs: list[multiaddr.Multiaddr], *, static: bool,
                         protocols: list[TProtocol]) -> Any:  # fmt: skip
    """A stream to ``peer_id`` at ``addrs`` speaking the first of ``protocols`` it takes.

    ``static``: the addresses are configured (``--bootstrap``), and only they are dialled.
    """
    # A failed dial blocks the peer for 60 s in py-libp2p's negative cache; a restarted
    # hub must be reachable again at once.
    unblock = getattr(host.get_network(), "unblock_peer", None)
    if unblock is not None:
        unblock(peer_id)
    if static:
        # Only the configured addresses: identify may have taught the peerstore others
        # (the peer's direct address), which would bypass a proxy in between.
        host.get_peerstore().clear_addrs(peer_id)
    await host.connect(PeerInfo(peer_id, addrs))
    return await host.new_stream(peer_id, protocols)
