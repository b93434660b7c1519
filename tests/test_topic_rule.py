"""One topic rule (``wire.topics``): what it accepts, and the same refusal from the hub, the SDK and the CLIs."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sdk
import wire
from tests.support.client_protocol import ready
from tests.support.hubprocess import HubProcess
from tests.support.rawclient import RawClient
from tests.support.segments import BatchSpec, Expected, SegmentWriter, init_data_dir
from wire.topics import RULE, InvalidTopicError, check_topic, topic_problem

ROOT = Path(__file__).resolve().parent.parent


def message(name: str, *, pattern: bool = False) -> str:
    """The refusal ``wire.check_topic`` gives for ``name``."""
    with pytest.raises(InvalidTopicError) as info:
        check_topic(name, pattern=pattern)
    return str(info.value)


# -- the rule, against its documentation -------------------------------------------------------


def documented(name: str, *, pattern: bool) -> bool:
    """docs/protocol.md §1, statement by statement (written apart from the implementation)."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return False  # not UTF-8
    if not 1 <= size <= 255:
        return False
    for char in name:
        if char.isspace() or unicodedata.category(char) == "Cc":
            return False
    tokens = name.split(".")
    for i, token in enumerate(tokens):
        if token == "":
            return False
        if "*" in token or ">" in token:
            if not pattern:
                return False
            if token != "*" and not (token == ">" and i == len(tokens) - 1):
                return False
    return True


# Characters where the rule has something to say, and ordinary ones around them.
_EDGES = [
    "a", "b", "Z", "0", "_", "-", "é", "日", "😀", "\u200b", ".", ".", "*", ">",
    " ", "\t", "\n", "\r", "\x00", "\x1b", "\x1f", "\x7f", "\x85", "\x9f", "\xa0", "\u2028", "\u3000", "\ud800",
]  # fmt: skip
# Around the 255-byte limit, with characters of 1..4 bytes.
LONG = st.builds(
    lambda char, n, tail: char * n + tail,
    st.sampled_from(["a", "é", "日", "😀"]),
    st.integers(60, 256),
    st.sampled_from(["", "a", ".b", "é"]),
)
NAMES = st.text(alphabet=st.sampled_from(_EDGES), max_size=14) | st.text(max_size=14) | LONG


@settings(max_examples=3000, deadline=None)
@given(NAMES, st.booleans())
def test_the_rule_accepts_exactly_what_it_documents(name: str, pattern: bool) -> None:
    assert (topic_problem(name, pattern=pattern) is None) is documented(name, pattern=pattern), name


TOKEN = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters=".*>"), min_size=1,
                max_size=8).filter(lambda t: not any(c.isspace() for c in t))  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(TOKEN | st.just("*"), min_size=1, max_size=6), st.booleans())
def test_every_documented_pattern_is_accepted(tokens: list[str], rest: bool) -> None:
    name = ".".join([*tokens, ">"] if rest else tokens)
    if len(name.encode()) > 255:
        return
    check_topic(name, pattern=True)
    if "*" not in tokens and not rest:
        check_topic(name)  # without wildcards it is a topic too


@pytest.mark.parametrize(
    ("name", "pattern", "problem"),
    [
        ("", False, "empty"),
        ("a..b", False, "empty token"),
        (".a", True, "empty token"),
        ("a.", False, "empty token"),
        ("a b", False, "contains whitespace (U+0020)"),
        ("a\u00a0b", True, "contains whitespace (U+00A0)"),
        ("a\x07", False, "contains a control character (U+0007)"),
        ("orders.*", False, "'*' and '>' are only for subscription patterns"),
        ("a.b*c", False, "'*' and '>' are only for subscription patterns"),
        ("a.>.b", True, "'>' must be the last token"),
        ("a.b*", True, "must be whole tokens, not part of 'b*'"),
        ("é" * 128, False, "256 bytes of UTF-8, more than 255"),
        ("\ud800", False, "not valid UTF-8"),
    ],
)
def test_each_problem_is_named(name: str, pattern: bool, problem: str) -> None:
    text = message(name, pattern=pattern)
    assert problem in text and text.endswith(RULE) and "\n" not in text


def test_limits_and_wildcards_that_pass() -> None:
    for name in ("a", "é" * 127 + "a", "orders.eu-west_1", "日本.東京"):
        check_topic(name)
    for name in ("*", ">", "a.*.c", "a.*.>", "*.*"):
        check_topic(name, pattern=True)


# -- the hub -----------------------------------------------------------------------------------


def publish_frame(topic: str) -> wire.Publish:
    mset = wire.MessageSet.build((topic,), [(b"", b"x")])
    return wire.Publish(producer_id=0, sequence=7, flags=wire.PublishFlags.NONE, sets=(mset,))


BAD_TOPICS = ["a..b", "has space", "tab\there", "a.b*c", "orders.*"]
BAD_PATTERNS = ["a..b", "has space", "a.>.b", "x.b*"]


async def test_the_hub_refuses_publishes_with_error_and_the_message(hub_address: str) -> None:
    for name in BAD_TOPICS:
        client = await RawClient.connect(hub_address)
        await client.send(publish_frame(name))
        error = await client.expect(wire.Error)
        assert isinstance(error, wire.Error)
        assert (error.code, error.ref, error.reason) == (wire.ErrorCode.INVALID_TOPIC, 7, message(name))
        assert await client.recv() is None  # ERROR is fatal
        await client.aclose()


