"""The hub's core driven by hand: no sockets, no event loop, a clock the test moves.

>>> hub = CoreHub(tmp_path)                       # doctest: +SKIP
>>> alice = hub.connect()                         # a session, greeted
>>> alice.send(wire.Sub(sub_id=1, patterns=("t",)))
>>> alice.expect(wire.SubOk)
>>> hub.pump()                                    # run followers and groups until idle
>>> hub.clock.advance(31); hub.core.tick_groups(); hub.pump()

Each :class:`Client` is a fake transport: what the core queues for its session is taken
and decoded as soon as the core announces it, as a writer with an always-ready socket would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import wire
from hub.core.clients import ClientSession
from hub.core.clock import ManualClock
from hub.core.consumers import ConsumerRegistry
from hub.core.hub import CoreSettings, HubCore
from hub.storage.store import LogStore
from hub.storage.topic_log import LogSettings

F = TypeVar("F", bound=wire.Frame)


class Client:
    """One client connection: frames in through the core, frames out as the core queues them."""

    def __init__(self, hub: CoreHub, session: ClientSession) -> None:
        self.hub = hub
        self.session = session
        self.frames: list[wire.Frame] = []
        self.closed = False
        self.reading = True
        self._decoder = wire.FrameDecoder(accept=wire.HUB_TO_CLIENT_OPCODES, limits=wire.Limits(max_body=64 << 20))
        session.transport = self

    # Transport
    def flush_now(self) -> None:
        self._drain()

    def wake_writer(self) -> None:
        self._drain()

    def closing(self) -> None:
        self.closed = True
        self._drain()

    def _drain(self) -> None:
        if not self.reading:
            return  # a client that does not read: its queue fills up
        out = self.session.out
        while out.items:
            data, size = out.take(1 << 30)
            self._decoder.feed(data)
            self.session.sent(size)
        self.frames.extend(self._decoder)

    def stop_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
        self._drain()

    # the test's side
    def send(self, *frames: wire.Frame) -> None:
        self.send_bytes(b"".join(f.encode() for f in frames))

    def send_bytes(self, data: bytes) -> None:
        """``data`` as one chunk read, handled to its end as the shell does (turn after turn)."""
        core = self.hub.core
        while core.receive_data(self.session, data) and self.session.closing is None:
            data = b""

    def take(self) -> list[wire.Frame]:
        frames, self.frames = self.frames, []
        return frames

    def expect(self, kind: type[F]) -> F:
        """The next frame, which must be a ``kind``."""
        assert self.frames, f"expected {kind.__name__}, got nothing"
        frame = self.frames.pop(0)
        assert isinstance(frame, kind), f"expected {kind.__name__}, got {frame!r}"
        return frame

    def delivered(self) -> list[tuple[str, int, bytes]]:
        """(topic, offset, data) of every DELIVER received so far (taken), in order; other frames stay."""
        got, rest = [], []
        for frame in self.frames:
            if isinstance(frame, wire.Deliver):
                got.extend((frame.batch.topic, off, data) for off, _key, data in frame.batch.messages())
            else:
                rest.append(frame)
        self.frames = rest
        return got


class CoreHub:
    """A :class:`HubCore` with (optionally) storage in ``data_dir``, a manual clock and fake clients."""

    def __init__(self, data_dir: Path | None = None, **settings: Any) -> None:
        self.clock = ManualClock()
        store = consumers = None
        if data_dir is not None:
            store = LogStore(data_dir, LogSettings())
            store.open()
            consumers = ConsumerRegistry(data_dir, expiry_seconds=3600)
            consumers.load()
        self.store = store
        self.core = HubCore(CoreSettings(**settings), hub_id=0xC0DE, clock=self.clock, store=store,
                            consumers=consumers)  # fmt: skip
        self.core.start()

    def connect(self, *, greet: bool = True) -> Client:
        session = self.core.open_session("127.0.0.1:1")
        assert isinstance(session, ClientSession), session
        client = Client(self, session)
        if greet:
            client.send(wire.Hello(client_name="test"))
            client.expect(wire.Welcome)
        return client

    def pump(self, max_steps: int = 10_000) -> int:
        """Run ready followers and groups until none is left; the steps taken."""
        steps = 0
        with self.core.output:
            while self.core.work and steps < max_steps:
                self.core.work.run_one()
                steps += 1
        assert not self.core.work, "the work queue did not settle"
        return steps

    def publish(self, topic: str | tuple[str, ...], *datas: bytes, client: Client | None = None) -> wire.PublishAck:
        """Publish ``datas`` as one set with an ack (from a fresh client unless one is given)."""
        topics = (topic,) if isinstance(topic, str) else topic
        sender = client or self.connect()
        mset = wire.MessageSet.build(topics, [(b"", d) for d in datas])
        sender.send(wire.Publish(sequence=1, flags=wire.PublishFlags.ACK, sets=(mset,)))
        return sender.expect(wire.PublishAck)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
