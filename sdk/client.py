"""The async client: a thin anyio driver around :class:`sdk.protocol.ClientProtocol`.

Runs under trio and asyncio alike.  Per connection one reader task feeds the
protocol core and one timer task runs heartbeats; a flusher task turns
buffered publishes into frames when the publishing task yields (or after
``linger``).  Every write goes through one lock, one ``send`` per chunk.

>>> async def main():                                           # doctest: +SKIP
...     async with sdk.connect("127.0.0.1:4222") as client:
...         async with client.subscribe("orders.*") as sub:
...             await client.publish("orders.eu", b"hello")
...             async for msg in sub:
...                 print(msg.topic, msg.offset, msg.data)
...                 break
"""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

import wire

from .address import parse_address
from .batching import DEFAULT_FLUSH_BYTES, Ticket
from .errors import ConnectionLostError, HubError, Pub0subError, PublishTimeoutError
from .handshake import DEFAULT_HANDSHAKE_TIMEOUT, HandshakeWatch
from .kv import KeyValue
from .messages import Message, PublishAck, Reconnect
from .protocol import DEFAULT_MAX_PENDING_BYTES, FATAL_CODES, ClientProtocol, State
from .security import PathLike, hello_token, tls_context, tls_failure
from .subscription import Subscription
from .versions import KV_VIEWS

_READ_SIZE = 256 * 1024
#: How long the TCP connect of connect() and of each reconnect attempt may take (the
#: handshake that follows has its own bound, sdk.handshake.DEFAULT_HANDSHAKE_TIMEOUT).
DEFAULT_CONNECT_TIMEOUT = 10.0
_DISCONNECTS = (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)


@asynccontextmanager
async def connect(
    address: str,
    *,
    name: str = "",
    token: bytes | str = b"",
    user: str | None = None,
    password: str | None = None,
    tls: bool | ssl.SSLContext | None = None,
    ca_file: PathLike | None = None,
    cert_file: PathLike | None = None,
    key_file: PathLike | None = None,
    reconnect: Reconnect | None = Reconnect(),  # noqa: B008 - frozen, shared safely
    heartbeat: float | None = None,
    max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
    linger: float = 0.0,
    flush_bytes: int = DEFAULT_FLUSH_BYTES,
    producer_id: int | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
) -> AsyncIterator[Client]:
    """Connect to a hub at ``"host:port"`` and yield a :class:`Client`.

    * ``user`` and ``password``, or ``token`` (``USER:SECRET`` as ``pub0sub auth`` prints it):
      the credentials for a hub with a users file; a wrong one raises :class:`HubError`
      ``NOT_AUTHORIZED`` (never retried).  See docs/security.md.
    * ``tls``: connect with TLS (a hub with ``--tls-cert``), verifying the hub's certificate
      against ``ca_file`` (default: the system's CAs) and its name against ``address``;
      ``cert_file``/``key_file`` for a hub that asks for client certificates.  Giving any
      file turns TLS on; an ``ssl.SSLContext`` is used as it is.  A failed handshake raises
      :class:`TlsError`.
    * ``reconnect``: a :class:`Reconnect` policy, or ``None`` to raise
      :class:`ConnectionLostError` on the first loss.  After a reconnect every
      open subscription is re-opened where it stopped, and acked publishes not
      yet acknowledged are resent (the idempotent producer id keeps the hub from
      storing them twice).
    * ``heartbeat``: seconds between pings when idle (default: the hub's
      ``heartbeat_ms`` from WELCOME); 3 silent intervals mean the hub is dead.
    * ``max_pending_bytes``: bytes buffered per subscription in the client before
      its slow-consumer policy applies.
    * ``linger``: seconds to wait before sending a partly filled publish batch;
      0 sends it as soon as the publishing task yields.
    * ``producer_id``: fixed idempotent producer id (default: random per client).
    * ``connect_timeout``: seconds for the TCP connect; ``handshake_timeout``: seconds
      from there to the hub's WELCOME.  Something on the port that is not a hub raises
      :class:`NotAHubError` as soon as it answers, or after ``handshake_timeout`` if it
      stays silent.

    >>> async with connect("127.0.0.1:4222", name="worker-1") as client:  # doctest: +SKIP
    ...     await client.publish("events", b"started")
    """
    client = Client(
        address,
        name=name,
        token=hello_token(token=token, user=user, password=password),
        tls=tls_context(tls, ca_file=ca_file, cert_file=cert_file, key_file=key_file),
        reconnect=reconnect,
        heartbeat=heartbeat,
        max_pending_bytes=max_pending_bytes,
        linger=linger,
        flush_bytes=flush_bytes,
        producer_id=producer_id,
        connect_timeout=connect_timeout,
        handshake_timeout=handshake_timeout,
    )
    try:
        await client._open()  # outside the task group: a failure is a plain ConnectionLostError
    except BaseException:
        client._proto.close()
        raise
    body_error: BaseException | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(client._supervise)
        tg.start_soon(client._flusher)
        try:
            yield client
        except BaseException as exc:
            # Re-raised below, outside the task group, so callers catch SlowConsumerError & co.
            # themselves rather than wrapped in an ExceptionGroup.
            body_error = exc
        finally:
            with anyio.CancelScope(shield=True):
                await client._shutdown()
            tg.cancel_scope.cancel()
    if body_error is not None:
        raise body_error


