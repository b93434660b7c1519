"""The client listener: accept connections, give each a session and its I/O tasks."""

from __future__ import annotations

import contextlib
import errno
import logging
from collections.abc import Sequence

import trio

from ..core.events import ev
from ..core.hub import HubCore
from .connection import ClientConnection
from .ports import PortInUseError

log = logging.getLogger("pub0sub.hub.connection")

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
    def __init__(self, core: HubCore, *, write_chunk: int) -> None:
        self.core = core
        self.write_chunk = write_chunk

    async def handle(self, stream: trio.SocketStream) -> None:
        """trio.serve_listeners' handler: one connection, from accept to close."""
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "?"
        session = self.core.open_session(peer)
        if isinstance(session, bytes):  # refused (max_connections): say why, then hang up
            log.info("connection from %s refused: max_connections reached", peer,
                     extra=ev("conn_refused", peer=peer, reason="max_connections"))
            gone = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
            with trio.move_on_after(REFUSAL_SECONDS), contextlib.suppress(*gone):
                await stream.send_all(session)
            await trio.aclose_forcefully(stream)
            return
        await ClientConnection(self.core, session, stream, write_chunk=self.write_chunk).run()