async def test_the_hub_refuses_subscriptions_with_sub_end_and_the_message(hub_address: str) -> None:
    client = await RawClient.connect(hub_address)
    for sub_id, name in enumerate(BAD_PATTERNS, 1):
        await client.send(wire.Sub(sub_id=sub_id, patterns=("fine", name)))
        end = await client.expect(wire.SubEnd)
        assert isinstance(end, wire.SubEnd)
        assert (end.sub_id, end.code, end.reason) == (sub_id, wire.ErrorCode.INVALID_TOPIC, message(name, pattern=True))
    await client.send(wire.Sub(sub_id=99, patterns=("fine",)))
    await client.expect(wire.SubOk)  # the connection survives every refusal
    await client.send(wire.SubUpdate(sub_id=99, op=wire.UpdateOp.ADD, patterns=("a b",)))
    end = await client.expect(wire.SubEnd)
    assert isinstance(end, wire.SubEnd) and end.code is wire.ErrorCode.INVALID_TOPIC
    await client.aclose()


# -- the SDK ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BAD_TOPICS)
def test_the_sdk_raises_before_sending_a_publish(name: str) -> None:
    proto = ready()
    with pytest.raises(sdk.InvalidTopicError) as info:
        proto.publish(name, b"x")
    proto.flush()
    assert proto.data_to_send() == b""
    error = info.value
    assert str(error) == message(name) and error.name == name and error.code is wire.ErrorCode.INVALID_TOPIC
    assert isinstance(error, ValueError) and isinstance(error, sdk.Pub0subError)


@pytest.mark.parametrize("name", BAD_PATTERNS)
def test_the_sdk_raises_before_sending_a_subscription(name: str) -> None:
    proto = ready()
    with pytest.raises(sdk.InvalidTopicError) as info:
        proto.subscribe(["fine", name])
    assert proto.data_to_send() == b"" and not proto.subs
    assert str(info.value) == message(name, pattern=True)


async def test_the_sdk_refuses_against_a_real_hub_and_keeps_the_connection(hub_address: str) -> None:
    async with sdk.connect(hub_address, reconnect=None) as client:
        with pytest.raises(sdk.InvalidTopicError, match="empty token"):
            await client.publish("a..b", b"x")
        with pytest.raises(sdk.InvalidTopicError, match="last token"):
            async with client.subscribe("a.>.b"):
                pass
        async with client.subscribe("fine") as sub:
            with pytest.raises(sdk.InvalidTopicError, match="whitespace"):
                await sub.add(["has space"])
            await client.publish("fine", b"still works")
            assert (await sub.next(timeout=10)).data == b"still works"  # type: ignore[union-attr]
            assert sub.topics == ("fine",)


# -- the command line ------------------------------------------------------------------------


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@pytest.mark.parametrize("name", ["", "a..b", "has space", "orders.*"])
def test_pub_refuses_with_one_line_and_exit_2(hub_address: str, name: str) -> None:
    result = cli("pub", "--hub", hub_address, "--topic", name, "x")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"pub0sub pub: {message(name)}\n"


@pytest.mark.parametrize("name", ["", "a..b", "has space", "a.>.b"])
def test_sub_refuses_with_one_line_and_exit_2(hub_address: str, name: str) -> None:
    result = cli("sub", "--hub", hub_address, "--topic", "ok", "--topic", name, "--timeout", "5")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"pub0sub sub: {message(name, pattern=True)}\n"


def test_pub_and_sub_agree_on_a_name(hub_address: str) -> None:
    pub = cli("pub", "--hub", hub_address, "--topic", "a..b", "x")
    sub = cli("sub", "--hub", hub_address, "--topic", "a..b", "--timeout", "5")
    assert pub.stderr.removeprefix("pub0sub pub: ") == sub.stderr.removeprefix("pub0sub sub: ")


# -- data stored before the rule -----------------------------------------------------------


def test_old_topics_the_rule_refuses_stay_readable(tmp_path: Path, start_hub: Callable[..., HubProcess]) -> None:
    """Logs written before the rule (or forwarded by a seed peer) still recover, decode and replay."""
    data = init_data_dir(tmp_path / "data", 0xABCDEF0012345678)
    expected = Expected()
    for topic in ("legacy topic", "a..b"):
        writer = SegmentWriter(data, "old", topic, expected, per_segment=10)
        writer.add(BatchSpec([(b"", topic.encode())], 1_700_000_000_000_000, 100, 0xABCDEF0012345678, 1))
        writer.flush()
    hub = start_hub("--data-dir", str(data))
    status = json.loads(cli("status", "--hub", hub.address, "--json").stdout)
    assert {t["topic"] for t in status["topic_list"]} >= {"legacy topic", "a..b"}
    result = cli("sub", "--hub", hub.address, "--topic", ">", "--start", "earliest", "--count", "2", "--json")
    assert result.returncode == 0, result.stderr
    assert sorted((d["topic"], d["data"]) for d in map(json.loads, result.stdout.splitlines())) == [
        ("a..b", "a..b"),
        ("legacy topic", "legacy topic"),
    ]
    segment = next((data / "topics").glob("legacy_topic-*/*.log"))
    decoded = cli("decode", str(segment))
    assert decoded.returncode == 0 and "legacy topic" in decoded.stdout

