"""Topic ACLs: what one user may publish to, subscribe to, and which durable names and groups it may use.

Each right is a list of allow rules and a list of deny rules; **a deny always wins** over an
allow, whatever the order they were written in (as in NATS and in Kafka's ACLs).  Topics are
judged with the topic patterns of :mod:`wire.topics` (``*`` one token, a last ``>`` one or more);
durable and group names with :class:`NameRules` (exact names, or a prefix ending in ``*``).

* **Publish** to topic ``t``: allowed when an allow pattern matches ``t`` and no deny pattern does.
* **Subscribe** with pattern ``p`` (:meth:`TopicRules.judge`):

  - refused when no single allow pattern covers ``p`` (every topic ``p`` matches must be
    allowed by one rule: a grant is a promise about all of them), or when one deny
    pattern covers ``p`` (nothing it matches could ever be delivered);
  - **narrowed** when ``p`` overlaps a deny pattern without being inside it
    (``foo.*`` with ``foo.baz`` denied): the subscription is accepted and the denied topics
    are never delivered to it -- NATS's behaviour, and the one a user expects from "everything
    under ``foo`` but the secret one";
  - accepted as it is otherwise.

  Durable subscriptions and group members are never narrowed: their positions are shared with
  whoever attaches next (another user, perhaps) and a group hands each message to one member,
  so their patterns must lie wholly inside the grant (see ``hub.core.auth_hooks``).

Everything here is pure: ``covers`` and ``overlaps`` decide on the patterns' tokens alone
(``tests/test_acl.py`` checks them against brute force over every topic of a small alphabet).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from wire.topics import REST, SINGLE, check_topic

#: Cached verdicts per rule set before the cache is dropped wholesale (a client spraying
#: unique topic names costs re-evaluation, not memory).
MAX_CACHED = 65536
#: The wildcard of a name rule: ``billing-*`` is every name starting ``billing-``, ``*`` every name.
NAME_WILDCARD = "*"


def tokens(pattern: str) -> tuple[str, ...]:
    return tuple(pattern.split("."))


def matches(pattern: tuple[str, ...], topic: tuple[str, ...]) -> bool:
    """Does ``pattern`` match the concrete ``topic`` (both as token tuples)?"""
    for i, token in enumerate(pattern):
        if token == REST:
            return len(topic) > i
        if i >= len(topic) or (token != SINGLE and token != topic[i]):
            return False
    return len(pattern) == len(topic)


def covers(outer: tuple[str, ...], inner: tuple[str, ...]) -> bool:
    """Is every topic ``inner`` matches also matched by ``outer``?"""
    for i, token in enumerate(outer):
        if token == REST:
            return len(inner) > i  # inner has a token here (a `>` of its own is one or more too)
        if i >= len(inner):
            return False
        mine = inner[i]
        if mine == REST:
            return False  # inner reaches any length, outer stops at its own
        if token != SINGLE and token != mine:
            return False  # a literal covers only itself, never `*`
    return len(outer) == len(inner)


def overlaps(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Is there a topic both ``a`` and ``b`` match?"""
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x == REST:
            return y is not None
        if y == REST:
            return x is not None
        if x is None or y is None:
            return False
        if x != SINGLE and y != SINGLE and x != y:
            return False
    return True


@dataclass(frozen=True)
class Verdict:
    """What a subscribe pattern gets: ``refused`` (with the reason), or accepted, perhaps ``narrowed``."""

    refused: str | None = None
    #: The deny patterns it overlaps: topics they match are never delivered to it.
    narrowed_by: tuple[str, ...] = ()


