"""Hub data directories written straight from ``wire`` encoders, without a hub.

A data directory looks like the hub's own (``hub/storage``):
``DATA/hub-id`` (hex), ``DATA/topics/<readable>-<sha1[:12]>/<20-digit base offset>.log``.
Each segment is a SEGMENT_HEADER frame then LOG_BATCH frames, exactly what a hub appends.

:func:`make_test_cluster` builds the small two-hub fixture the analytics tests use and returns
what a correct reader must find in it.  :func:`write_bench_dir` builds the large one-hub directory
the benchmark reads::

    python -m tests.support.segments bench /tmp/p0s-bench --records 5000000
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import wire

BASE_TS = 1_700_000_000_000_000
"""Origin accept time of the first batch, µs (2023-11-14 22:13:20 UTC)."""


def topic_directory_name(topic: str) -> str:
    """The hub's directory name for ``topic`` (same rule as hub/storage, which sdk must not import)."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", topic)[:60]
    return f"{readable}-{hashlib.sha1(topic.encode()).hexdigest()[:12]}"


def init_data_dir(root: Path, hub_id: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "topics").mkdir(exist_ok=True)
    (root / "hub-id").write_text(f"{hub_id:016x}\n")
    return root


@dataclass
class Written:
    """What went into one (hub, topic): the rows a reader must produce, in offset order."""

    count: int = 0
    bytes: int = 0
    timestamps: list[int] = field(default_factory=list)
    latencies: list[int] = field(default_factory=list)
    key_lens: list[int] = field(default_factory=list)
    data_lens: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)


@dataclass
class Corruption:
    path: Path
    position: int
    length: int
    records: int


@dataclass
class Expected:
    """The truth about a generated cluster, for assertions."""

    hubs: dict[str, Path] = field(default_factory=dict)
    #: (hub id hex, topic) -> what readable rows it holds
    written: dict[tuple[str, str], Written] = field(default_factory=dict)
    corrupted: list[Corruption] = field(default_factory=list)
    #: (path, position of the torn frame, bytes after it)
    torn: list[tuple[Path, int, int]] = field(default_factory=list)
    files: int = 0

    @property
    def total(self) -> int:
        return sum(w.count for w in self.written.values())


@dataclass
class BatchSpec:
    """One LOG_BATCH to write; ``corrupt`` flips a byte in its records after the CRC is computed."""

    messages: list[tuple[bytes, bytes]]
    timestamp: int
    latency: int
    origin: int
    origin_seq: int
    producer_id: int = 0
    producer_seq: int = 0
    topics: tuple[str, ...] = ()
    corrupt: bool = False


class SegmentWriter:
    """Writes one topic's log into a data dir, rolling segments every ``per_segment`` batches."""

    def __init__(self, root: Path, hub: str, topic: str, expected: Expected, *, per_segment: int) -> None:
        self.directory = root / "topics" / topic_directory_name(topic)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.topic = topic
        self.hub = hub
        self.expected = expected
        self.per_segment = per_segment
        self.next_offset = 0
        self.path: Path | None = None
        self.in_segment = 0
        self.out: list[bytes] = []

    def _roll(self, created: int) -> None:
        self.flush()
        self.path = self.directory / f"{self.next_offset:020d}.log"
        self.out = [wire.SegmentHeader(topic=self.topic, base_offset=self.next_offset, created=created).encode()]
        self.in_segment = 0
        self.expected.files += 1

    def add(self, spec: BatchSpec) -> None:
        if self.path is None or self.in_segment >= self.per_segment:
            self._roll(spec.timestamp)
        assert self.path is not None
        count, records = wire.encode_records(spec.messages)
        batch = wire.RecordBatch(
            topic=self.topic,
            base_offset=self.next_offset,
            timestamp=spec.timestamp,
            origin=spec.origin,
            origin_seq=spec.origin_seq,
            count=count,
            records=records,
        )
        frame = wire.LogBatch.create(
            append_ts=spec.timestamp + spec.latency,
            producer_id=spec.producer_id,
            producer_seq=spec.producer_seq,
            batch=batch,
            topics=spec.topics,
        ).encode()
        position = sum(len(part) for part in self.out)
        if spec.corrupt:
            # The last data byte: the frame boundary stays intact, only the CRC fails.
            frame = frame[:-1] + bytes((frame[-1] ^ 0xFF,))
            self.expected.corrupted.append(Corruption(self.path, position, len(frame), count))
        else:
            w = self.expected.written.setdefault((self.hub, self.topic), Written())
            w.count += count
            for i, (key, data) in enumerate(spec.messages):
                w.bytes += len(key) + len(data)
                w.timestamps.append(spec.timestamp)
                w.latencies.append(spec.latency)
                w.key_lens.append(len(key))
                w.data_lens.append(len(data))
                w.offsets.append(self.next_offset + i)
        # A corrupted batch still used its offsets: the hub assigned them before the disk broke.
        self.next_offset += count
        self.out.append(frame)
        self.in_segment += 1

    def tear(self, spec: BatchSpec, keep: int) -> None:
        """Append only the first ``keep`` bytes of a batch: a crash mid-write."""
        assert self.path is not None
        count, records = wire.encode_records(spec.messages)
        batch = wire.RecordBatch(
            topic=self.topic, base_offset=self.next_offset, timestamp=spec.timestamp, origin=spec.origin,
            origin_seq=spec.origin_seq, count=count, records=records,
        )
        frame = wire.LogBatch.create(append_ts=spec.timestamp + spec.latency, producer_id=0, producer_seq=0,
                                     batch=batch).encode()
        position = sum(len(part) for part in self.out)
        self.out.append(frame[:keep])
        self.expected.torn.append((self.path, position, keep))

    def flush(self) -> None:
        if self.path is not None and self.out:
            self.path.write_bytes(b"".join(self.out))
        self.out = []


