"""TCP servers on 127.0.0.1 that are not hubs, for the "wrong target" tests.

>>> with silent_server() as address:                        # doctest: +SKIP
...     sdk.connect_blocking(address)        # NotAHubError after the handshake timeout
>>> with answering_server(HTTP_400) as address:             # doctest: +SKIP
...     sdk.connect_blocking(address)        # NotAHubError quoting "HTTP/1.1 400 Bad Request"
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

HTTP_400 = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A port that completes TCP handshakes (the kernel does, from the backlog) and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@contextlib.contextmanager
def answering_server(reply: bytes) -> Iterator[str]:
    """A port that answers every connection with ``reply`` at once (as an HTTP server answers
    bytes it cannot parse) and closes it; served by a thread until the block ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # the listener was closed: the block ended
                return
            with conn, contextlib.suppress(OSError):
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        # shutdown() wakes the accept() blocked in the thread; close() alone may not.
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(10)
