"""One client connection's I/O: a reader task, a writer task, a socket.

The reader hands every chunk it receives to the core (``HubCore.receive_data``),
which decodes and handles it synchronously and queues replies and deliveries on
the connection's :class:`~hub.core.clients.ClientSession`.  Output made while a
chunk is handled is sent by the task that made it, when the chunk is done, if the
writer is idle (:mod:`hub.core.flushing`); the writer sends the rest, one
``send_all`` per chunk of ``write_chunk`` bytes.  A connection the core closes
gets its last frame (an ERROR) sent, then is hung up within ``CLOSE_FLUSH_SECONDS``.
"""

from __future__ import annotations

import logging

import trio

from ..core.clients import ClientSession, CloseReason
from ..core.events import ev
from ..core.hub import HubCore
from .sockio import send_now

log = logging.getLogger("pub0sub.hub.connection")

RECEIVE_SIZE = 64 << 10
#: How long a closing connection may take to flush its final ERROR frame.
CLOSE_FLUSH_SECONDS = 2.0


class ClientConnection:
    """Implements :class:`hub.core.clients.Transport` for ``session`` over ``stream``."""

    def __init__(self, core: HubCore, session: ClientSession, stream: trio.SocketStream, *, write_chunk: int) -> None:
        self.core = core
        self.session = session
        self.stream = stream
        self.write_chunk = write_chunk
        self._lot = trio.lowlevel.ParkingLot()
        #: The rest of a direct flush the socket did not take: (bytes, queued size); the
        #: writer sends it before anything else.
        self._unsent: tuple[memoryview, int] | None = None
        self._cancel: trio.CancelScope | None = None
        session.transport = self

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                if self.session.closing is not None:  # closed before it started (shutting down)
                    self.closing()
                nursery.start_soon(self._read_loop)
                await self._write_loop()
                nursery.cancel_scope.cancel()
        finally:
            self.core.session_ended(self.session)
            await trio.aclose_forcefully(self.stream)
            session = self.session
            reason = session.closing.value if session.closing else "ended"
            # Every connection's end, with its reason (one line per connection, never per message).
            log.info("connection %d (%s) closed: %s", session.conn_id, session.peer, reason,
                     extra=ev("conn_closed", conn=session.conn_id, peer=session.peer, reason=reason))

    # -- Transport ---------------------------------------------------------------------

    def closing(self) -> None:
        self.wake_writer()
        if self._cancel is not None:
            # A peer that does not read must not keep us waiting on the final frame.
            self._cancel.deadline = min(self._cancel.deadline, trio.current_time() + CLOSE_FLUSH_SECONDS)

    def wake_writer(self) -> None:
        if self._lot:
            self._lot.unpark()

    def flush_now(self) -> None:
        """Send queued output from the calling task without waiting (see :mod:`hub.core.flushing`).

        Only when the writer is parked: then nothing is mid-send and the bytes keep their
        order.  Otherwise, and for whatever the socket does not take, the writer goes on."""
        out = self.session.out
        if not out.items:
            return
        if not self._lot or self.session.closing is not None:
            self.wake_writer()
            return
        data, size = out.take(self.write_chunk)
        try:
            sent = send_now(self.stream, data)
        except trio.BrokenResourceError:
            self.session.close(CloseReason.WRITE_FAILED)
            return
        if sent == len(data):
            self._sent(size)
        else:
            self._unsent = (memoryview(data)[sent:], size)
        if self._unsent is not None or out.items:
            self.wake_writer()

    # -- tasks -------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        session = self.session
        out = session.out
        chunk = self.write_chunk
        while True:
            if self._unsent is not None:
                data, size = self._unsent
                self._unsent = None
            elif out.items:
                taken, size = out.take(chunk)
                data = memoryview(taken)
            elif session.closing is not None:
                return
            else:
                await self._lot.park()
                continue
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                session.close(CloseReason.WRITE_FAILED)
                return
            self._sent(size)

    def _sent(self, size: int) -> None:
        """``size`` queued bytes are on the wire: log readers waiting for room may go on."""
        self.session.sent(size)

    async def _read_loop(self) -> None:
        session = self.session
        core = self.core
        try:
            while session.closing is None:
                data = await self.stream.receive_some(RECEIVE_SIZE)
                if not data:
                    session.close(CloseReason.CLIENT_CLOSED)
                    return
                core.receive_data(session, data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            session.close(CloseReason.READ_FAILED)
