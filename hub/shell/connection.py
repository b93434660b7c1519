"""One client connection's I/O: one task while it is idle, a writer task while output waits.

The connection's task reads: every chunk it receives goes to the core
(``HubCore.receive_data``), which decodes and handles it synchronously and queues
replies and deliveries on the connection's :class:`~hub.core.clients.ClientSession`.
Output made while a chunk is handled is sent by the task that made it, when the
chunk is done, if no writer is running (:mod:`hub.core.flushing`).  A writer task
exists only while the socket has not taken everything: started for the rest, one
``send_all`` per chunk of ``write_chunk`` bytes, gone once the queue is empty -- so
an idle connection holds one task, not two, and nothing parked (C1 in
docs/benchmarks.md: thousands of idle subscribers).  Under TLS every send goes through
the writer (an SSL stream has no non-blocking send).  Until it is welcomed, a connection
also has a timer task that closes it at its greeting deadline (``hello_timeout``), cancelled
once it is welcomed.  A connection the core closes
gets its last frame (an ERROR) sent, then is hung up within ``CLOSE_FLUSH_SECONDS``.

The reader stops reading while the client leaves more than a threshold of replies to its
own requests unread, counting those still in the kernel's send queue
(:mod:`hub.core.read_pause`): a client that pings or publishes without reading the answers
costs the hub that threshold, not a share of its time.
"""

from __future__ import annotations

import logging

import trio

from ..core.clients import ClientSession, CloseReason
from ..core.events import ev
from ..core.hub import HubCore
from ..core.read_pause import ReplyBacklog, pause_threshold
from .auth import Verifier
from .sockio import kernel_unsent, read_now, send_now
from .tls import ClientStream

log = logging.getLogger("pub0sub.hub.connection")

RECEIVE_SIZE = 64 << 10
#: How long a closing connection may take to flush its final ERROR frame.
CLOSE_FLUSH_SECONDS = 2.0
#: How often a connection not read from looks whether its replies drained (the kernel does not
#: say): first after PAUSE_POLL_SECONDS, then twice as long each time, up to PAUSE_POLL_MAX_SECONDS.
#: A client that reads again is read again within about as long as it had been paused (a short
#: lag costs it 10 ms); one that never reads costs a few wake-ups a second, not a hundred (four
#: of them took ~6% of the hub's core in the attack benchmark, docs/benchmarks.md).
PAUSE_POLL_SECONDS = 0.01
PAUSE_POLL_MAX_SECONDS = 0.32


