"""The client listener: accept connections, give each a session and its I/O tasks."""

from __future__ import annotations

import contextlib
import errno
import ssl
from collections.abc import Sequence

import trio

from ..core.clients import ClientSession
from ..core.hub import HubCore
from .auth import Verifier
from .connection import ClientConnection
from .ports import PortInUseError
from .tls import ClientStream, start_tls

#: How long a refused connection is given to read its ERROR frame.
REFUSAL_SECONDS = 1.0


async def open_client_listeners(host: str | None, port: int) -> Sequence[trio.SocketListener]:
    """trio's listeners on ``host:port``; a port in use is a :class:`PortInUseError` (one line)."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(host or "0.0.0.0", port) from None
        raise


class ClientListener:
    def __init__(self, core: HubCore, *, write_chunk: int, tls: ssl.SSLContext | None = None) -> None:
        self.core = core
        self.write_chunk = write_chunk
        self.tls = tls
        self.verifier = Verifier()

    async def handle(self, tcp: trio.SocketStream) -> None:
        """trio.serve_listeners' handler: one connection, from accept to close."""
        # From accept, TLS handshake included, a connection has hello_timeout to be welcomed.
        deadline = trio.current_time() + self.core.settings.hello_timeout
        try:
            host, port = tcp.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "?"
        session = self.core.open_session(peer)
        stream: ClientStream = tcp
        if self.tls is not None and isinstance(session, bytes):
            stream = trio.SSLStream(tcp, self.tls, server_side=True)  # the refusal's send does the handshake
        elif self.tls is not None and isinstance(session, ClientSession):
            secured = await start_tls(tcp, self.tls, peer, deadline=deadline)
            if secured is None:
                self.core.stats.tls_handshake_failures += 1
                self.core.session_ended(session)
                await trio.aclose_forcefully(tcp)
                return
            stream = secured
        if isinstance(session, bytes):  # refused (max_connections): say why, then hang up
            gone = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
            with trio.move_on_after(REFUSAL_SECONDS), contextlib.suppress(*gone):
                await stream.send_all(session)
            await trio.aclose_forcefully(stream)
            return
        connection = ClientConnection(
            self.core, session, stream, write_chunk=self.write_chunk, verifier=self.verifier, greeting_deadline=deadline
        )
        await connection.run()
