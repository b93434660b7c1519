"""Tag queries (Tendermint's pubsub queries over headers): grammar, compiled predicate, the hub.

The compiled predicate is checked against a plain reference evaluator on generated queries and
headers (hypothesis); syntax errors name the position; the hub applies a SUB's query to live,
replayed and group delivery; the SDK and a 2-hub mesh deliver exactly what the query accepts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import sdk
import wire
from tests.support.cluster import Cluster, publish_until_linked
from tests.support.corehub import CoreHub
from tests.support.hubprocess import HubProcess
from wire.query import Both, Condition, Either, Node, QuerySyntaxError, compile_query, parse

NAMES = ["tm.event", "tx.height", "sender", "n"]

# -- a reference evaluator and a printer, independent of the compiler --------------------------------


def reference(node: Node, headers: dict[str, Any]) -> bool:
    if isinstance(node, Both):
        return reference(node.left, headers) and reference(node.right, headers)
    if isinstance(node, Either):
        return reference(node.left, headers) or reference(node.right, headers)
    if node.name not in headers:
        return False
    raw = headers[node.name]
    try:
        text = raw if isinstance(raw, str) else raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if node.op == "EXISTS":
        return True
    if node.op == "CONTAINS":
        return text is not None and node.value in text
    if isinstance(node.value, str):
        return (text == node.value) if node.op == "=" else (text != node.value)
    try:
        number = float(text) if text is not None else None
    except ValueError:
        number = None
    if number is None:
        return False
    return {"=": number == node.value, "!=": number != node.value, "<": number < node.value,
            "<=": number <= node.value, ">": number > node.value, ">=": number >= node.value}[node.op]  # fmt: skip


def show(node: Node) -> str:
    if isinstance(node, Both):
        return f"({show(node.left)} AND {show(node.right)})"
    if isinstance(node, Either):
        return f"({show(node.left)} OR {show(node.right)})"
    if node.op == "EXISTS":
        return f"{node.name} EXISTS"
    if isinstance(node.value, str):
        quoted = "'" + node.value.replace("'", "''") + "'"
        return f"{node.name} {node.op} {quoted}"
    return f"{node.name} {node.op} {node.value!r}"


texts = st.text(st.sampled_from("ab'x é5"), max_size=4)
numbers = st.floats(allow_nan=False, allow_infinity=False, width=32).map(float) | st.integers(-50, 50).map(float)
conditions = st.one_of(
    st.builds(Condition, st.sampled_from(NAMES), st.just("EXISTS"), st.none()),
    st.builds(Condition, st.sampled_from(NAMES), st.just("CONTAINS"), texts),
    st.builds(Condition, st.sampled_from(NAMES), st.sampled_from(["=", "!="]), texts),
    st.builds(Condition, st.sampled_from(NAMES), st.sampled_from(wire.query.COMPARISONS), numbers),
)
queries = st.recursive(
    conditions,
    lambda inner: st.builds(Both, inner, inner) | st.builds(Either, inner, inner),
    max_leaves=8,
)
header_values = st.one_of(texts, st.integers(-60, 60).map(str), numbers.map(repr), st.binary(max_size=3))
header_maps = st.dictionaries(st.sampled_from(NAMES), header_values, max_size=4)


@settings(max_examples=600, deadline=None)
@given(node=queries, headers=header_maps)
def test_the_compiled_predicate_agrees_with_the_reference(node: Node, headers: dict[str, Any]) -> None:
    text = show(node)
    assert parse(text) == node  # the printer's parentheses give back the same tree
    block = wire.encode_headers(headers)
    assert compile_query(text)(block) is reference(node, wire.decode_headers(block))


def test_precedence_and_keywords() -> None:
    a, b, c = (Condition(n, "EXISTS") for n in ("a", "b", "c"))
    assert parse("a EXISTS OR b EXISTS AND c EXISTS") == Either(a, Both(b, c))  # AND binds tighter
    assert parse("(a EXISTS OR b EXISTS) and c exists") == Both(Either(a, b), c)  # keywords: any case
    assert parse("tx.height >= 5") == Condition("tx.height", ">=", 5.0)
    assert parse("s = 'it''s'") == Condition("s", "=", "it's")
    assert math.isclose(parse("x < -1.5e3").value, -1500.0)  # type: ignore[union-attr,arg-type]


@pytest.mark.parametrize(
    ("text", "position", "problem"),
    [
        ("", 0, "the query is empty"),
        ("tx.height >", 11, "expected a number or a quoted string, found the end of the query"),
        ("a = 'x' AND", 11, "expected a header name or '(', found the end of the query"),
        ("(a EXISTS", 9, "expected ')', found the end of the query"),
        ("a EXISTS b EXISTS", 9, "expected AND, OR or the end of the query, found 'b'"),
        ("a < 'x'", 4, "expected a number after < (strings compare with = and != only), found \"'x'\""),
        ("a ~ 1", 2, "unexpected character '~'"),
        ("a = 'open", 4, "unexpected character \"'\""),
        ("a CONTAINS 3", 11, "expected a quoted string after CONTAINS, found '3'"),
    ],
)
def test_syntax_errors_name_the_position(text: str, position: int, problem: str) -> None:
    with pytest.raises(QuerySyntaxError) as info:
        parse(text)
    assert (info.value.position, info.value.problem) == (position, problem)
    assert str(info.value).startswith(f"query syntax error at position {position}: ")


# -- the hub's core ------------------------------------------------------------------------------------


def publish_tagged(client: object, topic: str, sets: list[tuple[bytes, dict[str, str]]]) -> None:
    msets = tuple(wire.MessageSet.build((topic,), [(b"", d)], headers=wire.encode_headers(h)) for d, h in sets)
    client.send(wire.Publish(flags=wire.PublishFlags.HEADERS, sets=msets))  # type: ignore[attr-defined]


def data_of(client: object) -> list[bytes]:
    return [d for f in client.take() if isinstance(f, wire.Deliver | wire.DeliverHeaders)  # type: ignore[attr-defined]
            for _, _, d in f.batch.messages()]  # fmt: skip


TX = "tm.event = 'Tx' AND tx.height > 5"
EVENTS = [(b"tx-3", {"tm.event": "Tx", "tx.height": "3"}), (b"block", {"tm.event": "NewBlock", "tx.height": "9"}),
          (b"tx-7", {"tm.event": "Tx", "tx.height": "7"}), (b"untagged", {})]  # fmt: skip


def test_live_replay_and_group_deliver_what_the_query_accepts(tmp_path: Path) -> None:
    hub = CoreHub(tmp_path)
    live = hub.connect()
    live.send(wire.Sub(sub_id=1, patterns=("chain",), query=TX))
    live.expect(wire.SubOk)
    publish_tagged(hub.connect(), "chain", EVENTS)
    assert data_of(live) == [b"tx-7"]
    replay, member = hub.connect(), hub.connect()
    replay.send(wire.Sub(sub_id=1, patterns=("chain",), start=wire.StartPosition.EARLIEST, query="tx.height EXISTS"))
    member.send(wire.Sub(sub_id=1, patterns=("chain",), group="g", start=wire.StartPosition.EARLIEST, query=TX))
    for client in (replay, member):
        client.expect(wire.SubOk)
    hub.pump()
    assert data_of(replay) == [b"tx-3", b"block", b"tx-7"]
    assert data_of(member) == [b"tx-7"]
    member.send(wire.Ack(sub_id=1, ranges=(wire.AckRange(topic="chain", first_offset=2, last_offset=2),)))
    hub.pump()
    assert hub.core.consumers.get("group", "g").positions["chain"].floor == 4  # type: ignore[union-attr]
    other = hub.connect()
    other.send(wire.Sub(sub_id=1, patterns=("chain",), group="g", query="tx.height EXISTS"))
    assert other.expect(wire.SubEnd).code is wire.ErrorCode.UNEXPECTED_FRAME
    hub.close()


def test_a_query_that_does_not_parse_is_refused_with_its_position() -> None:
    hub = CoreHub()
    client = hub.connect()
    client.send(wire.Sub(sub_id=3, patterns=("chain",), query="tx.height > AND"))
    end = client.expect(wire.SubEnd)
    assert end.code is wire.ErrorCode.INVALID_QUERY and "at position 12" in end.reason
    old = hub.connect(greet=False)
    old.send(wire.Hello(version=2, client_name="v2"))
    old.expect(wire.Welcome)
    old.send(wire.Sub(sub_id=1, patterns=("chain",), query=TX))
    assert old.expect(wire.Error).code is wire.ErrorCode.MALFORMED_FRAME


# -- the SDK, real hubs --------------------------------------------------------------------------------


def test_sdk_query_subscriptions_say_which_query_matched(start_hub: Any) -> None:
    hub: HubProcess = start_hub()
    with pytest.raises(sdk.QuerySyntaxError, match="at position 11"), sdk.connect_blocking(hub.address) as client:
        client.subscribe("chain", query="tx.height >")

    async def scenario() -> None:
        async with (
            sdk.connect(hub.address) as client,
            client.subscribe("chain", query=TX) as txs,
            client.subscribe("chain", query="tm.event = 'NewBlock'") as blocks,
        ):
            for data, headers in EVENTS:
                await client.publish("chain", data, headers=headers)
            got_tx = await txs.__anext__()
            got_block = await blocks.__anext__()
            assert (got_tx.data, got_tx.subscription.query) == (b"tx-7", TX)
            assert (got_block.data, got_block.subscription.query) == (b"block", "tm.event = 'NewBlock'")
            assert await txs.next(timeout=0.3) is None

    anyio.run(scenario, backend="trio")


@pytest.mark.slow
def test_a_query_subscriber_across_a_two_hub_mesh(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        a, b = cluster.start(2)
        cluster.wait_converged(timeout=30)

        async def scenario() -> None:
            async with (
                sdk.connect(b.address) as sub_client,
                sub_client.subscribe("chain", query=TX) as sub,
                sdk.connect(a.address) as pub,
            ):
                await publish_until_linked(pub, sub, "chain", headers={"tm.event": "Tx", "tx.height": "6"})
                for data, headers in EVENTS:
                    await pub.publish_acked("chain", data, headers=headers)
                assert (await sub.__anext__()).data == b"tx-7"
                assert await sub.next(timeout=0.5) is None

        trio.run(scenario)
