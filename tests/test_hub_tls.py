"""TLS on the client listener: the SDK (async and blocking) and the commands verify the hub by
default; mutual TLS; and what each side says when the other does not speak TLS.

Certificates come from ``trustme`` (tests/support/security.py).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import sdk
from tests.support.command import ROOT
from tests.support.hubprocess import HubProcess
from tests.support.inprocess import StartHub, start_server
from tests.support.security import Certs, certs

__all__ = ["certs", "start_server"]  # fixtures, imported for pytest


async def tls_hub(start_server: StartHub, certs: Certs, **settings: object) -> str:
    server = await start_server(tls_cert=certs.hub_cert, tls_key=certs.hub_key, **settings)
    assert server.status()["tls"]["enabled"]
    return server.address


async def test_async_client_over_tls_verifies_the_hub(start_server: StartHub, certs: Certs) -> None:
    address = await tls_hub(start_server, certs)
    async with sdk.connect(address, ca_file=certs.ca) as client, client.subscribe("t") as sub:
        await client.publish("t", b"over tls" * 1000)
        msg = await sub.__anext__()
        assert msg.data == b"over tls" * 1000
    with pytest.raises(sdk.TlsError, match=r"certificate verify failed.*pass the CA"):
        async with sdk.connect(address, ca_file=certs.other_ca, reconnect=None):
            pass
    with pytest.raises(sdk.TlsError, match="certificate verify failed"):
        async with sdk.connect(address, tls=True, reconnect=None):  # the system CAs never signed a test CA
            pass


async def test_blocking_client_over_tls(start_server: StartHub, certs: Certs) -> None:
    address = await tls_hub(start_server, certs)

    def exchange() -> list[bytes]:
        with sdk.connect_blocking(address, ca_file=certs.ca) as client, client.subscribe("t") as sub:
            for i in range(300):
                client.publish("t", b"%d" % i)
            client.flush()
            return [sub.next(timeout=10).data for _ in range(300)]

    assert await trio.to_thread.run_sync(exchange) == [b"%d" % i for i in range(300)]

    def untrusted() -> None:
        sdk.connect_blocking(address, ca_file=certs.other_ca, reconnect=None)

    with pytest.raises(sdk.TlsError, match="not trusted"):
        await trio.to_thread.run_sync(untrusted)


async def test_mutual_tls_wants_a_client_certificate(start_server: StartHub, certs: Certs) -> None:
    address = await tls_hub(start_server, certs, tls_client_ca=certs.ca)
    async with sdk.connect(address, ca_file=certs.ca, cert_file=certs.client_cert, key_file=certs.client_key) as c:
        assert c.connected
    # Without one the hub ends the handshake (TLS 1.3 reports it at the first read: either error).
    with pytest.raises((sdk.TlsError, sdk.ConnectionLostError)):
        async with sdk.connect(address, ca_file=certs.ca, reconnect=None) as c:
            await c.status()


async def test_plain_and_tls_clients_are_told_what_is_wrong(start_server: StartHub, certs: Certs) -> None:
    tls_address = await tls_hub(start_server, certs)
    with pytest.raises(sdk.HubError, match="speaks TLS only"):
        async with sdk.connect(tls_address, reconnect=None):
            pass
    plain = await start_server(data_dir=None)
    with pytest.raises(sdk.TlsError, match="does the hub speak TLS"):
        async with sdk.connect(plain.address, ca_file=certs.ca, reconnect=None):
            pass


def test_commands_take_a_ca_file(certs: Certs, start_hub: Callable[..., HubProcess], tmp_path: Path) -> None:
    hub = start_hub("--tls-cert", str(certs.hub_cert), "--tls-key", str(certs.hub_key), "--data-dir",
                    str(tmp_path / "data"))  # fmt: skip

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sdk.cli", *args, "--hub", hub.address], capture_output=True,
                              text=True, timeout=60, cwd=ROOT)  # fmt: skip

    assert run("pub", "--topic", "t", "--ack", "--ca-file", str(certs.ca), "hi").returncode == 0
    got = run("sub", "--topic", "t", "--start", "earliest", "--count", "1", "--ca-file", str(certs.ca))
    assert got.stdout == "t 0 hi\n", got.stderr
    status = run("status", "--json", "--ca-file", str(certs.ca))
    assert '"tls"' in status.stdout
    refused = run("status", "--tls")  # the system's CAs: the test CA is not among them
    assert refused.returncode == 1 and "TLS handshake" in refused.stderr and "Traceback" not in refused.stderr


async def test_a_connection_past_the_rate_limit_is_closed_before_any_tls_handshake(
    start_server: StartHub, certs: Certs
) -> None:
    """Under TLS a refusal would cost the handshake it saves: the connection is closed at once,
    the client reads end of file instead of a ServerHello (and the refusal is counted)."""
    server = await start_server(tls_cert=certs.hub_cert, tls_key=certs.hub_key,
                                max_connects_per_second_per_address=0.01, connect_burst_per_address=1)  # fmt: skip
    host, port = server.address.rsplit(":", 1)
    first = trio.socket.socket()
    await first.bind(("127.0.0.2", 0))
    await first.connect((host, int(port)))  # admitted: its TLS handshake is the hub's to wait for
    second = trio.socket.socket()
    await second.bind(("127.0.0.2", 0))
    await second.connect((host, int(port)))
    await second.send(b"\x16\x03\x01\x00\x05hello")  # the start of a ClientHello
    with trio.fail_after(5):
        assert await second.recv(1024) == b""  # closed, not a byte of TLS or of pub0sub
    assert server.core.connect_rate.refused == 1
    first.close()
    second.close()


async def test_past_max_connections_a_tls_client_is_told_so_over_tls(start_server: StartHub, certs: Certs) -> None:
    """A refusal at max_connections under TLS does the handshake (the client must read the
    reason over TLS) in a task of its own, so the accept loop goes on meanwhile."""
    address = await tls_hub(start_server, certs, max_connections=1)
    async with sdk.connect(address, ca_file=certs.ca):
        with pytest.raises(sdk.HubError, match="max_connections=1"):
            async with sdk.connect(address, ca_file=certs.ca, reconnect=None):
                pass
