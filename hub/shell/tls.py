"""TLS on the client listener, through the standard ``ssl`` module under trio.

``--tls-cert`` and ``--tls-key`` make the hub speak TLS only (TLS 1.2 or newer) on its client
port; ``--tls-client-ca`` also requires every client to present a certificate signed by that
CA (mutual TLS).  The handshake counts against the connection's ``hello_timeout``: a peer that
starts one and stalls is closed like one that never sends HELLO.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import trio

log = logging.getLogger("pub0sub.hub.tls")

# (Unparametrised: trio-typing's stale stubs, which libp2p pulls in, know no SSLStream[T].)
ClientStream = trio.SocketStream | trio.SSLStream


class TlsSetupError(ValueError):
    """A certificate, key or CA file the hub cannot use; the message names the file."""


def server_context(cert: Path, key: Path | None, client_ca: Path | None = None) -> ssl.SSLContext:
    """The hub's TLS settings; :class:`TlsSetupError` if the files cannot be used."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"cannot use --tls-cert {cert} / --tls-key {key}: {exc}") from None
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise TlsSetupError(f"cannot use --tls-client-ca {client_ca}: {exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def socket_of(stream: ClientStream) -> trio.socket.SocketType:
    if isinstance(stream, trio.SSLStream):
        transport = stream.transport_stream
        assert isinstance(transport, trio.SocketStream)
        return transport.socket
    return stream.socket


async def handshake(stream: ClientStream, peer: str, *, deadline: float) -> bool:
    """Complete a TLS stream's handshake by ``deadline`` (a plain stream has none); False if it failed."""
    if not isinstance(stream, trio.SSLStream):
        return True
    with trio.move_on_at(deadline):
        try:
            await stream.do_handshake()
            return True
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            cause = exc.__cause__ or exc
            log.info("TLS handshake with %s failed: %s", peer, cause)
            return False
    log.info("TLS handshake with %s did not finish in time", peer)
    return False
