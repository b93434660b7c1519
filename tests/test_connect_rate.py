"""The per-address connection rate limit (hub/core/connect_rate.py) on real hubs: connections from
one source address past its burst get ``ERROR LIMIT_EXCEEDED`` and are closed at once, other
addresses (127.0.0.2 is not 127.0.0.1) and exempt CIDRs are served, the table of addresses stays
within its bound, and status and the metrics count the refusals per address class.

The rate is set so low (one connection per 100 s) that no token comes back while a test runs:
the figures here are counts, never times."""

from __future__ import annotations

import json
import re

import pytest
import trio

import wire
from hub.app import HubServer
from hub.config import HubConfig, load_config
from hub.core.connect_rate import ADDRESS_CLASSES, LOG_EVERY_SECONDS, ConnectRate, ConnectRateLimits, LogThrottle
from hub.core.metrics import MetricsSources, collect
from tests.support.rawclient import RawClient

SLOW = 0.01  # connections a second: none refills during a test
BURST = 3


async def start(nursery: trio.Nursery, **settings: object) -> HubServer:
    config = HubConfig(listen="127.0.0.1:0", max_connects_per_second_per_address=SLOW,
                       connect_burst_per_address=BURST, **settings)  # type: ignore[arg-type]  # fmt: skip
    server = HubServer(config)
    await nursery.start(server.serve)
    return server


async def refused(address: str, source: str) -> wire.Error:
    """A connection from ``source`` that the hub refuses: its ERROR, then the hub hangs up."""
    client = await RawClient.connect(address, hello=False, source=source)
    await client.send(wire.Hello(client_name="one too many"))
    error = await client.expect(wire.Error)
    assert await client.recv() is None, "the hub kept a refused connection open"
    await client.aclose()
    return error  # type: ignore[return-value]


async def status(client: RawClient) -> dict[str, object]:
    await client.send(wire.Status())
    return json.loads((await client.expect(wire.StatusReply)).document)  # type: ignore[attr-defined]


async def test_an_address_past_its_burst_is_refused_and_the_others_are_served(nursery: trio.Nursery) -> None:
    server = await start(nursery)
    kept = [await RawClient.connect(server.address, source="127.0.0.2") for _ in range(BURST)]
    error = await refused(server.address, "127.0.0.2")
    assert error.code is wire.ErrorCode.LIMIT_EXCEEDED
    assert "connection rate from 127.0.0.2" in error.reason and "retry in" in error.reason, error.reason
    again = await refused(server.address, "127.0.0.2")  # still limited: no token came back
    assert again.code is wire.ErrorCode.LIMIT_EXCEEDED
    # Another address has a bucket of its own; the connections let in keep being served.
    other = await RawClient.connect(server.address, source="127.0.0.1")
    for client in (*kept, other):
        await client.send(wire.PING)
        assert (await client.expect(wire.Heartbeat)).word == "pong"  # type: ignore[attr-defined]
    doc = await status(other)
    rate = doc["connect_rate"]
    assert rate["refused"] == 2 and rate["refused_by_address_class"]["loopback"] == 2, rate  # type: ignore[index]
    assert rate["addresses_tracked"] == 2 and rate["burst_per_address"] == BURST, rate  # type: ignore[index]
    # Each refusal came alone, so each was followed by a pause of the accept loop.
    assert rate["refusing_pauses"] == 2, rate  # type: ignore[index]
    # Refused before a session: neither counted as opened nor at max_connections.
    assert server.core.stats.connections_total == BURST + 1 and server.core.stats.connections_refused == 0
    samples = {f.name: f.samples for f in collect(MetricsSources(server.core))}
    limited = dict((labels["address_class"], value) for labels, value in samples["pub0sub_connections_rate_limited"])
    assert limited == {**dict.fromkeys(ADDRESS_CLASSES, 0), "loopback": 2}


async def test_an_exempt_cidr_is_never_limited(nursery: trio.Nursery) -> None:
    server = await start(nursery, connect_rate_exempt=("127.0.0.2/31",))  # 127.0.0.2 and 127.0.0.3
    kept = [await RawClient.connect(server.address, source=source)
            for source in ("127.0.0.2", "127.0.0.3") for _ in range(BURST + 2)]  # fmt: skip
    for _ in range(BURST):
        kept.append(await RawClient.connect(server.address, source="127.0.0.4"))
    assert (await refused(server.address, "127.0.0.4")).code is wire.ErrorCode.LIMIT_EXCEEDED
    assert server.core.connect_rate.refused == 1
    assert server.core.connect_rate.status()["addresses_tracked"] == 1  # exempt addresses take no entry


