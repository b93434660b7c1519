"""Topic ACLs (hub/core/acl.py) and the users file (hub/core/auth_file.py), without a hub.

The pattern relations are checked against brute force: every topic over a small alphabet, long
enough that any topic telling two patterns apart has a twin among them (the token ``z`` appears
in no pattern, and lengths reach one past the longer pattern).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub.core.acl import NameRules, Permissions, TopicRules, covers, matches, overlaps, tokens
from hub.core.auth_file import AuthFileError, parse_auth_file
from wire.credentials import split_credentials

LITERALS = ("a", "b")


@st.composite
def patterns(draw: st.DrawFn) -> str:
    body = draw(st.lists(st.sampled_from((*LITERALS, "*")), min_size=0, max_size=3))
    if draw(st.booleans()) or not body:
        body.append(">" if draw(st.booleans()) or not body else draw(st.sampled_from(LITERALS)))
    return ".".join(body)


def topics_up_to(length: int) -> list[tuple[str, ...]]:
    return [t for n in range(1, length + 1) for t in itertools.product((*LITERALS, "z"), repeat=n)]


def matched(pattern: str, universe: list[tuple[str, ...]]) -> set[tuple[str, ...]]:
    return {t for t in universe if matches(tokens(pattern), t)}


@given(patterns(), patterns())
def test_covers_and_overlaps_agree_with_brute_force(a: str, b: str) -> None:
    universe = topics_up_to(max(len(tokens(a)), len(tokens(b))) + 1)
    in_a, in_b = matched(a, universe), matched(b, universe)
    assert covers(tokens(a), tokens(b)) == (in_b <= in_a), (a, b)
    assert overlaps(tokens(a), tokens(b)) == bool(in_a & in_b), (a, b)


@given(st.lists(patterns(), min_size=1, max_size=3), st.lists(patterns(), max_size=3), patterns())
def test_a_subscription_never_gets_a_denied_topic(allow: list[str], deny: list[str], pattern: str) -> None:
    """What a judged subscription may deliver, checked topic by topic against the plain definition."""
    rules = TopicRules(tuple(allow), tuple(deny))
    verdict = rules.judge(pattern)
    longest = max(len(tokens(p)) for p in [*allow, *deny, pattern])
    for topic_tokens in topics_up_to(longest + 1):
        topic = ".".join(topic_tokens)
        allowed = any(matches(tokens(p), topic_tokens) for p in allow)
        denied = any(matches(tokens(p), topic_tokens) for p in deny)
        assert rules.permits(topic) == (allowed and not denied)
        assert rules.denies(topic) == denied
        if verdict.refused is None and matches(tokens(pattern), topic_tokens):
            # Accepted: every topic it matches is allowed; a denied one is held back by the narrowing.
            assert allowed, (allow, pattern, topic)
            assert not denied or verdict.narrowed_by, (deny, pattern, topic)


def test_nats_permission_cases() -> None:
    rules = TopicRules(allow=("foo.>",), deny=("foo.baz",))
    assert rules.judge("foo.*").narrowed_by == ("foo.baz",)  # accepted, foo.baz held back
    assert rules.judge("foo.bar").refused is None and not rules.judge("foo.bar").narrowed_by
    assert rules.judge("foo.baz").refused == "'foo.baz' is denied (deny 'foo.baz')"
    assert rules.judge(">").refused == "'>' is outside the grant"
    assert not rules.permits("foo.baz") and rules.permits("foo.bar")
    # Deny wins over an allow that overlaps it exactly, whatever the order they were written in.
    both = TopicRules(allow=("orders.eu", "orders.*"), deny=("orders.eu",))
    assert not both.permits("orders.eu") and both.judge("orders.eu").refused


def test_durables_and_groups_are_never_narrowed() -> None:
    perms = Permissions(
        subscribe=TopicRules(allow=("foo.>",), deny=("foo.baz",)),
        durables=NameRules(allow=("billing-*",)),
        groups=NameRules(allow=("workers",), deny=("workers-old",)),
    )
    assert perms.subscription_refusal(["foo.*"]) == (None, True)
    refusal, _ = perms.subscription_refusal(["foo.*"], group="workers")
    assert refusal is not None and "never narrowed" in refusal
    assert perms.subscription_refusal(["foo.bar"], group="workers") == (None, False)
    assert perms.subscription_refusal(["foo.bar"], durable="billing-eu") == (None, False)
    assert perms.subscription_refusal(["foo.bar"], durable="payroll")[0] == "the durable name 'payroll' is not granted"
    assert perms.subscription_refusal(["foo.bar"], group="nobody")[0] == "the group 'nobody' is not granted"


def test_name_rules_prefixes_and_deny() -> None:
    rules = NameRules(allow=("*",), deny=("admin-*",))
    assert rules.permits("billing") and not rules.permits("admin-1")
    with pytest.raises(ValueError, match="prefix ending in"):
        NameRules(allow=("a*b",))


HASH = "$argon2id$v=19$m=1024,t=1,p=1$c2FsdHNhbHQ$0Ig6DUiU2fFJoaB2L3Uy7A"


def test_users_file_round_trip() -> None:
    config = parse_auth_file(f"""
[users.alice]
secrets = ["{HASH}"]
publish = ["orders.>"]
subscribe = {{ allow = ["orders.>"], deny = ["orders.secret"] }}
durables = ["billing-*"]
groups = {{ allow = ["workers"] }}

[anonymous]
subscribe = ["public.>"]
""")
    alice = config.users["alice"]
    assert alice.secrets == (HASH,)
    assert alice.permissions.publish.permits("orders.eu") and not alice.permissions.publish.permits("audit")
    assert alice.permissions.subscribe.deny == ("orders.secret",)
    assert config.anonymous is not None and config.anonymous.subscribe.permits("public.news")
    assert not config.anonymous.publish.permits("public.news")  # nothing granted that is not written


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[users.alice]\nsecrets = ['hunter2']\n", "must be an argon2id hash"),
        (f"[users.alice]\nsecrets = ['{HASH}']\npublsh = ['a']\n", "unknown key(s) ['publsh']"),
        (f"[users.alice]\nsecrets = ['{HASH}']\npublish = ['a..b']\n", "invalid topic 'a..b'"),
        (f"[users.alice]\nsecrets = ['{HASH}']\nsubscribe = {{ allow = ['a'], denny = ['b'] }}\n", "['denny']"),
        (f"[users.'bad name']\nsecrets = ['{HASH}']\n", "a user name is"),
        ("[users.alice]\n", "'secrets' must list"),
        ("[user.alice]\n", "unknown table(s) ['user']"),
        ("[users.alice\n", "not valid TOML"),
    ],
)
def test_users_file_mistakes_are_named(text: str, message: str) -> None:
    with pytest.raises(AuthFileError, match=None) as caught:
        parse_auth_file(text, source="users.toml")
    assert message in str(caught.value) and str(caught.value).startswith("users.toml"), caught.value


def test_credentials_are_user_colon_secret() -> None:
    assert split_credentials(b"alice:s3:cret") == ("alice", "s3:cret")
    assert split_credentials(b"alice") is None
    assert split_credentials(b"alice:") is None
    assert split_credentials(b"\xff:x") is None
