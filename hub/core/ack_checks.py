"""What an ACK frame may settle, asked of the subscription's group or follower (protocol.md, ACK)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wire import AckMode

if TYPE_CHECKING:
    from wire import Ack

    from .clients import Subscription


def frame_ack_refusal(sub: Subscription, frame: Ack) -> str | None:
    """Why ``frame`` must be refused: an ACK settles only offsets delivered to ``sub`` and pending."""
    if sub.group is not None:
        check = sub.group.ack_refusal
    elif sub.consumer is not None and sub.follower is not None and sub.ack_mode is AckMode.EXPLICIT:
        check = sub.follower.ack_refusal
    else:
        return "it takes no acks (only durable subscriptions and groups with ack_mode EXPLICIT do)"
    for r in frame.ranges:
        refusal = check(r.topic, r.first_offset, r.last_offset)
        if refusal is not None:
            return refusal
    return None
