"""Black holes in the simulated network: a link that drops every frame both ways while both of
its hubs run, as a failed switch port or a partition does (the test bed makes them with the
kernel: sdk/tools/link_cuts.py).

Each end suspects the other ``suspect_after`` seconds in, as a hub whose probe went unanswered
does (hub/core/mesh/overlay_peer.py), and routes round it (hub/core/overlay/routes.py).  A hole
shorter than the world's ``detect_cut`` (the heartbeat bound) heals: frames flow again and the
suspicions end.  A longer one ends the link at the bound, as a cut does (World.cut).
"""

from __future__ import annotations

from .world import World


class BlackHoles:
    def __init__(self, world: World) -> None:
        self.world = world
        #: (a, b) -> the epoch of the link being dropped
        self._open: dict[tuple[int, int], int] = {}
        world.drops.append(self._drops)

    def open(self, a: int, b: int, duration: float, suspect_after: float = 0.5) -> bool:
        """Drop everything between ``a`` and ``b`` for ``duration`` seconds; False: they have no link."""
        w = self.world
        pair = w.pair(a, b)
        epoch = w.links.get(pair)
        if epoch is None or pair in self._open:
            return False
        now = w.clock.now
        if duration >= w.detect_cut:
            w.cut(a, b, duration)  # nothing crosses it from now on, and it ends at the heartbeat bound
        else:
            self._open[pair] = epoch
            w.loop.at(now + duration, self._heal, pair, epoch)
        for hub, other in ((a, b), (b, a)):
            w.loop.at(now + suspect_after, self._suspect_if_open, hub, other, epoch)
        return True

    def _drops(self, src: int, dst: int, epoch: int) -> bool:
        return self._open.get(self.world.pair(src, dst)) == epoch

    def _suspect_if_open(self, hub: int, other: int, epoch: int) -> None:
        """A probe unanswered: only while the hole lasts (one that healed first was answered)."""
        if self._open.get(self.world.pair(hub, other)) == epoch or self.world.cut_between(hub, other):
            self._suspect(hub, other, True)

    def _suspect(self, hub: int, other: int, suspected: bool) -> None:
        h = self.world.hubs[hub]
        if h.up and h.overlay is not None and other in h.overlay.links:
            h.overlay.suspect(other, suspected)
            self.world.pump(hub)

    def _heal(self, pair: tuple[int, int], epoch: int) -> None:
        if self._open.get(pair) == epoch:
            del self._open[pair]
            for hub, other in (pair, pair[::-1]):
                self._suspect(hub, other, False)  # the first frame through answers the probe
