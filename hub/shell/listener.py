"""The client listener: accept connections, give each a session and its I/O tasks."""

from __future__ import annotations

import contextlib
import errno
import ssl
from collections.abc import Sequence

import trio

from ..core.hub import HubCore
from .auth import Verifier
from .connection import ClientConnection
from .ports import PortInUseError
from .tls import ClientStream, handshake, socket_of

#: How long a refused connection is given to read its ERROR frame.
REFUSAL_SECONDS = 1.0


async def open_client_listeners(
    host: str | None, port: int, *, tls: ssl.SSLContext | None = None
) -> tuple[Sequence[trio.SocketListener], Sequence[trio.abc.Listener[ClientStream]]]:
    """trio's listeners on ``host:port``, and what serves them (TLS listeners around them with
    ``tls``); a port in use is a :class:`PortInUseError` (one line)."""
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(host or "0.0.0.0", port) from None
        raise
    if tls is None:
        return listeners, listeners
    return listeners, [trio.SSLListener(listener, tls) for listener in listeners]


class ClientListener:
    def __init__(self, core: HubCore, *, write_chunk: int) -> None:
        self.core = core
        self.write_chunk = write_chunk
        self.verifier = Verifier()

    async def handle(self, stream: ClientStream) -> None:
        """trio.serve_listeners' handler: one connection, from accept to close."""
        # From accept, TLS handshake included, a connection has hello_timeout to be welcomed.
        deadline = trio.current_time() + self.core.settings.hello_timeout
        try:
            host, port = socket_of(stream).getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "?"
        session = self.core.open_session(peer)
        if isinstance(session, bytes):  # refused (max_connections): say why, then hang up
            gone = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
            with trio.move_on_after(REFUSAL_SECONDS), contextlib.suppress(*gone):
                await stream.send_all(session)
            await trio.aclose_forcefully(stream)
            return
        if not await handshake(stream, peer, deadline=deadline):
            self.core.stats.tls_handshake_failures += 1
            self.core.session_ended(session)
            await trio.aclose_forcefully(stream)
            return
        connection = ClientConnection(
            self.core, session, stream, write_chunk=self.write_chunk, verifier=self.verifier, greeting_deadline=deadline
        )
        await connection.run()
