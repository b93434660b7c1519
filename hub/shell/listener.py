"""The client listener: accept connections, give each a session and its I/O task."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import ssl
from collections.abc import Sequence
from typing import Any

import trio

from ..core.clients import ClientSession
from ..core.connect_rate import LogThrottle
from ..core.events import ev
from ..core.hub import HubCore
from .auth import Verifier
from .connection import ClientConnection
from .ports import PortInUseError
from .tls import ClientStream, start_tls

log = logging.getLogger("pub0sub.hub.connection")

#: How long a refused connection is given to read its ERROR frame.
REFUSAL_SECONDS = 1.0
#: accept() errors that mean "no room right now" (as trio.serve_listeners treats them): the
#: loop waits ACCEPT_RETRY_SECONDS and goes on; the connection waits in the backlog meanwhile.
ACCEPT_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
ACCEPT_RETRY_SECONDS = 0.1
#: accept() errors that are the new connection's, not the listener's (accept(2): "treat them
#: like EAGAIN"; EPERM is a firewall's refusal): the loop goes on to the next connection.
ACCEPT_SKIP_ERRNOS = {
    errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.ENETDOWN, errno.ENOPROTOOPT,
    errno.EHOSTDOWN, errno.ENONET, errno.EHOSTUNREACH, errno.EOPNOTSUPP, errno.ENETUNREACH,
}  # fmt: skip
#: Connections accepted in one wake-up before other tasks get a turn.
ACCEPT_BATCH = 64
#: What a connection refused at once may have sent already, read before it is closed.
RECEIVE_ON_REFUSAL = 64 << 10


async def open_client_listeners(host: str | None, port: int) -> Sequence[trio.SocketListener]:
    """trio's listeners on ``host:port``; a port in use is a :class:`PortInUseError` (one line)."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(host or "0.0.0.0", port) from None
        raise