# -- the test cluster ---------------------------------------------------------------------------

HUB_A = 0xF00DCAFE00000001  # above 2**63: hub ids are u64 and must not turn negative
HUB_B = 0x0000000000000B0B
PER_BATCH = 100
#: Publish-to-append latency of batch ``i`` (µs): a spread with a long tail, so the percentiles differ.
LATENCY_PATTERN = (120, 150, 150, 200, 250, 300, 400, 600, 1_000, 5_000)


def _latency(i: int) -> int:
    return LATENCY_PATTERN[i % len(LATENCY_PATTERN)]


def make_test_cluster(root: Path) -> Expected:
    """Two hubs, three topics, 6 000 readable records, one corrupted batch and one torn tail.

    * ``orders`` is published on hub A (1 500 records, 64-byte data, 8-byte keys) and forwarded
      to hub B, which stores its own copy 2 ms later: same origin timestamps, origin = hub A.
    * ``clicks`` is on hub A only (1 300 records in 2 segments); one of its batches is corrupted
      (checksum), so 1 200 are readable.
    * ``metrics.eu`` is on hub B only (1 800 records of varied sizes, published to two topics at
      once), and its last segment ends in a torn batch.
    """
    expected = Expected()
    hub_a, hub_b = f"{HUB_A:016x}", f"{HUB_B:016x}"
    dir_a = init_data_dir(root / "hub-a", HUB_A)
    dir_b = init_data_dir(root / "hub-b", HUB_B)
    expected.hubs = {hub_a: dir_a, hub_b: dir_b}

    orders_a = SegmentWriter(dir_a, hub_a, "orders", expected, per_segment=100)
    orders_b = SegmentWriter(dir_b, hub_b, "orders", expected, per_segment=100)
    for i in range(15):
        msgs = [(f"k{i:03d}-{j:03d}".encode()[:8].ljust(8, b"_"), bytes(64)) for j in range(PER_BATCH)]
        ts = BASE_TS + i * 100_000  # 10 batches/s: 1 000 records/s over 1.5 s
        spec = BatchSpec(msgs, ts, _latency(i), HUB_A, 1 + i * PER_BATCH, producer_id=77, producer_seq=i + 1)
        orders_a.add(spec)
        forwarded = BatchSpec(msgs, ts, _latency(i) + 2_000, HUB_A, 1 + i * PER_BATCH)
        orders_b.add(forwarded)

    clicks = SegmentWriter(dir_a, hub_a, "clicks", expected, per_segment=7)
    for i in range(13):
        msgs = [(b"", b"c" * 32) for _ in range(PER_BATCH)]
        ts = BASE_TS + i * 250_000
        clicks.add(BatchSpec(msgs, ts, _latency(i + 3), HUB_A, 10_000 + i * PER_BATCH, producer_id=5,
                             producer_seq=i + 1, corrupt=(i == 9)))

    metrics = SegmentWriter(dir_b, hub_b, "metrics.eu", expected, per_segment=10)
    for i in range(18):
        msgs = [(b"m" * (j % 5), b"x" * (10 + (i * 7 + j) % 90)) for j in range(PER_BATCH)]
        ts = BASE_TS + 500_000 + i * 200_000
        metrics.add(BatchSpec(msgs, ts, _latency(i + 6), HUB_B, 1 + i * PER_BATCH, producer_id=9,
                              producer_seq=i + 1, topics=("metrics.eu", "metrics.all")))
    metrics.tear(BatchSpec([(b"", b"t" * 40)] * 10, BASE_TS + 9_000_000, 100, HUB_B, 9_999), keep=37)

    for writer in (orders_a, orders_b, clicks, metrics):
        writer.flush()
    return expected


