"""KEY_FILTER and SUB's key filter: which keys a subscription delivers, set and changed live.

The rules of a filter and its matching are in :mod:`hub.core.key_filters`; this module applies
the client's commands to subscriptions.  A group's members share one filter: the group's, given
by the member that created it (as they share its topics), and a member cannot change it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from wire import HEADERS_CLIENT_VERSION, ErrorCode, KeyFilter, KeyFilterUpdate, SubOk

from .key_filters import matcher_of

if TYPE_CHECKING:
    from .clients import ClientSession, Subscription

#: The client protocol version that added key filters (with headers: one version for both).
KEY_FILTER_VERSION = HEADERS_CLIENT_VERSION
#: A subscription without a filter: every key (what ADD and REMOVE start from).
EVERY_KEY = KeyFilter(all=True)

EndSubscription = Callable[["ClientSession", "Subscription", ErrorCode, str], None]
Refuse = Callable[["ClientSession", int, ErrorCode, str], None]


def filter_refusal(session: ClientSession, key_filter: KeyFilter | None) -> str | None:
    """Why a SUB's key filter is not allowed on this connection (None: it is)."""
    if key_filter is not None and session.version < KEY_FILTER_VERSION:
        return f"a key filter in SUB needs client protocol {KEY_FILTER_VERSION}"
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
