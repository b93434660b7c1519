"""The keys of the hub's log events, named once for every layer.

Each log call of the hub says which event it is and what it concerns, through
``extra=ev("conn_closed", conn=3, peer="127.0.0.1:5555", reason="client_closed")``.
The names are the same everywhere -- ``event``, ``conn``, ``peer``, ``topic``,
``reason`` -- so a log query for one of them finds it on every line that has it
(``hub/logs.py`` writes them as text or JSON).  Further keys are given with an
``x_`` prefix (``x_address=...``) and written without it.
"""

from __future__ import annotations

from typing import Any

#: The keys every event line may carry, in this order.
KEYS = ("event", "conn", "peer", "topic", "reason")


def ev(event: str, **keys: Any) -> dict[str, Any]:
    """``extra`` for a log call: the event's name and its keys (None values left out)."""
    unknown = [k for k in keys if k not in KEYS and not k.startswith("x_")]
    if unknown:
        raise TypeError(f"log keys must be one of {KEYS} or start with x_: {unknown}")
    return {"event": event, **{k: v for k, v in keys.items() if v is not None}}