class ClientConnection:
    """Implements :class:`hub.core.clients.Transport` for ``session`` over ``stream``."""

    __slots__ = (
        "_direct", "_greeting", "_nursery", "_pause_above", "_replies", "_socket", "_unsent", "_writing", "core",
        "greeting_deadline", "session", "stream", "verifier", "write_chunk",
    )  # fmt: skip

    def __init__(
        self,
        core: HubCore,
        session: ClientSession,
        stream: ClientStream,
        *,
        write_chunk: int,
        verifier: Verifier,
        greeting_deadline: float,
    ) -> None:
        self.core = core
        self.session = session
        self.stream = stream
        self.write_chunk = write_chunk
        self.verifier = verifier
        self.greeting_deadline = greeting_deadline
        #: Direct flushes write to the socket itself: not under TLS, where the writer task sends.
        self._direct = isinstance(stream, trio.SocketStream)
        #: The greeting timer's scope: cancelled once the client is welcomed (an idle connection
        #: keeps one task).
        self._greeting: trio.CancelScope | None = trio.CancelScope()
        #: A writer task is running (started, not yet ended): it alone sends, in order.
        self._writing = False
        #: The rest of a direct flush the socket did not take: (bytes, queued size); the
        #: writer sends it before anything else.
        self._unsent: tuple[memoryview, int] | None = None
        self._nursery: trio.Nursery | None = None
        #: Replies the client has not taken yet, and how many bytes of them stop the reader.
        self._replies = ReplyBacklog()
        self._pause_above = pause_threshold(session.out.cap)
        #: The TCP socket under the stream (under TLS too): its kernel send queue is asked.
        tcp = stream if isinstance(stream, trio.SocketStream) else stream.transport_stream
        self._socket = tcp.socket if isinstance(tcp, trio.SocketStream) else None
        session.transport = self

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self.session.closing is not None:  # closed before it started (shutting down)
                    self.closing()
                nursery.start_soon(self._greeting_timer)
                await self._read_loop()
                # Ended by the client (EOF) or a failed read: the writer, if one runs, ends it.
        finally:
            self._nursery = None
            self.core.session_ended(self.session)
            await trio.aclose_forcefully(self.stream)
            session = self.session
            # No reference cycle outlives the connection: its objects go with their reference
            # counts, frozen or not (hub.shell.gc_freeze).
            session.unlink()
            reason = session.closing.value if session.closing else "ended"
            # Every connection's end, with its reason (one line per connection, never per message).
            log.info("connection %d (%s) closed: %s", session.conn_id, session.peer, reason,
                     extra=ev("conn_closed", conn=session.conn_id, peer=session.peer, reason=reason))

    # -- Transport ---------------------------------------------------------------------

    def closing(self) -> None:
        nursery = self._nursery
        if nursery is None:
            return  # run() calls this again when it starts, or has ended
        # A peer that does not read must not keep us waiting on the final frame.
        scope = nursery.cancel_scope
        scope.deadline = min(scope.deadline, trio.current_time() + CLOSE_FLUSH_SECONDS)
        if self._writing or self._unsent is not None or self.session.out.items:
            self._start_writer()  # it sends the last frames, then ends the connection
        else:
            scope.cancel()

    def wake_writer(self) -> None:
        self._start_writer()

    def flush_now(self) -> None:
        """Send queued output from the calling task without waiting (see :mod:`hub.core.flushing`).

        Only when no writer runs: then nothing is mid-send and the bytes keep their order.
        Otherwise, and for whatever the socket does not take, the writer goes on."""
        out = self.session.out
        if not out.items:
            return
        if self._writing or self.session.closing is not None or not self._direct:
            self._start_writer()
            return
        assert isinstance(self.stream, trio.SocketStream)
        data, size = self._take()
        try:
            sent = send_now(self.stream, data)
        except trio.BrokenResourceError:
            self.session.close(CloseReason.WRITE_FAILED)
            return
        self._replies.written(sent)
        if sent == len(data):
            self._sent(size)
        else:
            self._unsent = (memoryview(data)[sent:], size)
        if self._unsent is not None or out.items:
            self._start_writer()

    # -- tasks -------------------------------------------------------------------------

    def _start_writer(self) -> None:
        if not self._writing and self._nursery is not None:
            self._writing = True
            self._nursery.start_soon(self._write_loop)

    async def _write_loop(self) -> None:
        session = self.session
        out = session.out
        try:
            while True:
                if self._unsent is not None:
                    data, size = self._unsent
                    self._unsent = None
                elif out.items:
                    taken, size = self._take()
                    data = memoryview(taken)
                else:
                    # Everything is sent: the task ends (no await between this look and the
                    # flag's reset, so output queued later finds no writer and starts one).
                    break
                try:
                    await self.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    session.close(CloseReason.WRITE_FAILED)
                    break
                self._replies.written(len(data))
                self._sent(size)
        finally:
            self._writing = False
        if session.closing is not None and self._nursery is not None:
            self._nursery.cancel_scope.cancel()  # the last frame is out: hang up

    def _take(self) -> tuple[bytes, int]:
        """Up to ``write_chunk`` bytes of queued output for one send, and their queued size."""
        out = self.session.out
        replies_before = out.control_bytes
        data, size = out.take(self.write_chunk)
        self._replies.taken(size, replies_before - out.control_bytes)
        return data, size

    def _sent(self, size: int) -> None:
        """``size`` queued bytes are on the wire: log readers waiting for room may go on."""
        self.session.sent(size)

    async def _read_loop(self) -> None:
        session = self.session
        core = self.core
        # Plain TCP is read from its descriptor directly; TLS through its stream.
        fd = self._socket.fileno() if self._direct and self._socket is not None else -1
        try:
            while session.closing is None:
                if self._replies_unread() > self._pause_above:
                    await self._paused()
                    continue
                data: bytes | None
                if fd < 0:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                else:
                    # What trio's receive_some does, without its four coroutine frames and a
                    # context manager parked under every idle connection (~1.4 KB each, C1):
                    # a read that succeeds at once is followed by a turn for the others.
                    await trio.lowlevel.checkpoint_if_cancelled()
                    data = read_now(fd, RECEIVE_SIZE)
                    if data is not None:
                        await trio.lowlevel.cancel_shielded_checkpoint()
                    while data is None:
                        await trio.lowlevel.wait_readable(fd)
                        data = read_now(fd, RECEIVE_SIZE)
                if not data:
                    session.close(CloseReason.CLIENT_CLOSED)
                    return
                more = core.receive_data(session, data)
                while session.closing is None:
                    if (job := session.auth_job) is not None:
                        # Nothing more is read until HELLO's secret is checked (off the event loop).
                        more = core.verified(session, await self.verifier.check(job))
                    elif more:
                        # The chunk's next turn: others run first, and its replies must be read.
                        if self._replies_unread() > self._pause_above:
                            await self._paused()
                        else:
                            await trio.lowlevel.checkpoint()
                        if session.closing is not None:
                            break
                        more = core.receive_data(session, b"")
                    else:
                        break
                if session.greeted and self._greeting is not None:
                    # The timer ends; its scope is not kept for the connection's life.
                    self._greeting.cancel()
                    self._greeting = None
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            session.close(CloseReason.READ_FAILED)

    def _replies_unread(self) -> int:
        """Reply bytes the client has not taken; the kernel is asked only when they may pass the threshold."""
        queued = self.session.out.control_bytes
        bound = self._replies.at_most(queued)
        if bound <= self._pause_above:
            return bound
        return self._replies.unread(queued, kernel_unsent(self._socket.fileno() if self._socket is not None else -1))

    async def _paused(self) -> None:
        """Read nothing until the client takes its replies (or the core closes it: hub.core.read_pause)."""
        session = self.session
        pauses = self.core.read_pauses
        clock = self.core.clock
        pauses.paused(session, clock.monotonic(), self._replies_unread())
        wait = PAUSE_POLL_SECONDS
        try:
            # Polled: the kernel's send queue draining wakes nobody.
            while session.closing is None and self._replies_unread() > self._pause_above:
                await trio.sleep(wait)
                wait = min(2 * wait, PAUSE_POLL_MAX_SECONDS)
        finally:
            pauses.resumed(session, clock.monotonic())

    async def _greeting_timer(self) -> None:
        """A connection not welcomed by its deadline is closed (``hub.core.greeting``)."""
        scope = self._greeting
        if scope is None:
            return
        with scope:
            await trio.sleep_until(self.greeting_deadline)
            self.core.hello_overdue(self.session)
