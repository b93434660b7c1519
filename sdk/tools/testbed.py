"""The overlay test bed: N real hub processes on the overlay, traffic, crashes, stalls, link failures.

``pub0sub testbed --hubs 50 --minutes 10`` starts the hubs on loopback (each bootstrapped from
the first; the overlay finds the rest) with ``--mesh-overlay``, or with ``--mesh-overlay-from N``
on the v2 full mesh that each leaves for the overlay at N hubs (``overlay_from``), measures
them idle, then runs publishers and subscribers across hubs while it kills and restarts
(SIGKILL, same data dir) and stalls (SIGSTOP/SIGCONT) the hubs that relay but serve no
client -- a stall hits the relay that relayed the most sets since the last one, so that its
neighbours route around it (detours) -- and fails links: a link failure cuts the link that
carried the most bytes since the last one, both ways, while both hubs stay up (both ends must
notice it by their heartbeats).  The kernel cuts it (``link_cuts.py``: nftables drops its
packets, then lets them through again), with nothing in the path of the other links; where
that cannot be done (no ``nft``, no root), each hub announces a proxy in front of its mesh port
(``--mesh-announce``, ``proxy_farm.py``), so every link runs through one, which black-holes the
link and then closes it.  It prints what issue 16 asks:
delivery of acknowledged publishes, duplicates, FIFO violations per publisher, publish-to-
deliver latency, payload copies per delivered set, control against payload bytes, interest
frames per hub-level join, time to first delivery after a subscribe, links, RSS and CPU per
hub.  A line of progress every few seconds; a JSON summary (``--json``) and a plot (``--plot``)
at the end (``testbed_report.py``).

Every publish is acknowledged by its hub (``publish_acked``) and carries (publisher, sequence,
send time); subscribers live at hubs that are never crashed or stalled (their links may fail),
so every acknowledged publish of a topic must reach every subscriber of it, once and in order
per publisher.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..blocking import connect_blocking
from .cluster import HubInfo, LocalCluster, Ports
from .link_cuts import KernelCuts, unavailable
from .proxy_farm import ProxyFarm
from .testbed_report import Publisher, Received, Settings, Subscriber, summarize

#: The v2 mesh protocol's id prefix (``/pub0sub/mesh/2...``), as the hubs' status names a link's protocol.
V2 = "/pub0sub/mesh/2."

#: Hubs asked for their status at once (each a connection from a thread of this process).
STATUS_THREADS = 16

#: Each hub's own page size (for RSS from /proc/PID/statm) and clock ticks (CPU from /proc/PID/stat).
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def proc_sample(pid: int) -> tuple[float, int]:
    """(CPU seconds used so far, RSS bytes) of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    cpu = (int(parts[11]) + int(parts[12])) / TICKS
    with open(f"/proc/{pid}/statm") as f:
        rss = int(f.read().split()[1]) * PAGE
    return cpu, rss


