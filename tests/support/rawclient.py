"""A minimal client speaking raw wire frames over trio TCP: tests the hub without the SDK."""

from __future__ import annotations

import trio

from wire import HUB_TO_CLIENT_OPCODES, Frame, FrameDecoder, Hello, Limits, Welcome


class RawClient:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(limits=Limits(max_body=16 << 20), accept=HUB_TO_CLIENT_OPCODES)
        self.eof = False

    @classmethod
    async def connect(
        cls, address: str, *, hello: bool = True, name: str = "raw", token: bytes = b"", source: str | None = None
    ) -> RawClient:
        """``source``: the local address to connect from (any of 127.0.0.0/8 works on Linux)."""
        host, port = address.rsplit(":", 1)
        if source is None:
            stream = await trio.open_tcp_stream(host, int(port))
        else:
            sock = trio.socket.socket()
            await sock.bind((source, 0))
            await sock.connect((host, int(port)))
            stream = trio.SocketStream(sock)
        client = cls(stream)
        if hello:
            await client.send(Hello(client_name=name, token=token))
            welcome = await client.expect(Welcome)
            client.welcome = welcome
        return client

    async def send(self, *frames: Frame | bytes) -> None:
        await self.stream.send_all(b"".join(f if isinstance(f, bytes) else f.encode() for f in frames))

    # Bounded by default: a silent hub fails the test in seconds, not at pytest's timeout.
    async def recv(self, timeout: float = 5.0) -> Frame | None:  # noqa: ASYNC109
        """The next frame, or None at EOF."""
        with trio.fail_after(timeout):
            while True:
                frame = self.decoder.next_frame()
                if frame is not None:
                    return frame
                if self.eof:
                    return None
                try:
                    data = await self.stream.receive_some(1 << 16)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if not data:
                    self.eof = True
                    self.decoder.close()
                    continue
                self.decoder.feed(data)

    # As recv.
    async def expect(self, kind: type[Frame], timeout: float = 5.0, *, skip: tuple[type[Frame], ...] = ()) -> Frame:  # noqa: ASYNC109
        while True:
            frame = await self.recv(timeout)
            if isinstance(frame, kind):
                return frame
            if frame is not None and isinstance(frame, skip):
                continue
            raise AssertionError(f"expected {kind.__name__}, got {frame!r}")

    async def aclose(self) -> None:
        await self.stream.aclose()
