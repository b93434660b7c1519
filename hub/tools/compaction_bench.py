"""Compaction throughput and the size of a compacted topic against its uncompacted size.

    python -m hub.tools.compaction_bench [--records 1000000] [--keys 10000] [--size 64] [--order random] [--json]

In process, on a temporary data directory, through the hub's own storage code: ``--records``
records (keys ``k00000`` .. drawn at random from ``--keys`` with a fixed seed, or cycling through
them in order with ``--order cycle``; ``--size`` bytes of data each) are appended
to one topic log in batches of 1,000 (8 MiB segments), the log is rolled so every record sits in
a closed segment, then one compaction pass (hub/storage/compaction.py, the worker's code) runs
over them and its output is put in place (hub/storage/compaction_commit.py).  Printed: the
records the pass read per second of its wall time (reading twice, writing, fsync), the topic
directory's bytes before and after, and the records left.  ``pub0sub bench KV1`` runs this.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from wire.records import encode_records

from ..storage.batches import SharedBatch
from ..storage.compaction import SegmentRef, compact
from ..storage.compaction_commit import put_in_place
from ..storage.segment import Segment
from ..storage.store import LogStore
from ..storage.topic_log import LogSettings

TOPIC = "kv.bench"
BATCH = 1_000
SEGMENT_BYTES = 8 << 20


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def measure(records: int, keys: int, size: int, order: str = "random") -> dict[str, object]:
    rng = random.Random(21)
    key_of = (lambda i: b"k%05d" % rng.randrange(keys)) if order == "random" else (lambda i: b"k%05d" % (i % keys))
    with tempfile.TemporaryDirectory(prefix="pub0sub-compaction-bench-") as tmp:
        store = LogStore(Path(tmp), LogSettings(segment_bytes=SEGMENT_BYTES))
        store.open()
        try:
            now = time.time_ns() // 1000
            topic_log = store.log_for(TOPIC, now)
            data = b"x" * size
            for start in range(0, records, BATCH):
                count, region = encode_records(
                    (key_of(i), data) for i in range(start, min(start + BATCH, records))
                )
                batch = SharedBatch(TOPIC, topic_log.next_offset, now, 1, start + 1, count, region)
                topic_log.append(batch, topics=(TOPIC,), producer_id=0, producer_seq=0, append_ts=now)
            # Roll, as the next append would: every record is now in a closed segment.
            topic_log.segments.append(Segment.create(topic_log.directory, TOPIC, topic_log.next_offset, now,
                                                     store.files))  # fmt: skip
            before = directory_bytes(topic_log.directory)
            segments = topic_log.segments
            refs = [SegmentRef(s.path, s.base_offset, n.base_offset) for s, n in itertools.pairwise(segments)]
            started = time.perf_counter()
            result = compact(topic_log.directory, refs, now_us=now, tombstone_us=0, segment_bytes=SEGMENT_BYTES,
                             stop=threading.Event())  # fmt: skip
            for written in result.groups:
                put_in_place(topic_log, written, sync=False)
            seconds = time.perf_counter() - started
            after = directory_bytes(topic_log.directory)
            left = result.records_read - result.records_removed
        finally:
            store.close()
    return {"records": records, "keys": keys, "size": size, "order": order, "segments_in": len(refs),
            "seconds": round(seconds, 4), "records_per_s": round(result.records_read / seconds),
            "bytes_before": before, "bytes_after": after,
            "size_pct": round(100 * after / before, 3), "records_left": left}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hub.tools.compaction_bench", description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--order", choices=("random", "cycle"), default="random")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    out = measure(args.records, args.keys, args.size, args.order)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['records']:,} records over {out['keys']:,} keys: compacted {out['records_per_s']:,} records/s; "
              f"{out['bytes_before']:,} -> {out['bytes_after']:,} bytes ({out['size_pct']}%), "
              f"{out['records_left']:,} records left")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
