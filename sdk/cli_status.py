"""``pub0sub status``: show a hub's status document.

    pub0sub status --hub 127.0.0.1:7420
    pub0sub status --json | jq .counters

The document is whatever the hub's STATUS_REPLY holds; this command prints
scalars as ``key: value`` lines and lists of objects as tables, so new keys
show up without a change here.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from .blocking import connect_blocking
from .cli_support import add_hub_option, run


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Show a pub0sub hub's status.")
    add_hub_option(p)
    p.add_argument("--json", action="store_true", help="print the status document as JSON")
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


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub status") -> int:
    args = build_parser(prog).parse_args(argv)

    def body() -> int:
        with connect_blocking(args.hub, name="pub0sub-status", reconnect=None) as client:
            doc = client.status(timeout=args.timeout)
        if args.json:
            print(json.dumps(doc, indent=2, sort_keys=False))
        else:
            print("\n".join(render(doc)))
        return 0

    return run(prog, body)


if __name__ == "__main__":
    sys.exit(main())
