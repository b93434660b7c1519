"""A one-connection TCP relay that records every chunk both ways, in the order it crossed.

For captures of real traffic without capture privileges: a client connects to
:attr:`Recorder.port`, the relay connects to ``upstream`` and copies bytes both ways
until either side closes, keeping ``(from_client, bytes)`` chunks.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Recorder:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.chunks: list[tuple[bool, bytes]] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    def _accept(self) -> None:
        self._listener.settimeout(30)
        client, _ = self._listener.accept()
        server = socket.create_connection(self.upstream, timeout=30)
        for src, dst, from_client in ((client, server, True), (server, client, False)):
            t = threading.Thread(target=self._pump, args=(src, dst, from_client), daemon=True)
            t.start()
            self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        src.settimeout(60)
        try:
            while data := src.recv(1 << 16):
                with self._lock:  # recorded before it is passed on: a reply is recorded after its request
                    self.chunks.append((from_client, data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self, timeout: float = 10.0) -> list[tuple[bool, bytes]]:
        """Wait for both directions to end (the client closed); the chunks recorded."""
        for t in self._threads:
            t.join(timeout)
        self._listener.close()
        return list(self.chunks)
