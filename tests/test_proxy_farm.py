"""``sdk/tools/proxy_farm.py``: the test bed's proxies, in a process of their own, fail one link of
many -- the one that carried the most bytes -- and leave the others alone."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from sdk.tools.proxy_farm import ProxyFarm


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        with contextlib.suppress(ConnectionResetError):  # the proxy closes with a RST (a cut link)
            while data := self.request.recv(65536):
                self.request.sendall(data)


@pytest.fixture
def echo_port() -> Iterator[int]:
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo) as server:
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield server.server_address[1]
        server.shutdown()


def echoed(conn: socket.socket, data: bytes) -> bytes:
    conn.sendall(data)
    got = b""
    with contextlib.suppress(TimeoutError):
        while len(got) < len(data) and (chunk := conn.recv(65536)):
            got += chunk
    return got


def test_the_busiest_link_is_black_holed_alone_and_closed_on_heal(echo_port: int) -> None:
    with ProxyFarm() as farm:
        ports = {name: farm.add(name, upstream=echo_port) for name in ("a", "b")}
        assert farm.busiest() is None  # no connection yet
        with (
            socket.create_connection(("127.0.0.1", ports["a"]), timeout=2) as quiet,
            socket.create_connection(("127.0.0.1", ports["a"]), timeout=2) as busy,
            socket.create_connection(("127.0.0.1", ports["b"]), timeout=2) as other,
        ):
            assert echoed(quiet, b"q" * 10) == b"q" * 10
            assert echoed(busy, b"b" * 5000) == b"b" * 5000
            assert echoed(other, b"o" * 100) == b"o" * 100
            busiest = farm.busiest()
            assert busiest is not None
            name, handle, sent = busiest
            assert (name, sent) == ("a", 10_000)  # both ways
            assert farm.blackhole(name, handle)
            # That one link swallows everything; the others, on its proxy and another, carry on.
            busy.settimeout(0.5)
            assert echoed(busy, b"lost") == b""
            assert echoed(quiet, b"still") == b"still" and echoed(other, b"here") == b"here"
            # The counts started again at the look, and a black-holed link is not picked again:
            # the quiet one ("still" both ways) carried the most since.
            again = farm.busiest()
            assert again is not None and (again[0], again[2]) == ("a", 10) and again[1] != handle
            farm.heal("a")
            busy.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                assert busy.recv(10) == b""  # closed: its stream lost bytes
            assert echoed(quiet, b"after") == b"after"
