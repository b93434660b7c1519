"""Link failures between processes on loopback, made in the kernel: the test bed's cuts.

A link failure is a TCP connection whose packets stop, both ways, while both ends are up: what a
broken switch port or a partition does.  Here the kernel makes it.  An nftables table of this
process's own (``pub0sub_cuts_<pid>``) has one chain on the ``input`` hook, empty but for the
link being cut: two rules that drop the connection's packets, one per direction (on loopback
every packet passes ``input`` once).  Healing flushes the chain, and TCP sends what waited.

Nothing sits in the path of the links that are not cut, which is why the test bed prefers this
to a proxy in front of every hub (``proxy_farm.py``): the proxies relayed every byte of every
link in one Python process on the same two cores, and with them the 50-hub test bed's
per-second p99 with no fault near rose from ~25 ms to 90-140 ms (docs/scale.md).  What a link
carried comes from the kernel's own count per socket (``ss``, tcp_info's ``bytes_acked`` and
``bytes_received``), which also names the process at each end.

It needs the ``nft`` command and the right to change the firewall (root, or CAP_NET_ADMIN);
:func:`unavailable` says why not, and the test bed then falls back to its proxies.

>>> with KernelCuts() as cuts:                                  # doctest: +SKIP
...     link = cuts.busiest({4242: "hub-1", 4343: "hub-2"}, {24013: "hub-1", 24014: "hub-2"})
...     cuts.cut(link)        # its packets are dropped both ways from now on
...     cuts.heal()           # and flow again
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

#: Tables this module makes are named this, then the PID of the process that made them.
TABLE_PREFIX = "pub0sub_cuts_"
#: Seconds an ``nft`` or ``ss`` call may take.
COMMAND_SECONDS = 10.0

_ENDPOINT = re.compile(r"^(\S+):(\d+)$")
_PID = re.compile(r"pid=(\d+)")
_COUNT = re.compile(r"\b(bytes_acked|bytes_received):(\d+)")


@dataclass(frozen=True)
class Link:
    """One TCP connection between two processes: the accepting end, the dialling end."""

    into: str  #: the process that accepted it (a name from the caller's ``pids``)
    dialled_by: str  #: the process that dialled it ("" when no process of ``pids`` holds that end)
    local: tuple[str, int]  #: the accepting socket's address
    peer: tuple[str, int]  #: the dialling socket's address
    #: bytes both ways since the previous :meth:`KernelCuts.busiest` (since it opened, on the first)
    carried: int


def unavailable() -> str | None:
    """Why kernel cuts cannot be made here (None: they can): no ``nft``, ``ss``, or no right to a table."""
    for command in ("nft", "ss"):
        if shutil.which(command) is None:
            return f"no `{command}` command (Debian: apt-get install {'nftables' if command == 'nft' else 'iproute2'})"
    probe = f"{TABLE_PREFIX}probe_{os.getpid()}"
    try:
        _nft(f"add table ip {probe}\ndelete table ip {probe}\n")
    except RuntimeError as exc:
        return f"nft cannot make a table here ({exc}); it needs root or CAP_NET_ADMIN"
    return None


class KernelCuts:
    """This process's cuts: its own nftables table, removed on exit (and any a dead process left)."""

    def __init__(self) -> None:
        self.table = f"{TABLE_PREFIX}{os.getpid()}"
        self._seen: dict[tuple[tuple[str, int], tuple[str, int]], int] = {}
        self._open = False

    def __enter__(self) -> KernelCuts:
        self._remove_orphans()
        _nft(f"add table ip {self.table}\n"
             f"add chain ip {self.table} cut {{ type filter hook input priority raw; policy accept; }}\n")  # fmt: skip
        self._open = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the table: every cut heals."""
        if self._open:
            self._open = False
            _nft(f"delete table ip {self.table}\n")

    def busiest(self, listeners: Mapping[int, str], pids: Mapping[int, str]) -> Link | None:
        """The connection into one of ``listeners`` (port -> name) that carried the most bytes since
        the previous call (kernel counts per socket); None when there is none.  ``pids`` (PID ->
        name) names the process that dialled it.  Only sockets of the processes in ``pids`` count."""
        sockets = _established()
        owner = {(s.local, s.peer): s.pid for s in sockets}
        best: Link | None = None
        seen: dict[tuple[tuple[str, int], tuple[str, int]], int] = {}
        for s in sockets:
            if s.local[1] not in listeners or pids.get(s.pid) != listeners[s.local[1]]:
                continue  # not the accepting end of a link into one of them
            key = (s.local, s.peer)
            seen[key] = s.carried
            carried = s.carried - self._seen.get(key, 0)
            if best is None or carried > best.carried:
                dialler = pids.get(owner.get((s.peer, s.local), -1), "")
                best = Link(into=listeners[s.local[1]], dialled_by=dialler, local=s.local, peer=s.peer, carried=carried)
        self._seen = seen
        return best

    def cut(self, link: Link) -> None:
        """Drop every packet of ``link`` both ways from now on (until :meth:`heal`)."""
        (a_host, a_port), (b_host, b_port) = link.local, link.peer
        rule = f"add rule ip {self.table} cut ip saddr {{}} ip daddr {{}} tcp sport {{}} tcp dport {{}} drop\n"
        _nft(rule.format(a_host, b_host, a_port, b_port) + rule.format(b_host, a_host, b_port, a_port))

    def heal(self) -> None:
        """Every cut ends: packets flow again, and TCP resends what the cut held up."""
        _nft(f"flush chain ip {self.table} cut\n")

    def _remove_orphans(self) -> None:
        """Tables of this module whose process is gone (killed before it could remove them)."""
        listing = subprocess.run(["nft", "list", "tables", "ip"], capture_output=True, text=True,
                                 timeout=COMMAND_SECONDS, check=False).stdout  # fmt: skip
        for name in re.findall(rf"\btable ip ({TABLE_PREFIX}(\d+))\b", listing):
            table, pid = name
            if not os.path.exists(f"/proc/{pid}"):
                _nft(f"delete table ip {table}\n")


@dataclass(frozen=True)
class _Socket:
    local: tuple[str, int]
    peer: tuple[str, int]
    pid: int
    carried: int


def _established() -> list[_Socket]:
    """Every established TCP socket over IPv4 with its process and bytes both ways (``ss -tinpH``)."""
    out = subprocess.run(["ss", "-4tinpH", "state", "established"], capture_output=True, text=True,
                         timeout=COMMAND_SECONDS, check=True).stdout  # fmt: skip
    return parse_ss(out)


def parse_ss(out: str) -> list[_Socket]:
    """``ss -tinpH state established`` output: a line per socket (queues, local, peer, users),
    then an indented line of tcp_info.  Sockets without a process or counts are left out."""
    sockets: list[_Socket] = []
    head: list[str] | None = None
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            head = line.split()
            continue
        if head is None or len(head) < 5:
            continue
        local, peer, pid = _ENDPOINT.match(head[2]), _ENDPOINT.match(head[3]), _PID.search(head[4])
        head = None
        counts = dict(_COUNT.findall(line))
        if local and peer and pid:
            sockets.append(_Socket(local=(local[1], int(local[2])), peer=(peer[1], int(peer[2])), pid=int(pid[1]),
                                   carried=sum(int(v) for v in counts.values())))  # fmt: skip
    return sockets


def _nft(script: str) -> None:
    done = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True,
                          timeout=COMMAND_SECONDS, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"nft failed: {done.stderr.strip() or done.returncode}")