class Client:
    """A connection to one hub; create it with :func:`connect`."""

    def __init__(
        self,
        address: str,
        *,
        name: str,
        token: bytes,
        reconnect: Reconnect | None,
        heartbeat: float | None,
        max_pending_bytes: int,
        linger: float,
        tls: ssl.SSLContext | None = None,
        flush_bytes: int,
        producer_id: int | None,
        connect_timeout: float,
        handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
    ) -> None:
        self.address = address
        self._host, self._port = parse_address(address)
        self._tls = tls
        self._reconnect = reconnect
        self._linger = linger
        self._connect_timeout = connect_timeout
        self._handshake_timeout = handshake_timeout
        self._proto = ClientProtocol(
            name=name,
            token=token,
            producer_id=producer_id,
            heartbeat=heartbeat,
            max_pending_bytes=max_pending_bytes,
            flush_bytes=flush_bytes,
            address=address,
        )
        self._stream: anyio.abc.ByteStream | None = None
        self._send_lock = anyio.Lock()
        self._connected = anyio.Event()
        self._flush_wanted = anyio.Event()
        self._flush_armed = False
        self._closing = False
        #: number of connections made (1 after connect(), +1 per reconnect)
        self.connections = 0

    # -- lifecycle ------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._proto.state == State.READY

    @property
    def protocol_version(self) -> int | None:
        """The client protocol version this client and the hub agreed on (docs/sdk.md, "Older hubs")."""
        return self._proto.version

    @property
    def hub_id(self) -> int | None:
        welcome = self._proto.welcome
        return welcome.hub_id if welcome else None

    async def _open(self) -> None:
        """Connect; an older hub's UNSUPPORTED_VERSION is met with an older version (sdk.versions)."""
        while True:
            try:
                await self._dial()
                return
            except HubError as exc:
                if not self._proto.step_down(exc):
                    raise

    async def _dial(self) -> None:
        """One connection attempt: TCP connect (``connect_timeout``), HELLO, WELCOME (``handshake_timeout``)."""
        proto = self._proto
        stream: anyio.abc.ByteStream
        try:
            with anyio.fail_after(self._connect_timeout):
                if self._tls is None:
                    stream = await anyio.connect_tcp(self._host, self._port)
                else:
                    # Not "standard compatible": a hub hangs up without TLS's close_notify, and
                    # that end is an end, not an attack on the last record.
                    stream = await anyio.connect_tcp(
                        self._host, self._port, ssl_context=self._tls, tls_hostname=self._host,
                        tls_standard_compatible=False,
                    )  # fmt: skip
        except TimeoutError:
            raise ConnectionLostError(f"cannot connect to {self.address}: timed out") from None
        except ssl.SSLError as exc:
            raise tls_failure(self.address, exc) from None
        except _DISCONNECTS as exc:
            raise ConnectionLostError(f"cannot connect to {self.address}: {_describe(exc)}") from None
        watch = HandshakeWatch(self.address, timeout=self._handshake_timeout)
        try:
            with anyio.fail_after(self._handshake_timeout):
                proto.connection_made()
                await stream.send(proto.data_to_send())
                while proto.state == State.HANDSHAKE:
                    try:
                        data = await stream.receive(_READ_SIZE)
                    except anyio.EndOfStream:
                        raise watch.closed() from None
                    watch.received(data)
                    proto.receive_data(data)
                    if proto.state == State.HANDSHAKE and proto.has_output:
                        await stream.send(proto.data_to_send())
        except BaseException as exc:
            proto.connection_lost()
            await anyio.aclose_forcefully(stream)
            not_a_hub = watch.explain(exc)
            if not_a_hub is not None:
                raise not_a_hub from None
            if isinstance(exc, _DISCONNECTS) and not isinstance(exc, Pub0subError):
                raise ConnectionLostError(f"handshake with {self.address} failed: {_describe(exc)}") from None
            raise
        self._stream = stream
        self.connections += 1
        self._connected.set()
        await self._write()  # resubscriptions and resends queued by the core after WELCOME

    async def _supervise(self) -> None:
        """Serve the connection; on loss reconnect per policy or fail everything."""
        while True:
            if self._closing:
                # The application left ``async with connect()`` before this task first ran
                # (e.g. it raised at once): _shutdown already closed the stream.
                return
            error = await self._serve()
            stream, self._stream = self._stream, None
            self._connected = anyio.Event()
            if stream is not None:
                await anyio.aclose_forcefully(stream)
            if self._closing:
                return
            self._proto.connection_lost(error)
            fatal = isinstance(error, HubError) and error.code in FATAL_CODES
            if self._reconnect is None or fatal or not await self._reconnect_loop(error):
                self._proto.fail(error)
                self._connected.set()  # wake publishers waiting for a connection: they see the failure
                return

    async def _reconnect_loop(self, error: BaseException) -> bool:
        assert self._reconnect is not None
        for delay in self._reconnect.delays():
            await anyio.sleep(delay)
            if self._closing:
                return False
            try:
                await self._open()
                return True
            except HubError as exc:
                if exc.code in FATAL_CODES:
                    return False
            except Pub0subError:
                continue
        return False

    async def _serve(self) -> BaseException:
        """Run reader and heartbeat tasks until the connection ends; return why it ended."""
        reason: list[BaseException] = []

        async def read(scope: anyio.CancelScope) -> None:
            stream = self._stream
            if stream is None:  # closed (shutdown or a failed write) before this task started
                reason.append(ConnectionLostError("connection closed"))
                scope.cancel()
                return
            try:
                while True:
                    data = await stream.receive(_READ_SIZE)
                    self._proto.receive_data(data)
                    if self._proto.has_output:
                        await self._write()
            except anyio.EndOfStream:
                reason.append(ConnectionLostError("the hub closed the connection"))
            except Pub0subError as exc:
                reason.append(exc)
            except _DISCONNECTS as exc:
                reason.append(ConnectionLostError(f"connection to the hub failed: {_describe(exc)}"))
            scope.cancel()

        async def beat(scope: anyio.CancelScope) -> None:
            try:
                while True:
                    wait = self._proto.poll()
                    if self._proto.has_output:
                        await self._write()
                    await anyio.sleep(wait)
            except Pub0subError as exc:
                reason.append(exc)
            scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read, tg.cancel_scope)
            tg.start_soon(beat, tg.cancel_scope)
        return reason[0] if reason else ConnectionLostError("connection closed")

    async def _write(self) -> None:
        """Send everything the core has queued; one ``send`` per chunk, never per message."""
        lock = self._send_lock
        try:
            # Uncontended (the usual case) without a checkpoint: the send below is one already.
            lock.acquire_nowait()
        except anyio.WouldBlock:
            await lock.acquire()
        sent = False
        try:
            while (stream := self._stream) is not None and (data := self._proto.data_to_send()):
                try:
                    await stream.send(data)
                    sent = True
                except _DISCONNECTS:
                    # The reader sees the broken stream too and reports it; acked frames get resent.
                    await anyio.aclose_forcefully(stream)
                    return
        finally:
            lock.release()
        if not sent:
            # Still a checkpoint with nothing to send, as every awaitable of the SDK is: a loop
            # around flush() must not hold the event loop.
            await anyio.lowlevel.checkpoint()

    async def _flusher(self) -> None:
        """Frame buffered publishes once the publisher yields (or after ``linger``)."""
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted = anyio.Event()
            if self._linger > 0:
                await anyio.sleep(self._linger)
            if not self._flush_armed:
                continue  # a flush() since the wake-up has sent everything: nothing to do
            while self._stream is None and self._proto.failed is None:
                # Disconnected: leave messages in the buffer so publishers block at flush_bytes.
                await self._connected.wait()
            self._flush_armed = False
            self._proto.flush()
            await self._write()

    async def _shutdown(self) -> None:
        try:
            with anyio.move_on_after(self._connect_timeout):
                await self.flush()
        except Pub0subError:
            pass
        self._closing = True
        self._proto.close()
        stream, self._stream = self._stream, None
        if stream is not None:
            await anyio.aclose_forcefully(stream)

    def _kick(self) -> None:
        """Have the flusher send what the core queued (credit grants, acks) soon."""
        if not self._flush_armed:
            self._flush_armed = True
            self._flush_wanted.set()

    def _check(self) -> None:
        failed = self._proto.failed
        if failed is not None:
            raise failed

    # -- publishing -----------------------------------------------------------

    async def publish(
        self,
        topics: str | Sequence[str],
        data: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, str | bytes] | None = None,
    ) -> None:
        """Publish ``data`` to one topic or several (once each), without waiting for the hub.

        Messages are buffered and sent in batches: consecutive publishes to the
        same topics share one message set, and a batch goes out when it passes
        ``flush_bytes`` or when this task next yields.  Order is kept per topic.
        Unacknowledged publishes in flight when a connection drops are lost
        (at-most-once); use :meth:`publish_acked` for at-least-once.  ``headers``
        (names to ``str`` or ``bytes``) arrive as ``msg.headers``; they travel once per
        message set, so publishes with the same topics and headers still share one.

        >>> await client.publish(["orders", "audit"], b'{"id": 1}', key=b"cust-9")  # doctest: +SKIP
        >>> await client.publish("orders", b"paid", headers={"trace": "4bf9"})  # doctest: +SKIP
        """
        if self._proto.publish(topics, data, key, headers):
            await self._flush_now()
        elif not self._flush_armed:
            self._flush_armed = True
            self._flush_wanted.set()

    async def publish_encoded(
        self,
        topics: str | Sequence[str],
        records: Any,
        ends: Sequence[int],
        *,
        headers: Mapping[str, str | bytes] | None = None,
    ) -> int:
        """Publish records already in the wire layout (:meth:`PublishBuffer.add_encoded
        <sdk.batching.PublishBuffer.add_encoded>`), all to ``topics`` with ``headers``; return how many.

        Record ``i`` is ``records[ends[i]:ends[i + 1]]``, ``[u16 key_len][u32 data_len][key][data]``.
        The frames are those :meth:`publish` would have made of the same records one by one (an
        idempotent producer's retry may mix the two).  Every frame that fills meanwhile goes out
        in one write before this returns, waiting for the connection as a full :meth:`publish`
        does; the rest waits in the buffer like any publish.

        >>> count, region = wire.encode_records([(b"k", b"a"), (b"", b"b")])  # doctest: +SKIP
        >>> await client.publish_encoded("orders", region, [0, 8, 15])         # doctest: +SKIP
        2
        """
        self._check()
        proto = self._proto
        framed = proto.buffer.sequence
        count = proto.publish_encoded(topics, records, ends, headers)
        if proto.buffer.sequence != framed:  # frames filled: send them now, as publish() does
            # Only the full frames: the records after the last one wait, as publish() would have
            # buffered them only after this write.
            await self._send_framed()
        if not proto.buffer.empty:
            self._kick()
        return count

    async def flush(self) -> None:
        """Send every buffered publish now (returns once written to the socket, not acked)."""
        self._check()
        await self._flush_now()

    async def _flush_now(self) -> None:
        self._proto.flush()
        await self._send_framed()

    async def _send_framed(self) -> None:
        """Write every frame the core holds (waiting for the connection, if it is down)."""
        while self._stream is None and self._proto.failed is None:
            # Disconnected: hold the publisher here so buffered frames cannot grow without bound.
            await self._connected.wait()
        self._check()
        # This write sends every frame: a flusher woken by the same publishes has nothing to do
        # (it was a second lock and write per wake-up), and must not frame what is buffered
        # after them meanwhile (publish_encoded's tail: its frames would differ from publish()'s).
        self._flush_armed = False
        await self._write()

    async def publish_acked(
        # timeout= as in nats.py: the PublishTimeoutError it ends in carries the batch sequence.
        self,
        topics: str | Sequence[str],
        data: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, str | bytes] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> PublishAck:
        """Publish and wait until the hub has stored the message; returns its offsets.

        Concurrent calls share frames (one PUBLISH_ACK covers a whole batch).
        Raises :class:`PublishTimeoutError` after ``timeout`` seconds (the outcome
        is then unknown) and :class:`ConnectionLostError` if the connection is
        lost for good.  After a reconnect the batch is resent.

        >>> ack = await client.publish_acked("orders", b"paid")   # doctest: +SKIP
        >>> ack.offsets["orders"]                                 # doctest: +SKIP
        41
        """
        ticket = self._proto.publish_acked(topics, data, key, headers)
        result: PublishAck = await self._wait(ticket, timeout, self._flush_now)
        return result

    # Carries publish_acked's and status's timeout= into the error each raises.
    async def _wait(self, ticket: Ticket, timeout: float | None, kick: Any = None) -> Any:  # noqa: ASYNC109
        if not ticket.done:
            event = anyio.Event()
            ticket.waiter = event
            if kick is not None:
                await kick()
            with anyio.move_on_after(math.inf if timeout is None else timeout):
                await event.wait()
            if not ticket.done:
                raise PublishTimeoutError(
                    f"no acknowledgement within {timeout:g}s", sequence=getattr(ticket, "sequence", 0)
                )
        return ticket.outcome()

    # -- subscribing and status ----------------------------------------------------

    def subscribe(
        self,
        topics: str | Sequence[str],
        *,
        start: Any = "latest",
        policy: str = "cancel",
        credit: int = 0,
        ack: str | None = None,
        durable: str = "",
        group: str = "",
        ack_wait: float | None = None,
        keys: Iterable[bytes | str] | None = None,
        key_prefixes: Iterable[bytes | str] | None = None,
        query: str | None = None,
        on_batch: Callable[[list[Message]], object] | None = None,
    ) -> Subscription:
        """A subscription to topics and/or patterns; use it as ``async with``.

        ``start``: ``"latest"`` (live only), ``"earliest"``, an offset (for every
        exact topic), a ``{topic: offset}`` dict, or an aware ``datetime``.
        ``policy``: ``"cancel"`` (a slow consumer gets :class:`SlowConsumerError`)
        or ``"drop-oldest"`` (drops, reported as :class:`Gap`).  ``credit`` > 0
        bounds what the hub sends ahead of consumption.  See :class:`Subscription`.

        ``durable="name"``: the hub keeps this subscription's position under the name
        while nobody is attached; reattaching (any connection, any process) resumes at
        the first unacknowledged offset.  ``group="name"``: a consumer group; each
        message goes to one member, and one not acknowledged within ``ack_wait``
        seconds (default: the hub's ``--ack-wait-seconds``) is delivered again.
        ``ack``: ``"none"`` (the hub counts delivery as acknowledgement), ``"auto"``
        (the SDK acknowledges what the application has moved past) or ``"manual"``
        (``await msg.ack()``); the default is ``"auto"`` for durable subscriptions
        and groups and ``"none"`` otherwise.  Groups cannot use ``"none"``.

        ``keys`` / ``key_prefixes``: deliver only records with one of these keys (or a key
        starting with one of the prefixes; ``b""`` is "no key"); the hub filters, and
        :meth:`Subscription.add_keys` and friends change it live.  A group's members share
        the group's filter.  ``query``: a tag query over the publishers' headers
        (docs/queries.md), e.g. ``"tm.event = 'Tx' AND tx.height > 5"``: only messages whose
        headers it accepts are delivered, and ``msg.subscription.query`` says which query a
        message matched.  A query that does not parse raises ``sdk.QuerySyntaxError`` (naming
        the position) before anything is sent.

        ``on_batch``: a plain function called with each delivered batch (a list of
        :class:`Message`) in the client's reader task, as soon as it is decoded: no task
        switch between the socket and the application, so the lowest latency.  It must not
        block (nothing else of this client is read meanwhile); ``await sub.wait()`` until the
        subscription ends.  If it raises, the subscription is closed (UNSUB; with
        ``ack="auto"`` that batch is not acknowledged) and ``wait()`` raises the exception.

        >>> async with client.subscribe(["orders.*", "audit"], start="earliest") as sub:  # doctest: +SKIP
        ...     async for msg in sub:
        ...         handle(msg)
        >>> async with client.subscribe("prices", on_batch=lambda batch: book.update(batch)) as sub:  # doctest: +SKIP
        ...     await sub.wait()
        """
        return Subscription(
            self,
            topics,
            start=start,
            policy=policy,
            credit=credit,
            ack=ack,
            durable=durable,
            group=group,
            ack_wait=ack_wait,
            keys=keys,
            key_prefixes=key_prefixes,
            query=query,
            on_batch=on_batch,
        )

    def kv(self, topic: str, *, timeout: float = 30.0) -> KeyValue:
        """A key-value view of ``topic`` (best on a compacted topic, docs/compaction.md); use it as
        ``async with``.  ``get``/``keys`` answer from memory once the view has caught up;
        ``put``/``delete`` publish and return once the view holds the write.

        >>> async with client.kv("config") as kv:  # doctest: +SKIP
        ...     await kv.put("mode", b"fast")
        ...     assert await kv.get("mode") == b"fast"
        """
        self._proto.require(KV_VIEWS)
        return KeyValue(self, topic, timeout=timeout)

    # timeout= as in nats.py, ending in a TimeoutError that says what went unanswered.
    async def status(self, *, timeout: float = 10.0) -> dict[str, Any]:  # noqa: ASYNC109
        """The hub's status document (STATUS_REPLY JSON) as a dict.

        >>> (await client.status())["connections"]   # doctest: +SKIP
        """
        self._check()
        ticket = self._proto.status()
        await self._write()
        try:
            result: dict[str, Any] = await self._wait(ticket, timeout)
        except PublishTimeoutError:
            raise TimeoutError(f"no status reply within {timeout:g}s") from None
        return result

    @property
    def protocol(self) -> ClientProtocol:
        """The sans-IO core (for tests and diagnostics)."""
        return self._proto

    async def _kill_connection(self) -> None:
        """Drop the TCP connection abruptly (tests use this to exercise reconnect)."""
        stream = self._stream
        if stream is not None:
            await anyio.aclose_forcefully(stream)


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


__all__ = ["Client", "connect", "wire"]