async def test_the_address_table_stays_within_its_bound(nursery: trio.Nursery) -> None:
    """Many source addresses cannot grow the table: the least recently seen is forgotten (and
    starts again with a full bucket, which the counters own up to)."""
    server = await start(nursery)
    server.core.connect_rate = ConnectRate(ConnectRateLimits(per_second=SLOW, burst=1, max_addresses=4))
    sources = [f"127.0.0.{n}" for n in range(2, 12)]
    for source in sources:
        client = await RawClient.connect(server.address, source=source)
        await client.aclose()
        assert len(server.core.connect_rate._buckets) <= 4
    # 127.0.0.11 is remembered with an empty bucket; 127.0.0.2 was forgotten long since.
    assert (await refused(server.address, "127.0.0.11")).code is wire.ErrorCode.LIMIT_EXCEEDED
    client = await RawClient.connect(server.address, source="127.0.0.2")
    await client.aclose()
    assert server.core.connect_rate.status()["addresses_tracked"] == 4


async def test_connections_that_fail_before_welcome_cost_their_address_more(nursery: trio.Nursery) -> None:
    """--failed-connect-cost: a connection that sends garbage, or says nothing until its HELLO
    deadline, costs its address more tokens, so the next one is refused at accept; welcomed
    connections from another address cost nothing beyond their own token."""
    server = await start(nursery, failed_connect_cost=1.0, hello_timeout=0.3)
    rate = server.core.connect_rate

    async def charged(count: int) -> None:
        with trio.fail_after(5):  # the session ends a moment after the client sees the hang-up
            while rate.failed_charged < count:  # noqa: ASYNC110 - a counter, nothing to wait on
                await trio.sleep(0.01)

    garbage = await RawClient.connect(server.address, hello=False, source="127.0.0.2")  # burst 3 -> 2
    await garbage.send(b"\xff\x00\x00\x00\x01x")  # no such opcode
    assert (await garbage.expect(wire.Error)).code is wire.ErrorCode.UNKNOWN_OPCODE  # type: ignore[attr-defined]
    await charged(1)  # 2 -> 1
    silent = await RawClient.connect(server.address, hello=False, source="127.0.0.2")  # 1 -> 0
    await silent.expect(wire.Error)  # not welcomed within hello_timeout
    await charged(2)  # 0 -> -1: had it cost nothing, one connection of the burst would be left
    assert (await refused(server.address, "127.0.0.2")).code is wire.ErrorCode.LIMIT_EXCEEDED
    welcomed = [await RawClient.connect(server.address, source="127.0.0.3") for _ in range(BURST)]
    for client in welcomed:
        await client.aclose()
    assert (await refused(server.address, "127.0.0.3")).code is wire.ErrorCode.LIMIT_EXCEEDED  # its burst, no more
    doc = await status(await RawClient.connect(server.address, source="127.0.0.4"))
    assert doc["connect_rate"]["failed_charged"] == 2 and rate.refused == 2, doc["connect_rate"]  # type: ignore[index]
    samples = {f.name: f.samples for f in collect(MetricsSources(server.core))}
    assert [value for _, value in samples["pub0sub_connections_failed_charged"]] == [2]
    await garbage.aclose()
    await silent.aclose()


def test_a_failed_connection_owes_at_most_one_burst_and_pays_it_back_at_the_rate() -> None:
    rate = ConnectRate(ConnectRateLimits(per_second=10.0, burst=4, failed_cost=3.0, exempt=("10.0.0.9",)))
    assert rate.check("10.0.0.1", 0.0) is None  # 4 -> 3
    rate.failed("10.0.0.1", 0.0)  # 3 -> 0
    assert rate.check("10.0.0.1", 0.0) is not None
    for _ in range(5):
        rate.failed("10.0.0.1", 0.0)  # down to a debt of one burst, no further
    assert rate.check("10.0.0.1", 0.49) is not None  # -4 + 4.9 tokens: not yet one
    assert rate.check("10.0.0.1", 0.6) is None  # 0.9 + 1.1: the debt is paid
    rate.failed("10.0.0.2", 0.0)  # never seen: nothing to charge
    rate.failed("10.0.0.9", 0.0)  # exempt
    assert rate.failed_charged == 6 and rate.status()["addresses_tracked"] == 1
    off = ConnectRate(ConnectRateLimits(per_second=10.0, burst=1, failed_cost=0.0))
    assert off.check("10.0.0.1", 0.0) is None
    off.failed("10.0.0.1", 0.0)
    assert off.check("10.0.0.1", 0.1) is None and off.failed_charged == 0


def test_a_repeated_refusal_is_logged_first_then_once_an_interval_with_its_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    throttle = LogThrottle()
    assert throttle.count(100.0) == 1  # the first: said at once
    assert [throttle.count(100.0 + i) for i in range(1, 10)] == [0] * 9
    assert throttle.count(100.0 + LOG_EVERY_SECONDS) == 10  # the nine held back, and this one
    assert throttle.count(100.5 + LOG_EVERY_SECONDS) == 0
    rate = ConnectRate(ConnectRateLimits(per_second=0.001, burst=1))
    with caplog.at_level("WARNING", logger="pub0sub.hub.connection"):
        refusals = [rate.check("10.0.0.1", t / 10) for t in range(6)]
    assert refusals[0] is None and all(refusals[1:]) and rate.refused == 5
    assert [r.x_refused for r in caplog.records] == [1]  # type: ignore[attr-defined]


