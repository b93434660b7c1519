"""What a subscription selects beyond its topics: SUB's key filter and tag query, KEY_FILTER.

The rules of a filter and its matching are in :mod:`hub.core.key_filters`, the query language in
:mod:`wire.query`; this module applies the client's SUB and commands to subscriptions.  A group's
members share one filter and one query: the group's, given by the member that created it (as
they share its topics), and a member cannot change them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from wire import HEADERS_CLIENT_VERSION, ErrorCode, KeyFilter, KeyFilterUpdate, Sub, SubOk
from wire.query import QuerySyntaxError, compile_query

from .key_filters import matcher_of

if TYPE_CHECKING:
    from .clients import ClientSession, Subscription

#: The client protocol version that added key filters (with headers: one version for both).
KEY_FILTER_VERSION = HEADERS_CLIENT_VERSION
#: A subscription without a filter: every key (what ADD and REMOVE start from).
EVERY_KEY = KeyFilter(all=True)

EndSubscription = Callable[["ClientSession", "Subscription", ErrorCode, str], None]
Refuse = Callable[["ClientSession", int, ErrorCode, str], None]


def filter_refusal(session: ClientSession, frame: Sub) -> str | None:
    """Why a SUB's key filter or query is not allowed on this connection (None: it is)."""
    if (frame.key_filter is not None or frame.query is not None) and session.version < KEY_FILTER_VERSION:
        return f"a key filter or query in SUB needs client protocol {KEY_FILTER_VERSION}"
    return None


def set_selection(sub: Subscription, frame: Sub) -> str | None:
    """Give ``sub`` the SUB's key filter and query; why the query does not parse (None: it does)."""
    set_keys(sub, frame.key_filter)
    if frame.query is not None:
        try:
            sub.query = compile_query(frame.query)
        except QuerySyntaxError as exc:
            return str(exc)
        sub.query_text = frame.query
    return None


def set_keys(sub: Subscription, keys: KeyFilter | None) -> None:
    sub.keys = keys
    sub.key_filter = matcher_of(keys)


class KeyCommands:
    def __init__(self, *, refuse: Refuse, end: EndSubscription) -> None:
        self._refuse = refuse
        self._end = end

    def on_key_filter(self, session: ClientSession, frame: KeyFilterUpdate) -> None:
        if session.version < KEY_FILTER_VERSION:
            session.fail(ErrorCode.UNEXPECTED_FRAME, f"KEY_FILTER needs client protocol {KEY_FILTER_VERSION}")
            return
        sub = session.subs.get(frame.sub_id)
        if sub is None:
            self._refuse(session, frame.sub_id, ErrorCode.UNKNOWN_SUBSCRIPTION, "no such subscription")
            return
        if sub.group is not None:  # refused: ends it, as a refused SUB_UPDATE does
            self._end(session, sub, ErrorCode.UNEXPECTED_FRAME, "a group member cannot change the group's keys")
            return
        set_keys(sub, (sub.keys or EVERY_KEY).apply(frame.op, frame.filter))
        if sub.follower is not None:
            sub.follower.wake()  # held back by nothing now, or by less: let it look again
        session.send_control(SubOk(sub_id=sub.sub_id).encode())
