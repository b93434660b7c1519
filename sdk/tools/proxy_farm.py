"""Many :class:`~sdk.tools.tcpproxy.TcpProxy` in a process of their own: the test bed's links.

The test bed (``testbed.py``) puts one proxy in front of each hub's mesh port, which the hub
announces (``--mesh-announce``), so every link to the hub runs through it and a link fault can
black-hole one of them.  The proxies relay every byte of every link: in the test bed's own
process they would share its GIL with the publishers' and subscribers' threads, and each of
those threads' turns would delay the links (a thread waits up to ``sys.getswitchinterval()``,
5 ms, for the GIL).  So they run here, all in one trio loop (:class:`ProxyLoop`), in a child
driven by one JSON line per request on its stdin, answered by one JSON line on its stdout:

>>> with ProxyFarm() as farm:                                   # doctest: +SKIP
...     port = farm.add("hub-3", upstream=24013)      # a proxy on 127.0.0.1:port -> :24013
...     name, handle, sent = farm.busiest()           # the connection that forwarded most since the last look
...     farm.blackhole(name, handle)                   # that one link fails; the others carry on
...     farm.heal(name)                                # and is closed
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from .bench.procs import LineReader, python_module, stop_process
from .tcpproxy import ProxyLoop, TcpProxy

HOST = "127.0.0.1"
#: Seconds an answer may take (a proxy's own calls wait up to 10 s); past it the request fails.
ANSWER_SECONDS = 30.0


class ProxyFarm:
    """The parent's side: start the child, send requests, read answers; stop it by its PID."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._answers: LineReader | None = None

    def __enter__(self) -> ProxyFarm:
        self._proc = subprocess.Popen(python_module(__name__), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, start_new_session=True)  # fmt: skip
        self._answers = LineReader(self._proc)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def close(self) -> None:
        """Stop the child by its PID; its proxies' sockets close with it (the hubs are stopped first)."""
        if self._proc is not None:
            stop_process(self._proc)
            self._proc = self._answers = None

    def add(self, name: str, *, upstream: int) -> int:
        """Start a proxy named ``name`` in front of ``127.0.0.1:upstream``; its port."""
        return int(self._ask({"op": "add", "name": name, "upstream": upstream})["port"])

    def busiest(self) -> tuple[str, int, int] | None:
        """(proxy, connection handle, bytes) of the connection that forwarded the most bytes since
        the previous call, over every proxy; None when there is no connection.  Counts start again."""
        answer = self._ask({"op": "busiest"})
        return None if answer["name"] is None else (answer["name"], answer["handle"], answer["bytes"])

    def blackhole(self, name: str, handle: int) -> bool:
        """Swallow every byte of that connection from now on; False if it has ended already."""
        return bool(self._ask({"op": "blackhole", "name": name, "handle": handle})["ok"])

    def heal(self, name: str) -> None:
        """Close the proxy's black-holed connections (their streams lost bytes): the hubs link again."""
        self._ask({"op": "heal", "name": name})

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        proc, answers = self._proc, self._answers
        if proc is None or proc.stdin is None or answers is None:
            raise RuntimeError("the proxy farm is not running")
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        line = answers.next_line(timeout=ANSWER_SECONDS, what=f"proxy farm: {request['op']}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"proxy farm: {request['op']}: {answer['error']}")
        return answer


def serve(requests: Any, answers: Any) -> None:
    """The child's side: one proxy per ``add``, all in one trio loop, until ``requests`` ends
    (a parent gone for good: no farm outlives it); then stop them all."""
    proxies: dict[str, TcpProxy] = {}
    loop = ProxyLoop().start()
    try:
        for line in requests:
            request = json.loads(line)
            try:
                answer = _answer(proxies, request, loop)
            except Exception as exc:  # told to the parent, which raises it there
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            answers.write(json.dumps(answer) + "\n")
            answers.flush()
    finally:
        loop.stop()


def _answer(proxies: dict[str, TcpProxy], request: dict[str, Any], loop: ProxyLoop) -> dict[str, Any]:
    op = request["op"]
    if op == "add":
        proxy = proxies[request["name"]] = TcpProxy((HOST, int(request["upstream"])), loop=loop).start()
        return {"port": proxy.port}
    if op == "busiest":
        best: tuple[str, int, int] | None = None
        for name, proxy in proxies.items():
            found = proxy.busiest()
            if found is not None and (best is None or found[1] > best[2]):
                best = (name, *found)
        return {"name": None} if best is None else {"name": best[0], "handle": best[1], "bytes": best[2]}
    if op == "blackhole":
        return {"ok": proxies[request["name"]].blackhole_one(int(request["handle"]))}
    if op == "heal":
        proxies[request["name"]].heal()
        return {}
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout)
