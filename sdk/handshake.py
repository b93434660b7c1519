"""Telling a pub0sub hub from whatever else answers on a port, while waiting for WELCOME.

Both drivers (:mod:`sdk.client`, :mod:`sdk.blocking`) send HELLO and wait for WELCOME.  A
hub answers at once.  Anything else sends bytes that are not a frame a hub sends (an HTTP
server's ``HTTP/1.1 400 Bad Request``, a TLS alert, our own HELLO echoed back), which fails
on the first bytes, closes the connection, or says nothing, which fails after
:data:`DEFAULT_HANDSHAKE_TIMEOUT`.  Every case is a :class:`NotAHubError` quoting what came.
"""

from __future__ import annotations

from .errors import NotAHubError, ProtocolError

#: Seconds a hub may take to answer HELLO once the TCP connection is up.  A hub answers from
#: its event loop as soon as HELLO arrives (well under a millisecond on loopback); this bound
#: is how long a port that accepts and stays silent keeps a command waiting.
DEFAULT_HANDSHAKE_TIMEOUT = 3.0
#: Bytes of a non-hub's answer kept to quote in the error.
_QUOTED_BYTES = 48
_TEXT = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}


class HandshakeWatch:
    """What one peer sent during one handshake, to say what it was if it is not a hub.

    >>> watch = HandshakeWatch("127.0.0.1:8080", timeout=3.0)
    >>> watch.received(b"HTTP/1.1 400 Bad Request\\r\\nContent-Length: 0\\r\\n\\r\\n")
    >>> str(watch.closed())
    '127.0.0.1:8080 did not answer like a pub0sub hub (it sent "HTTP/1.1 400 Bad Request" and closed the connection)'
    """

    def __init__(self, address: str, *, timeout: float) -> None:
        self.address = address
        self.timeout = timeout
        self.head = b""

    def received(self, data: bytes) -> None:
        if len(self.head) < _QUOTED_BYTES:
            self.head += data[: _QUOTED_BYTES - len(self.head)]

    def explain(self, error: BaseException) -> NotAHubError | None:
        """The :class:`NotAHubError` a handshake failure means, or None for other failures."""
        if isinstance(error, ProtocolError):
            return self._error(f"it sent {quote(self.head)}")
        if isinstance(error, TimeoutError):
            return self.silent()
        if isinstance(error, ConnectionResetError | BrokenPipeError):
            # A server that closes at once, with our HELLO unread, resets the connection.
            return self.closed()
        return None

    def silent(self) -> NotAHubError:
        if self.head:
            return self._error(f"it sent {quote(self.head)}, then nothing for {self.timeout:g}s")
        return self._error(f"no answer to HELLO within {self.timeout:g}s")

    def closed(self) -> NotAHubError:
        if self.head:
            return self._error(f"it sent {quote(self.head)} and closed the connection")
        return self._error("it closed the connection without answering")

    def _error(self, detail: str) -> NotAHubError:
        if self.head[:2] == b"\x15\x03":  # a TLS alert record: the hub (or whatever it is) wants TLS
            detail += "; that is a TLS alert: the port speaks TLS, connect with tls=True (--tls)"
        return NotAHubError(self.address, detail, received=self.head)


def quote(data: bytes) -> str:
    """Text as its first line in quotes (``"HTTP/1.1 400 Bad Request"``), anything else as hex bytes."""
    if set(data) <= _TEXT:
        lines = [line for line in data.decode("ascii").splitlines() if line.strip()]
        if lines:
            return f'"{lines[0][:60]}"'
    return "bytes " + data[:16].hex(" ") + (" ..." if len(data) > 16 else "")