def wakeups(pid: int) -> int:
    """Context switches of a process's main thread (its event loop) so far, from /proc: each is
    one wake-up of the loop, or a preemption."""
    with open(f"/proc/{pid}/status") as f:
        return sum(int(line.split()[1]) for line in f if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")))


def machine_cpu() -> tuple[int, int]:
    """(busy, all) clock ticks of every core of the machine so far, from /proc/stat (idle and
    iowait are not busy)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


class TestBed:
    def __init__(self, settings: Settings, progress: Callable[[str], object] = print) -> None:
        self.s = settings
        self.progress = progress
        self.rng = random.Random(settings.seed)
        args = [
            "--mesh-overlay-from",
            str(settings.overlay_from),
            "--no-discovery",
            "--max-peers",
            str(settings.max_peers),
            "--mesh-degree",
            str(min(settings.degree, settings.max_peers)),
            "--log-level",
            "WARNING",
        ]
        #: With link faults: the kernel cuts them, else a proxy in front of each hub's mesh port (_proxied)
        self.link_cuts = self._link_cuts() if "link" in settings.faults else None
        self.cuts = KernelCuts() if self.link_cuts == "kernel" else None
        self.proxies = ProxyFarm() if self.link_cuts == "proxy" else None
        self.proxy_ports: dict[str, int] = {}
        self.cluster = LocalCluster(settings.hubs, settings.data_root, extra_args=args, note=progress,
                                    hub_args=None if self.proxies is None else self._proxied)  # fmt: skip
        self.stop = threading.Event()
        self.faults: list[dict[str, Any]] = []
        self.figures: dict[str, Any] = {}
        self.relays: list[int] = []
        #: ROUTED_SETS frames each relay had sent when last looked at (see _stall_target)
        self._relayed: dict[int, int] = {}
        self._drained = False

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        s = self.s
        t0 = time.monotonic()
        self.progress(f"starting {s.hubs} hubs with {self._mode()} --max-peers {s.max_peers} in {s.data_root}"
                      + ("" if self.proxies is None else ", each behind a proxy")
                      + ("" if self.cuts is None else ", links cut in the kernel (nftables)"))
        self.figures["link_cuts"] = self.link_cuts
        with contextlib.ExitStack() as stack:
            if self.proxies is not None:
                stack.enter_context(self.proxies)  # stopped after the hubs
            if self.cuts is not None:
                stack.enter_context(self.cuts)  # removed after the hubs stopped
            stack.enter_context(self.cluster)
            self.figures["start_seconds"] = round(time.monotonic() - t0, 1)
            formed = self._wait_formed(timeout=max(60.0, s.hubs * 2.0))
            self.figures["formed_seconds"] = round(time.monotonic() - t0, 1) if formed else None
            self.figures["idle"] = self._idle()
            pubs, subs = self._plan()
            before = self._overlay_totals()
            threads = [threading.Thread(target=self._subscribe, args=(sub,), daemon=True) for sub in subs]
            for thread in threads:
                thread.start()
            time.sleep(5.0)  # the hub-level joins reach the rendezvous owners
            joins = sum(len(sub.topics) for sub in subs)
            after_joins = self._overlay_totals()
            interest = sum(
                after_joins["frames"].get(k, 0) - before["frames"].get(k, 0)
                for k in ("INTEREST", "WATCH", "INTEREST_SET")
            )
            self.figures["interest_frames_per_join"] = round(interest / joins, 1) if joins else None
            pub_threads = [threading.Thread(target=self._publish, args=(pub,), daemon=True) for pub in pubs]
            self.figures["traffic_started_at"] = time.time()
            for thread in pub_threads:
                thread.start()
            threading.Thread(target=self._sample_machine, daemon=True).start()
            self._traffic(pubs, subs, s.minutes * 60)
            self.stop.set()
            for thread in pub_threads:
                thread.join(10)
            self._drain(pubs, subs, timeout=30.0)
            for thread in threads:
                thread.join(10)
            self.figures["end"] = self._overlay_totals()
            self.figures["traffic_bytes"] = {
                k: self.figures["end"]["bytes"].get(k, 0) - after_joins["bytes"].get(k, 0)
                for k in self.figures["end"]["bytes"]
            }
            self.figures["traffic_frames"] = {
                k: self.figures["end"]["frames"].get(k, 0) - after_joins["frames"].get(k, 0)
                for k in self.figures["end"]["frames"]
            }
            self.figures["hubs_at_end"] = self._per_hub()
            if self.proxies is not None and self.proxies.pid is not None:
                self.figures["proxy_cpu_seconds"] = round(proc_sample(self.proxies.pid)[0], 1)
        return summarize(self.s, self.figures, pubs, subs, self.faults)

    def _link_cuts(self) -> str:
        """How this run cuts links (Settings.link_cuts), ``auto`` settled; kernel cuts asked for
        where they cannot be made are an error that says why."""
        why = None if self.s.link_cuts == "proxy" else unavailable()
        if self.s.link_cuts == "kernel" and why is not None:
            raise RuntimeError(f"links cannot be cut in the kernel here: {why}")
        if self.s.link_cuts == "auto" and why is not None:
            self.progress(f"links go through proxies: they cannot be cut in the kernel here ({why})")
        return "proxy" if why is not None or self.s.link_cuts == "proxy" else "kernel"

    def _proxied(self, name: str, ports: Ports) -> list[str]:
        """The arguments that put hub ``name`` behind its proxy (the same one across restarts)."""
        assert self.proxies is not None
        if name not in self.proxy_ports:
            self.proxy_ports[name] = self.proxies.add(name, upstream=ports.mesh)
        return ["--mesh-announce", f"/ip4/127.0.0.1/tcp/{self.proxy_ports[name]}"]

    def _mode(self) -> str:
        n = self.s.overlay_from
        return "--mesh-overlay" if n == 1 else f"--mesh-overlay-from {n} (the v2 full mesh first)"

    def _wait_formed(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        want = self.s.hubs - 1
        while time.monotonic() < deadline:
            reach = [overlay.get("reachable", 0) for overlay in self._overlays(self.cluster.hubs)]
            self.progress(f"forming: {sum(r >= want for r in reach)}/{len(reach)} hubs reach all others")
            if all(r >= want for r in reach):
                return True
            time.sleep(2.0)
        return False

    def _mesh(self, hub: HubInfo) -> dict[str, Any]:
        try:
            with connect_blocking(hub.address, name="testbed", handshake_timeout=3.0) as client:
                return client.status(timeout=5.0).get("mesh") or {}
        except Exception:  # a hub down or stalled: it has nothing to say now
            return {}

    def _meshes(self, hubs: Sequence[HubInfo]) -> list[dict[str, Any]]:
        """:meth:`_mesh` of each hub, asked at once: one at a time, a 50-hub look took a round trip
        per hub, and up to the timeouts for each hub down or stalled."""
        with ThreadPoolExecutor(max_workers=max(1, min(STATUS_THREADS, len(hubs)))) as pool:
            return list(pool.map(self._mesh, hubs))

    def _overlays(self, hubs: Sequence[HubInfo]) -> list[dict[str, Any]]:
        return [mesh.get("overlay") or {} for mesh in self._meshes(hubs)]

    def _overlay_totals(self) -> dict[str, dict[str, int]]:
        frames: dict[str, int] = {}
        sent: dict[str, int] = {}
        for overlay in self._overlays(self.cluster.hubs):
            for kind, n in overlay.get("sent_frames", {}).items():
                frames[kind] = frames.get(kind, 0) + n
            for kind, n in overlay.get("sent_bytes", {}).items():
                sent[kind] = sent.get(kind, 0) + n
        return {"frames": frames, "bytes": sent}

    def _idle(self) -> dict[str, Any]:
        """CPU (% of a core) and RSS per hub over ``idle_seconds`` with no traffic at all, from
        ``idle_settle`` seconds after the overlay formed."""
        hubs = self.cluster.hubs
        time.sleep(self.s.idle_settle)
        first = [proc_sample(h.pid) for h in hubs]
        woken = [wakeups(h.pid) for h in hubs]
        time.sleep(self.s.idle_seconds)
        last = [proc_sample(h.pid) for h in hubs]
        wakes = [(wakeups(h.pid) - w) / self.s.idle_seconds for h, w in zip(hubs, woken, strict=True)]
        cpu = [100 * (b[0] - a[0]) / self.s.idle_seconds for a, b in zip(first, last, strict=True)]
        rss = [b[1] for b in last]
        return {
            "cpu_percent_mean": round(sum(cpu) / len(cpu), 2),
            "cpu_percent_max": round(max(cpu), 2),
            "wakeups_per_s_mean": round(sum(wakes) / len(wakes), 1),
            "rss_mib_mean": round(sum(rss) / len(rss) / 2**20, 1),
            "rss_mib_max": round(max(rss) / 2**20, 1),
        }

    def _per_hub(self) -> list[dict[str, Any]]:
        rows = []
        for hub, mesh in zip(self.cluster.hubs, self._meshes(self.cluster.hubs), strict=True):
            overlay = mesh.get("overlay") or {}
            cpu, rss = proc_sample(hub.pid) if hub.proc is not None and hub.proc.poll() is None else (0.0, 0)
            rows.append(
                {
                    "hub": hub.name,
                    "links": len(overlay.get("links", [])),
                    "shortcuts": len(overlay.get("shortcuts", [])),
                    # links of the full mesh the switch left (to a hub the overlay does not reach)
                    "v2_links": sum(
                        1 for p in mesh.get("peers", []) if p.get("connected") and V2 in (p.get("protocol") or "")
                    ),
                    # times this hub routed around a neighbour that answered nothing (detours), since
                    # it started (the links' own counts go with links that ended, as a stall's often do)
                    "suspicions": overlay.get("suspicions", 0),
                    "resent_round_suspects": overlay.get("resent_round_suspects", 0),
                    "resent_round_lost_links": overlay.get("resent_round_lost_links", 0),
                    # libp2p connections held, and those closed for carrying no stream (hub/mesh/idle.py)
                    "libp2p_connections": overlay.get("connections"),
                    "idle_closed": overlay.get("idle_closed"),
                    "rss_mib": round(rss / 2**20, 1),
                    "cpu_seconds": round(cpu, 1),
                    "counters": overlay.get("counters", {}),
                }
            )
        return rows

    # -- who does what ---------------------------------------------------------------------

    def _plan(self) -> tuple[list[Publisher], list[Subscriber]]:
        s = self.s
        order = list(range(s.hubs))
        self.rng.shuffle(order)
        pub_hubs = order[: s.publishers]
        sub_hubs = order[s.publishers : s.publishers + s.subscriber_hubs]
        #: hubs that serve no client: these are crashed and stalled
        self.relays = order[s.publishers + s.subscriber_hubs :]
        wanted: dict[int, list[str]] = {h: [] for h in sub_hubs}
        topics = []
        for i in range(s.wide_topics):
            topic = f"bed.wide{i}"
            topics.append(topic)
            for h in sub_hubs:
                wanted[h].append(topic)
        for i in range(s.few_topics):
            topic = f"bed.few{i}"
            topics.append(topic)
            for h in self.rng.sample(sub_hubs, min(len(sub_hubs), 4)):
                wanted[h].append(topic)
        for i in range(s.pair_topics):
            topic = f"bed.pair{i}"
            topics.append(topic)
            for h in self.rng.sample(sub_hubs, min(len(sub_hubs), 2)):
                wanted[h].append(topic)
        pubs = [
            Publisher(i, h, [t for j, t in enumerate(topics) if j % len(pub_hubs) == i]) for i, h in enumerate(pub_hubs)
        ]
        subs = [Subscriber(h, ts) for h, ts in wanted.items() if ts]
        return pubs, subs

    def _subscribe(self, sub: Subscriber) -> None:
        hub = self.cluster.hubs[sub.hub]
        try:
            with (
                connect_blocking(hub.address, name=f"bed-sub-{sub.hub}") as client,
                client.subscribe(sub.topics) as live,
            ):
                sub.subscribed_at = time.time()
                while not (self.stop.is_set() and self._drained):
                    msg = live.next(timeout=0.5)
                    if msg is None:
                        continue
                    publisher, seq, sent = msg.data.split(b":", 2)
                    sub.got.append((msg.topic, Received(time.time(), int(publisher), int(seq), float(sent))))
        except Exception as exc:  # counted and shown: a subscriber that fails loses what came after
            sub.errors.append(repr(exc))

    def _publish(self, pub: Publisher) -> None:
        hub = self.cluster.hubs[pub.hub]
        interval = self.s.publishers / self.s.rate
        seq = 0
        with connect_blocking(hub.address, name=f"bed-pub-{pub.index}") as client:
            next_at = time.monotonic()
            while not self.stop.is_set():
                topic = pub.topics[seq % len(pub.topics)]
                seq += 1
                sent = time.time()
                try:
                    client.publish_acked(topic, f"{pub.index}:{seq}:{sent:.6f}".encode(), timeout=10.0)
                    pub.acked.append((topic, seq, sent))
                except Exception:  # unknown outcome: not counted as acknowledged
                    pub.failed += 1
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))

    def _traffic(self, pubs: list[Publisher], subs: list[Subscriber], seconds: float) -> None:
        s = self.s
        start = time.monotonic()
        next_fault = start + s.fault_every if s.fault_every > 0 else float("inf")
        next_line = start
        kinds = [k for k in s.faults if k == "link" or self.relays]  # crashes and stalls hit relays only
        turn = 0
        while (now := time.monotonic()) - start < seconds:
            if now >= next_fault and kinds:
                self._fault(kinds[turn % len(kinds)])
                turn += 1
                # On the run's clock, not after the fault ended: a restart slowed by load must not
                # push the next fault out of a short run (CI's 21-second run had only its crash).
                # One that came due meanwhile starts at once.
                next_fault = max(next_fault + s.fault_every, time.monotonic())
            if now >= next_line:
                acked = sum(len(p.acked) for p in pubs)
                got = sum(len(x.got) for x in subs)
                self.progress(f"{now - start:6.0f}s  acked {acked:,}  delivered {got:,}  faults {len(self.faults)}")
                next_line = now + 10.0
            time.sleep(0.2)

    def _sample_machine(self) -> None:
        """The machine's busy share of its cores over each second of traffic (the hubs, this
        process and whatever else runs), as (second, share): a second slow for every hub at once
        may be one the cores were full."""
        start = self.figures["traffic_started_at"]
        series = self.figures["machine_busy"] = []
        busy, total = machine_cpu()
        while not self.stop.wait(1.0 - (time.time() - start) % 1.0):
            now_busy, now_total = machine_cpu()
            if now_total > total:
                series.append((round(time.time() - start) - 1, round((now_busy - busy) / (now_total - total), 3)))
            busy, total = now_busy, now_total

    def _stall_target(self) -> tuple[int, int]:
        """The relay that relayed the most sets since the last look, and how many frames of them:
        stalling a hub no set crosses exercises nothing (in the first 50-hub runs the publishers
        reached the subscriber hubs over shortcuts, and no stall led to a detour).  A random relay
        when none relayed any.  A relay serves no client, so every ROUTED_SETS it sent was relayed."""
        best, most = self.rng.choice(self.relays), 0
        overlays = self._overlays([self.cluster.hubs[index] for index in self.relays])
        for index, overlay in zip(self.relays, overlays, strict=True):
            sent = overlay.get("sent_frames", {}).get("ROUTED_SETS", 0)
            relayed = max(0, sent - self._relayed.get(index, 0))  # a restarted hub counts from 0
            self._relayed[index] = sent
            if relayed > most:
                best, most = index, relayed
        return best, most

    def _fault(self, kind: str) -> None:
        at = time.time()
        fault = self._link_fault() if kind == "link" else self._hub_fault(crash=kind == "crash")
        if fault is not None:
            self.faults.append({"kind": kind, "at": at, **fault})

    def _hub_fault(self, *, crash: bool) -> dict[str, Any]:
        if crash:
            index, relayed = self.rng.choice(self.relays), 0
        else:
            index, relayed = self._stall_target()
        hub = self.cluster.hubs[index]
        assert hub.proc is not None
        if crash:
            self.cluster.kill(index)
            time.sleep(self.s.fault_length)
            self.cluster.restart(index)
        else:
            hub.proc.send_signal(signal.SIGSTOP)
            time.sleep(self.s.fault_length)
            hub.proc.send_signal(signal.SIGCONT)
        self.progress(f"fault: {'killed and restarted' if crash else 'stalled'} {hub.name}"
                      + ("" if crash else f" (it relayed {relayed} frames of sets since the last stall)"))
        return {"hub": hub.name} if crash else {"hub": hub.name, "relayed_frames_before": relayed}

    def _link_fault(self) -> dict[str, Any] | None:
        """Cut the link that carried the most bytes since the last look for ``fault_length``
        seconds: both hubs are up and must notice it by their heartbeats, route around it, and
        repair what it lost.  In the kernel its packets are dropped and then let through again
        (what TCP still holds then arrives, if the hubs kept the link); a proxy black-holes it
        (what it swallowed is lost), then closes it, and knows only which hub the link goes into."""
        if self.cuts is not None:
            return self._kernel_link_fault(self.cuts)
        assert self.proxies is not None
        busiest = self.proxies.busiest()
        if busiest is None or not self.proxies.blackhole(busiest[0], busiest[1]):
            self.progress("fault: no link to fail")
            return None
        name, _, sent = busiest
        time.sleep(self.s.fault_length)
        self.proxies.heal(name)
        self.progress(f"fault: black-holed a link into {name} (it carried {sent:,} bytes since the last look)")
        return {"hub": name, "bytes_before": sent}

    def _kernel_link_fault(self, cuts: KernelCuts) -> dict[str, Any] | None:
        hubs = self.cluster.hubs
        listeners = {self.cluster.ports_of(i).mesh: hub.name for i, hub in enumerate(hubs)}
        pids = {hub.proc.pid: hub.name for hub in hubs if hub.proc is not None and hub.proc.poll() is None}
        link = cuts.busiest(listeners, pids)
        if link is None:
            self.progress("fault: no link to fail")
            return None
        cuts.cut(link)
        time.sleep(self.s.fault_length)
        cuts.heal()
        self.progress(f"fault: cut the link from {link.dialled_by or '?'} into {link.into} "
                      f"(it carried {link.carried:,} bytes since the last look)")  # fmt: skip
        return {"hub": link.into, "from": link.dialled_by, "bytes_before": link.carried}

    def _drain(self, pubs: list[Publisher], subs: list[Subscriber], timeout: float) -> None:
        """Wait until every subscriber holds what it should, or the timeout."""
        want: dict[int, int] = {}
        for sub in subs:
            want[id(sub)] = sum(1 for p in pubs for topic, _, _ in p.acked if topic in sub.topics)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(
            len({(r.publisher, r.seq) for _, r in sub.got}) < want[id(sub)] for sub in subs
        ):
            time.sleep(0.5)
        self._drained = True
