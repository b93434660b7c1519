"""The hub's users file (``--auth-file``): users, their hashed secrets and what each may do.

A TOML document (docs/security.md gives the whole format)::

    [users.alice]
    secrets = ["$argon2id$v=19$m=65536,t=3,p=4$..."]   # one or more: rotate without a gap
    publish = ["orders.>"]                              # a list is the allow rules...
    subscribe = { allow = ["orders.>"], deny = ["orders.secret"] }   # ...a table has both
    durables = ["billing-*"]                            # names, or prefixes ending in '*'
    groups = ["workers"]
    status = true                                       # may read STATUS (default false; "topics":
                                                        # only the offsets of its subscribe grant)

    [anonymous]                                         # optional: a client without credentials
    subscribe = ["public.>"]

Anything not granted is refused; without ``[anonymous]`` a client must authenticate.  The
parser refuses the whole file on any mistake (unknown key, bad pattern, a secret that is not
an argon2id hash), naming the user and the key: a reload that fails keeps the file in force
before it, so a typo never opens or closes the hub by accident.

Only parsing and checking live here; the shell reads the file (the core does no I/O).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any

from wire.credentials import USER_NAME, USER_NAME_RULE

from .acl import NameRules, Permissions, StatusGrant, TopicRules

#: The only hash the file takes (argon2-cffi's ``PasswordHasher().hash``; ``pub0sub auth`` makes them).
HASH_PREFIX = "$argon2id$"
#: Secrets per user: enough to rotate, few enough that a wrong one costs few slow hashes.
MAX_SECRETS = 4
_RIGHTS = ("publish", "subscribe", "durables", "groups", "status")
_STATUS_GRANTS = {True: StatusGrant.FULL, False: StatusGrant.NONE, "topics": StatusGrant.TOPICS}


class AuthFileError(ValueError):
    """The users file cannot be used; the message names the file, the user and the key."""


@dataclass(frozen=True)
class User:
    name: str
    #: argon2id hash strings; a secret matching any of them authenticates.
    secrets: tuple[str, ...]
    permissions: Permissions


@dataclass(frozen=True)
class AuthConfig:
    users: dict[str, User]
    #: What a client without credentials may do; None: it is refused.
    anonymous: Permissions | None
    #: Where it came from, for messages and status.
    source: str = ""


def parse_auth_file(text: str, *, source: str = "auth file") -> AuthConfig:
    """Parse and check a users file; :class:`AuthFileError` on any mistake."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AuthFileError(f"{source}: not valid TOML: {exc}") from None
    unknown = set(doc) - {"users", "anonymous"}
    if unknown:
        raise AuthFileError(f"{source}: unknown table(s) {sorted(unknown)}; expected [users.NAME] and [anonymous]")
    users_doc = doc.get("users", {})
    if not isinstance(users_doc, dict):
        raise AuthFileError(f"{source}: 'users' must be a table of [users.NAME] tables")
    users: dict[str, User] = {}
    for name, entry in users_doc.items():
        where = f"{source}: user {name!r}"
        if not USER_NAME.fullmatch(name):
            raise AuthFileError(f"{where}: {USER_NAME_RULE}")
        if not isinstance(entry, dict):
            raise AuthFileError(f"{where}: must be a table")
        users[name] = User(name, _secrets(entry, where), _permissions(entry, where, extra={"secrets"}))
    anonymous = None
    if "anonymous" in doc:
        if not isinstance(doc["anonymous"], dict):
            raise AuthFileError(f"{source}: [anonymous] must be a table")
        anonymous = _permissions(doc["anonymous"], f"{source}: [anonymous]", extra=set())
    return AuthConfig(users=users, anonymous=anonymous, source=source)


def _secrets(entry: dict[str, Any], where: str) -> tuple[str, ...]:
    secrets = entry.get("secrets")
    if isinstance(secrets, str):
        secrets = [secrets]
    if not isinstance(secrets, list) or not 1 <= len(secrets) <= MAX_SECRETS:
        raise AuthFileError(f"{where}: 'secrets' must list 1..{MAX_SECRETS} argon2id hashes (pub0sub auth makes them)")
    for secret in secrets:
        if not isinstance(secret, str) or not secret.startswith(HASH_PREFIX):
            raise AuthFileError(f"{where}: a secret must be an argon2id hash starting {HASH_PREFIX!r}, not a password")
    return tuple(secrets)


def _permissions(entry: dict[str, Any], where: str, *, extra: set[str]) -> Permissions:
    unknown = set(entry) - set(_RIGHTS) - extra
    if unknown:
        raise AuthFileError(f"{where}: unknown key(s) {sorted(unknown)}; expected {[*sorted(extra), *_RIGHTS]}")
    try:
        publish, subscribe = (TopicRules(*_allow_deny(entry.get(k), f"{where}: {k}")) for k in ("publish", "subscribe"))
        durables, groups = (NameRules(*_allow_deny(entry.get(k), f"{where}: {k}")) for k in ("durables", "groups"))
    except ValueError as exc:  # a bad pattern (wire.topics' message) or a bad name rule
        raise AuthFileError(f"{where}: {exc}") from None
    raw = entry.get("status", False)
    status = _STATUS_GRANTS.get(raw) if isinstance(raw, bool | str) else None  # not 1 (== True)
    if status is None:
        raise AuthFileError(f'{where}: status must be true, false or "topics" (may it read STATUS, or its part?)')
    return Permissions(publish=publish, subscribe=subscribe, durables=durables, groups=groups, status=status)


def _allow_deny(value: object, where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``["a", "b"]`` (allow only) or ``{allow = [...], deny = [...]}``; absent: nothing granted."""
    if value is None:
        return (), ()
    if isinstance(value, list):
        return _names(value, where), ()
    if isinstance(value, dict):
        unknown = set(value) - {"allow", "deny"}
        if unknown:
            raise AuthFileError(f"{where}: unknown key(s) {sorted(unknown)}; expected allow, deny")
        return _names(value.get("allow", []), f"{where}.allow"), _names(value.get("deny", []), f"{where}.deny")
    raise AuthFileError(f"{where}: a list of rules, or a table with allow and deny lists")


def _names(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AuthFileError(f"{where}: must be a list of strings")
    return tuple(value)
