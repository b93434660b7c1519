"""pub0sub's Python SDK: an async client (anyio: trio or asyncio) and a blocking client.

>>> import sdk
>>> async def main():                                          # doctest: +SKIP
...     async with sdk.connect("127.0.0.1:7420") as client:
...         async with client.subscribe("greetings") as sub:
...             await client.publish("greetings", b"hello")
...             msg = await sub.__anext__()
...             print(msg.topic, msg.offset, msg.data)

See ``docs/sdk.md`` for the guide.
"""

from __future__ import annotations

from wire.query import QuerySyntaxError

from .blocking import BlockingClient, BlockingSubscription, connect_blocking
from .client import Client, connect
from .errors import (
    ConnectionLostError,
    HubError,
    InvalidTopicError,
    NotAHubError,
    ProtocolError,
    Pub0subError,
    PublishTimeoutError,
    SlowConsumerError,
    SubscriptionClosedError,
    TlsError,
    UnsupportedFeatureError,
)
from .kv import BlockingKeyValue, KeyValue, KVEntry
from .messages import Gap, Message, PublishAck, Reconnect
from .subscription import Subscription

__all__ = [
    "BlockingClient",
    "BlockingKeyValue",
    "BlockingSubscription",
    "Client",
    "ConnectionLostError",
    "Gap",
    "HubError",
    "InvalidTopicError",
    "KeyValue",
    "KVEntry",
    "Message",
    "NotAHubError",
    "ProtocolError",
    "Pub0subError",
    "PublishAck",
    "PublishTimeoutError",
    "QuerySyntaxError",
    "Reconnect",
    "SlowConsumerError",
    "Subscription",
    "SubscriptionClosedError",
    "TlsError",
    "UnsupportedFeatureError",
    "connect",
    "connect_blocking",
]
