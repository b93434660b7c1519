"""Connections from Spark code (driver and executors): the first hub of the ``hub`` option that answers."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from ..blocking import BlockingClient, connect_blocking
from ..errors import ConnectionLostError
from .options import NO_ACCESS, HubAccess, ReadOptions, TopicBounds, bounds_from_status

log = logging.getLogger("pub0sub.spark")


#: Pause between two rounds over the addresses while a hub is not answering (restarting).
RETRY_PAUSE = 0.2


def connect_first(
    hubs: Sequence[str], *, connect_timeout: float, retry_for: float = 0.0, access: HubAccess = NO_ACCESS, **kwargs: Any
) -> BlockingClient:
    """Connect to the first address that answers, with ``access``'s credentials and TLS, trying
    them in order, and again for ``retry_for`` seconds while none does (a hub restarting:
    executors outlive that rather than burn their task retries in a second).

    Raises :class:`ConnectionLostError` naming every address and why it failed.
    """
    deadline = time.monotonic() + retry_for
    while True:
        errors = []
        for address in hubs:
            try:
                return connect_blocking(address, connect_timeout=connect_timeout, **access.connect_kwargs(), **kwargs)
            except ConnectionLostError as exc:
                errors.append(f"{address}: {exc}")
        if time.monotonic() + RETRY_PAUSE > deadline:
            raise ConnectionLostError("no pub0sub hub reachable (option 'hub'): " + "; ".join(errors))
        time.sleep(RETRY_PAUSE)


def topic_bounds(opts: ReadOptions) -> dict[str, TopicBounds]:
    """Every topic's first/next offset from the hub's status document (driver side, one short connection).

    No reconnect policy inside one try; ``fetchOffset.numRetries`` more tries, ``fetchOffset.retryIntervalMs``
    apart, as Kafka's source does, then the error goes to Spark, which fails the query.
    """
    for attempt in range(opts.fetch_retries + 1):
        try:
            with connect_first(opts.hubs, connect_timeout=opts.connect_timeout, access=opts.access, reconnect=None,
                               name="spark-planner") as client:  # fmt: skip
                return bounds_from_status(client.status(timeout=opts.connect_timeout))
        except (ConnectionLostError, TimeoutError) as exc:
            if attempt == opts.fetch_retries:
                raise
            log.warning("pub0sub planning: %s; trying again in %g s", exc, opts.fetch_retry_interval)
            time.sleep(opts.fetch_retry_interval)
    raise AssertionError("unreachable")


def abandon(client: BlockingClient) -> None:
    """Close without sending what is buffered.

    A failed write task must not send its half-filled last frame: the retried task would
    number its full frame the same, and the hub would drop that one as a duplicate.
    ``BlockingClient.close()`` always flushes, hence the private calls.
    """
    with contextlib.suppress(Exception):
        client._proto.close()
    with contextlib.suppress(Exception):
        client._drop_socket()
