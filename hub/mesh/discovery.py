"""Find the other hubs of the cluster through a Kademlia DHT.

Each hub runs the DHT in server mode, bootstraps from ``--bootstrap``
multiaddrs, provides ``pub0sub-cluster:<name>`` and looks it up again every
``interval`` seconds so that late joiners are found -- while it needs to: a hub on
the overlay that holds a link finds the others from link state, and only provides
(an idle 20-hub cluster, switched to the overlay, took 1.94-1.97 of this machine's 2
cores with every hub looking up every 2 s, 0.41-0.48 without: docs/scale.md).  On the
v2 full mesh the lookups back off while they find no new hub, doubling up to
``max_interval``: each lookup asks every hub of a small cluster, so an idle 9-hub
mesh looking up every 2 s spent ~11% of a core per hub (docs/benchmarks.md).  A joiner
does not wait for them: it looks up at ``interval`` itself and dials the hubs it finds.
A lookup that finds a hub it did not find before, or a link that ends (:meth:`hurry`),
brings the interval back to ``interval``.

py-libp2p quirks handled here:

* ``find_providers`` answers from the local provider store alone as soon as it
  holds any entry for the key (its own ``provide`` and every earlier lookup
  put entries there), so a second lookup would never see a late joiner.  Each
  lookup therefore sets the local entries aside, asks the network, and puts
  them back.
* String keys that look like hex are hex-decoded: the cluster key contains
  ``:`` and non-hex letters, so it is always taken as UTF-8.
* Results contain duplicates and this hub itself: deduplicated by peer id.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import multiaddr
import trio
from libp2p.abc import IHost
from libp2p.kad_dht.kad_dht import DHTMode, KadDHT
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.tools.anyio_service import background_trio_service

from ..core.events import ev

log = logging.getLogger("hub.mesh.discovery")

#: Lookup intervals between re-provides while the hub looks the cluster up: provider records are
#: held in the memory of the hubs nearest the key, and a restarted holder has lost them.
REPROVIDE_EVERY = 30
#: Seconds between re-provides while the overlay holds a link.  Each provide reaches the ~20 hubs
#: nearest the key, a libp2p connection to each, which the overlay closes again once idle
#: (hub/mesh/idle.py): re-provided every 60 s, an idle 12-hub overlay kept reconnecting and
#: closing (0.62% of a core per hub; 0.35% at 600 s, its connections those of its links).
#: Joiners come in through --bootstrap hubs, every hub provides when it starts, and py-libp2p
#: keeps a record 48 h.
REPROVIDE_LINKED_SECONDS = 600.0
LOOKUP_TIMEOUT = 10.0


def cluster_key(cluster: str) -> str:
    """The DHT key hubs of ``cluster`` provide; never hex-looking (see the module doc)."""
    return f"pub0sub-cluster:{cluster}"


class Discovery:
    def __init__(
        self,
        host: IHost,
        *,
        cluster: str,
        bootstrap: Sequence[str],
        interval: float,
        on_found: Callable[[PeerInfo], None],
        linked: Callable[[], bool] = lambda: False,
        max_interval: float = 0.0,
    ) -> None:
        """``linked()``: the hub finds its peers otherwise now (the overlay holds a link): no lookups.
        ``max_interval``: how far the interval backs off while lookups find nothing new (at or
        below ``interval``: no backoff)."""
        self.host = host
        self.key = cluster_key(cluster)
        self.bootstrap = [multiaddr.Multiaddr(a) for a in bootstrap]
        self.interval = interval
        self.max_interval = max(interval, max_interval)
        #: Seconds until the next lookup: ``interval``, doubled after each lookup that found no new hub.
        self.wait = interval
        self._hurried = trio.Event()
        self.on_found = on_found
        self.linked = linked
        self.dht: KadDHT | None = None
        self.rounds = 0
        #: DHT lookups of the cluster key made (none while ``linked()``)
        self.lookups = 0
        #: Every hub a lookup found so far (peer ids as text): a lookup that adds none to it backs off
        self.found: set[str] = set()
        #: Provides of the cluster key made
        self.provides = 0

    def status(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "lookups": self.lookups, "provides": self.provides, "found": len(self.found),
                "interval": self.wait}

    def hurry(self) -> None:
        """Something changed (a link ended): look up again at the shortest interval from now on."""
        self.wait = self.interval
        self._hurried.set()

    def _next_wait(self, found: frozenset[str]) -> float:
        """Back off while lookups find no hub they had not found before; a new one starts over.

        An empty result counts as nothing new once some hub was found: py-libp2p's lookups in a
        small cluster now and then come back empty (two hubs: about every other one).  A hub that
        has found nobody yet keeps looking at the base interval."""
        new = found - self.found
        self.found |= new
        settled = bool(self.found) and not new
        self.wait = min(self.wait * 2, self.max_interval) if settled else self.interval
        return self.wait

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        dht = KadDHT(self.host, DHTMode.SERVER)
        self.dht = dht
        async with background_trio_service(dht):
            # Started before any network work: a dead bootstrap must not hold up the hub.
            task_status.started()
            provided_at = -math.inf
            while True:
                if dht.get_routing_table_size() == 0:
                    await self._bootstrap(dht)
                linked = self.linked()
                found: list[PeerInfo] = []
                if not linked:
                    with trio.move_on_after(LOOKUP_TIMEOUT):
                        found = await self._lookup(dht)
                    for info in found:
                        self.on_found(info)
                # Look up before the first provide: afterwards the local store is never empty.
                every = REPROVIDE_LINKED_SECONDS if linked else REPROVIDE_EVERY * self.interval
                if trio.current_time() - provided_at >= every:
                    with trio.move_on_after(LOOKUP_TIMEOUT):
                        await dht.provide(self.key)
                        provided_at = trio.current_time()
                        self.provides += 1
                self.rounds += 1
                if linked:
                    self.wait = self.interval  # rounds only: provides, and a look at whether still linked
                else:
                    self._next_wait(frozenset(str(info.peer_id) for info in found))
                with trio.move_on_after(self.wait):
                    await self._hurried.wait()
                self._hurried = trio.Event()

    async def _bootstrap(self, dht: KadDHT) -> None:
        for addr in self.bootstrap:
            try:
                info = info_from_p2p_addr(addr)
                if info.peer_id == self.host.get_id():
                    continue
                with trio.fail_after(LOOKUP_TIMEOUT):
                    await self.host.connect(info)
                    await dht.add_peer(info.peer_id)
                self.on_found(info)
            except Exception as exc:  # an unreachable bootstrap is retried next round
                log.info("bootstrap %s failed: %r", addr, exc,
                         extra=ev("mesh_bootstrap_failed", reason=repr(exc), x_address=str(addr)))
        if dht.get_routing_table_size():
            with trio.move_on_after(LOOKUP_TIMEOUT):
                await dht.refresh_routing_table()

    async def _lookup(self, dht: KadDHT) -> list[PeerInfo]:
        self.lookups += 1
        store = getattr(getattr(dht, "provider_store", None), "providers", None)
        raw_key = self.key.encode("utf-8")
        saved = store.pop(raw_key, None) if isinstance(store, dict) else None
        try:
            providers = await dht.find_providers(self.key)
        except Exception as exc:
            log.debug("cluster lookup failed: %r", exc, extra=ev("mesh_lookup_failed", reason=repr(exc)))
            providers = []
        finally:
            if saved and isinstance(store, dict):
                current = store.setdefault(raw_key, {})
                for peer, record in saved.items():
                    current.setdefault(peer, record)
        me = self.host.get_id()
        unique: dict[Any, PeerInfo] = {}
        for info in providers:
            if info.peer_id != me and info.peer_id not in unique:
                unique[info.peer_id] = info
        return list(unique.values())
