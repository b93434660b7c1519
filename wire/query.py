"""Tag queries over message headers, in the spirit of Tendermint's pubsub queries.

``tx.height > 5 AND (tm.event = 'Tx' OR tm.event EXISTS) AND sender CONTAINS 'cosmos1'``

The grammar is in docs/queries.md.  :func:`parse` reads a query once (a
:class:`QuerySyntaxError` names the character position of the first thing it cannot
read) into a small tree, and :func:`compile_query` turns the tree into one Python
predicate over a headers block: the hub evaluates it once per delivered batch (headers
belong to a message set, so every message of a batch has the same answer), the SDK
before it subscribes.  Sans-IO and dependency-free, so the hub and the SDK share it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from .headers import HeaderValue, decode_headers

#: Longest query text accepted (it travels as a str16).
MAX_QUERY_BYTES = 0xFFFF
COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
_TOKEN = re.compile(
    r"\s*(?:(?P<string>'(?:[^']|'')*')|(?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
    r"|(?P<op><=|>=|!=|=|<|>)|(?P<paren>[()])|(?P<word>[A-Za-z_][A-Za-z0-9_.\-]*))"
)
_KEYWORDS = {"AND", "OR", "EXISTS", "CONTAINS"}


class QuerySyntaxError(ValueError):
    """A query that does not follow the grammar; ``position`` is the 0-based character index."""

    def __init__(self, query: str, position: int, problem: str) -> None:
        self.query = query
        self.position = position
        self.problem = problem
        super().__init__(f"query syntax error at position {position}: {problem}\n  {query}\n  {' ' * position}^")


@dataclass(frozen=True, slots=True)
class Condition:
    """``name op value``, ``name EXISTS`` (op "EXISTS", value None) or ``name CONTAINS 'text'``."""

    name: str
    op: str
    value: str | float | None = None


@dataclass(frozen=True, slots=True)
class Both:
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Either:
    left: Node
    right: Node


Node = Condition | Both | Either


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, position)
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                at = pos + len(text[pos:]) - len(text[pos:].lstrip())
                raise QuerySyntaxError(text, at, f"unexpected character {text[at]!r}")
            kind = m.lastgroup or ""
            start = m.start(kind)
            word = m.group(kind)
            if kind == "word" and word.upper() in _KEYWORDS:
                kind, word = "keyword", word.upper()
            self.tokens.append((kind, word, start))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str, int]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", "", len(self.text))

    def take(self) -> tuple[str, str, int]:
        token = self.peek()
        self.i += 1
        return token

    def fail(self, token: tuple[str, str, int], wanted: str) -> QuerySyntaxError:
        found = "the end of the query" if token[0] == "end" else repr(token[1])
        return QuerySyntaxError(self.text, token[2], f"expected {wanted}, found {found}")

    def parse(self) -> Node:
        node = self.either()
        if self.peek()[0] != "end":
            raise self.fail(self.peek(), "AND, OR or the end of the query")
        return node

    def either(self) -> Node:
        node = self.both()
        while self.peek()[:2] == ("keyword", "OR"):
            self.take()
            node = Either(node, self.both())
        return node

    def both(self) -> Node:
        node = self.unary()
        while self.peek()[:2] == ("keyword", "AND"):
            self.take()
            node = Both(node, self.unary())
        return node

    def unary(self) -> Node:
        token = self.take()
        if token[:2] == ("paren", "("):
            node = self.either()
            close = self.take()
            if close[:2] != ("paren", ")"):
                raise self.fail(close, "')'")
            return node
        if token[0] != "word":
            raise self.fail(token, "a header name or '('")
        name = token[1]
        op = self.take()
        if op[:2] == ("keyword", "EXISTS"):
            return Condition(name, "EXISTS")
        if op[:2] == ("keyword", "CONTAINS"):
            value = self.take()
            if value[0] != "string":
                raise self.fail(value, "a quoted string after CONTAINS")
            return Condition(name, "CONTAINS", _unquote(value[1]))
        if op[0] != "op":
            raise self.fail(op, "=, !=, <, <=, >, >=, EXISTS or CONTAINS")
        value = self.take()
        if value[0] == "number":
            return Condition(name, op[1], float(value[1]))
        if value[0] == "string":
            if op[1] not in ("=", "!="):
                raise self.fail(value, f"a number after {op[1]} (strings compare with = and != only)")
            return Condition(name, op[1], _unquote(value[1]))
        raise self.fail(value, "a number or a quoted string")


def _unquote(token: str) -> str:
    return token[1:-1].replace("''", "'")


def parse(text: str) -> Node:
    """The query's tree; :class:`QuerySyntaxError` with the position of the first problem."""
    if len(text.encode("utf-8")) > MAX_QUERY_BYTES:
        raise QuerySyntaxError(text[:40] + "...", 0, f"a query is at most {MAX_QUERY_BYTES} bytes")
    if not text.strip():
        raise QuerySyntaxError(text, 0, "the query is empty")
    return _Parser(text).parse()


# -- compiled: one closure per node ----------------------------------------------------------------

Headers = dict[str, HeaderValue]
Predicate = Callable[[Headers], bool]


def _text(value: HeaderValue) -> str | None:
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _number(value: HeaderValue) -> float | None:
    text = _text(value)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _compile(node: Node) -> Predicate:
    if isinstance(node, Both):
        left, right = _compile(node.left), _compile(node.right)
        return lambda h: left(h) and right(h)
    if isinstance(node, Either):
        left, right = _compile(node.left), _compile(node.right)
        return lambda h: left(h) or right(h)
    name, op, want = node.name, node.op, node.value
    if op == "EXISTS":
        return lambda h: name in h
    if op == "CONTAINS":
        needle = str(want)
        return lambda h: name in h and (t := _text(h[name])) is not None and needle in t
    if isinstance(want, str):
        equal = op == "="
        return lambda h: name in h and (_text(h[name]) == want) is equal
    compare = _NUMERIC[op]
    return lambda h: name in h and (n := _number(h[name])) is not None and compare(n, want)


_NUMERIC: dict[str, Callable[[float, float | str | None], bool]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,  # type: ignore[operator]
    "<=": lambda a, b: a <= b,  # type: ignore[operator]
    ">": lambda a, b: a > b,  # type: ignore[operator]
    ">=": lambda a, b: a >= b,  # type: ignore[operator]
}


def compile_query(text: str) -> Callable[[bytes], bool]:
    """A predicate over a headers block (``b""``: no headers), from the query ``text``.

    Parsed and compiled once; the answer per distinct block is cached, because one publish's
    block repeats across its batches and every subscription with the same query shares it.
    """
    predicate = _compile(parse(text))

    @lru_cache(maxsize=1024)
    def matches(block: bytes) -> bool:
        return predicate(decode_headers(block))

    return matches
