"""The topic rule: which names clients may publish to and subscribe with.

One rule, one function (:func:`check_topic`), one message: the hub, the SDK and
every command line tool apply it, so a name is accepted or refused -- with the
same words -- wherever it is typed.

* A **topic** is 1..255 bytes of UTF-8 made of ``.``-separated, non-empty
  tokens, with no whitespace (what ``str.isspace`` calls whitespace) and no
  control characters (Unicode category Cc: U+0000..U+001F, U+007F..U+009F),
  and neither ``*`` nor ``>`` anywhere.
* A **pattern** is the same, except that a token may be exactly ``*`` (one
  token) and the last token may be exactly ``>`` (one or more tokens).  Every
  topic is also a pattern (one that matches only itself).

>>> check_topic("orders.eu")
>>> check_topic("orders.*", pattern=True)
>>> topic_problem("orders..eu")
'empty token (two dots in a row, or a dot first or last)'

The frame codecs do not apply this rule: on the wire (mesh v1 as the seed
defines it, log segments, captures) a topic is any 1..255 bytes of UTF-8, so
a seed peer's names and data stored before the rule existed still decode.
"""

from __future__ import annotations

import re

from .errors import ErrorCode
from .limits import MAX_TOPIC_BYTES

#: A pattern token matching exactly one topic token.
SINGLE = "*"
#: A pattern's last token matching one or more topic tokens.
REST = ">"

#: The rule in one sentence; every refusal ends with it, so the reader learns what would pass.
RULE = (
    f"Topics are 1..{MAX_TOPIC_BYTES} bytes of UTF-8: dot-separated non-empty tokens without whitespace, "
    f"control characters, '{SINGLE}' or '{REST}'; patterns may also use '{SINGLE}' as a token and '{REST}' "
    "as the last token."
)
#: Longer names are shortened in messages: a refusal stays one readable line.
_SHOWN_CHARS = 60

# re's \s is exactly str.isspace() for str patterns; Cc is U+0000..U+001F and U+007F..U+009F.
_FORBIDDEN = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")
_WILDCARD = re.compile(r"[*>]")


class InvalidTopicError(ValueError):
    """``name`` breaks the topic rule; ``problem`` says how (the message adds :data:`RULE`).

    ``code`` is :attr:`ErrorCode.INVALID_TOPIC`, the code the hub sends in ERROR and SUB_END.
    """

    code = ErrorCode.INVALID_TOPIC

    def __init__(self, name: object, problem: str, *, pattern: bool = False) -> None:
        self.name = name
        self.problem = problem
        self.pattern = pattern
        super().__init__(topic_message(name, problem, pattern=pattern))


def topic_message(name: object, problem: str, *, pattern: bool = False) -> str:
    """The one refusal message: ``invalid topic 'a..b': empty token (...). Topics are ...``."""
    kind = "pattern" if pattern else "topic"
    shown = repr(name)
    if isinstance(name, str) and len(name) > _SHOWN_CHARS:
        shown = f"{name[:_SHOWN_CHARS]!r}... ({len(name)} characters)"
    return f"invalid {kind} {shown}: {problem}. {RULE}"


def topic_problem(name: object, *, pattern: bool = False) -> str | None:
    """Why ``name`` is not a valid topic (or, with ``pattern``, pattern); None if it is."""
    if not isinstance(name, str):
        return f"not a str but {type(name).__name__}"
    if not name:
        return "empty"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "not valid UTF-8 (it holds a lone surrogate)"
    if size > MAX_TOPIC_BYTES:
        return f"{size} bytes of UTF-8, more than {MAX_TOPIC_BYTES}"
    bad = _FORBIDDEN.search(name)
    if bad is not None:
        char = bad.group()
        what = "whitespace" if char.isspace() else "a control character"
        return f"contains {what} (U+{ord(char):04X})"
    tokens = name.split(".")
    last = len(tokens) - 1
    for i, token in enumerate(tokens):
        if not token:
            return "empty token (two dots in a row, or a dot first or last)"
        if not _WILDCARD.search(token):
            continue
        if not pattern:
            return f"'{SINGLE}' and '{REST}' are only for subscription patterns"
        if token == REST and i != last:
            return f"'{REST}' must be the last token"
        if token not in (SINGLE, REST):
            return f"'{SINGLE}' and '{REST}' must be whole tokens, not part of {token!r}"
    return None


def check_topic(name: object, *, pattern: bool = False) -> None:
    """Raise :class:`InvalidTopicError` unless ``name`` is a valid topic (or pattern).

    Use ``pattern=True`` for what a subscription names: a topic or a pattern.
    A name that fails without wildcards is reported as a topic, so ``a..b``
    gets the same message from ``publish`` and from ``subscribe``.
    """
    problem = topic_problem(name, pattern=pattern)
    if problem is not None:
        wild = pattern and isinstance(name, str) and _WILDCARD.search(name) is not None
        raise InvalidTopicError(name, problem, pattern=wild)


def is_pattern(name: str) -> bool:
    """True if ``name`` has a wildcard token (``*``, or ``>``): it can match more than itself."""
    return any(token in (SINGLE, REST) for token in name.split("."))


def pattern_tokens(name: str) -> tuple[str, ...] | None:
    """The tokens of ``name`` if it is a valid pattern with a wildcard token, else None.

    Names that are not valid patterns (a seed peer may announce any 1..255-byte
    name) are literal names: they match only themselves.
    """
    if not is_pattern(name) or topic_problem(name, pattern=True) is not None:
        return None
    return tuple(name.split("."))


def pattern_matches(tokens: tuple[str, ...], topic_tokens: list[str]) -> bool:
    """Does the pattern (as :func:`pattern_tokens`) match the topic (split on dots)?"""
    for i, token in enumerate(tokens):
        if token == REST:
            return len(topic_tokens) > i
        if i >= len(topic_tokens):
            return False
        if token != SINGLE and token != topic_tokens[i]:
            return False
    return len(tokens) == len(topic_tokens)
