"""An idempotent producer thread that logs every publish in a :class:`History` and survives crashes."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import wire
from tests.support.history import OK, UNKNOWN, History, Op
from tests.support.syncclient import ConnectionLost, SyncClient, publish_frame
from tests.support.waiting import wait_until


class Publisher(threading.Thread):
    """An idempotent producer that survives hub crashes.

    Publishes batches of unique values (round robin over ``topics``) with
    ``window`` batches in flight, logs every attempt in ``history``; when the
    connection breaks, every batch in flight is *unknown* and is retried after
    reconnecting, in order, with the same producer id and sequence.

    It publishes to one hub: the hub id of its first WELCOME (kept in the data directory, so
    the same across restarts).  While that hub restarts, its old port is free and any other
    hub started meanwhile may get it (the suite starts hundreds); a connection welcomed by
    another hub id is closed and retried, never published on -- otherwise its acks would
    count as this hub's and the checker would call them lost.
    """

    def __init__(
        self,
        history: History,
        address: Callable[[], str],
        topics: list[str],
        *,
        producer: int,
        per_batch: int = 20,
        window: int = 4,
        ack_timeout: float = 3.0,
        max_seconds: float = 60.0,
        interval: float = 0.0,
    ) -> None:
        super().__init__(daemon=True, name=f"publisher-{producer}")
        self.history = history
        self.address = address
        self.topics = topics
        self.producer = producer
        self.per_batch = per_batch
        self.window = window
        self.ack_timeout = ack_timeout
        self.max_seconds = max_seconds
        #: Pause before each new batch (0: as fast as acks come back), to bound a run's volume.
        self.interval = interval
        self.stopping = threading.Event()
        self.process = f"p{producer}"
        self.acked_batches = 0
        self.reconnects = 0
        #: value -> (topic, offset) from STORED acks
        self.ack_offsets: dict[bytes, tuple[str, int]] = {}
        self.duplicate_acks = 0
        self.errors: list[str] = []
        self.finished_cleanly = False
        #: the hub it publishes to (set by the first WELCOME) and connections refused as another hub
        self.hub_id: int | None = None
        self.wrong_hub_connects = 0

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # surfaced by the test
            self.errors.append(f"publisher crashed: {exc!r}")

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        seq = 0
        counter = 0
        unacked: OrderedDict[int, tuple[str, list[bytes], Op]] = OrderedDict()
        client: SyncClient | None = None
        while time.monotonic() < deadline:
            if self.stopping.is_set() and not unacked:
                self.finished_cleanly = True
                break
            try:
                if client is None:
                    try:
                        client = SyncClient.connect(self.address(), timeout=1.0, name=self.process)
                    except (OSError, ConnectionLost):
                        time.sleep(0.05)
                        continue
                    if not self._is_my_hub(client):
                        client = None
                        time.sleep(0.05)
                        continue
                    self.reconnects += 1
                    for s, (topic, values, _op) in list(unacked.items()):
                        op = self.history.invoke(self.process, topic, values)
                        unacked[s] = (topic, values, op)
                        client.send(publish_frame(topic, values, producer=self.producer, seq=s))
                while not self.stopping.is_set() and len(unacked) < self.window:
                    if self.interval:
                        time.sleep(self.interval)
                    seq += 1
                    topic = self.topics[seq % len(self.topics)]
                    values = [f"{self.process}-{counter + j}".encode() for j in range(self.per_batch)]
                    counter += self.per_batch
                    op = self.history.invoke(self.process, topic, values)
                    unacked[seq] = (topic, values, op)
                    client.send(publish_frame(topic, values, producer=self.producer, seq=seq))
                if not unacked:
                    continue
                ack = client.expect(wire.PublishAck, self.ack_timeout)
            except (TimeoutError, OSError, ConnectionLost) as exc:
                # A timeout or a broken connection: the outcome is unknown, never "failed".
                for _s, (_t, _v, op) in unacked.items():
                    self.history.complete(op, UNKNOWN, note=repr(exc))
                if client is not None:
                    client.close()
                client = None
                continue
            head = next(iter(unacked))
            if ack.sequence != head:
                self.errors.append(f"ack for sequence {ack.sequence}, expected {head} (acks must come in order)")
            if ack.sequence not in unacked:
                continue
            topic, values, op = unacked.pop(ack.sequence)
            self.history.complete(op, OK, note=ack.status.name)
            self.acked_batches += 1
            if ack.status is wire.AckStatus.DUPLICATE:
                self.duplicate_acks += 1
            else:
                ranges = {(r.topic, r.first_offset, r.num) for r in ack.ranges}
                assert len(ranges) == 1, ranges
                ((r_topic, first, num),) = ranges
                if r_topic != topic or num != len(values):
                    self.errors.append(f"ack range {ranges} does not match batch ({topic}, {len(values)})")
                for i, v in enumerate(values):
                    self.ack_offsets[v] = (r_topic, first + i)
        if client is not None:
            client.close()

    def _is_my_hub(self, client: SyncClient) -> bool:
        assert client.welcome is not None
        if self.hub_id is None:
            self.hub_id = client.welcome.hub_id
        if client.welcome.hub_id == self.hub_id:
            return True
        self.wrong_hub_connects += 1
        client.close()
        return False

    def stop(self, timeout: float = 30.0) -> None:
        self.stopping.set()
        self.join(timeout)
        assert not self.is_alive(), "publisher did not finish its retries in time"


def wait_progress(pub: Publisher, more_than: int, within: float = 10.0) -> None:
    """Until ``pub`` has more than ``more_than`` batches acknowledged; fails at once if it died."""

    def progressed() -> bool:
        if pub.acked_batches > more_than:
            return True
        why = pub.errors or f"no error: its max_seconds ({pub.max_seconds:g}) ran out"
        assert pub.is_alive(), f"publisher ended: {why}"
        return False

    wait_until(progressed, timeout=within, what=lambda: f"more than {more_than} acknowledged batches ({pub.errors})")


def assert_acked_offsets_hold(pub: Publisher, reads: dict[str, list[tuple[int, bytes]]]) -> None:
    """Every STORED ack named the offset where the value is read now."""
    where = {v: (t, o) for t, items in reads.items() for o, v in items}
    wrong = [(v, pos, where.get(v)) for v, pos in pub.ack_offsets.items() if where.get(v) != pos]
    assert not wrong, f"{len(wrong)} acknowledged offsets changed, e.g. {wrong[:5]}"
