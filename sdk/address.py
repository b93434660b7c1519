"""Hub addresses: ``"host:port"``, ``"[v6]:port"``."""

from __future__ import annotations


def parse_address(address: str) -> tuple[str, int]:
    """Split ``"host:port"`` (IPv6 in brackets) into host and port.

    >>> parse_address("127.0.0.1:4222"), parse_address("[::1]:9")
    (('127.0.0.1', 4222), ('::1', 9))
    """
    if not isinstance(address, str):
        raise TypeError(f"address must be 'host:port', got {type(address).__name__}")
    text = address.strip()
    if text.startswith("tcp://"):
        text = text[len("tcp://") :]
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"hub address must look like HOST:PORT, got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)
