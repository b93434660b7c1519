"""Just enough HTTP/1.1 for the operators' port: read one GET, answer, close.

The operators' endpoints (metrics, probes, the status page) are small GETs from
Prometheus, a kubelet or a browser; one request per connection (``Connection:
close``) keeps this a few lines instead of a web framework.  Requests are bounded
in size and time, so a stuck or hostile client holds one task for a few seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

#: Largest request head accepted, and how long a client may take to send it.
MAX_HEAD = 16 << 10
HEAD_SECONDS = 10.0

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str


class BadRequest(Exception):
    pass


async def read_request(stream: trio.abc.Stream) -> Request | None:
    """The request line of the next request (None: the client sent nothing and left)."""
    head = bytearray()
    with trio.move_on_after(HEAD_SECONDS):
        while b"\r\n\r\n" not in head and b"\n\n" not in head:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            head += chunk
            if len(head) > MAX_HEAD:
                raise BadRequest(f"request head over {MAX_HEAD} bytes")
    if not head:
        return None
    line = bytes(head).split(b"\n", 1)[0].decode("latin-1").strip()
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise BadRequest(f"not an HTTP request line: {line[:80]!r}")
    path, _, query = parts[1].partition("?")
    return Request(parts[0], path, query)


def response_head(status: int, content_type: str, *, length: int | None = None, extra: str = "") -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'OK')}", f"Content-Type: {content_type}",
             "Cache-Control: no-store", "X-Content-Type-Options: nosniff", "Connection: close"]  # fmt: skip
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def respond(
    stream: trio.abc.Stream, status: int, content_type: str, body: bytes, *, head_only: bool = False
) -> None:
    await stream.send_all(response_head(status, content_type, length=len(body)) + (b"" if head_only else body))
