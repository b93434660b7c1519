"""The shell's part of client authentication: reading the users file, and running the slow
hash checks in worker threads, a few at a time, off the event loop (:mod:`hub.core.auth`)."""

from __future__ import annotations

import logging
from pathlib import Path

import trio

from ..core.auth import Verification
from ..core.auth_file import AuthConfig, AuthFileError, parse_auth_file
from ..core.events import ev

log = logging.getLogger("pub0sub.hub.auth")

#: Hash checks running at once.  Each takes ~0.1 s of one core and 64 MiB (argon2-cffi's
#: defaults): two keep a flood of bad passwords from taking the machine, and a check waiting
#: for its turn still counts against the client's hello_timeout.
VERIFY_THREADS = 2


def read_auth_file(path: Path) -> AuthConfig:
    """Read and parse ``path``; :class:`AuthFileError` (one line) if it cannot be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AuthFileError(f"cannot read the users file {path}: {exc}") from None
    return parse_auth_file(text, source=str(path))


class Verifier:
    def __init__(self, threads: int = VERIFY_THREADS) -> None:
        self._limiter = trio.CapacityLimiter(threads)

    async def check(self, job: Verification) -> str | None:
        """The hash ``job``'s secret matched, or None.  A cancelled wait leaves the thread to finish alone."""
        try:
            # (trio-typing's stale stubs, which libp2p pulls in, predate abandon_on_cancel)
            return await trio.to_thread.run_sync(  # type: ignore[call-arg]
                job.run, limiter=self._limiter, abandon_on_cancel=True
            )
        except Exception:  # (argon2's own refusals are handled in run(): this is a bug, not a client)
            log.exception("checking the secret of user %r failed", job.user,
                          extra=ev("auth_check_failed", x_user=job.user))
            return None
