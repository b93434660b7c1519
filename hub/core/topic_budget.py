"""How many topics a publish may create: per frame, per connection and on the whole hub.

Every new topic is a directory and a segment file (a descriptor while it is in use,
an inode for ever) and costs the event loop ~0.2 ms to create: one client spraying
unique names would otherwise fill the disk's inodes, and one frame naming 17,850 new
topics held the loop for seconds.  A publish that would pass a limit is refused
whole, before anything of it is stored, with ``ERROR LIMIT_EXCEEDED`` naming the limit.
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
    #: Topics one PUBLISH frame may create: bounds the time the loop spends on one frame.
    max_new_topics_per_frame: int = 256


#: After a chunk's frames created this many topics, the hub lets other connections run
#: before it handles the next frame of that chunk (see ``HubCore.receive_data``).
YIELD_AFTER_NEW_TOPICS = 256


def new_topics(frame: Publish, exists: Callable[[str], object]) -> set[str]:
    """The topics ``frame`` names that do not exist yet."""
    return {name for mset in frame.sets for name in mset.topics if exists(name) is None}


def topic_refusal(limits: TopicLimits, *, new: int, created_by_connection: int, existing: int) -> str | None:
    """Why creating ``new`` topics must be refused, or None.

    >>> topic_refusal(TopicLimits(max_topics=10), new=3, created_by_connection=0, existing=8)
    'the hub would hold 11 topics, limit max_topics=10'
    """
    if new > limits.max_new_topics_per_frame:
        limit = limits.max_new_topics_per_frame
        return f"one publish would create {new} topics, limit max_new_topics_per_frame={limit}"
    if created_by_connection + new > limits.max_new_topics_per_connection:
        return (
            f"this connection would have created {created_by_connection + new} topics, "
            f"limit max_new_topics_per_connection={limits.max_new_topics_per_connection}"
        )
    if existing + new > limits.max_topics:
        return f"the hub would hold {existing + new} topics, limit max_topics={limits.max_topics}"
    return None
