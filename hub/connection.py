"""One client connection: a reader task, a writer task, a bounded queue.

The reader decodes frames and hands them to the server synchronously (the
router never awaits); the writer drains the :class:`OutboundQueue` in chunks,
one ``send_all`` per chunk.  Output made while some task handles an input chunk
is sent by that task when the chunk is done, if the writer is idle
(:mod:`hub.flushing`); what the socket does not take is left to the writer.
Any fatal problem becomes an ERROR frame with a code and reason, then the
connection closes; nothing else is affected.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from wire import (
    CLIENT_TO_HUB_OPCODES,
    Error,
    ErrorCode,
    FrameDecoder,
    Limits,
    ProtocolError,
)

from .outbound import OutboundQueue
from .sockio import send_now
from .storage.batches import SharedBatch
from .subscription import Subscription

if TYPE_CHECKING:
    from wire import Frame

    from .server import HubServer

log = logging.getLogger("pub0sub.hub.connection")

RECEIVE_SIZE = 64 << 10
#: How long a closing connection may take to flush its final ERROR frame.
CLOSE_FLUSH_SECONDS = 2.0


class CloseReason(enum.Enum):
    """Why a connection ended; carried into logs and ERROR frames."""

    CLIENT_CLOSED = "client closed the connection"
    CLIENT_ERROR = "client sent ERROR"
    PROTOCOL_ERROR = "protocol error"
    HEARTBEAT_TIMEOUT = "heartbeat timeout"
    LIMIT_EXCEEDED = "limit exceeded"
    NOT_READING = "client does not read its responses"
    SHUTDOWN = "hub shutting down"
    READ_FAILED = "read failed"
    WRITE_FAILED = "write failed"


class ClientConnection:
    def __init__(self, server: HubServer, stream: trio.SocketStream, conn_id: int, peer: str) -> None:
        self.server = server
        self.stream = stream
        self.conn_id = conn_id
        self.peer = peer
        self.client_name = ""
        config = server.config
        self.decoder = FrameDecoder(limits=Limits(max_body=config.max_body), accept=CLIENT_TO_HUB_OPCODES)
        self.out = OutboundQueue(config.max_pending_bytes)
        self.subs: dict[int, Subscription] = {}
        self.topic_count = 0
        self.greeted = False
        now = trio.current_time()
        self.last_received = now
        self.last_sent = now
        self.closing: CloseReason | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        self.messages_in = 0
        self._lot = trio.lowlevel.ParkingLot()
        #: The rest of a direct flush the socket did not take: (bytes, queued size); the
        #: writer sends it before anything else.
        self._unsent: tuple[memoryview, int] | None = None
        self._room_lot = trio.lowlevel.ParkingLot()
        self._cancel: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None

    # -- lifecycle ---------------------------------------------------------------

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                self._nursery = nursery
                nursery.start_soon(self._read_loop)
                await self._write_loop()
                nursery.cancel_scope.cancel()
        finally:
            self.server.forget(self)
            await trio.aclose_forcefully(self.stream)
            log.debug("connection %d (%s) closed: %s", self.conn_id, self.peer, self.closing)

    def close(self, reason: CloseReason, error: Error | None = None) -> None:
        """Close once: drop queued output, send ``error`` (if any), then hang up."""
        if self.closing is not None:
            return
        self.closing = reason
        discarded = self.out.clear()
        self.server.stats.discarded_on_close += discarded
        if error is not None:
            self.out.push_control(error.encode())
            log.info("connection %d (%s): %s: %s", self.conn_id, self.peer, error.code.name, error.reason)
        if reason is CloseReason.PROTOCOL_ERROR:
            self.server.stats.protocol_errors += 1
        self.wake_writer()
        if self._cancel is not None:
            # A peer that does not read must not keep us waiting on the final frame.
            self._cancel.deadline = min(self._cancel.deadline, trio.current_time() + CLOSE_FLUSH_SECONDS)

    def start_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` for as long as this connection lives (log followers)."""
        assert self._nursery is not None
        self._nursery.start_soon(fn)

    def fail(
        self, code: ErrorCode, reason: str, *, ref: int = 0, why: CloseReason = CloseReason.PROTOCOL_ERROR
    ) -> None:
        self.close(why, Error(code=code, reason=reason, ref=ref))

    # -- output --------------------------------------------------------------------

    def wake_writer(self) -> None:
        if self._lot:
            self._lot.unpark()

    def flush_now(self) -> None:
        """Send queued output from the calling task without waiting (see :mod:`hub.flushing`).

        Only when the writer is parked: then nothing is mid-send and the bytes keep their
        order.  Otherwise, and for whatever the socket does not take, the writer goes on."""
        out = self.out
        if not out.items:
            return
        if not self._lot or self.closing is not None:
            self.wake_writer()
            return
        data, size = out.take(self.server.config.write_chunk)
        try:
            sent = send_now(self.stream, data)
        except trio.BrokenResourceError:
            self.close(CloseReason.WRITE_FAILED)
            return
        if sent == len(data):
            self._sent(size)
        else:
            self._unsent = (memoryview(data)[sent:], size)
        if self._unsent is not None or out.items:
            self.wake_writer()

    def send_control(self, frame: bytes) -> None:
        if self.closing is not None:
            return
        self.out.push_control(frame)
        if self.out.pending_bytes > 2 * self.out.cap:
            # Only responses to the client's own requests are queued here: a client
            # that keeps asking without reading gets cut off, not unbounded memory.
            self.fail(ErrorCode.LIMIT_EXCEEDED, "responses pile up unread", why=CloseReason.NOT_READING)
            return
        self.server.output.ready(self)

    def deliver(self, sub: Subscription, batch: SharedBatch) -> None:
        """Queue ``batch`` for ``sub`` without ever blocking (router hot path)."""
        if sub.closed or self.closing is not None:
            return
        if sub.credit is not None:
            if sub.credit <= 0:
                self._hold(sub, batch)
                return
            if batch.count > sub.credit:
                batch, rest = batch.split(sub.credit)
                self._hold(sub, rest)
            sub.credit -= batch.count
        out = self.out
        nbytes = 9 + len(batch.header) + len(batch.records)
        if not out.fits(nbytes) and not self.server.subscriptions.make_room(self, sub, batch, nbytes):
            return
        out.push_deliver(sub, batch)
        self.server.output.ready(self)

    def push_batch(self, sub: Subscription, batch: SharedBatch) -> None:
        """Queue a batch a follower or group read from the log (they waited for room)."""
        if sub.closed or self.closing is not None:
            return
        self.out.push_deliver(sub, batch)
        self.server.output.ready(self)

    def queue_gap(self, sub: Subscription, topic: str, first: int, count: int) -> None:
        """Tell ``sub`` that offsets ``first..first+count-1`` of ``topic`` cannot be delivered."""
        self.out.push_gap(sub, topic, first, count)
        self.server.output.ready(self)

    async def wait_for_room(self) -> None:
        """Wait until the queue is at most half full (followers and groups pace on this)."""
        while self.closing is None and self.out.pending_bytes > self.out.cap // 2:
            await self._room_lot.park()

    def _hold(self, sub: Subscription, batch: SharedBatch) -> None:
        # Waiting for credit still costs memory: the same cap and policy apply.
        held_bytes = sum(len(b.records) for b in sub.held_batches)
        if held_bytes + self.out.pending_bytes + len(batch.records) > self.out.cap and sub.held_batches:
            self.server.subscriptions.held_overflow(self, sub, batch)
            return
        sub.held_batches.append(batch)
        sub.queued_messages += batch.count

    def release_held(self, sub: Subscription) -> None:
        held, sub.held_batches = sub.held_batches, []
        for batch in held:
            sub.queued_messages -= batch.count
            self.deliver(sub, batch)

    async def _write_loop(self) -> None:
        out = self.out
        chunk = self.server.config.write_chunk
        while True:
            if self._unsent is not None:
                data, size = self._unsent
                self._unsent = None
            elif out.items:
                taken, size = out.take(chunk)
                data = memoryview(taken)
            elif self.closing is not None:
                self._room_lot.unpark_all()
                return
            else:
                await self._lot.park()
                continue
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                self.close(CloseReason.WRITE_FAILED)
                return
            self._sent(size)

    def _sent(self, size: int) -> None:
        """``size`` queued bytes are on the wire."""
        self.bytes_out += size
        self.last_sent = trio.current_time()
        out = self.out
        if self._room_lot and out.pending_bytes <= out.cap // 2:
            self._room_lot.unpark_all()

    # -- input ---------------------------------------------------------------------

    async def _read_loop(self) -> None:
        decoder = self.decoder
        handle = self.server.handle_frame
        output = self.server.output
        try:
            while self.closing is None:
                data = await self.stream.receive_some(RECEIVE_SIZE)
                if not data:
                    self.close(CloseReason.CLIENT_CLOSED)
                    return
                self.last_received = trio.current_time()
                self.bytes_in += len(data)
                decoder.feed(data)
                frame: Frame | None
                with output:  # handling is synchronous: replies and deliveries leave at its end
                    while (frame := decoder.next_frame()) is not None:
                        handle(self, frame)
                        if self.closing is not None:
                            return
        except ProtocolError as exc:
            self.fail(exc.code, str(exc))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.close(CloseReason.READ_FAILED)

    def status(self) -> dict[str, object]:
        return {
            "id": self.conn_id,
            "peer": self.peer,
            "name": self.client_name,
            "subscriptions": len(self.subs),
            "pending_bytes": self.out.pending_bytes,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "messages_in": self.messages_in,
            "dropped_messages": self.out.dropped_messages,
        }
