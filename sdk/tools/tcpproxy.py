"""A userspace TCP proxy the tests and the test bed control: forward, cut, black-hole, heal.

``tc netem`` is not in the test machines' kernel (RELIABILITY.md), so the tests'
link faults between hubs go through this proxy, which can also delay a link and
close it.  The test bed only cuts links, which the kernel does without a relay
in every link's path (nftables, ``link_cuts.py``); where it cannot, the test bed
falls back to these proxies, one in front of each hub's mesh port, which the hub
announces with ``--mesh-announce`` (``testbed.py``).  It runs in a trio loop on a
background thread (its own, or a :class:`ProxyLoop` many proxies share), so a
test -- sync or trio -- drives it with plain method calls:

>>> with TcpProxy(("127.0.0.1", 4001)) as proxy:        # doctest: +SKIP
...     dial(proxy.port)
...     proxy.cut()         # close every connection, refuse new ones (accept + immediate close)
...     proxy.heal()        # forward again
...     proxy.blackhole()   # keep sockets open, swallow every byte both ways
...     proxy.heal()        # black-holed connections are closed: their streams lost bytes
...     proxy.stall()       # keep sockets open, read nothing: senders' buffers fill up
...     proxy.heal()        # stalled connections carry on where they stopped
...     proxy.delay(0.05)   # every chunk waits 50 ms each way (order kept)
...     proxy.drop(0.01)    # every chunk is swallowed with probability 1% (the stream is damaged)
...     proxy.heal()        # no delay, no drops; damaged connections are closed
...     handle, sent = proxy.busiest()  # the connection that forwarded most since the last look
...     proxy.blackhole_one(handle)     # one link fails, the others carry on; heal() closes it

Only 127.0.0.1; the listening port is chosen by the kernel (port 0).
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

import trio

T = TypeVar("T")

START_TIMEOUT = 10.0
RECV_SIZE = 1 << 16


class Mode(Enum):
    FORWARD = "forward"
    CUT = "cut"
    BLACKHOLE = "blackhole"
    STALL = "stall"


@dataclass(eq=False)
class _Conn:
    """One accepted client connection and (unless black-holed from the start) its upstream."""

    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    #: Once set, the pumps swallow instead of forwarding -- for the rest of this connection's life.
    holed: bool = False
    #: While set, the pumps read nothing (the kernel's buffers fill and senders block).
    stalled: trio.Event | None = None
    #: A chunk was dropped: the stream is damaged, so heal() closes it.
    damaged: bool = False
    #: Bytes forwarded (both ways), and that count at the last look (see TcpProxy.busiest)
    forwarded: int = 0
    looked: int = 0


@dataclass
class ProxyStats:
    accepted: int = 0
    refused: int = 0
    bytes_forwarded: int = 0
    bytes_swallowed: int = 0
    bytes_dropped: int = 0
    closed_by_cut: int = 0


class ProxyLoop:
    """One trio loop, in a thread of its own, that many proxies share (``TcpProxy(..., loop=)``):
    a proxy per thread, fifty of them, would pass the GIL back and forth for every chunk."""

    def __init__(self) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def start(self) -> ProxyLoop:
        self._thread = threading.Thread(target=trio.run, args=(self._main,), name="tcpproxy-loop", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise TimeoutError("the proxies' loop did not start")
        return self

    def stop(self) -> None:
        """Stop the loop and every proxy still in it."""
        if self._thread is None:
            return
        if self._token is not None and self._nursery is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._nursery.cancel_scope.cancel)
        self._thread.join(START_TIMEOUT)
        self._thread = None

    def spawn(self, fn: Callable[[], Any]) -> None:
        """Run the async ``fn`` as a task of the loop (from any thread)."""
        if self._token is None or self._nursery is None:
            raise RuntimeError("the proxies' loop is not running")
        self._token.run_sync_soon(self._nursery.start_soon, fn)

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            self._token, self._nursery = trio.lowlevel.current_trio_token(), nursery
            self._ready.set()
            await trio.sleep_forever()


class TcpProxy:
    """Listens on 127.0.0.1:<free port> and relays to ``upstream`` while in FORWARD mode; a task
    of a shared :class:`ProxyLoop` (``loop``), or of one of its own."""

    def __init__(self, upstream: tuple[str, int], *, host: str = "127.0.0.1", rcvbuf: int | None = None,
                 loop: ProxyLoop | None = None) -> None:  # fmt: skip
        self.upstream = upstream
        self.host = host
        #: SO_RCVBUF of accepted sockets (None: the kernel's); small makes a stall block senders soon.
        self.rcvbuf = rcvbuf
        self.port = 0
        self.mode = Mode.FORWARD
        self.stats = ProxyStats()
        #: seconds each forwarded chunk waits (both ways), and the chance a chunk is swallowed
        self._delay = 0.0
        self._drop_rate = 0.0
        self._rng = random.Random(0)
        self._conns: set[_Conn] = set()
        self._token: trio.lowlevel.TrioToken | None = None
        self._main_scope: trio.CancelScope | None = None
        self._loop = loop
        self._own_loop: ProxyLoop | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._error: BaseException | None = None

    # -- lifecycle (called from the test's thread) ------------------------------------

    def start(self) -> TcpProxy:
        loop = self._loop
        if loop is None:
            loop = self._own_loop = ProxyLoop().start()
        loop.spawn(self._guarded_main)
        if not self._ready.wait(START_TIMEOUT) or self._error is not None:
            self.stop()  # its own loop too
            if self._error is None:
                raise TimeoutError("tcp proxy did not start")
            raise RuntimeError("tcp proxy failed to start") from self._error
        return self

    def stop(self) -> None:
        if self._token is not None and self._main_scope is not None and not self._stopped.is_set():
            scope = self._main_scope
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(scope.cancel)
            self._stopped.wait(START_TIMEOUT)
        if self._own_loop is not None:
            self._own_loop.stop()
            self._own_loop = None

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    # -- faults (called from the test's thread) ---------------------------------------

    def forward(self) -> None:
        """Relay new connections (existing black-holed ones stay black-holed; see :meth:`heal`)."""
        self._call(self._set_mode, Mode.FORWARD)

    def cut(self) -> None:
        """Close every connection now and refuse new ones until :meth:`heal`."""
        self._call(self._set_mode, Mode.CUT)

    def blackhole(self) -> None:
        """Keep every socket open but swallow all bytes both ways; new connections too."""
        self._call(self._set_mode, Mode.BLACKHOLE)

    def stall(self) -> None:
        """Keep every socket open but stop reading, both ways, until :meth:`heal`: what a peer
        that stopped taking data looks like to the sender (its writes block once buffers fill)."""
        self._call(self._set_mode, Mode.STALL)

    def heal(self) -> None:
        """Forward again.  Black-holed connections are closed: their streams lost bytes
        mid-frame, so the only honest continuation is a fresh connection.  Stalled ones
        resume where they stopped: they lost nothing."""
        self._call(self._heal)

    def delay(self, seconds: float) -> None:
        """Forward every chunk ``seconds`` late, both ways (order kept): a slow link."""
        self._call(setattr, self, "_delay", seconds)

    def drop(self, rate: float, *, seed: int = 0) -> None:
        """Swallow each chunk with probability ``rate`` (seeded): a lossy link under TCP, so the
        stream arrives damaged and the endpoints must notice (Noise's checks fail, frames break)."""
        self._call(self._set_drop, rate, seed)

    def _set_drop(self, rate: float, seed: int) -> None:
        self._drop_rate = rate
        self._rng = random.Random(seed)

    @property
    def connections(self) -> int:
        return self._call(lambda: len(self._conns))

    def busiest(self) -> tuple[int, int] | None:
        """(a handle for :meth:`blackhole_one`, bytes) of the open connection that forwarded the
        most bytes since the previous call; None without one.  Every count starts again."""
        return self._call(self._busiest)

    def blackhole_one(self, handle: int) -> bool:
        """Swallow every byte of that one connection from now on, both ways, while the others carry
        on: one link of many failing.  :meth:`heal` closes it.  False if it has ended meanwhile."""
        return self._call(self._blackhole_one, handle)

    def _busiest(self) -> tuple[int, int] | None:
        best: tuple[int, int] | None = None
        for conn in self._conns:
            sent, conn.looked = conn.forwarded - conn.looked, conn.forwarded
            if not conn.holed and (best is None or sent > best[1]):
                best = (id(conn), sent)
        return best

    def _blackhole_one(self, handle: int) -> bool:
        for conn in self._conns:
            if id(conn) == handle:
                conn.holed = True
                return True
        return False

    # -- inside the proxy's trio loop --------------------------------------------------

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` in the proxy's loop and wait for it -- from any thread.

        ``trio.from_thread.run_sync`` refuses to be called from a thread that runs a
        trio loop of its own (an async test); ``run_sync_soon`` plus a plain event
        works from anywhere, and the short wait is on the proxy's own thread.
        """
        if self._token is None:
            raise RuntimeError("tcp proxy is not running")
        done = threading.Event()
        result: list[Any] = []
        error: list[BaseException] = []

        def run() -> None:
            try:
                result.append(fn(*args))
            except BaseException as exc:  # handed back to the caller's thread
                error.append(exc)
            finally:
                done.set()

        self._token.run_sync_soon(run)
        if not done.wait(START_TIMEOUT):
            raise TimeoutError("tcp proxy did not answer")
        if error:
            raise error[0]
        return typing.cast(T, result[0])

    def _set_mode(self, mode: Mode) -> None:
        self.mode = mode
        if mode is Mode.CUT:
            for conn in list(self._conns):
                conn.scope.cancel()
                self.stats.closed_by_cut += 1
        elif mode is Mode.BLACKHOLE:
            for conn in self._conns:
                conn.holed = True
        elif mode is Mode.STALL:
            for conn in self._conns:
                conn.stalled = conn.stalled or trio.Event()

    def _heal(self) -> None:
        self.mode = Mode.FORWARD
        self._delay = self._drop_rate = 0.0
        for conn in list(self._conns):
            if conn.holed or conn.damaged:
                conn.scope.cancel()
            if conn.stalled is not None:
                conn.stalled.set()
                conn.stalled = None

    async def _guarded_main(self) -> None:
        try:
            await self._main()
        except Exception as exc:  # reported to start() rather than lost in a thread or a shared loop
            self._error = exc
            self._ready.set()
        finally:
            self._stopped.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        listeners = await trio.open_tcp_listeners(0, host=self.host)
        if self.rcvbuf is not None:
            for listener in listeners:  # accepted sockets inherit it (Linux)
                listener.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        self.port = listeners[0].socket.getsockname()[1]
        with trio.CancelScope() as scope:
            self._main_scope = scope
            async with trio.open_nursery() as nursery:
                self._ready.set()
                await nursery.start(trio.serve_listeners, self._handle, listeners)
        for conn in list(self._conns):
            conn.scope.cancel()

    async def _handle(self, client: trio.SocketStream) -> None:
        if self.mode is Mode.CUT:
            self.stats.refused += 1
            _abort(client)
            return
        self.stats.accepted += 1
        conn = _Conn(holed=self.mode is Mode.BLACKHOLE, stalled=trio.Event() if self.mode is Mode.STALL else None)
        self._conns.add(conn)
        upstream: trio.SocketStream | None = None
        try:
            with conn.scope:
                if not conn.holed:
                    try:
                        upstream = await trio.open_tcp_stream(*self.upstream)
                    except OSError:
                        return
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, conn, client, upstream)
                    if upstream is not None:
                        nursery.start_soon(self._pump, conn, upstream, client)
        finally:
            self._conns.discard(conn)
            _abort(client)
            if upstream is not None:
                _abort(upstream)

    async def _pump(self, conn: _Conn, src: trio.SocketStream, dst: trio.SocketStream | None) -> None:
        while True:
            while conn.stalled is not None:
                await conn.stalled.wait()
            try:
                data = await src.receive_some(RECV_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                break
            if not data:
                break
            if conn.holed or dst is None:
                self.stats.bytes_swallowed += len(data)
                continue
            if self._drop_rate and self._rng.random() < self._drop_rate:
                conn.damaged = True
                self.stats.bytes_dropped += len(data)
                continue
            if self._delay:
                await trio.sleep(self._delay)
            while conn.stalled is not None:  # a chunk read just before the stall waits with it
                await conn.stalled.wait()
            try:
                await dst.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                break
            self.stats.bytes_forwarded += len(data)
            conn.forwarded += len(data)
        # One side ended: end the whole connection so the other side sees it too
        # (unless black-holed: a black hole never tells anyone anything).
        if not conn.holed:
            conn.scope.cancel()
        else:
            await trio.sleep_forever()


def _abort(stream: trio.SocketStream) -> None:
    """Close at once with a RST (SO_LINGER 0): a cut link looks like a dead network, not a polite FIN."""
    with contextlib.suppress(OSError):
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        stream.socket.close()
