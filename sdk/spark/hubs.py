"""Connections from Spark code (driver and executors): the first hub of the ``hub`` option that answers."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from ..blocking import BlockingClient, connect_blocking
from ..errors import ConnectionLostError
from .options import NO_ACCESS, HubAccess, TopicBounds, bounds_from_status


def connect_first(
    hubs: Sequence[str], *, connect_timeout: float, access: HubAccess = NO_ACCESS, **kwargs: Any
) -> BlockingClient:
    """Connect to the first address that answers, trying them in order, with ``access``'s credentials and TLS.

    Raises :class:`ConnectionLostError` naming every address and why it failed.
    """
    errors = []
    for address in hubs:
        try:
            return connect_blocking(address, connect_timeout=connect_timeout, **access.connect_kwargs(), **kwargs)
        except ConnectionLostError as exc:
            errors.append(f"{address}: {exc}")
    raise ConnectionLostError("no pub0sub hub reachable (option 'hub'): " + "; ".join(errors))


def topic_bounds(
    hubs: Sequence[str], *, connect_timeout: float, access: HubAccess = NO_ACCESS
) -> dict[str, TopicBounds]:
    """Every topic's first/next offset from the hub's status document (driver side, one short connection).

    No reconnect policy: planning should fail fast and let Spark report it, not hang.
    """
    with connect_first(hubs, connect_timeout=connect_timeout, access=access, reconnect=None,
                       name="spark-planner") as client:  # fmt: skip
        return bounds_from_status(client.status(timeout=connect_timeout))


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
