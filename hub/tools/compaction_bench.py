"""Compaction throughput, memory and reads, and the size of a compacted topic against its uncompacted size.

    python -m hub.tools.compaction_bench [--records 1000000] [--keys 10000] [--size 64] [--order random]
                                         [--map-bytes N] [--more N] [--json]

In process, on a temporary data directory, through the hub's own storage code: ``--records``
records (keys ``k00000`` .. drawn at random from ``--keys`` with a fixed seed, or cycling through
them in order with ``--order cycle``; ``--size`` bytes of data each) are appended to one topic
log in batches of 1,000 (8 MiB segments), the log is rolled so every record sits in a closed
segment, then the compaction loop's own pass (``hub.shell.compactor.compact_topic``: the
worker's file work, putting its output in place, the checkpoint) runs until the topic is no
longer due -- one pass, or several when the offset map (``--map-bytes``, default the hub's)
holds fewer keys than the dirty part has.  Printed: the records the passes read per second of
their wall time, the passes, the bytes they read (``rchar`` of /proc/self/io: every read
syscall), the process' peak RSS during them (``VmHWM``, reset first through
/proc/self/clear_refs) and its RSS before, the topic directory's bytes before and after, and
the records left.  ``--more N`` then appends N more records (the same keys), rolls, and
reports the passes over that new dirty part the same way (``second``).  ``pub0sub bench KV1``
runs this.
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from wire.records import encode_records

from ..shell.compactor import compact_topic
from ..storage.batches import SharedBatch
from ..storage.compaction_policy import CompactionPolicy
from ..storage.segment import Segment
from ..storage.store import LogStore
from ..storage.topic_log import LogSettings, TopicLog

TOPIC = "kv.bench"
BATCH = 1_000
SEGMENT_BYTES = 8 << 20


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def _proc(path: str, field: str) -> int:
    """A figure of /proc/self/status (kB, given in bytes) or /proc/self/io (bytes)."""
    for line in Path(path).read_text().splitlines():
        name, _, rest = line.partition(":")
        if name == field:
            number = int(rest.split()[0])
            return number * 1024 if rest.strip().endswith("kB") else number
    raise KeyError(field)


def _append(store: LogStore, topic_log: TopicLog, count: int, key_of: Callable[[int], bytes], data: bytes,
            now: int) -> None:  # fmt: skip
    first = topic_log.next_offset
    for start in range(first, first + count, BATCH):
        n, region = encode_records((key_of(i), data) for i in range(start, min(start + BATCH, first + count)))
        batch = SharedBatch(TOPIC, topic_log.next_offset, now, 1, start + 1, n, region)
        topic_log.append(batch, topics=(TOPIC,), producer_id=0, producer_seq=0, append_ts=now)
    # Roll, as the next append would: every record is now in a closed segment.
    topic_log.segments.append(Segment.create(topic_log.directory, TOPIC, topic_log.next_offset, now, store.files))


def _passes(store: LogStore, policy: CompactionPolicy, topic_log: TopicLog, now: int) -> dict[str, Any]:
    """Passes until the topic is not due: what they took."""
    before = directory_bytes(topic_log.directory)
    records_before = policy.records_read
    rss = _proc("/proc/self/status", "VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the RSS now
    read = _proc("/proc/self/io", "rchar")
    passes = 0
    started = time.perf_counter()
    while policy.due(topic_log, now):
        trio.run(compact_topic, store, policy, topic_log, now)
        passes += 1
    seconds = time.perf_counter() - started
    records = policy.records_read - records_before
    return {"passes": passes, "seconds": round(seconds, 4), "records_read": records,
            "records_per_s": round(records / seconds), "bytes_read": _proc("/proc/self/io", "rchar") - read,
            "rss_before": rss, "peak_rss": _proc("/proc/self/status", "VmHWM"), "bytes_before": before,
            "bytes_after": directory_bytes(topic_log.directory)}  # fmt: skip


def measure(records: int, keys: int, size: int, order: str = "random", map_bytes: int = 0,
            more: int = 0) -> dict[str, Any]:  # fmt: skip
    rng = random.Random(21)
    width = max(5, len(str(keys - 1)))  # every key one length: batches of one record size
    key_of: Callable[[int], bytes] = (
        (lambda i: b"k%0*d" % (width, rng.randrange(keys))) if order == "random" else
        (lambda i: b"k%0*d" % (width, i % keys))
    )  # fmt: skip
    # The policy takes the map size where it can (a tree before the bounded map has none).
    takes_map = "map_bytes" in inspect.signature(CompactionPolicy).parameters
    extra: dict[str, Any] = {"map_bytes": map_bytes} if map_bytes and takes_map else {}
    policy = CompactionPolicy((TOPIC,), tombstone_seconds=0, **extra)
    with tempfile.TemporaryDirectory(prefix="pub0sub-compaction-bench-") as tmp:
        store = LogStore(Path(tmp), LogSettings(segment_bytes=SEGMENT_BYTES))
        store.open()
        store.compaction = policy
        try:
            now = time.time_ns() // 1000
            topic_log = store.log_for(TOPIC, now)
            data = b"x" * size
            _append(store, topic_log, records, key_of, data, now)
            segments_in = len(topic_log.segments) - 1
            first = _passes(store, policy, topic_log, now)
            out = {"records": records, "keys": keys, "size": size, "order": order,
                   "map_bytes": getattr(policy, "map_bytes", None), "segments_in": segments_in, **first,
                   "size_pct": round(100 * first["bytes_after"] / first["bytes_before"], 3),
                   "records_left": records - policy.records_removed}  # fmt: skip
            if more:
                _append(store, topic_log, more, key_of, data, now)
                out["second"] = {"records": more, **_passes(store, policy, topic_log, now)}
        finally:
            store.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hub.tools.compaction_bench", description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--order", choices=("random", "cycle"), default="random")
    p.add_argument("--map-bytes", type=int, default=0, help="the offset map's bytes (0: the hub's default)")
    p.add_argument("--more", type=int, default=0, help="then append this many records and compact again")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    out = measure(args.records, args.keys, args.size, args.order, args.map_bytes, args.more)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['records']:,} records over {out['keys']:,} keys: {out['passes']} pass(es), compacted "
              f"{out['records_per_s']:,} records/s, read {out['bytes_read']:,} bytes, peak RSS "
              f"{out['peak_rss'] / 2**20:,.1f} MiB (from {out['rss_before'] / 2**20:,.1f}); "
              f"{out['bytes_before']:,} -> {out['bytes_after']:,} bytes ({out['size_pct']}%), "
              f"{out['records_left']:,} records left")  # fmt: skip
        if "second" in out:
            s = out["second"]
            print(f"then {s['records']:,} more: {s['passes']} pass(es) in {s['seconds']} s, read "
                  f"{s['bytes_read']:,} bytes, peak RSS {s['peak_rss'] / 2**20:,.1f} MiB")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
