"""How many topics a publish may create: per frame, per connection, per user and on the whole hub.

Every new topic is a directory and a segment file (a descriptor while it is in use,
an inode for ever) and costs the event loop ~0.2 ms to create: one client spraying
unique names would otherwise fill the disk's inodes, and one frame naming 17,850 new
topics held the loop for seconds.  A publish that would pass a limit is refused
whole, before anything of it is stored, with ``ERROR LIMIT_EXCEEDED`` naming the limit
and a topic it would have created.

The per-user count is kept with the user's counters (``hub.core.auth.UserCounters``), for
the hub's life: reconnecting does not give a user a fresh budget, as it gives a connection
one.  Anonymous clients of a hub with a users file share one budget; an open hub (no users
file) knows no users, only connections.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wire import Publish


@dataclass(frozen=True, kw_only=True)
class TopicLimits:
    #: Topics the hub holds in all (logs, or memory topics without a data directory).
    max_topics: int = 100_000
    #: Topics one connection may create over its life.
    max_new_topics_per_connection: int = 10_000
    #: Topics one user of the users file may create over the hub's life, all its connections together.
    max_new_topics_per_user: int = 20_000
    #: Topics one PUBLISH frame may create: bounds the time the loop spends on one frame.
    max_new_topics_per_frame: int = 256


#: After a chunk's frames created this many topics, the hub lets other connections run
#: before it handles the next frame of that chunk (see ``HubCore.receive_data``).
YIELD_AFTER_NEW_TOPICS = 256


def new_topics(frame: Publish, exists: Callable[[str], object]) -> set[str]:
    """The topics ``frame`` names that do not exist yet."""
    return {name for mset in frame.sets for name in mset.topics if exists(name) is None}


def topic_refusal(
    limits: TopicLimits, *, new: int, created_by_connection: int, existing: int, user: tuple[str, int] | None = None
) -> str | None:
    """Why creating ``new`` topics must be refused, or None; ``user`` is the user's name and
    the topics it created so far (None: no users file).

    >>> topic_refusal(TopicLimits(max_topics=10), new=3, created_by_connection=0, existing=8)
    'the hub would hold 11 topics, limit max_topics=10'
    >>> topic_refusal(TopicLimits(max_new_topics_per_user=5), new=2, created_by_connection=0, existing=0,
    ...               user=("alice", 4))
    "user 'alice' would have created 6 topics, limit max_new_topics_per_user=5"
    """
    if new > limits.max_new_topics_per_frame:
        limit = limits.max_new_topics_per_frame
        return f"one publish would create {new} topics, limit max_new_topics_per_frame={limit}"
    if created_by_connection + new > limits.max_new_topics_per_connection:
        return (
            f"this connection would have created {created_by_connection + new} topics, "
            f"limit max_new_topics_per_connection={limits.max_new_topics_per_connection}"
        )
    if user is not None and user[1] + new > limits.max_new_topics_per_user:
        name, created = user
        return (
            f"user {name!r} would have created {created + new} topics, "
            f"limit max_new_topics_per_user={limits.max_new_topics_per_user}"
        )
    if existing + new > limits.max_topics:
        return f"the hub would hold {existing + new} topics, limit max_topics={limits.max_topics}"
    return None
