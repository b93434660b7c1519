"""What HELLO's token holds for a hub with a users file: ``USER:SECRET`` in UTF-8.

The hub splits it (``hub.core.auth``), the SDK and ``pub0sub auth`` build it; the user name
rule is here once so all three agree.  An empty token is the anonymous client.

>>> join_credentials("alice", "s3:cret")
b'alice:s3:cret'
>>> split_credentials(b"alice:s3:cret")
('alice', 's3:cret')
"""

from __future__ import annotations

import re

#: User names: what fits in a log line and before the ``:`` of the token.
USER_NAME = re.compile(r"[A-Za-z0-9_.@+-]{1,64}")
USER_NAME_RULE = "a user name is 1..64 of A-Z a-z 0-9 _ . @ + -"


def join_credentials(user: str, secret: str) -> bytes:
    """The token for ``user`` and ``secret``; ValueError for a bad name or an empty secret."""
    if not USER_NAME.fullmatch(user):
        raise ValueError(f"bad user name {user!r}: {USER_NAME_RULE}")
    if not secret:
        raise ValueError("empty secret")
    return f"{user}:{secret}".encode()


def split_credentials(token: bytes) -> tuple[str, str] | None:
    """``(user, secret)`` from a token; None if it is not ``USER:SECRET`` in UTF-8."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        return None
    user, sep, secret = text.partition(":")
    if not sep or not USER_NAME.fullmatch(user) or not secret:
        return None
    return user, secret
