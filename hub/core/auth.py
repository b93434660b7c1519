"""Who a client is: HELLO's credentials checked against the users file, and per-user counters.

Without a users file the hub is open (:attr:`ClientAuth.required` is false) and every HELLO is
welcome, its token ignored, as before authentication existed.  With one, HELLO's token is
``USER:SECRET`` (UTF-8) and the secret is checked against the user's argon2id hashes.

Checking a hash is slow on purpose (~0.1 s of CPU and 64 MiB with argon2-cffi's defaults), so it
never runs on the event loop: :meth:`ClientAuth.hello` hands back a :class:`Verification`, the
shell runs it in a worker thread (a few at a time) and hands the result to
:meth:`ClientAuth.verified`.  A secret once verified is remembered as a keyed HMAC under a key
made at start and never written anywhere, so a reconnect storm of known clients costs a hash
comparison each, not a slow hash: :func:`hmac.compare_digest`, constant time.  An unknown user
is checked against a dummy hash all the same, so the time taken does not say which names exist;
and the refusal says "bad credentials" in both cases (the hub's log names the user).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets as random_secrets
from dataclasses import asdict, dataclass, field
from typing import Any

import argon2

from wire.credentials import split_credentials

from .acl import Permissions, StatusGrant
from .auth_file import AuthConfig
from .events import ev

log = logging.getLogger("pub0sub.hub.auth")

#: The counters' name for clients without credentials, and for names no user has.
ANONYMOUS = "(anonymous)"
UNKNOWN = "(unknown user)"
#: A hash of a random secret nobody knows, with argon2-cffi's default cost: checked for names
#: no user has, so an unknown name takes as long to refuse as a wrong secret.
_DUMMY_HASH = "$argon2id$v=19$m=65536,t=3,p=4$OHdNfCh8hpN7Y7tQmM7x7g$eo0dP1mA6lfO9sadJCJZiNIMXNpAGn3o17Mz31eaOkg"
_HASHER = argon2.PasswordHasher()
BAD_CREDENTIALS = "bad credentials"


@dataclass
class UserCounters:
    """Per user (read by status and the metrics): what it did and what it was refused."""

    connections: int = 0
    authenticated: int = 0
    auth_failures: int = 0
    publish_refused: int = 0
    subscribe_refused: int = 0
    #: Subscriptions ended, or connections closed, because a reload took the grant away.
    revoked: int = 0
    #: Topics the user created by publishing to new names, and publishes refused for creating
    #: more than ``max_new_topics_per_user`` (hub.core.topic_budget).
    topics_created: int = 0
    topic_limit_refused: int = 0
    #: STATUS frames refused: the users file does not grant it ``status = true``.
    status_refused: int = 0


@dataclass(eq=False)
class Identity:
    """Who one connection is.  Mutable: a reload gives it the new permissions in place."""

    user: str | None
    #: The hash its secret matched (None: anonymous); a reload that drops it ends the connection.
    secret_hash: str | None
    permissions: Permissions
    counters: UserCounters

    @property
    def label(self) -> str:
        return self.user if self.user is not None else ANONYMOUS


def status_refusal(identity: Identity | None) -> str | None:
    """Why this connection may not read STATUS, counted against its user; None: it may (an open
    hub, or ``status = true``).  The document names every client, user and topic of the hub."""
    if identity is None or identity.permissions.status:
        return None
    identity.counters.status_refused += 1
    return f"STATUS is not granted to {identity.label!r} (status = true in the users file grants it)"


def status_narrowed_to(identity: Identity | None) -> Permissions | None:
    """The grants whose topics a STATUS answer is narrowed to (``status = "topics"``); None: the whole document."""
    if identity is not None and identity.permissions.status is StatusGrant.TOPICS:
        return identity.permissions
    return None


@dataclass(frozen=True, eq=False)
class Verification:
    """One slow hash check, to run off the event loop; :meth:`run` touches no shared state."""

    user: str
    secret: str = field(repr=False)
    hashes: tuple[str, ...]
    known: bool

    def run(self) -> str | None:
        """The hash the secret matches, or None (argon2's own comparison is constant-time)."""
        for stored in self.hashes:
            try:
                if _HASHER.verify(stored, self.secret):
                    return stored if self.known else None
            except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
                continue
        return None


class ClientAuth:
    def __init__(self) -> None:
        self.config: AuthConfig | None = None
        self.counters: dict[str, UserCounters] = {}
        #: (user, hash) -> HMAC of the secret that matched it, under a key that dies with the process.
        self._verified: dict[tuple[str, str], bytes] = {}
        self._key = random_secrets.token_bytes(32)
        self.reloads = 0
        self.reload_errors = 0
        self.last_reload_error: str | None = None

    @property
    def required(self) -> bool:
        return self.config is not None

    def counters_of(self, name: str) -> UserCounters:
        counters = self.counters.get(name)
        if counters is None:
            counters = self.counters[name] = UserCounters()
        return counters

    # -- HELLO -----------------------------------------------------------------------

    def hello(self, token: bytes) -> Identity | Verification | str | None:
        """What HELLO's ``token`` gets: None (open hub), an identity at once, a check to run, or a refusal."""
        config = self.config
        if config is None:
            return None
        if not token:
            if config.anonymous is None:
                self.counters_of(ANONYMOUS).auth_failures += 1
                return "this hub requires credentials: HELLO's token is USER:SECRET"
            return self._identity(None, None, config.anonymous)
        credentials = split_credentials(token)
        if credentials is None:
            self.counters_of(UNKNOWN).auth_failures += 1
            return "HELLO's token must be USER:SECRET (UTF-8)"
        name, secret = credentials
        user = config.users.get(name)
        if user is None:
            return Verification(name, secret, (_DUMMY_HASH,), known=False)
        digest = self._digest(secret)
        for stored in user.secrets:
            remembered = self._verified.get((name, stored))
            if remembered is not None and hmac.compare_digest(remembered, digest):
                return self._identity(name, stored, user.permissions)
        return Verification(name, secret, user.secrets, known=True)

    def verified(self, check: Verification, matched: str | None) -> Identity | str:
        """The outcome of :meth:`Verification.run`: an identity, or the refusal to send."""
        config = self.config
        user = config.users.get(check.user) if config is not None else None
        if matched is None or user is None or matched not in user.secrets:
            # (a reload between the check and now may have removed the user or that secret)
            self.counters_of(check.user if user is not None else UNKNOWN).auth_failures += 1
            log.info("authentication failed for user %r", check.user,
                     extra=ev("auth_failed", reason="bad_credentials", x_user=check.user))
            return BAD_CREDENTIALS
        self._verified[(check.user, matched)] = self._digest(check.secret)
        return self._identity(check.user, matched, user.permissions)

    def _digest(self, secret: str) -> bytes:
        return hmac.new(self._key, secret.encode("utf-8"), hashlib.sha256).digest()

    def _identity(self, user: str | None, secret_hash: str | None, permissions: Permissions) -> Identity:
        counters = self.counters_of(user if user is not None else ANONYMOUS)
        counters.authenticated += 1
        return Identity(user, secret_hash, permissions, counters)

    # -- reload ----------------------------------------------------------------------

    def use(self, config: AuthConfig | None) -> None:
        """Put ``config`` in force (at start and on each reload); forget secrets no longer listed."""
        if self.config is not None:
            self.reloads += 1
        self.config = config
        listed = {(u.name, s) for u in config.users.values() for s in u.secrets} if config is not None else set()
        self._verified = {k: v for k, v in self._verified.items() if k in listed}

    def reload_failed(self, reason: str) -> None:
        self.reload_errors += 1
        self.last_reload_error = reason

    def refreshed(self, identity: Identity) -> Permissions | None:
        """``identity``'s permissions under the config now in force; None if it may no longer connect."""
        config = self.config
        if config is None:
            return identity.permissions  # (the hub never drops an auth file while running)
        if identity.user is None:
            return config.anonymous
        user = config.users.get(identity.user)
        if user is None or identity.secret_hash not in user.secrets:
            return None
        return user.permissions

    def status(self) -> dict[str, Any]:
        config = self.config
        return {
            "required": config is not None,
            "source": config.source if config is not None else None,
            "users": len(config.users) if config is not None else 0,
            "anonymous_allowed": config is None or config.anonymous is not None,
            "reloads": self.reloads,
            "reload_errors": self.reload_errors,
            "last_reload_error": self.last_reload_error,
            "per_user": {name: asdict(c) for name, c in sorted(self.counters.items())},
        }
