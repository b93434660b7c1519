"""The blocking client: a plain socket driver around :class:`sdk.protocol.ClientProtocol`.

No event loop and no threads, for scripts and Spark workers.  The socket is
serviced (pings answered, deliveries buffered, heartbeats checked) whenever the
client is called: each flush, ``publish_acked``, ``status`` and every wait for
a message.  Plain ``publish`` calls only buffer; a batch goes out when it passes
``flush_bytes``, on :meth:`BlockingClient.flush`, and on close.

A script that does not call the client for longer than 3 heartbeat intervals
may be declared dead by the hub; with a reconnect policy the next call simply
reconnects (re-opening its subscriptions where they stopped).

>>> with connect_blocking("127.0.0.1:7420") as client:         # doctest: +SKIP
...     with client.subscribe("jobs") as sub:
...         client.publish("jobs", b"build")
...         client.flush()
...         msg = sub.next(timeout=5)
"""

from __future__ import annotations

import math
import select
import socket
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .address import parse_address
from .batching import DEFAULT_FLUSH_BYTES, AckTicket, Ticket
from .blocking_subscription import BlockingSubscription
from .errors import ConnectionLostError, HubError, Pub0subError, PublishTimeoutError
from .handshake import DEFAULT_HANDSHAKE_TIMEOUT, HandshakeWatch
from .kv import BlockingKeyValue
from .messages import PublishAck, Reconnect
from .protocol import DEFAULT_MAX_PENDING_BYTES, FATAL_CODES, ClientProtocol, State
from .security import PathLike, hello_token, tls_context, tls_failure
from .versions import KV_VIEWS

_READ_SIZE = 256 * 1024
#: chunks read per service call when data keeps arriving, so a flood cannot starve the caller
_MAX_READS_PER_SERVICE = 64


def connect_blocking(
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
    flush_bytes: int = DEFAULT_FLUSH_BYTES,
    producer_id: int | None = None,
    connect_timeout: float = 10.0,
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
) -> BlockingClient:
    """Connect to a hub and return a :class:`BlockingClient` (also a context manager).

    Options mean what they mean for :func:`sdk.connect` (credentials and TLS included).

    >>> with connect_blocking("127.0.0.1:7420", name="etl") as client:  # doctest: +SKIP
    ...     print(client.publish_acked("rows", b"1").offsets)
    """
    client = BlockingClient(
        address,
        name=name,
        token=hello_token(token=token, user=user, password=password),
        tls=tls_context(tls, ca_file=ca_file, cert_file=cert_file, key_file=key_file),
        reconnect=reconnect,
        heartbeat=heartbeat,
        max_pending_bytes=max_pending_bytes,
        flush_bytes=flush_bytes,
        producer_id=producer_id,
        connect_timeout=connect_timeout,
        handshake_timeout=handshake_timeout,
    )
    try:
        client._open()
    except BaseException:
        client._proto.close()
        raise
    return client


