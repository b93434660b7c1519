"""TLS on the client listener, through the standard ``ssl`` module under trio.

``--tls-cert`` and ``--tls-key`` make the hub speak TLS only (TLS 1.2 or newer) on its client
port; ``--tls-client-ca`` also requires every client to present a certificate signed by that
CA (mutual TLS).  The handshake counts against the connection's ``hello_timeout``: a peer that
starts one and stalls is closed like one that never sends HELLO.
"""

from __future__ import annotations

import logging
import socket
import ssl
from pathlib import Path

import trio

from wire import Error, ErrorCode, Opcode

from ..core.events import ev

log = logging.getLogger("pub0sub.hub.tls")

PLAINTEXT_REFUSAL = "this hub's client port speaks TLS only: connect with TLS (tls=True, --tls)"

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


async def start_tls(
    stream: trio.SocketStream, context: ssl.SSLContext, peer: str, *, deadline: float
) -> trio.SSLStream | None:
    """TLS over ``stream``, handshake done by ``deadline``; None if it failed (and was logged).

    A client that sends a plaintext HELLO instead of a TLS ClientHello is told so in its own
    protocol (``ERROR UNEXPECTED_FRAME``), so it does not see a bare hang-up."""
    gone = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
    with trio.move_on_at(deadline):
        try:
            first = await stream.socket.recv(1, socket.MSG_PEEK)
            if first == bytes([Opcode.HELLO]):
                await stream.send_all(Error(code=ErrorCode.UNEXPECTED_FRAME, reason=PLAINTEXT_REFUSAL).encode())
                log.info("plaintext client at %s refused: this port speaks TLS", peer,
                         extra=ev("conn_refused", peer=peer, reason="plaintext_on_tls"))
                return None
            tls_stream = trio.SSLStream(stream, context, server_side=True)
            await tls_stream.do_handshake()
            return tls_stream
        except gone as exc:
            log.info("TLS handshake with %s failed: %s", peer, exc.__cause__ or exc,
                     extra=ev("tls_handshake_failed", peer=peer, reason=str(exc.__cause__ or exc)))
            return None
    log.info("TLS handshake with %s did not finish in time", peer,
             extra=ev("tls_handshake_failed", peer=peer, reason="hello_timeout"))
    return None
