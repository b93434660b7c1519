"""Topic ACLs applied to subscriptions: at SUB and SUB_UPDATE, and again when a reload changes them.

The rules and their meaning are in :mod:`hub.core.acl`; who the client is, in
:mod:`hub.core.auth`.  A subscription refused here gets ``SUB_END NOT_AUTHORIZED``; one a
reload no longer covers is ended the same way ("grant revoked"), and one a reload narrows
keeps going with the new deny rules held back from it.  A connection whose user, or the
secret it authenticated with, left the users file is closed with ``ERROR NOT_AUTHORIZED``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from wire import ErrorCode

from .clients import CloseReason

if TYPE_CHECKING:
    from .acl import Permissions
    from .clients import ClientSession, Subscription

EndSubscription = Callable[["ClientSession", "Subscription", ErrorCode, str], None]


class Judged(NamedTuple):
    refusal: str | None
    #: What to set as the subscription's ``denied`` (None: nothing held back).
    denied: Callable[[str], bool] | None


OPEN = Judged(None, None)


def judge(session: ClientSession, patterns: Iterable[str], *, durable: str = "", group: str = "") -> Judged:
    """May ``session`` subscribe to ``patterns``?  Counts a refusal against its user."""
    identity = session.identity
    if identity is None:
        return OPEN
    permissions = identity.permissions
    refusal, narrowed = permissions.subscription_refusal(patterns, durable=durable, group=group)
    if refusal is not None:
        identity.counters.subscribe_refused += 1
        return Judged(refusal, None)
    return Judged(None, permissions.subscribe.denies if narrowed else None)


def regrant(session: ClientSession, permissions: Permissions | None, *, end: EndSubscription) -> int:
    """A reload changed the grants: apply ``permissions`` (None: may no longer connect) to ``session``.

    Returns how many of its subscriptions ended (-1: the connection was closed)."""
    identity = session.identity
    assert identity is not None
    if permissions is None:
        identity.counters.revoked += 1
        session.fail(ErrorCode.NOT_AUTHORIZED, f"credentials of {identity.label!r} revoked: the users file changed",
                     why=CloseReason.NOT_AUTHORIZED)  # fmt: skip
        return -1
    identity.permissions = permissions
    ended = 0
    for sub in list(session.subs.values()):
        refusal, narrowed = permissions.subscription_refusal(
            sub.patterns,
            durable=sub.consumer.name if sub.consumer is not None else "",
            group=sub.group.name if sub.group is not None else "",
        )
        if refusal is not None:
            identity.counters.revoked += 1
            end(session, sub, ErrorCode.NOT_AUTHORIZED, f"grant revoked: {refusal}")
            ended += 1
            continue
        was, sub.denied = sub.denied, permissions.subscribe.denies if narrowed else None
        if (was is not None or sub.denied is not None) and sub.follower is not None:
            sub.follower.patterns_changed()
    return ended