class BlockingClient:
    """A blocking connection to one hub; create it with :func:`connect_blocking`."""

    def __init__(
        self,
        address: str,
        *,
        name: str,
        token: bytes,
        reconnect: Reconnect | None,
        heartbeat: float | None,
        max_pending_bytes: int,
        flush_bytes: int,
        producer_id: int | None,
        connect_timeout: float,
        handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.address = address
        self._host, self._port = parse_address(address)
        self._tls = tls
        self._reconnect = reconnect
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
        self._sock: socket.socket | None = None
        self.connections = 0

    # -- connection -------------------------------------------------------------------

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Send what is buffered, then close.  Idempotent."""
        if self._proto.state == State.CLOSED:
            return
        try:
            if self._sock is not None:
                self._proto.flush()
                self._send()
        except Pub0subError:
            pass
        self._proto.close()
        self._drop_socket()

    @property
    def protocol_version(self) -> int | None:
        """The client protocol version this client and the hub agreed on (docs/sdk.md, "Older hubs")."""
        return self._proto.version

    @property
    def hub_id(self) -> int | None:
        welcome = self._proto.welcome
        return welcome.hub_id if welcome else None

    @property
    def protocol(self) -> ClientProtocol:
        return self._proto

    def _open(self) -> None:
        """Connect; an older hub's UNSUPPORTED_VERSION is met with an older version (sdk.versions)."""
        while True:
            try:
                self._dial()
                return
            except HubError as exc:
                if not self._proto.step_down(exc):
                    raise

    def _dial(self) -> None:
        """One connection attempt: TCP connect (``connect_timeout``), HELLO, WELCOME (``handshake_timeout``)."""
        proto = self._proto
        try:
            sock = socket.create_connection((self._host, self._port), timeout=self._connect_timeout)
        except OSError as exc:
            raise ConnectionLostError(f"cannot connect to {self.address}: {exc.strerror or exc}") from None
        if self._tls is not None:
            try:
                sock = self._tls.wrap_socket(sock, server_hostname=self._host)  # handshakes within connect_timeout
            except (ssl.SSLError, OSError) as exc:
                sock.close()
                if isinstance(exc, ssl.SSLError):
                    raise tls_failure(self.address, exc) from None
                raise ConnectionLostError(f"TLS handshake with {self.address} failed: {exc}") from None
        watch = HandshakeWatch(self.address, timeout=self._handshake_timeout)
        deadline = time.monotonic() + self._handshake_timeout
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            proto.connection_made()
            sock.sendall(proto.data_to_send())
            while proto.state == State.HANDSHAKE:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise watch.silent()
                sock.settimeout(left)
                data = sock.recv(_READ_SIZE)
                if not data:
                    raise watch.closed()
                watch.received(data)
                proto.receive_data(data)
                if proto.state == State.HANDSHAKE and proto.has_output:
                    sock.sendall(proto.data_to_send())
            sock.settimeout(None)
        except BaseException as exc:
            proto.connection_lost()
            sock.close()
            not_a_hub = watch.explain(exc)
            if not_a_hub is not None:
                raise not_a_hub from None
            if isinstance(exc, OSError) and not isinstance(exc, Pub0subError):
                raise ConnectionLostError(f"handshake with {self.address} failed: {exc}") from None
            raise
        self._sock = sock
        self.connections += 1
        self._send()  # resubscriptions and resends queued after WELCOME

    def _drop_socket(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _lost(self, error: BaseException) -> None:
        """The connection broke: reconnect per policy, or fail and raise ``error``."""
        self._drop_socket()
        proto = self._proto
        if proto.state == State.CLOSED:
            raise proto.failed or error
        proto.connection_lost(error)
        fatal = isinstance(error, HubError) and error.code in FATAL_CODES
        if self._reconnect is not None and not fatal:
            for delay in self._reconnect.delays():
                time.sleep(delay)
                try:
                    self._open()
                    return
                except HubError as exc:
                    if exc.code in FATAL_CODES:
                        break
                except Pub0subError:
                    continue
        proto.fail(error)
        raise error

    def _ensure(self) -> socket.socket:
        failed = self._proto.failed
        if failed is not None:
            raise failed
        while self._sock is None:
            self._lost(ConnectionLostError("not connected"))
        return self._sock

    def _send(self) -> None:
        while True:
            sock = self._ensure()
            data = self._proto.data_to_send()
            if not data:
                return
            try:
                sock.sendall(data)
            except OSError as exc:
                self._lost(ConnectionLostError(f"connection to the hub failed: {exc.strerror or exc}"))

    def _service(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for input; process all that arrived; run heartbeats; send replies."""
        sock = self._ensure()
        proto = self._proto
        try:
            for _ in range(_MAX_READS_PER_SERVICE):
                wait = min(timeout, proto.poll())
                if not _readable(sock, wait):
                    if timeout > 0:
                        proto.poll()  # the silence may have just passed the heartbeat bound
                    break
                data = sock.recv(_READ_SIZE)
                if not data:
                    raise ConnectionLostError("the hub closed the connection")
                proto.receive_data(data)
                timeout = 0.0
            proto.poll()
        except Pub0subError as exc:
            self._lost(exc)
            return
        except OSError as exc:
            self._lost(ConnectionLostError(f"connection to the hub failed: {exc.strerror or exc}"))
            return
        if proto.has_output:
            self._send()

    def _wait(self, done: Any, timeout: float | None) -> bool:
        """Service the socket until ``done()`` or the timeout; true when done."""
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._service(min(left, 1.0))
        return True

    # -- publishing -------------------------------------------------------------------

    def publish(
        self,
        topics: str | Sequence[str],
        data: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, str | bytes] | None = None,
    ) -> None:
        """Buffer a message; sent when the batch passes ``flush_bytes`` or on :meth:`flush`.

        ``headers`` as for :meth:`sdk.Client.publish`.
        """
        if self._proto.publish(topics, data, key, headers):
            self.flush()

    def publish_encoded(
        self,
        topics: str | Sequence[str],
        records: Any,
        ends: Sequence[int],
        *,
        headers: Mapping[str, str | bytes] | None = None,
    ) -> int:
        """Buffer records already in the wire layout (:meth:`PublishBuffer.add_encoded
        <sdk.batching.PublishBuffer.add_encoded>`); return how many.

        The frames are those :meth:`publish` would have made of the same records one by one.
        Every frame that fills meanwhile goes out in one socket write before this returns;
        the rest waits in the buffer like any publish.
        """
        self._ensure()
        count = self._proto.publish_encoded(topics, records, ends, headers)
        if self._proto.has_output:
            self._send()
            self._service(0.0)
        return count

    def flush(self) -> None:
        """Send every buffered publish and process whatever the hub sent meanwhile."""
        self._ensure()
        self._proto.flush()
        self._send()
        self._service(0.0)

    def publish_acked(
        self,
        topics: str | Sequence[str],
        data: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, str | bytes] | None = None,
        timeout: float | None = None,
    ) -> PublishAck:
        """Publish and wait for the hub to store it; returns the offsets (see :meth:`sdk.Client.publish_acked`)."""
        self._ensure()
        ticket = self._proto.publish_acked(topics, data, key, headers)
        return self._await_acks([ticket], timeout)[0]

    def publish_acked_many(
        self,
        messages: Iterable[
            tuple[str | Sequence[str], bytes, bytes | None]
            | tuple[str | Sequence[str], bytes, bytes | None, Mapping[str, str | bytes] | None]
        ],
        *,
        timeout: float | None = None,
    ) -> list[PublishAck]:
        """Publish ``(topics, data, key)`` triples (or ``(topics, data, key, headers)``) in as few frames
        as fit; wait for every ack."""
        self._ensure()
        tickets = [self._proto.publish_acked(*message) for message in messages]
        return self._await_acks(tickets, timeout)

    def _await_acks(self, tickets: list[AckTicket], timeout: float | None) -> list[PublishAck]:
        self._proto.flush()
        self._send()
        if not self._wait(lambda: all(t.done for t in tickets), timeout):
            pending = next(t for t in tickets if not t.done)
            raise PublishTimeoutError(f"no acknowledgement within {timeout:g}s", sequence=pending.sequence)
        return [t.outcome() for t in tickets]

    # -- subscribing and status -------------------------------------------------------

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
        timeout: float | None = 30.0,
    ) -> BlockingSubscription:
        """Open a subscription (waits for SUB_OK); options as for :meth:`sdk.Client.subscribe`."""
        self._ensure()
        sub = BlockingSubscription(self)
        state, ticket = self._proto.subscribe(
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
            owner=sub,
        )
        sub._state = state
        sub._auto = state.ack == "auto" and state.sends_acks
        self._send()
        sub.start_offsets = self._await_ticket(ticket, timeout, "SUB_OK")
        return sub

    def kv(self, topic: str, *, timeout: float = 30.0) -> BlockingKeyValue:
        """A key-value view of ``topic`` (see :meth:`sdk.Client.kv`); also a context manager."""
        self._proto.require(KV_VIEWS)
        return BlockingKeyValue(self, topic, timeout=timeout)

    def status(self, *, timeout: float = 10.0) -> dict[str, Any]:
        """The hub's status document as a dict."""
        self._ensure()
        ticket = self._proto.status()
        self._send()
        result: dict[str, Any] = self._await_ticket(ticket, timeout, "status reply")
        return result

    def _await_ticket(self, ticket: Ticket, timeout: float | None, what: str) -> Any:
        if not self._wait(lambda: ticket.done, timeout):
            raise TimeoutError(f"no {what} within {timeout:g}s")
        return ticket.outcome()


def _readable(sock: socket.socket, wait: float) -> bool:
    """Wait up to ``wait`` s for ``sock`` to have input (or EOF, or an error).

    ``poll``, not ``select``: select() cannot watch a descriptor numbered 1024 or more,
    and an application that holds many files gets such numbers for its sockets."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending() > 0:
        return True  # TLS holds decrypted bytes the socket no longer shows poll()
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(-1 if wait == math.inf else math.ceil(max(0.0, wait) * 1000)))
