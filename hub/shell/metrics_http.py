"""The operators' port (``--metrics-listen``): Prometheus metrics, probes and the status page.

| path          | what                                                                 |
|---------------|----------------------------------------------------------------------|
| /metrics      | Prometheus text format (``hub/core/metrics.py``, read at scrape time) |
| /healthz      | 200 while the hub's event loop answers                               |
| /readyz       | 200 when storage is recovered, clients are served and the mesh has   |
|               | joined (when configured); 503 with the failing checks otherwise      |
| /             | the status page (``static/``: no build step, nothing from a CDN)     |
| /api/status   | the page's latest sample, JSON                                       |
| /api/events   | the same, pushed once a second as server-sent events                 |

Why trio and not prometheus-client's own server: that one answers from a thread, and
every figure is read from the core's dicts and lists while the event loop changes them
(a scrape racing a connection closing raises "dictionary changed size during
iteration", or reads half an update).  Making the core thread-safe would put locks on
the traffic's path; serving here, in the hub's own event loop, reads a consistent state
for free.  A scrape costs the loop a few milliseconds (labels are bounded), like a STATUS.
"""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

import trio

from ..core.events import ev
from ..core.overview import Overview
from .http import BadRequest, Request, read_request, respond, response_head
from .ports import PortInUseError
from .prometheus import CONTENT_TYPE_LATEST, CollectorRegistry, scrape

log = logging.getLogger("pub0sub.hub.ops")

#: Seconds between two samples of the status page (its rates are per this interval).
SAMPLE_SECONDS = 1.0
#: Status pages following /api/events at once; more are answered 503.
MAX_STREAMS = 32
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}  # fmt: skip
JSON = "application/json"


def static_files() -> dict[str, bytes]:
    """The page's assets, read once: ``/static/<name>`` (and ``/`` for index.html)."""
    folder = resources.files("hub.shell") / "static"
    return {entry.name: entry.read_bytes() for entry in folder.iterdir() if entry.name.rpartition(".")[2]
            in ("html", "js", "css", "svg")}  # fmt: skip


class OpsServer:
    """``readiness()`` names each check and whether it passes (None: does not apply)."""

    def __init__(self, *, registry: CollectorRegistry, overview: Overview,
                 readiness: Callable[[], Mapping[str, bool | None]]) -> None:  # fmt: skip
        self.registry = registry
        self.overview = overview
        self.readiness = readiness
        self.address = ""
        self.latest = b"{}"
        self._sampled = trio.Event()
        self._streams = 0
        self._static = static_files()

    async def run(self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            listeners = await trio.open_tcp_listeners(port, host=host)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUseError(host, port, what="metrics address") from None
            raise
        sockname = listeners[0].socket.getsockname()
        self.address = f"{sockname[0]}:{sockname[1]}"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._sample_forever)
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            log.info("metrics and status page on http://%s/", self.address,
                     extra=ev("ops_listening", x_address=self.address))
            task_status.started(self.address)

    async def _sample_forever(self) -> None:
        while True:
            try:
                self.latest = json.dumps(self.overview.sample(), separators=(",", ":")).encode()
            except Exception:  # a page that cannot be drawn must never take the hub down
                log.exception("status page sample failed", extra=ev("ops_sample_failed"))
            self._sampled.set()
            self._sampled = trio.Event()
            await trio.sleep(SAMPLE_SECONDS)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            try:
                request = await read_request(stream)
            except BadRequest as exc:
                await respond(stream, 400, "text/plain", f"{exc}\n".encode())
                return
            if request is not None:
                await self._route(stream, request)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the client left: nothing to tell anyone
        finally:
            await trio.aclose_forcefully(stream)

    async def _route(self, stream: trio.SocketStream, request: Request) -> None:
        if request.method not in ("GET", "HEAD"):
            await respond(stream, 405, "text/plain", b"GET only\n")
            return
        head = request.method == "HEAD"
        path = request.path
        if path == "/metrics":
            await respond(stream, 200, CONTENT_TYPE_LATEST, scrape(self.registry), head_only=head)
        elif path == "/healthz":
            await respond(stream, 200, "text/plain", b"ok\n", head_only=head)
        elif path == "/readyz":
            checks = dict(self.readiness())
            ready = all(ok is not False for ok in checks.values())
            body = json.dumps({"ready": ready, "checks": checks}).encode() + b"\n"
            await respond(stream, 200 if ready else 503, JSON, body, head_only=head)
        elif path == "/api/status":
            await respond(stream, 200, JSON, self.latest, head_only=head)
        elif path == "/api/events" and not head:
            await self._events(stream)
        elif path in ("/", "/index.html") or path.startswith("/static/"):
            name = "index.html" if path in ("/", "/index.html") else path.removeprefix("/static/")
            asset = self._static.get(name)
            if asset is None:
                await respond(stream, 404, "text/plain", b"not found\n")
                return
            kind = STATIC_TYPES["." + name.rpartition(".")[2]]
            await respond(stream, 200, kind, asset, head_only=head)
        else:
            await respond(stream, 404, "text/plain", b"not found: try /metrics, /healthz, /readyz or /\n")

    async def _events(self, stream: trio.SocketStream) -> None:
        """Server-sent events: the latest sample now, then each new one, until the page goes."""
        if self._streams >= MAX_STREAMS:
            await respond(stream, 503, "text/plain", f"at most {MAX_STREAMS} live pages\n".encode())
            return
        self._streams += 1
        try:
            await stream.send_all(response_head(200, "text/event-stream"))
            while True:
                await stream.send_all(b"data: " + self.latest + b"\n\n")
                await self._sampled.wait()
        finally:
            self._streams -= 1
