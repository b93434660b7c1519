"""Ports handed out for hubs that do not listen yet, leased across this machine's processes.

Why: :func:`sdk.tools.cluster.restartable_ports` picks ports below the ephemeral range at random
and checks each with a trial bind, and the hub binds it a second or more later (it imports
libp2p first).  Meanwhile another pick -- the next hub of the same cluster, or a test in another
pytest-xdist worker -- could find the same port free and hand it out again; the later hub then
exits with "mesh address ... is in use" (a suite run on three workers saw it, 2026-11-29).  A
lease keeps a port from being handed out again for LEASE_SECONDS by any process of this user:
one small JSON file, read and written under an exclusive ``flock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

#: Long enough for a hub to start and bind on a loaded machine; after that the bound port is
#: not free anyway.
LEASE_SECONDS = 120.0
REGISTRY = Path(tempfile.gettempdir()) / f"pub0sub-port-leases-{os.getuid()}.json"


def lease(candidates: Iterable[int], n: int, usable: Callable[[int], bool], *, registry: Path = REGISTRY,
          seconds: float = LEASE_SECONDS) -> list[int]:  # fmt: skip
    """Up to ``n`` distinct ports of ``candidates``, in their order, that no live lease holds and
    ``usable`` accepts; each is leased for ``seconds`` before it is returned."""
    with _leases(registry) as held:
        picked: list[int] = []
        for port in candidates:
            if port in held or port in picked or not usable(port):
                continue
            picked.append(port)
            if len(picked) == n:
                break
        until = time.time() + seconds
        held.update((port, until) for port in picked)
    return picked


def renew(ports: Iterable[int], *, registry: Path = REGISTRY, seconds: float = LEASE_SECONDS) -> None:
    """Lease ``ports`` again for ``seconds`` from now, whatever held them: the ports of a hub that
    goes down to be started on them again (LocalCluster.kill, restart), which no pick may take
    meanwhile."""
    with _leases(registry) as held:
        until = time.time() + seconds
        held.update((port, until) for port in ports)


@contextlib.contextmanager
def _leases(registry: Path) -> Iterator[dict[int, float]]:
    """The live leases (port -> end, epoch seconds), under the registry's lock; written back after."""
    with open(registry, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        f.seek(0)
        now = time.time()
        try:
            held = {int(port): float(until) for port, until in json.loads(f.read() or "{}").items()}
        except (ValueError, AttributeError, TypeError):
            held = {}  # a file cut short by a crash mid-write: its leases are lost, not the picks
        held = {port: until for port, until in held.items() if until > now}
        yield held
        f.seek(0)
        f.truncate()
        f.write(json.dumps(held))