def test_buckets_refill_ipv6_shares_a_slash_64_and_mapped_ipv4_is_ipv4() -> None:
    rate = ConnectRate(ConnectRateLimits(per_second=2.0, burst=2))
    assert rate.check("2001:db8::1", 0.0) is None and rate.check("2001:db8::ffff:2", 0.0) is None
    assert rate.check("2001:db8::3", 0.0) is not None  # the same /64
    assert rate.check("2001:db8:0:1::1", 0.0) is None  # the next /64
    assert rate.check("2001:db8::4", 0.5) is None  # half a second at 2/s: one token back
    assert rate.check("10.0.0.1", 0.0) is None and rate.check("::ffff:10.0.0.1", 0.0) is None
    assert rate.check("10.0.0.1", 0.0) is not None
    # 2001:db8::/32 is documentation space, which Python's ipaddress counts as private.
    assert dict(rate.refused_by_class) == {"private": 2}
    assert rate.check("8.8.8.8", 0.0) is None and rate.check("8.8.8.8", 0.0) is None
    assert rate.check("8.8.8.8", 0.0) is not None and rate.refused_by_class["global"] == 1


async def test_past_the_accept_budget_new_connections_wait_and_open_ones_are_served(nursery: trio.Nursery) -> None:
    """The accept budget (--max-accepts-per-second) counts every address together: past its burst
    the accept loop waits, so the next connection sits in the kernel's backlog, neither
    welcomed nor refused, while the connections already open are served."""
    server = await start(nursery, max_accepts_per_second=SLOW, accept_burst=BURST)  # an address each: none limited
    # The burst, and one more: accepted (a token short), after which the loop waits ~100 s.
    kept = [await RawClient.connect(server.address, source=f"127.0.0.{2 + i}") for i in range(BURST + 1)]
    waiting = await RawClient.connect(server.address, hello=False, source="127.0.0.9")
    await waiting.send(wire.Hello(client_name="in the backlog"))
    with trio.move_on_after(2.0):
        answer = await waiting.recv(timeout=2.0)
        pytest.fail(f"a connection past the accept budget was answered: {answer!r}")
    for client in kept:
        await client.send(wire.PING)
        assert (await client.expect(wire.Heartbeat)).word == "pong"  # type: ignore[attr-defined]
    rate = (await status(kept[0]))["connect_rate"]
    assert rate["accept_waits"] == 1 and rate["accepts_per_second"] == SLOW, rate  # type: ignore[index]
    assert server.core.stats.connections_total == BURST + 1 and server.core.connect_rate.refused == 0
    samples = {f.name: f.samples for f in collect(MetricsSources(server.core))}
    assert [value for _, value in samples["pub0sub_accept_waits"]] == [1]
    await waiting.aclose()


def test_the_accept_budget_refills_and_is_off_at_zero() -> None:
    rate = ConnectRate(ConnectRateLimits(accepts_per_second=10.0, accept_burst=2))
    assert rate.accept_wait(0.0) == 0.0 and rate.accept_wait(0.0) == 0.0  # the burst
    assert rate.accept_wait(0.0) == pytest.approx(0.1)  # a token short: wait for one at 10/s
    assert rate.accept_wait(0.1) == pytest.approx(0.1)  # the token came and went: short again
    assert rate.accept_wait(0.5) == 0.0  # 0.4 s at 10/s: back to the burst's 2
    assert rate.accept_waits == 2 and rate.accept_wait_seconds == pytest.approx(0.2)
    off = ConnectRate(ConnectRateLimits(accepts_per_second=0.0, accept_burst=1))
    assert all(off.accept_wait(0.0) == 0.0 for _ in range(100)) and off.accept_waits == 0


def test_the_settings_are_checked_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match=re.escape("'10.0.0.300/8' is not an address or CIDR")):
        load_config(env={}, overrides={"connect_rate_exempt": "127.0.0.0/8,10.0.0.300/8"})
    with pytest.raises(ValueError, match="must be >= 0"):
        load_config(env={}, overrides={"max_connects_per_second_per_address": -1})
    with pytest.raises(ValueError, match="max_accepts_per_second must be >= 0"):
        load_config(env={}, overrides={"max_accepts_per_second": -1})
    with pytest.raises(ValueError, match="failed_connect_cost must be >= 0"):
        load_config(env={}, overrides={"failed_connect_cost": -1})
    with pytest.raises(ValueError, match="accept_burst must be at least 1"):
        load_config(env={}, overrides={"accept_burst": 0})
    assert load_config(env={}, overrides={"connect_rate_exempt": "127.0.0.0/8, ::1"}).connect_rate_exempt == (
        "127.0.0.0/8", "::1")
