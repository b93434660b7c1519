"""Exceptions the SDK raises, each carrying the fields a caller needs to react.

Every exception derives from :class:`Pub0subError`; where a builtin means the
same thing it is a base too (``except ConnectionError`` and
``except TimeoutError`` keep working for code that knows nothing of pub0sub).
The ``code`` fields are :class:`wire.ErrorCode` values, the same numbers the
hub puts in its ERROR and SUB_END frames and in its logs.
"""

from __future__ import annotations

from collections.abc import Sequence

import wire
from wire import ErrorCode


class Pub0subError(Exception):
    """Base of every exception the SDK raises on purpose."""


class ConnectionLostError(Pub0subError, ConnectionError):
    """The connection to the hub is gone and (if a reconnect policy was given) could not be restored.

    ``code`` is the hub's ERROR code when the hub closed the connection with an
    ERROR frame, ``None`` for a socket error, EOF or heartbeat timeout.
    """

    def __init__(self, reason: str, *, code: ErrorCode | None = None) -> None:
        self.reason = reason
        self.code = code
        super().__init__(reason if code is None else f"{reason} ({code.name})")


class NotAHubError(ConnectionLostError):
    """The address accepted the TCP connection but did not answer HELLO like a pub0sub hub.

    Another service (an HTTP server, a database), a TLS port, or one that accepts and
    stays silent.  ``address`` is the one dialled, ``received`` the first bytes it sent
    (empty if it sent none); the message quotes them.
    """

    def __init__(self, address: str, detail: str, *, received: bytes = b"") -> None:
        self.address = address
        self.received = received
        super().__init__(f"{address} did not answer like a pub0sub hub ({detail})")


class TlsError(ConnectionLostError):
    """The TLS handshake with the hub failed: its certificate did not verify (wrong or missing
    CA, a name that does not match), the port does not speak TLS, or the hub wanted a client
    certificate.  The message says which is likely."""


class HubError(ConnectionLostError):
    """The hub sent an ERROR frame (which always closes the connection).

    ``ref`` names the publish sequence or subscription id concerned, else 0.
    A subclass of :class:`ConnectionLostError` because the contract makes every
    ERROR fatal for the connection.
    """

    def __init__(self, code: ErrorCode, reason: str, *, ref: int = 0) -> None:
        self.ref = ref
        super().__init__(f"hub error: {reason or code.name.lower()}", code=code)
        self.code: ErrorCode = code
        self.hub_reason = reason


class ProtocolError(Pub0subError):
    """The hub sent bytes that are not a valid frame (wraps :class:`wire.ProtocolError`).

    ``offset`` is the byte offset in the connection's input stream, ``code``
    the :class:`wire.ErrorCode` describing the problem.
    """

    def __init__(self, error: wire.ProtocolError) -> None:
        self.error = error
        self.offset = error.offset
        self.code = error.code
        super().__init__(f"protocol error from hub: {error}")


class SubscriptionClosedError(Pub0subError):
    """The hub ended a subscription (SUB_END) for a reason other than a slow consumer.

    Raised from the subscription's iterator (after the messages received before
    the SUB_END) and from ``subscribe()`` when the hub refuses the subscription.
    """

    def __init__(self, sub_id: int, code: ErrorCode, reason: str, *, topics: Sequence[str] = ()) -> None:
        self.sub_id = sub_id
        self.code = code
        self.reason = reason
        self.topics = tuple(topics)
        super().__init__(f"subscription {sub_id} {list(self.topics)} ended: {reason or code.name} ({code.name})")


class SlowConsumerError(SubscriptionClosedError):
    """The subscription could not keep up and was cancelled (``code`` OUT_OF_CAPACITY).

    Raised by the hub's ``cancel`` policy, or by the SDK itself when the
    messages buffered for this subscription pass ``max_pending_bytes``
    (``client_side`` is then true and ``pending_bytes`` says how much was held).
    """

    def __init__(
        self,
        sub_id: int,
        reason: str,
        *,
        topics: Sequence[str] = (),
        client_side: bool = False,
        pending_bytes: int = 0,
    ) -> None:
        self.client_side = client_side
        self.pending_bytes = pending_bytes
        super().__init__(sub_id, ErrorCode.OUT_OF_CAPACITY, reason, topics=topics)


class InvalidTopicError(Pub0subError, wire.InvalidTopicError):
    """A topic or pattern breaks the topic rule; raised before anything is sent to the hub.

    ``name`` is the refused name, ``problem`` what is wrong with it, ``pattern``
    whether it was read as a subscription pattern, ``code`` is ``INVALID_TOPIC``
    (what the hub would have answered).  The message is the one the hub and the
    command line tools give for the same name.  A :class:`ValueError` too.
    """

    @classmethod
    def check(cls, name: object, *, pattern: bool = False) -> None:
        """:func:`wire.check_topic`, raising this class."""
        try:
            wire.check_topic(name, pattern=pattern)
        except wire.InvalidTopicError as exc:
            raise cls(exc.name, exc.problem, pattern=exc.pattern) from None


class UnsupportedFeatureError(Pub0subError):
    """The connection speaks an older client protocol version than a feature needs.

    The SDK steps down to the version an older hub speaks (docs/sdk.md, "Older hubs"); on such a
    connection a call that needs more (``headers=`` on a publish, ``keys=``/``query=`` on a
    subscribe, ``kv()``, ``commit()``) raises this before anything is sent.  ``feature`` names
    it, ``needs`` is the first version that has it, ``version`` the one negotiated.
    """

    def __init__(self, feature: str, *, needs: int, version: int, address: str = "") -> None:
        self.feature = feature
        self.needs = needs
        self.version = version
        hub = f"the hub at {address}" if address else "the hub"
        super().__init__(
            f"{feature}: needs client protocol {needs}, and {hub} speaks {version} (upgrade the hub, or do without it)"
        )


class PublishTimeoutError(Pub0subError, TimeoutError):
    """No PUBLISH_ACK arrived in time; the outcome of the publish is unknown (it may be stored)."""

    def __init__(self, reason: str, *, sequence: int = 0) -> None:
        self.sequence = sequence
        super().__init__(reason)
