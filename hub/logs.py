"""The hub's logs: one event per line, as text for people or JSON for pipelines.

Every log call of the hub names its event and the keys it concerns through
``extra`` (``hub.core.events.ev``): ``event``, ``conn``, ``peer``, ``topic``,
``reason``, always under those names.  ``--log-format text`` appends them to the
message as ``key=value``; ``--log-format json`` writes one object per line with all
five keys present (null when they do not apply), so a query for ``reason`` finds
every connection and link end.  A traceback stays on its event's line (escaped in
text, a field in JSON).  Nothing is logged per message, on any path.

:data:`RECENT` keeps the latest notable events (INFO and up) for the status page.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from datetime import UTC, datetime
from typing import Any

from .core.events import KEYS

#: Loggers of the hub (its modules log under these two roots).
HUB_LOGGERS = ("pub0sub", "hub")
#: Events the status page keeps.
RECENT_EVENTS = 100


def _keys(record: logging.LogRecord) -> dict[str, Any]:
    keys = {key: getattr(record, key, None) for key in KEYS}
    if keys["event"] is None:
        keys["event"] = record.name  # not named (a library's line, or a mesh I/O file being rewritten): its logger
    return keys


def _one_line(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


class TextFormatter(logging.Formatter):
    """``2026-11-24 09:44:04,912 hub-1 INFO pub0sub.hub: message event=... conn=... reason=...``"""

    def __init__(self, hub_name: str = "") -> None:
        who = f"{hub_name} " if hub_name else ""
        super().__init__(f"%(asctime)s {who}%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)  # includes the traceback, if any, on lines of its own
        pairs = " ".join(f"{k}={_value(v)}" for k, v in _keys(record).items() if v is not None)
        head, _, tail = line.partition("\n")
        return _one_line(head + (" " + pairs if pairs else "") + ("\n" + tail if tail else ""))


def _value(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (not text or any(c in text for c in " \"=")) else text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``hub``, the five keys, ``msg``."""

    def __init__(self, hub_name: str = "") -> None:
        super().__init__()
        self.hub_name = hub_name

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "hub": self.hub_name or None,
            **_keys(record),
            "msg": record.getMessage(),
        }
        for name, value in record.__dict__.items():
            if name.startswith("x_"):  # further keys an event carries (ev(..., x_address=...))
                doc[name[2:]] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class RecentEvents(logging.Handler):
    """The latest notable events of the hub, for the status page (a bounded ring)."""

    def __init__(self, size: int = RECENT_EVENTS) -> None:
        super().__init__(logging.INFO)
        self._ring: deque[dict[str, Any]] = deque(maxlen=size)
        self._lock = threading.Lock()  # libp2p and the fsync thread may log from other threads

    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.startswith(HUB_LOGGERS):
            return
        entry = {"ts": round(record.created, 3), "level": record.levelname, **_keys(record),
                 "msg": record.getMessage()}  # fmt: skip
        with self._lock:
            self._ring.append(entry)

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._ring)


RECENT = RecentEvents()


def configure_logging(*, level: str, log_format: str, hub_name: str) -> None:
    """stderr at ``level`` in ``log_format``; :data:`RECENT` sees INFO and up whatever the level."""
    handler = logging.StreamHandler()
    handler.setLevel(level)
    handler.setFormatter(JsonFormatter(hub_name) if log_format == "json" else TextFormatter(hub_name))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.addHandler(RECENT)
    root.setLevel(min(logging.getLevelName(level), logging.INFO))
