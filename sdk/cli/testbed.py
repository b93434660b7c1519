"""``pub0sub testbed``: N real hubs on the overlay, traffic and faults, and what they did.

    pub0sub testbed --hubs 50 --minutes 10 --json bed.json --plot bed.png
    pub0sub testbed --hubs 50 --mesh-overlay-from 10     # start on the full mesh, as hubs do by default
    pub0sub testbed --hubs 10 --minutes 1 --fault-every 0      # no faults
    pub0sub testbed --hubs 20 --faults crash,stall             # no link failures
    pub0sub testbed --hubs 20 --link-cuts proxy                # links through proxies, not cut in the kernel

See sdk/tools/testbed.py for what runs and what is measured.  Exit status: 0 when every
acknowledged publish reached every subscriber of its topic once and in order, 1 otherwise
(or when stopped early), 2 usage errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..tools.stopping import run_until_stopped
from ..tools.testbed import Settings, TestBed
from ..tools.testbed_report import FAULT_KINDS, LINK_CUTS, render, write


def build_parser(prog: str) -> argparse.ArgumentParser:
    d = Settings()
    p = argparse.ArgumentParser(prog=prog, description="Run N overlay hubs on 127.0.0.1 with traffic and faults.")
    p.add_argument("--hubs", type=int, default=d.hubs, help=f"hub processes (default {d.hubs})")
    p.add_argument("--minutes", type=float, default=d.minutes, help=f"minutes of traffic (default {d.minutes:g})")
    p.add_argument("--max-peers", type=int, default=d.max_peers, help=f"links per hub at most (default {d.max_peers})")
    p.add_argument("--degree", type=int, default=d.degree, help=f"links each hub keeps (default {d.degree})")
    p.add_argument(
        "--mesh-overlay-from",
        type=int,
        default=d.overlay_from,
        metavar="N",
        help="the hubs' --mesh-overlay-from: 1 starts them on the overlay; 10 (a hub's default) starts "
        f"them on the full mesh, each switching once it holds N-1 links (default {d.overlay_from})",
    )
    p.add_argument("--rate", type=float, default=d.rate, help=f"publishes per second in all (default {d.rate:g})")
    p.add_argument("--publishers", type=int, default=d.publishers, help=f"publishing hubs (default {d.publishers})")
    p.add_argument(
        "--subscriber-hubs",
        type=int,
        default=d.subscriber_hubs,
        help=f"hubs with subscribers (default {d.subscriber_hubs}); the others are crashed and stalled",
    )
    p.add_argument(
        "--fault-every",
        type=float,
        default=d.fault_every,
        help=(f"a fault every this many seconds of the run, of the --faults kinds in turn (one due while "
              f"another lasts starts when it ends); 0: none (default {d.fault_every:g})"),
    )
    p.add_argument(
        "--faults",
        type=fault_kinds,
        default=d.faults,
        metavar="KINDS",
        help="comma-separated, taken in turn: crash (SIGKILL and restart a relay hub), stall (SIGSTOP it "
        "for a while), link (cut the busiest link for a while, see --link-cuts) "
        f"(default {','.join(d.faults)})",
    )
    p.add_argument(
        "--link-cuts",
        choices=LINK_CUTS,
        default=d.link_cuts,
        help="how a link is cut: kernel (nftables drops its packets both ways; needs the nft command "
        "and root or CAP_NET_ADMIN), proxy (every hub runs behind a proxy of this command's, which "
        f"black-holes the link), auto: kernel where it can (default {d.link_cuts})",
    )
    p.add_argument("--seed", type=int, default=d.seed, help=f"which hubs do what, and which fail (default {d.seed})")
    p.add_argument(
        "--data-root", type=Path, default=d.data_root, help=f"hub data dirs and logs (default {d.data_root})"
    )
    p.add_argument("--json", type=Path, help="write the summary here")
    p.add_argument("--plot", type=Path, help="write a plot (PNG) here")
    return p


def fault_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"fault kinds are {', '.join(FAULT_KINDS)}, got {text!r}")
    return kinds


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub testbed") -> int:
    parser = build_parser(prog)
    a = parser.parse_args(argv)
    if a.hubs < a.publishers + a.subscriber_hubs:
        parser.error(
            f"--hubs {a.hubs} leaves no hub to fault past {a.publishers} publishing and "
            f"{a.subscriber_hubs} subscribing hubs"
        )
    settings = Settings(
        hubs=a.hubs,
        minutes=a.minutes,
        max_peers=a.max_peers,
        degree=a.degree,
        overlay_from=a.mesh_overlay_from,
        rate=a.rate,
        publishers=a.publishers,
        subscriber_hubs=a.subscriber_hubs,
        fault_every=a.fault_every,
        faults=a.faults,
        link_cuts=a.link_cuts,
        seed=a.seed,
        data_root=a.data_root,
    )
    bed = TestBed(settings, progress=lambda line: print(line, flush=True))
    outcome = run_until_stopped(bed.run)
    if outcome.stopped or outcome.value is None:
        print(f"stopped by {outcome.signal}: the hubs are stopped, no summary", file=sys.stderr)
        return 1
    report = outcome.value
    print(render(report))
    write(report, a.json, a.plot)
    d = report["delivery"]
    return 0 if d["delivered"] == d["expected"] and not d["duplicates"] and not d["fifo_violations"] else 1
