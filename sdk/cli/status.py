"""``pub0sub status``: show a hub's status.

    pub0sub status --hub 127.0.0.1:7420        # one screen: the numbers an operator looks at first
    pub0sub status --wide                      # every key of the document, lists as tables
    pub0sub status --json | jq .counters       # the document itself

The document is whatever the hub's STATUS_REPLY holds.  The default view picks
the essentials in human units (like ``nats server info`` or ``redis-cli INFO``);
``--wide`` prints scalars as ``key value`` lines and lists of objects as tables,
so new keys show up there without a change here.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ..blocking import connect_blocking
from .support import add_hub_option, connect_options, run


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Show a pub0sub hub's status.")
    add_hub_option(p)
    view = p.add_mutually_exclusive_group()
    view.add_argument("--wide", action="store_true", help="every key of the status document, lists as tables")
    view.add_argument("--json", action="store_true", help="print the status document as JSON")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the reply (default 10)")
    return p


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    return "-" if value is None else str(value)


def table(rows: list[dict[str, Any]], indent: str = "  ") -> list[str]:
    """Rows of dicts as an aligned text table; nested lists of dicts are left out (shown separately)."""
    nested = {key for row in rows for key, value in row.items() if _is_table(value)}
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns and key not in nested:
                columns.append(key)
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = [indent + "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    for r in cells:
        lines.append(
            indent
            + "  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
        )
    return lines


def _numeric(text: str) -> bool:
    return text.replace(".", "", 1).lstrip("-").isdigit()


def _is_table(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def render(doc: dict[str, Any], indent: str = "") -> list[str]:
    """The status document as readable lines: scalars first, then sections and tables."""
    lines: list[str] = []
    scalars = {
        k: v for k, v in doc.items() if not isinstance(v, dict | list) or (isinstance(v, list) and not _is_table(v))
    }
    width = max((len(k) for k in scalars), default=0)
    for key, value in scalars.items():
        lines.append(f"{indent}{key.ljust(width)}  {_cell(value)}")
    for key, value in doc.items():
        if isinstance(value, dict):
            lines.append("")
            lines.append(f"{indent}{key}:")
            lines.extend(render(value, indent + "  "))
        elif _is_table(value):
            lines.append("")
            lines.append(f"{indent}{key}:")
            lines.extend(table(value, indent + "  "))
            for row in value:
                for sub_key, sub_value in row.items():
                    if _is_table(sub_value):
                        label = ", ".join(f"{k}={_cell(v)}" for k, v in row.items() if k in ("id", "name", "peer"))
                        lines.append(f"{indent}  {sub_key} of {label or '?'}:")
                        lines.extend(table(sub_value, indent + "    "))
    return lines


# -- the compact view ------------------------------------------------------------------


def human_count(n: float) -> str:
    """``1,234`` below 100 000, then ``123k``, ``4.56M``, ``7.89G`` (three significant digits)."""
    if abs(n) < 100_000:
        return f"{n:,.0f}"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            value = n / size
            return f"{value:.3g}{unit}" if value < 1000 else f"{value:,.0f}{unit}"
    return f"{n:,.0f}"


def human_bytes(n: float) -> str:
    """``512 B``, ``1.5 KiB``, ``64.0 MiB``, ``2.00 GiB``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}" if n / size < 100 else f"{n / size:,.0f} {unit}"
    return f"{n:.0f} B"