# -- the benchmark directory --------------------------------------------------------------------

def write_bench_dir(
    root: Path,
    *,
    records: int = 5_000_000,
    record_size: int = 64,
    topics: Sequence[str] = ("bench.a", "bench.b"),
    per_batch: int = 1_000,
    segment_bytes: int = 64 << 20,
    hub_id: int = 0xBE4C000000000001,
) -> tuple[int, int]:
    """One hub, ``records`` records of ``record_size`` data bytes spread over ``topics``.

    Returns ``(files, bytes)``.  Every batch shares one record region (only the offsets, times and
    CRCs differ), which keeps generating 5M records to a few seconds.
    """
    init_data_dir(root, hub_id)
    region_count, region = wire.encode_records((b"", bytes(record_size)) for _ in range(per_batch))
    files = 0
    per_topic = [records // len(topics) + (1 if i < records % len(topics) else 0) for i in range(len(topics))]
    for t, (topic, n) in enumerate(zip(topics, per_topic, strict=True)):
        directory = root / "topics" / topic_directory_name(topic)
        directory.mkdir(parents=True, exist_ok=True)
        offset = 0
        out = None
        size = 0
        while offset < n:
            count = min(per_batch, n - offset)
            if count == per_batch:
                body_count, body = region_count, region
            else:
                body_count, body = wire.encode_records((b"", bytes(record_size)) for _ in range(count))
            if out is None or size >= segment_bytes:
                if out is not None:
                    out.close()
                out = open(directory / f"{offset:020d}.log", "wb")  # noqa: SIM115 - closed on roll
                size = out.write(wire.SegmentHeader(topic=topic, base_offset=offset, created=BASE_TS).encode())
                files += 1
            ts = BASE_TS + (offset // per_batch) * 2_000 + t * 500  # 500k records/s per topic
            batch = wire.RecordBatch(topic=topic, base_offset=offset, timestamp=ts, origin=hub_id,
                                     origin_seq=offset + 1, count=body_count, records=body)
            frame = wire.LogBatch.create(append_ts=ts + 100 + (offset // per_batch) % 400, producer_id=1,
                                         producer_seq=offset // per_batch + 1, batch=batch).encode()
            size += out.write(frame)
            offset += count
        if out is not None:
            out.close()
    return files, sum(p.stat().st_size for p in (root / "topics").rglob("*.log"))


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.segments", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    bench = sub.add_parser("bench", help="one hub with many fixed-size records")
    bench.add_argument("root", type=Path)
    bench.add_argument("--records", type=int, default=5_000_000)
    bench.add_argument("--record-size", type=int, default=64)
    bench.add_argument("--per-batch", type=int, default=1_000)
    bench.add_argument("--segment-mib", type=int, default=64)
    cluster = sub.add_parser("cluster", help="the two-hub test cluster")
    cluster.add_argument("root", type=Path)
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.what == "bench":
        files, size = write_bench_dir(args.root, records=args.records, record_size=args.record_size,
                                      per_batch=args.per_batch, segment_bytes=args.segment_mib << 20)
        print(f"wrote {args.records} records in {files} segment files ({size / 1e6:.1f} MB) under {args.root}")
    else:
        expected = make_test_cluster(args.root)
        print(f"wrote {expected.total} readable records in {expected.files} files under {args.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
