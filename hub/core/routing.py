"""The routing table: which subscriptions want a topic.  Pure data, no I/O.

Like nats-server's ``sublist.go``: exact topics in a dict, wildcard patterns
in a token trie (:mod:`hub.core.topic_trie`: a match costs the topic's token
count, however many patterns are held), and a cache of "topic -> matching
subscriptions" that any change clears.  Publishes vastly outnumber
(un)subscribes, so a match is usually one dict lookup.

Topics are ``.``-separated tokens.  In a pattern ``*`` matches exactly one
token and ``>`` (last token only) matches one or more tokens.  The table does
not judge names (``wire.topics`` holds the rule, applied where clients come
in): a name that is not a valid wildcard pattern -- anything a seed peer may
announce -- is a literal name that matches only itself.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from wire.topics import pattern_tokens

from .topic_trie import TopicTrie

S = TypeVar("S", bound=Hashable)

#: Cached topics before the cache is dropped wholesale: bounds memory when a
#: publisher sprays unique topic names.
MAX_CACHED_TOPICS = 65536


class RoutingTable(Generic[S]):
    """Map topics and patterns to subscribers ``S``."""

    def __init__(self) -> None:
        self._exact: dict[str, dict[S, int]] = {}
        #: pattern -> (its tokens, subscriber counts); the trie holds the same count dicts
        self._wild: dict[str, tuple[tuple[str, ...], dict[S, int]]] = {}
        self._trie: TopicTrie[dict[S, int]] = TopicTrie()
        self._cache: dict[str, tuple[S, ...]] = {}
        #: called with (pattern, True) when a pattern gets its first subscriber and
        #: (pattern, False) when it loses its last: the mesh announces and withdraws interest
        self.on_change: Callable[[str, bool], None] | None = None

    def add(self, pattern: str, sub: S) -> None:
        """Register ``sub`` for ``pattern`` (counted: adding twice needs two removes)."""
        tokens = pattern_tokens(pattern)
        new = pattern not in self._wild and pattern not in self._exact
        if tokens is not None:
            entry = self._wild.get(pattern)
            if entry is None:
                entry = self._wild[pattern] = (tokens, {})
                self._trie.insert(tokens, entry[1])
            entry[1][sub] = entry[1].get(sub, 0) + 1
        else:
            subs = self._exact.setdefault(pattern, {})
            subs[sub] = subs.get(sub, 0) + 1
        self._cache.clear()
        if new and self.on_change is not None:
            self.on_change(pattern, True)

    def remove(self, pattern: str, sub: S) -> bool:
        """Unregister one registration of ``sub`` for ``pattern``; False if absent."""
        wild = pattern in self._wild
        if wild:
            entry = self._wild.get(pattern)
            table = entry[1] if entry else None
        else:
            table = self._exact.get(pattern)
        if not table or sub not in table:
            return False
        table[sub] -= 1
        if table[sub] == 0:
            del table[sub]
            if not table:
                if wild:
                    tokens, _ = self._wild.pop(pattern)
                    self._trie.remove(tokens)
                else:
                    del self._exact[pattern]
                if self.on_change is not None:
                    self.on_change(pattern, False)
        self._cache.clear()
        return True

    def match(self, topic: str) -> tuple[S, ...]:
        """Every subscriber of ``topic``, each once, exact matches first."""
        hit = self._cache.get(topic)
        if hit is not None:
            return hit
        found: dict[S, None] = dict.fromkeys(self._exact.get(topic, ()))
        if self._wild:
            for subs in self._trie.match(topic.split(".")):
                found.update(dict.fromkeys(subs))
        result = tuple(found)
        if len(self._cache) >= MAX_CACHED_TOPICS:
            self._cache.clear()
        self._cache[topic] = result
        return result

    def patterns(self) -> list[str]:
        """Every registered topic and pattern (for interest announcements and status)."""
        return [*self._exact, *self._wild]

    def __len__(self) -> int:
        return len(self._exact) + len(self._wild)
