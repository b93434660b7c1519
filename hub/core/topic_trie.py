"""Wildcard patterns in a token trie: matching a topic costs its token count, not the pattern count.

The shape of nats-server's ``sublist``: one node per token, a ``*`` child that
matches any one token, and at each node the value of the pattern that ends there
(``here``) and of the pattern that ends there with ``>`` (``rest``: one or more
further tokens).  Matching ``a.b.c`` visits at most the literal and the ``*`` child
at each level -- with 80,000 patterns held, a publish no longer scans them all.

Values are opaque to the trie (the routing table stores each pattern's subscriber
counts).  Patterns are the tokens :func:`wire.topics.pattern_tokens` gives: ``>``
only as the last token.  :func:`wire.topics.pattern_matches` is the specification;
tests/test_topic_trie.py holds the trie to it with hypothesis.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from wire.topics import REST, SINGLE

V = TypeVar("V")


class _Node(Generic[V]):
    __slots__ = ("children", "here", "rest")

    def __init__(self) -> None:
        self.children: dict[str, _Node[V]] = {}
        #: the value of the pattern that ends at this node
        self.here: V | None = None
        #: the value of the pattern that ends at this node followed by ``>``
        self.rest: V | None = None

    def empty(self) -> bool:
        return not self.children and self.here is None and self.rest is None


class TopicTrie(Generic[V]):
    def __init__(self) -> None:
        self._root: _Node[V] = _Node()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def insert(self, tokens: tuple[str, ...], value: V) -> None:
        """Hold ``value`` for the pattern ``tokens`` (replacing the value it had)."""
        node = self._root
        last = len(tokens) - 1
        for i, token in enumerate(tokens):
            if token == REST and i == last:
                self._size += node.rest is None
                node.rest = value
                return
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = _Node()
            node = child
        self._size += node.here is None
        node.here = value

    def remove(self, tokens: tuple[str, ...]) -> None:
        """Forget the pattern ``tokens`` (nothing happens if it is not held); prune empty nodes."""
        path: list[tuple[_Node[V], str]] = []
        node = self._root
        last = len(tokens) - 1
        for i, token in enumerate(tokens):
            if token == REST and i == last:
                self._size -= node.rest is not None
                node.rest = None
                break
            child = node.children.get(token)
            if child is None:
                return
            path.append((node, token))
            node = child
        else:
            self._size -= node.here is not None
            node.here = None
        for parent, token in reversed(path):
            child = parent.children[token]
            if not child.empty():
                break
            del parent.children[token]

    def match(self, topic_tokens: list[str]) -> Iterator[V]:
        """The values of every held pattern that matches the topic (split on dots)."""
        n = len(topic_tokens)
        stack: list[tuple[_Node[V], int]] = [(self._root, 0)]
        while stack:
            node, i = stack.pop()
            if node.rest is not None and i < n:
                yield node.rest
            if i == n:
                if node.here is not None:
                    yield node.here
                continue
            children = node.children
            if not children:
                continue
            child = children.get(topic_tokens[i])
            if child is not None:
                stack.append((child, i + 1))
            star = children.get(SINGLE)
            if star is not None and star is not child:
                stack.append((star, i + 1))