def human_duration(seconds: float) -> str:
    """``45.2s``, ``12m 03s``, ``5h 07m``, ``3d 04h``: the two largest units."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    s = int(seconds)
    for big, big_size, small, small_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if s >= big_size:
            return f"{s // big_size}{big} {(s % big_size) // small_size:02d}{small}"
    return f"{s}s"


def human_rate(per_second: float) -> str:
    return f"{per_second:.1f}/s" if per_second < 10 else f"{human_count(per_second)}/s"


def address_of(multiaddr: str | None) -> str:
    """``/ip4/127.0.0.1/tcp/7421/p2p/12D3...`` -> ``127.0.0.1:7421`` (as typed for --listen)."""
    if not multiaddr:
        return "-"
    parts = multiaddr.strip("/").split("/")
    fields = dict(zip(parts[::2], parts[1::2], strict=False))
    host = fields.get("ip4") or fields.get("dns4") or fields.get("dns") or fields.get("ip6")
    port = fields.get("tcp") or fields.get("udp")
    if host is None or port is None:
        return multiaddr.split("/p2p/")[0]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _peer_state(peer: dict[str, Any]) -> str:
    version = (peer.get("protocol") or "").rsplit("/", 1)[-1].split(".")[0]
    if peer.get("connected"):
        return ", ".join(x for x in ("linked", f"v{version}" if version else "", peer.get("direction") or "") if x)
    return f"down ({peer['last_close']})" if peer.get("last_close") else "down"


def _plural(n: int, word: str) -> str:
    return f"{human_count(n)} {word}{'' if n == 1 else 's'}"


def _access(doc: dict[str, Any]) -> str:
    """Who may use the client port (docs/security.md): open or users, TLS, refusals."""
    auth: dict[str, Any] = doc.get("auth") or {}
    tls = " over TLS" if (doc.get("tls") or {}).get("enabled") else ""
    if not auth.get("required"):
        return f"OPEN: anyone who reaches the port may publish and subscribe to anything{tls}"
    per_user = (auth.get("per_user") or {}).values()
    refused = sum(u.get("publish_refused", 0) + u.get("subscribe_refused", 0) for u in per_user)
    failures = sum(u.get("auth_failures", 0) for u in per_user)
    return (f"{_plural(auth.get('users', 0), 'user')}{tls}; {_plural(failures, 'failed login')}, "
            f"{refused} refused by grants, {_plural(auth.get('reloads', 0), 'reload')}")


def _mesh_admission(admission: dict[str, Any]) -> str:
    """Who may link as a hub (docs/security.md, "Mesh admission"), and who was refused."""
    rules = str(admission.get("rules") or "open: any peer that reaches the mesh port")
    if not admission.get("refused"):
        return f"{rules}; none refused"
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted((admission.get("refused_by_kind") or {}).items()))
    last = (admission.get("recent_refusals") or [{}])[-1]
    refused = human_count(admission["refused"])
    return f"{rules}; {refused} refused ({kinds}), last {last.get('peer_id')} at {last.get('address')}"


def compact(doc: dict[str, Any]) -> list[str]:
    """One screen: who the hub is, its load and its peers, in human units (``--wide`` has the rest)."""
    counters: dict[str, Any] = doc.get("counters", {})
    rates: dict[str, Any] = doc.get("rates", {})
    rows: list[tuple[str, str]] = [
        ("hub", f"{doc.get('name') or '(no --name)'}  id {doc.get('hub_id', '?')}  pid {doc.get('pid', '?')}"),
        ("address", str(doc.get("listen", "?"))),
        ("uptime", human_duration(float(doc.get("uptime_s", 0)))),
    ]
    storage = doc.get("storage")
    if storage:
        data = f"{storage.get('data_dir')} (durability {storage.get('durability')})"
        if repaired := len(storage.get("recovery") or []):
            data += f", {_plural(repaired, 'segment')} repaired at start"
        rows.append(("data", data))
        if storage.get("storage_error"):
            rows.append(("STORAGE ERROR", str(storage["storage_error"])))
    else:
        rows.append(("data", "none: memory only, live subscriptions only"))
    rows.append(("access", _access(doc)))
    connections = (
        f"{human_count(doc.get('connections', 0))} now, {human_count(counters.get('connections_total', 0))} since "
        f"start, {human_count(counters.get('connections_refused', 0))} refused"
    )
    rows.append(("connections", connections))
    kinds = ", ".join(f"{human_count(n)} {kind}" for kind, n in (doc.get("subscriptions_by_kind") or {}).items())
    rows.append(("subscriptions", human_count(doc.get("subscriptions", 0)) + (f": {kinds}" if kinds else "")))
    named = []
    if durables := doc.get("durables"):
        named.append(f"{_plural(len(durables), 'durable')} ({sum(1 for d in durables if d.get('attached'))} attached)")
    if groups := doc.get("groups"):
        named.append(_plural(len(groups), "group"))
    if named:
        rows.append(("consumers", ", ".join(named)))
    rows.append(("topics", human_count(doc.get("topics", 0))))
    stored = f"{human_count(counters.get('messages_in', 0))} ({human_bytes(counters.get('bytes_in', 0))})"
    rows.append(("messages in", f"{stored}, now {human_rate(rates.get('messages_in_per_s', 0))}"))
    delivered = f"{human_count(counters.get('deliveries', 0))} deliveries"
    rows.append(("messages out", f"{delivered}, now {human_rate(rates.get('deliveries_per_s', 0))}"))
    cancelled = _plural(counters.get("cancelled_subscriptions", 0), "slow subscription")
    rows.append(("dropped", f"{_plural(counters.get('dropped_messages', 0), 'message')}, {cancelled} cancelled"))
    mesh = doc.get("mesh")
    peers: list[dict[str, Any]] = (mesh.get("peers") or []) if mesh else []
    if mesh:
        linked = sum(1 for p in peers if p.get("connected"))
        from_peers = human_count(mesh.get("forwarded_messages_in", 0))
        rows.append(("mesh", f"cluster {mesh.get('cluster')}, {linked} of {_plural(len(peers), 'peer')} linked, "
                             f"{from_peers} messages in from peers"))  # fmt: skip
        rows.append(("peer id", str(mesh.get("peer_id"))))
        rows.append(("mesh admission", _mesh_admission(mesh.get("admission") or {})))
        rows.extend(("mesh address", addr.split("/p2p/")[0]) for addr in mesh.get("listen_addrs") or [])
    else:
        rows.append(("mesh", "off (no --mesh-listen)"))
    width = max(len(label) for label, _ in rows)
    lines = [f"{label.ljust(width)}  {value}" for label, value in rows]
    if peers:
        peer_rows = [
            {
                "hub id": p.get("hub_id") or "?",
                "address": address_of(p.get("multiaddr")),
                "state": _peer_state(p),
                "sent": human_count(p.get("messages_sent", 0)),
                "received": human_count(p.get("messages_received", 0)),
            }
            for p in peers
        ]
        lines += ["", *table(peer_rows, indent="")]
    return lines


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub status") -> int:
    args = build_parser(prog).parse_args(argv)

    def body() -> int:
        with connect_blocking(args.hub, name="pub0sub-status", reconnect=None, **connect_options(args)) as client:
            doc = client.status(timeout=args.timeout)
        if args.json:
            print(json.dumps(doc, indent=2, sort_keys=False))
        elif args.wide:
            print("\n".join(render(doc)))
        else:  # a document narrowed to the user's topics (status = "topics") is short: show it all
            print("\n".join(render(doc) if doc.get("narrowed_to") else compact(doc)))
        return 0

    return run(prog, body)


if __name__ == "__main__":
    sys.exit(main())
