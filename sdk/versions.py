"""Which client protocol version to speak with a hub, and what each version allows; sans-IO.

The SDK offers the newest version (:data:`wire.CLIENT_PROTOCOL_VERSION`) in HELLO.  A hub from
before that version answers ``ERROR UNSUPPORTED_VERSION`` and closes the connection, and says
in its reason which versions it speaks (``... (hub speaks 1..2)``, or ``(hub speaks 1)`` from a
hub that knew only version 1).  :func:`next_version` reads that reason and picks the version to
offer on a fresh connection: the newest the hub names, else one lower than the refused one, so
that a rolling upgrade that updates clients before hubs keeps every client connected.  Both
drivers (:mod:`sdk.client`, :mod:`sdk.blocking`) ask :meth:`sdk.protocol.ClientProtocol.step_down`,
which asks this module: the decision lives here once.

On a connection at an older version the features it lacks are refused at the call with
:class:`sdk.errors.UnsupportedFeatureError` (docs/sdk.md, "Older hubs"); nothing is sent that the
hub could not read.
"""

from __future__ import annotations

import re

from wire import HEADERS_CLIENT_VERSION, ErrorCode

from .errors import HubError, UnsupportedFeatureError

#: The version that added COMMIT and COMMITTED (docs/protocol.md §11).
COMMIT_VERSION = 2
#: The version that added headers, key filters and tag queries (one version for all three).
SELECTION_VERSION = HEADERS_CLIENT_VERSION

#: What a feature is called in an error, and the first client protocol version that has it.
HEADERS = ("headers on publish", HEADERS_CLIENT_VERSION)
KEY_FILTERS = ("key filters", SELECTION_VERSION)
QUERIES = ("tag queries", SELECTION_VERSION)
KV_VIEWS = ("kv views (they read deletions from headers)", HEADERS_CLIENT_VERSION)
COMMIT = ("commit", COMMIT_VERSION)

# "(hub speaks 1..2)" since version 2, "(hub speaks 1)" before: the newest is the last number.
_SPOKEN = re.compile(r"hub speaks (?:(\d+)\.\.)?(\d+)\)")


def highest_spoken(reason: str) -> int | None:
    """The newest version an UNSUPPORTED_VERSION reason says the hub speaks (None: it does not say).

    >>> highest_spoken("client protocol version 3 not supported (hub speaks 1..2)")
    2
    >>> highest_spoken("client protocol version 2 not supported (hub speaks 1)")
    1
    >>> highest_spoken("go away") is None
    True
    """
    match = _SPOKEN.search(reason)
    return int(match.group(2)) if match else None


def next_version(refused: int, error: BaseException) -> int | None:
    """The version to offer next after the hub refused ``refused`` with ``error``; None: give up.

    Not an UNSUPPORTED_VERSION refusal, or nothing lower than version 1: None.  A hub that names
    only versions at or above the refused one speaks none the SDK has left to offer: None.

    >>> refusal = HubError(ErrorCode.UNSUPPORTED_VERSION, "client protocol version 3 not supported (hub speaks 1..2)")
    >>> next_version(3, refusal)
    2
    >>> next_version(3, HubError(ErrorCode.UNSUPPORTED_VERSION, "no"))
    2
    >>> next_version(1, HubError(ErrorCode.UNSUPPORTED_VERSION, "no")) is None
    True
    """
    if not isinstance(error, HubError) or error.code != ErrorCode.UNSUPPORTED_VERSION or refused <= 1:
        return None
    spoken = highest_spoken(error.hub_reason)
    if spoken is None:
        return refused - 1
    if spoken >= refused:
        return None
    return max(1, spoken)


def require(feature: tuple[str, int], version: int | None, address: str = "") -> None:
    """Raise :class:`UnsupportedFeatureError` when a connection at ``version`` lacks ``feature``.

    ``version`` None (not connected yet) allows everything: the newest version is what the SDK
    offers first.
    """
    name, needs = feature
    if version is not None and version < needs:
        raise UnsupportedFeatureError(name, needs=needs, version=version, address=address)


__all__ = ["highest_spoken", "next_version", "require"]
