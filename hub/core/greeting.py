"""A connection's first moments: HELLO, who the client is, WELCOME -- or the refusal.

Until WELCOME a connection may send only HELLO, of at most :data:`GREETING_LIMITS`, and must
be welcomed within ``hello_timeout`` of its accept (the shell's timer calls
:meth:`Greeting.overdue`).  With a users file (:mod:`hub.core.auth`) HELLO's secret is checked
off the event loop: the session holds the check in ``auth_job``, the frames behind HELLO wait
in its decoder, and the shell hands the result to :meth:`Greeting.verified`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from wire import CLIENT_PROTOCOL_VERSION, HEADERS_CLIENT_VERSION, ErrorCode, Hello, Limits

from .auth import ClientAuth, Identity
from .auth_file import AuthConfig
from .clients import ClientSession, CloseReason
from .grants import EndSubscription, regrant
from .stats import HubStats

#: Until WELCOME a connection may send only HELLO, and only this big: a name and a token fit
#: many times over, and an unauthenticated peer cannot make the hub buffer more.
GREETING_LIMITS = Limits(max_body=4096)

#: Version 2 added COMMIT and COMMITTED, version 3 headers (PUBLISH flag HEADERS, DELIVER_HEADERS)
#: and key filters; docs/protocol.md §11.  Older clients are served as before (a version 1 or 2
#: subscriber gets batches that carried headers as plain DELIVERs, without them).  A hub speaks
#: 1..``max_client_version`` (default: all of them); an operator pins an older one during a
#: rolling upgrade, and the refusal's reason says which versions the hub speaks, in the words
#: hubs have always used, so that the SDK steps down to one of them (sdk/versions.py).


class Greeting:
    def __init__(
        self,
        *,
        auth: ClientAuth,
        stats: HubStats,
        welcome: Callable[[int], bytes],
        max_body: int,
        hello_timeout: float,
        end_subscription: EndSubscription,
        max_version: int = CLIENT_PROTOCOL_VERSION,
    ) -> None:
        self.auth = auth
        self.stats = stats
        self._welcome = welcome
        self._limits = Limits(max_body=max_body)
        self.hello_timeout = hello_timeout
        self._end = end_subscription
        self.max_version = max_version

    def opened(self, session: ClientSession) -> None:
        session.decoder.limits = GREETING_LIMITS

    def on_hello(self, session: ClientSession, frame: Hello) -> None:
        if session.greeted or session.auth_job is not None:
            session.fail(ErrorCode.UNEXPECTED_FRAME, "HELLO sent twice")
            return
        if not 1 <= frame.version <= self.max_version:
            session.fail(
                ErrorCode.UNSUPPORTED_VERSION,
                f"client protocol version {frame.version} not supported (hub speaks 1..{self.max_version})",
            )
            return
        session.version = frame.version
        session.out.headers = frame.version >= HEADERS_CLIENT_VERSION
        session.client_name = frame.client_name
        outcome = self.auth.hello(frame.token)
        if outcome is None or isinstance(outcome, Identity | str):
            self._admit(session, outcome)
        else:
            session.auth_job = outcome  # the frames behind HELLO wait in the decoder until verified()

    def verified(self, session: ClientSession, matched: str | None) -> bool:
        """The shell ran ``session.auth_job`` (``matched``: the hash it matched); True if admitted."""
        job, session.auth_job = session.auth_job, None
        if job is None or session.closing is not None:
            return False
        self._admit(session, self.auth.verified(job, matched))
        return session.closing is None

    def overdue(self, session: ClientSession) -> None:
        """``hello_timeout`` passed since accept: a connection still not welcomed is closed."""
        if session.greeted or session.closing is not None:
            return
        self.stats.hello_timeouts += 1
        code = ErrorCode.NOT_AUTHORIZED if self.auth.required else ErrorCode.HEARTBEAT_TIMEOUT
        session.fail(code, f"not welcomed within {self.hello_timeout:g}s of connecting (send HELLO first)",
                     why=CloseReason.HEARTBEAT_TIMEOUT)  # fmt: skip

    def use(self, config: AuthConfig | None, sessions: Iterable[ClientSession]) -> tuple[int, int]:
        """Put a users file in force (at start, and on each reload) and apply it to ``sessions``:
        how many subscriptions ended and connections closed because their grant went."""
        self.auth.use(config)
        ended = closed = 0
        for session in list(sessions):
            if session.identity is not None and session.closing is None:
                outcome = regrant(session, self.auth.refreshed(session.identity), end=self._end)
                if outcome < 0:
                    closed += 1
                else:
                    ended += outcome
        return ended, closed

    def _admit(self, session: ClientSession, identity: Identity | str | None) -> None:
        if isinstance(identity, str):
            self.stats.auth_failures += 1
            session.fail(ErrorCode.NOT_AUTHORIZED, identity, why=CloseReason.NOT_AUTHORIZED)
            return
        if identity is not None:
            identity.counters.connections += 1
        session.identity = identity
        session.greeted = True
        session.decoder.limits = self._limits
        session.send_control(self._welcome(session.version))
