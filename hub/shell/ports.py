"""One owner per listening port, and a one-line answer when a port is taken.

A second hub on a client port in use fails deep inside trio's listener set-up; a
second hub on a mesh port in use does not fail at all, because py-libp2p listens
with ``SO_REUSEPORT`` and the kernel then lets both processes accept on it (and
splits the peers' connections between them).  So the mesh port is tried here
first with a plain bind, which a port that anything listens on refuses.
"""

from __future__ import annotations

import errno
import socket


class PortInUseError(OSError):
    """Something already listens on ``host:port``; ``what`` names the setting (the client
    address or the mesh address), the message is the whole story for a person."""

    def __init__(self, host: str, port: int, *, what: str = "address") -> None:
        self.host = host
        self.port = port
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        super().__init__(errno.EADDRINUSE, f"{what} {shown} is in use")

    def __str__(self) -> str:
        return str(self.strerror)


def check_port_free(host: str, port: int, *, what: str = "address") -> None:
    """Raise :class:`PortInUseError` if something listens on ``host:port`` (port 0: nothing to check).

    The trial bind sets ``SO_REUSEADDR`` (as trio's listeners do), so connections of a
    hub that just stopped, still in TIME_WAIT, do not count; a listening socket does,
    with or without ``SO_REUSEPORT``, because this one does not set it.
    """
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUseError(host, port, what=what) from None
            raise
