"""The process's file descriptor limit: raised to its ceiling, and what it leaves for clients.

Every client connection is a file descriptor, so the soft ``RLIMIT_NOFILE`` (often 1024)
is the real connection limit of a hub unless it is raised.  An unprivileged process may
raise its soft limit up to the hard one; the hub does that at start and says what it got.
Past the limit ``accept`` fails with EMFILE and connections wait unanswered in the backlog,
so ``max_connections`` is kept below it: the hub refuses the next one with an ERROR frame
instead (refusing takes a descriptor too, for as long as the frame takes to send).
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

from ..core.events import ev

log = logging.getLogger("pub0sub.hub")

#: Descriptors kept back from clients: listeners, log segments, the mesh's connections,
#: the fsync thread's files, refusals being sent.
RESERVED_FDS = 512


@dataclass(frozen=True, slots=True)
class FdLimit:
    before: int
    soft: int
    hard: int

    @property
    def for_clients(self) -> int:
        """Client connections the limit leaves room for (at least 1)."""
        return max(1, self.soft - RESERVED_FDS)


def _finite(value: int) -> int:
    return 1 << 31 if value == resource.RLIM_INFINITY else value


def raise_fd_limit() -> FdLimit:
    """Raise the soft descriptor limit to the hard one (best effort); the limits it ends with."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:  # e.g. macOS refuses RLIM_INFINITY: keep what we have
            log.warning("cannot raise the file descriptor limit from %d to %d: %s", soft, hard, exc,
                        extra=ev("fd_limit_not_raised", reason=str(exc)))  # fmt: skip
    return FdLimit(before=_finite(before), soft=_finite(soft), hard=_finite(hard))


def connection_limit(configured: int | None, fds: FdLimit) -> int:
    """``max_connections`` to apply: the configured value, or what the descriptors allow when
    none is configured or the configured one is beyond it (then said in the log)."""
    room = fds.for_clients
    if configured is None:
        return room
    if configured > room:
        log.warning(
            "max_connections=%d is more than the file descriptor limit leaves for clients (%d of %d): "
            "using %d, so connection %d is refused with an ERROR instead of waiting in the backlog",
            configured, room, fds.soft, room, room + 1,
            extra=ev("max_connections_lowered", x_configured=configured, x_applied=room),
        )  # fmt: skip
        return room
    return configured