class ClientListener:
    """Accepts on each listener and starts one task per connection, its :meth:`ClientConnection.run`.

    trio.serve_listeners would do the accepting, with a handler coroutine of its own and
    one of ours wrapped around every connection's for as long as it lives: two frames per
    idle connection that hold nothing of use (C1 in docs/benchmarks.md).  Here the session
    is opened, or refused, in the accept loop, and the connection's task is its own run()
    (with TLS, a task that does the handshake first: it must not hold up the accept loop).
    """

    def __init__(self, core: HubCore, *, write_chunk: int, tls: ssl.SSLContext | None = None) -> None:
        self.core = core
        self.write_chunk = write_chunk
        self.tls = tls
        self.verifier = Verifier()
        #: Refusals at max_connections, logged as the rate limit logs its own.
        self._full_log = LogThrottle()

    # Typed Any: as HubServer.serve (libp2p's trio-typing hides trio.TaskStatus from mypy).
    async def serve(self, listeners: Sequence[trio.SocketListener], *,
                    task_status: Any = trio.TASK_STATUS_IGNORED) -> None:  # fmt: skip
        """Accept on every listener until cancelled; connections live in this task's nursery."""
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(self._accept_loop, listener, nursery)
            task_status.started()

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Accept what the backlog holds, up to :data:`ACCEPT_BATCH` a wake-up, with plain
        socket calls: trio's accept() passes through the scheduler once per connection and wraps
        every socket in two objects, which a refused connection never uses (a connection storm is
        mostly refusals).  A trio stream is made only for a connection that gets a session.  The
        loop accepts on a duplicate of the listener's descriptor, its own to close."""
        async with listener:
            with socket.socket(fileno=os.dup(listener.socket.fileno())) as raw:
                raw.setblocking(False)
                while True:
                    await trio.lowlevel.wait_readable(raw.fileno())
                    wait = self._accept_batch(raw, nursery)
                    if wait > 0:  # the next connections wait in the backlog meanwhile
                        await trio.sleep(wait)

    def _accept_batch(self, raw: socket.socket, nursery: trio.Nursery) -> float:
        """Accept until the backlog is empty or the batch is done: how long to wait before the
        next batch (the accept budget's wait, or the pause after refusals)."""
        rate = self.core.connect_rate
        refused = 0
        for _ in range(ACCEPT_BATCH):
            try:
                conn, address = raw.accept()
            except BlockingIOError:
                return rate.refusing_pause(refused)
            except OSError as exc:
                if exc.errno in ACCEPT_SKIP_ERRNOS:
                    continue
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                reason = errno.errorcode.get(exc.errno or 0, str(exc))
                log.error("accept failed (%s): retrying in %.0f ms", reason, ACCEPT_RETRY_SECONDS * 1000,
                          extra=ev("accept_failed", reason=reason))  # fmt: skip
                return ACCEPT_RETRY_SECONDS
            refused += self.handle(conn, address, nursery)
            wait = rate.accept_wait(self.core.clock.monotonic())
            if wait > 0:
                return wait
        return rate.refusing_pause(refused)

    def handle(self, conn: socket.socket, address: Any, nursery: trio.Nursery) -> bool:
        """One accepted connection (a blocking stdlib socket, its peer's address from accept):
        its session and task, or its refusal (True)."""
        # From accept, TLS handshake included, a connection has hello_timeout to be welcomed.
        deadline = trio.current_time() + self.core.settings.hello_timeout
        host, port = address[:2]
        peer = f"{host}:{port}"
        limited = self.core.connect_rate.check(host, self.core.clock.monotonic())
        if limited is not None:  # connecting too often: refused before it costs a session or a task
            refuse_now(conn, b"" if self.tls is not None else limited)
            return True
        session = self.core.open_session(peer)
        if isinstance(session, bytes):  # refused (max_connections): say why, then hang up
            self._log_full(peer)
            if self.tls is None:
                refuse_now(conn, session)
            else:  # the refusal's send does the handshake
                tcp = trio.SocketStream(trio.socket.from_stdlib_socket(conn))
                nursery.start_soon(_refuse, trio.SSLStream(tcp, self.tls, server_side=True), session)
            return True
        tcp = trio.SocketStream(trio.socket.from_stdlib_socket(conn))
        if self.tls is not None:
            nursery.start_soon(self._secure_then_run, tcp, session, peer, deadline)
        else:
            nursery.start_soon(self._connection(session, tcp, deadline).run)
        return False

    def _log_full(self, peer: str) -> None:
        if refused := self._full_log.count(self.core.clock.monotonic()):
            log.info("connection from %s refused: max_connections reached (%d refused since the last such line)",
                     peer, refused, extra=ev("conn_refused", peer=peer, reason="max_connections"))

    def _connection(self, session: ClientSession, stream: ClientStream, deadline: float) -> ClientConnection:
        return ClientConnection(
            self.core, session, stream, write_chunk=self.write_chunk, verifier=self.verifier, greeting_deadline=deadline
        )

    async def _secure_then_run(
        self, tcp: trio.SocketStream, session: ClientSession, peer: str, deadline: float
    ) -> None:
        assert self.tls is not None
        secured = await start_tls(tcp, self.tls, peer, deadline=deadline)
        if secured is None:
            self.core.stats.tls_handshake_failures += 1
            self.core.session_ended(session)
            await trio.aclose_forcefully(tcp)
            return
        await self._connection(session, secured, deadline).run()


def refuse_now(conn: socket.socket, error: bytes) -> None:
    """Refuse a connection without a task: what it sent is read once (a socket closed with unread
    input sends a reset, which can make the client's kernel drop the ERROR before it is read),
    ``error`` is written (a fresh socket's buffer takes it whole) and the socket is closed.
    Under TLS ``error`` is empty: the refusal would cost a handshake, the work refusing saves."""
    with contextlib.suppress(OSError):
        conn.recv(RECEIVE_ON_REFUSAL, socket.MSG_DONTWAIT)
    with contextlib.suppress(OSError):
        if error:
            conn.send(error, socket.MSG_DONTWAIT)
    conn.close()


async def _refuse(stream: trio.SSLStream, error: bytes) -> None:
    gone = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
    with trio.move_on_after(REFUSAL_SECONDS), contextlib.suppress(*gone):
        await stream.send_all(error)
    await trio.aclose_forcefully(stream)