@dataclass(eq=False)
class TopicRules:
    """Allow and deny topic patterns for one right (publish or subscribe) of one user."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    _allow: list[tuple[str, ...]] = field(init=False, repr=False)
    _deny: list[tuple[str, ...]] = field(init=False, repr=False)
    _permits: dict[str, bool] = field(init=False, repr=False, default_factory=dict)
    _denied: dict[str, bool] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        for pattern in (*self.allow, *self.deny):
            check_topic(pattern, pattern=True)
        self._allow = [tokens(p) for p in self.allow]
        self._deny = [tokens(p) for p in self.deny]

    def same_as(self, other: TopicRules) -> bool:
        return set(self.allow) == set(other.allow) and set(self.deny) == set(other.deny)

    def permits(self, topic: str) -> bool:
        """May this right be used on the concrete ``topic``?  (Cached.)"""
        hit = self._permits.get(topic)
        if hit is None:
            t = tokens(topic)
            hit = any(matches(a, t) for a in self._allow) and not self.denies(topic)
            if len(self._permits) >= MAX_CACHED:
                self._permits.clear()
            self._permits[topic] = hit
        return hit

    def denies(self, topic: str) -> bool:
        """Does a deny rule match the concrete ``topic``?  (Cached: a narrowed subscription asks per delivery.)"""
        hit = self._denied.get(topic)
        if hit is None:
            t = tokens(topic)
            hit = any(matches(d, t) for d in self._deny)
            if len(self._denied) >= MAX_CACHED:
                self._denied.clear()
            self._denied[topic] = hit
        return hit

    def judge(self, pattern: str) -> Verdict:
        """The verdict for a subscription (or any use of a pattern) naming ``pattern``."""
        p = tokens(pattern)
        if not any(covers(a, p) for a in self._allow):
            return Verdict(refused=f"{pattern!r} is outside the grant")
        for rule, d in zip(self.deny, self._deny, strict=True):
            if covers(d, p):
                return Verdict(refused=f"{pattern!r} is denied (deny {rule!r})")
        narrowing = tuple(rule for rule, d in zip(self.deny, self._deny, strict=True) if overlaps(d, p))
        return Verdict(narrowed_by=narrowing)


def name_matches(rule: str, name: str) -> bool:
    if rule.endswith(NAME_WILDCARD):
        return name.startswith(rule[:-1])
    return name == rule


@dataclass(frozen=True)
class NameRules:
    """Allow and deny rules for durable subscription names or group names."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for rule in (*self.allow, *self.deny):
            if not rule or NAME_WILDCARD in rule[:-1]:
                raise ValueError(f"name rule {rule!r}: a name, or a prefix ending in '{NAME_WILDCARD}'")

    def permits(self, name: str) -> bool:
        return any(name_matches(r, name) for r in self.allow) and not any(name_matches(r, name) for r in self.deny)


class StatusGrant(IntEnum):
    """How much of STATUS a user may read (the users file's ``status``)."""

    #: ``false``: none (ERROR NOT_AUTHORIZED).
    NONE = 0
    #: ``"topics"``: who the hub is and the offsets of the topics the user may subscribe to,
    #: what the Spark source plans its reads from; nothing about other users, clients or topics.
    TOPICS = 1
    #: ``true``: the whole document.
    FULL = 2


@dataclass(frozen=True)
class Permissions:
    """Everything one user (or the anonymous client, when allowed) may do."""

    publish: TopicRules = field(default_factory=TopicRules)
    subscribe: TopicRules = field(default_factory=TopicRules)
    durables: NameRules = field(default_factory=NameRules)
    groups: NameRules = field(default_factory=NameRules)
    #: May read the STATUS document (every connection, user, topic and counter of the hub), or
    #: only its own topics' part.
    status: StatusGrant = StatusGrant.NONE

    def publish_refusal(self, topics: Iterable[str]) -> str | None:
        """The first topic this user may not publish to, as a refusal; None if all are allowed."""
        for topic in topics:
            if not self.publish.permits(topic):
                return f"publish to {topic!r} is not allowed"
        return None

    def subscription_refusal(
        self, patterns: Iterable[str], *, durable: str = "", group: str = ""
    ) -> tuple[str | None, bool]:
        """Why a subscription to ``patterns`` (with that durable name or group) is refused, or
        None; and whether it is narrowed (some topics it matches are denied)."""
        if durable and not self.durables.permits(durable):
            return f"the durable name {durable!r} is not granted", False
        if group and not self.groups.permits(group):
            return f"the group {group!r} is not granted", False
        narrowed = False
        for pattern in patterns:
            verdict = self.subscribe.judge(pattern)
            if verdict.refused is not None:
                return f"subscribe: {verdict.refused}", False
            if verdict.narrowed_by:
                if durable or group:
                    kind = "durable subscription" if durable else "group member"
                    return (f"subscribe: {pattern!r} overlaps the denied {verdict.narrowed_by[0]!r}, and a {kind} "
                            "is never narrowed: its patterns must lie wholly inside the grant"), False
                narrowed = True
        return None, narrowed
