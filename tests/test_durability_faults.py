"""Durability under faults, Jepsen style (docs: /work/shared/brief/RELIABILITY.md).

Hubs run as subprocesses with a data directory; faults are SIGKILL (by PID),
simulated power loss (SIGKILL + truncating every segment to its last fsynced
length, from the hub's ``PUB0SUB_SYNC_JOURNAL``), and damage done to segment
files while the hub is down.  Clients speak raw wire frames (no SDK) and log
every publish as invoked, then ok / fail / unknown; :mod:`tests.support.history`
counts lost, duplicated, reordered and offset anomalies.

Mapping to RELIABILITY.md: scenario 1 (kill -9 under load), 2 (power loss),
9 (corrupted log file), plus the durable-delivery guarantees of
ARCHITECTURE.md (replay/live seam, durable resume, group redelivery,
idempotent producers).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import wire
from tests.support.history import FAIL, OK, UNKNOWN, History, check
from tests.support.hubprocess import ROOT, HubProcess, hub_status
from tests.support.publisher import Publisher, assert_acked_offsets_hold, wait_progress
from tests.support.rawclient import RawClient
from tests.support.scenarios import SERVE_AGAIN_WITHIN, kill9, kill_loop, power_loss_loop, restart_timed
from tests.support.syncclient import SyncClient, publish_frame, read_all, topic_ends
from tests.support.waiting import wait_until
from wire.frames import HEADER, HEADER_SIZE

StartHub = Callable[..., HubProcess]



# -- helpers ------------------------------------------------------------------------------


def hub_args(data_dir: Path, *, durability: str = "received", segment_bytes: int | None = None) -> list[str]:
    args = ["--data-dir", str(data_dir), "--durability", durability]
    if segment_bytes is not None:
        args += ["--segment-bytes", str(segment_bytes)]
    return args


def journal_env(journal: Path) -> dict[str, str]:
    return {"PUB0SUB_SYNC_JOURNAL": str(journal)}


def stop_and_read_stderr(hub: HubProcess) -> str:
    """Graceful stop (SIGTERM, by PID); returns everything the hub logged."""
    hub.proc.terminate()
    hub.proc.wait(10)
    return hub.stderr_text()


def hub_start_error(*args: str, timeout: float = 20.0) -> str | None:
    """Start a hub; None if it came up (it is then stopped by PID), else everything it printed.

    (conftest's HubProcess loses the hub's stderr when a start fails: it closes
    the pipes before reading them.)
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "hub", "--listen", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""
        if line.startswith("listening on "):
            return None
        proc.kill()
        _out, err = proc.communicate(timeout=10)
        return f"exit {proc.returncode}: {line}{err}"
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def segment_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "topics").glob("*/*.log"))


def topic_segments(data_dir: Path, topic: str) -> list[Path]:
    from hub.storage.topic_log import topic_directory_name

    return sorted((data_dir / "topics" / topic_directory_name(topic)).glob("*.log"))


def walk_frames(path: Path) -> list[tuple[int, int, int]]:
    """``(position, end, opcode)`` of every whole frame in a segment file."""
    data = path.read_bytes()
    frames = []
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        opcode, length = HEADER.unpack_from(data, pos)
        end = pos + HEADER_SIZE + length
        if end > len(data):
            break
        frames.append((pos, end, opcode))
        pos = end
    return frames


def log_batches(path: Path) -> list[tuple[int, int]]:
    return [(pos, end) for pos, end, op in walk_frames(path) if op == wire.Opcode.LOG_BATCH]


def publish_batches(
    address: str, topic: str, batches: int, per_batch: int, *, producer: int = 0, first_seq: int = 1, tag: str = "m"
) -> list[wire.PublishAck]:
    acks = []
    with SyncClient.connect(address, name="loader") as client:
        for i in range(batches):
            values = [f"{tag}{i * per_batch + j}".encode() for j in range(per_batch)]
            client.send(publish_frame(topic, values, producer=producer, seq=first_seq + i if producer else i + 1))
            acks.append(client.expect(wire.PublishAck))
    return acks


def recovery_entries(status: dict) -> list[dict]:
    return status["storage"]["recovery"]


# -- the checker itself --------------------------------------------------------------------


def test_checker_accepts_a_clean_history() -> None:
    h = History()
    a = h.invoke("p", "t", [b"1", b"2"])
    h.complete(a, OK)
    b = h.invoke("p", "t", [b"3"])
    h.complete(b, UNKNOWN)
    c = h.invoke("p", "t", [b"4"])
    h.complete(c, FAIL)
    result = check(h, {"t": [(0, b"1"), (1, b"2")]})
    assert result.valid, result.summary()
    assert (result.acknowledged, result.read, result.unknown_missing, result.unknown_read) == (2, 2, 1, 0)


def test_checker_counts_every_kind_of_anomaly() -> None:
    h = History()
    for values, status in (([b"a1", b"a2"], OK), ([b"a3", b"a4"], OK), ([b"a5"], UNKNOWN), ([b"a6"], FAIL)):
        op = h.invoke("p", "t", values)
        h.complete(op, status)
    retry = h.invoke("p", "t", [b"a5"])  # a retry of the unknown op: same value, keeps its place
    h.complete(retry, OK)
    reads = {
        "t": [
            (0, b"a1"),
            (1, b"a3"),  # reordered: a3 before a2
            (2, b"a2"),
            (2, b"a2"),  # duplicate value, and offset 2 again (backwards)
            (5, b"a5"),  # offsets 3, 4 skipped
            (6, b"a6"),  # its publish failed: unexpected
            (7, b"zz"),  # never published: unexpected
        ]
    }  # a4 acknowledged, never read: lost
    r = check(h, reads)
    assert not r.valid
    assert r.anomalies == {
        "lost": 1,
        "duplicated": 1,
        "reordered": 1,
        "offset_skips": 1,
        "offset_backwards": 1,
        "unexpected": 2,
    }, r.summary()


def test_checker_allows_offsets_skipped_by_an_announced_gap() -> None:
    h = History()
    op = h.invoke("p", "t", [b"x", b"y"])
    h.complete(op, OK)
    reads = {"t": [(0, b"x"), (3, b"y")]}
    assert check(h, reads).offset_skips == 1
    assert check(h, reads, holes={"t": [(1, 2)]}).valid


def test_checker_reorder_is_per_publisher_and_topic() -> None:
    h = History()
    for proc, topic, values in (("p", "t", [b"p1", b"p2"]), ("q", "t", [b"q1", b"q2"]), ("p", "u", [b"u1"])):
        h.complete(h.invoke(proc, topic, values), OK)
    interleaved = {"t": [(0, b"q1"), (1, b"p1"), (2, b"q2"), (3, b"p2")], "u": [(0, b"u1")]}
    assert check(h, interleaved).valid
    swapped = {"t": [(0, b"q1"), (1, b"p2"), (2, b"q2"), (3, b"p1")], "u": [(0, b"u1")]}
    assert check(h, swapped).reordered == 1


def test_history_refuses_double_completion() -> None:
    h = History()
    op = h.invoke("p", "t", [b"1"])
    h.complete(op, UNKNOWN)
    with pytest.raises(ValueError):
        h.complete(op, OK)


# -- 1. SIGKILL under load, repeated ---------------------------------------------------------


@pytest.mark.slow
def test_sigkill_under_load_loses_and_duplicates_nothing(start_hub: StartHub, tmp_path: Path) -> None:
    run = kill_loop(start_hub, tmp_path / "data", kills=3, seed=int(time.time()))
    for pub in run.publishers:
        assert not pub.errors, pub.errors
        assert pub.finished_cleanly
        assert pub.reconnects >= 4
    counts = run.history.counts()
    assert counts[UNKNOWN] >= 3, f"every kill should leave batches in flight: {counts}"
    assert counts[FAIL] == 0
    assert run.figures["restart_s_max"] < SERVE_AGAIN_WITHIN, run.figures
    result = run.verdict
    assert result.valid, result.summary()
    assert result.lost == 0 and result.duplicated == 0 and result.unknown_missing == 0, result.summary()
    assert result.acknowledged > 1000
    for pub in run.publishers:
        assert_acked_offsets_hold(pub, run.reads)
    print(run.row())


def test_a_publisher_never_counts_another_hub_on_its_hubs_old_port(start_hub: StartHub, tmp_path: Path) -> None:
    """The checker above trusts that every ack came from the hub under test.  While that hub
    restarts, its old port is free; another hub may take it (the suite starts hundreds), and a
    publisher that published there would get acks this hub never gave: "lost" values, though
    nothing was lost.  Here the address points at another hub while the first is down."""
    args = hub_args(tmp_path / "mine")
    mine = start_hub(*args)
    other = start_hub(*hub_args(tmp_path / "other"))
    address = [mine.address]
    history = History()
    pub = Publisher(history, lambda: address[0], ["stray.t"], producer=0x57, window=2, max_seconds=60)
    pub.start()
    try:
        wait_progress(pub, 5)
        address[0] = other.address  # the next connection finds another hub there
        kill9(mine)
        # The status calls count too: 8 means some of the publisher's reached the other hub.
        wait_until(lambda: hub_status(other.address)["counters"]["connections_total"] >= 8, timeout=10,
                   what="connections to the other hub")
        mine, _took = restart_timed(start_hub, args)
        address[0] = mine.address
        wait_progress(pub, pub.acked_batches + 5)
    finally:
        pub.stop()
    assert not pub.errors and pub.finished_cleanly, pub.errors
    with SyncClient.connect(other.address) as client:
        assert "stray.t" not in topic_ends(client)
    reads, gaps = read_all(mine.address, ["stray.t"])
    assert not gaps
    result = check(history, reads)
    assert result.valid and result.lost == 0 and result.acknowledged > 0, result.summary()
    assert pub.wrong_hub_connects >= 1


# -- 2. simulated power loss ---------------------------------------------------------------------


@pytest.mark.slow
def test_power_loss_with_fsync_loses_nothing_acknowledged(start_hub: StartHub, tmp_path: Path) -> None:
    run = power_loss_loop(start_hub, tmp_path / "data", tmp_path / "sync-journal", losses=3)
    (pub,) = run.publishers
    assert not pub.errors, pub.errors
    assert pub.finished_cleanly
    assert run.figures["restart_s_max"] < SERVE_AGAIN_WITHIN, run.figures
    result = run.verdict
    assert result.valid, result.summary()
    assert result.lost == 0 and result.duplicated == 0 and result.unknown_missing == 0, result.summary()
    # An ack is only sent once its batch is synced: every acknowledged offset still holds its value.
    assert_acked_offsets_hold(pub, run.reads)
    print(run.row())


def test_power_loss_window_of_received_mode(start_hub: StartHub, tmp_path: Path) -> None:
    """``received`` acknowledges once the bytes are written to the OS and never fsyncs the log.

    Its power-loss window is therefore everything the kernel had not yet written
    back on its own: dirty page-cache pages younger than ``vm.dirty_expire_centisecs``
    (30 s by default) plus up to one writeback period (``vm.dirty_writeback_centisecs``,
    5 s) -- roughly the last 30-35 s of acknowledged publishes (less when
    ``vm.dirty_background_ratio`` forces earlier writeback), plus the directory
    entries of segment files created in that time.  What survives is a prefix of
    each segment only if the file system writes pages back in order, which it
    does not promise: recovery then sees a torn or corrupted tail.  A SIGKILL
    alone loses nothing (test 1).  We do not assert a loss (the page cache may
    have been flushed); we show the hub never claims durability in this mode:
    no fsync is counted and the sync journal stays empty.
    """
    data_dir = tmp_path / "data"
    journal = tmp_path / "sync-journal"
    hub = start_hub(*hub_args(data_dir, durability="received"), env=journal_env(journal))
    acks = publish_batches(hub.address, "window", 20, 10, producer=7)
    assert all(a.status is wire.AckStatus.STORED for a in acks)
    with SyncClient.connect(hub.address) as client:
        storage = client.status()["storage"]
    assert storage["durability"] == "received"
    assert storage["fsyncs"] == 0
    assert not journal.exists() or journal.read_text() == ""
    # Under a simulated power loss now, every acknowledged message of this test would be gone.


# -- 3. torn tail ---------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["half-frame-appended", "last-frame-cut"])
def test_torn_tail_is_truncated_reported_and_offsets_continue(start_hub: StartHub, tmp_path: Path, how: str) -> None:
    data_dir = tmp_path / "data"
    hub = start_hub("--data-dir", str(data_dir))
    publish_batches(hub.address, "torn", 5, 10)  # offsets 0..49, one LOG_BATCH per publish
    kill9(hub)
    (segment,) = topic_segments(data_dir, "torn")
    size = segment.stat().st_size
    if how == "half-frame-appended":
        batch = wire.RecordBatch(
            topic="torn",
            base_offset=50,
            timestamp=1,
            origin=1,
            origin_seq=51,
            count=1,
            records=wire.encode_record(b"", b"never-acked"),
        )
        frame = wire.LogBatch.create(append_ts=1, producer_id=0, producer_seq=0, batch=batch).encode()
        torn = frame[: len(frame) // 2]
        with open(segment, "ab") as fh:
            fh.write(torn)
        expect_served, expect_cut = 50, len(torn)
    else:
        pos, end = log_batches(segment)[-1]
        keep = pos + (end - pos) // 2
        os.truncate(segment, keep)
        expect_served, expect_cut = 40, keep - pos
    hub = start_hub("--data-dir", str(data_dir))
    with SyncClient.connect(hub.address) as client:
        status = client.status()
        entries = [
            e for e in recovery_entries(status) if e["segment"].endswith(segment.name) and "torn" in e["segment"]
        ]
        assert len(entries) == 1, recovery_entries(status)
        assert entries[0]["truncated_bytes"] == expect_cut
        assert entries[0]["corrupted_ranges"] == []
        assert topic_ends(client)["torn"] == expect_served
    reads, gaps = read_all(hub.address, ["torn"])
    assert not gaps
    assert reads["torn"] == [(i, f"m{i}".encode()) for i in range(expect_served)]
    # New publishes continue right after the last good batch.
    with SyncClient.connect(hub.address) as client:
        client.send(publish_frame("torn", [b"after-1", b"after-2"], seq=1))
        ack = client.expect(wire.PublishAck)
    assert [(r.topic, r.first_offset, r.num) for r in ack.ranges] == [("torn", expect_served, 2)]
    reads, _ = read_all(hub.address, ["torn"])
    assert reads["torn"][-2:] == [(expect_served, b"after-1"), (expect_served + 1, b"after-2")]
    stderr = stop_and_read_stderr(hub)
    assert "WARNING" in stderr and "torn tail" in stderr, stderr
    assert size - expect_cut > 0


# -- 4. corrupted records ---------------------------------------------------------------------------


def test_corrupted_batch_is_never_served_and_reported_as_gap(start_hub: StartHub, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    hub = start_hub("--data-dir", str(data_dir))
    publish_batches(hub.address, "rot", 5, 10)  # batches at offsets 0, 10, 20, 30, 40
    stop_and_read_stderr(hub)
    (segment,) = topic_segments(data_dir, "rot")
    batches = log_batches(segment)
    assert len(batches) == 5
    pos, end = batches[2]  # offsets 20..29
    data = bytearray(segment.read_bytes())
    data[end - 2] ^= 0x40  # a byte of the last record's data: the frame boundary stays intact
    segment.write_bytes(bytes(data))

    hub = start_hub("--data-dir", str(data_dir))
    with SyncClient.connect(hub.address) as client:
        status = client.status()
    (entry,) = [e for e in recovery_entries(status) if "rot" in e["segment"]]
    assert entry["truncated_bytes"] == 0
    assert [r[:2] for r in entry["corrupted_ranges"]] == [[pos, end]]
    assert "checksum" in entry["corrupted_ranges"][0][2]

    reads, gaps = read_all(hub.address, ["rot"])
    assert [(g.topic, g.first_offset, g.dropped) for g in gaps] == [("rot", 20, 10)]
    assert reads["rot"] == [(i, f"m{i}".encode()) for i in (*range(0, 20), *range(30, 50))]
    # The corrupted data never reaches a reader, not even from an offset inside it.
    reads, gaps = read_all(hub.address, ["rot"], offsets={"rot": 25})
    assert [o for o, _ in reads["rot"]] == list(range(30, 50))
    assert gaps and all(g.first_offset + g.dropped == 30 for g in gaps)
    # The topic was not shortened: new messages continue at 50.
    with SyncClient.connect(hub.address) as client:
        client.send(publish_frame("rot", [b"new"], seq=1))
        ack = client.expect(wire.PublishAck)
    assert ack.ranges[0].first_offset == 50
    stderr = stop_and_read_stderr(hub)
    assert "ERROR" in stderr and "CORRUPTED" in stderr, stderr


def test_garbage_frame_header_moves_the_rest_aside(start_hub: StartHub, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    hub = start_hub("--data-dir", str(data_dir))
    publish_batches(hub.address, "junk", 5, 10)
    stop_and_read_stderr(hub)
    (segment,) = topic_segments(data_dir, "junk")
    pos, _end = log_batches(segment)[2]
    original = segment.read_bytes()
    damaged = bytearray(original)
    damaged[pos : pos + HEADER_SIZE] = b"\xff\xde\xad\xbe\xef"  # an unknown opcode and a bogus length
    segment.write_bytes(bytes(damaged))

    hub = start_hub("--data-dir", str(data_dir))
    with SyncClient.connect(hub.address) as client:
        status = client.status()
        assert topic_ends(client)["junk"] == 20
    (entry,) = [e for e in recovery_entries(status) if "junk" in e["segment"]]
    copy = segment.with_name(f"{segment.name}.corrupt-{pos}")
    assert entry["corrupt_copy"] == str(copy)
    assert entry["truncated_bytes"] == len(original) - pos
    assert copy.read_bytes() == bytes(damaged[pos:])
    assert segment.stat().st_size == pos
    reads, gaps = read_all(hub.address, ["junk"])
    assert not gaps
    assert reads["junk"] == [(i, f"m{i}".encode()) for i in range(20)]
    stderr = stop_and_read_stderr(hub)
    assert "ERROR" in stderr and "CORRUPTED" in stderr and str(copy) in stderr, stderr


def corrupt_middle_batch(start_hub: StartHub, data_dir: Path, topic: str) -> HubProcess:
    """5 batches of 10 (offsets 0..49), the one at 20..29 corrupted on disk, hub restarted (empty tail cache)."""
    hub = start_hub("--data-dir", str(data_dir))
    publish_batches(hub.address, topic, 5, 10)
    stop_and_read_stderr(hub)
    (segment,) = topic_segments(data_dir, topic)
    _pos, end = log_batches(segment)[2]
    data = bytearray(segment.read_bytes())
    data[end - 2] ^= 0x40
    segment.write_bytes(bytes(data))
    return start_hub("--data-dir", str(data_dir))


def test_reader_after_a_corrupted_batch_gets_no_gap_for_it(start_hub: StartHub, tmp_path: Path) -> None:
    hub = corrupt_middle_batch(start_hub, tmp_path / "data", "rot")
    reads, gaps = read_all(hub.address, ["rot"], offsets={"rot": 30})
    assert [o for o, _ in reads["rot"]] == list(range(30, 50))
    assert [(g.first_offset, g.dropped) for g in gaps] == []


def test_group_redelivers_messages_stored_after_a_corrupted_batch(start_hub: StartHub, tmp_path: Path) -> None:
    hub = corrupt_middle_batch(start_hub, tmp_path / "data", "rot")
    with SyncClient.connect(hub.address, name="member") as member:
        member.send(
            wire.Sub(
                sub_id=1,
                patterns=("rot",),
                start=wire.StartPosition.EARLIEST,
                ack_mode=wire.AckMode.EXPLICIT,
                group="g",
                ack_wait_ms=300,
            )
        )
        member.expect(wire.SubOk)
        deliveries: dict[int, int] = {}
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline and len([o for o, n in deliveries.items() if n >= 2]) < 40:
            try:
                frame = member.recv(0.05)
            except TimeoutError:
                continue
            if isinstance(frame, wire.Deliver):
                offsets = [o for o, _k, _d in frame.batch.messages()]
                for o in offsets:
                    deliveries[o] = deliveries.get(o, 0) + 1
                if all(deliveries[o] >= 2 for o in offsets):  # ack only redeliveries
                    member.send(
                        wire.Ack(
                            sub_id=1,
                            ranges=(wire.AckRange(topic="rot", first_offset=offsets[0], last_offset=offsets[-1]),),
                        )
                    )
        g = group_status(hub.address, "g")
    assert sorted(o for o, n in deliveries.items() if n >= 2) == [*range(20), *range(30, 50)], deliveries
    assert g is not None and g["acked_floor"] == {"rot": 50}, g


def test_hub_starts_after_power_loss_emptied_its_hub_id(start_hub: StartHub, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    hub = start_hub("--data-dir", str(data_dir))
    publish_batches(hub.address, "ident", 1, 5)
    kill9(hub)
    (data_dir / "hub-id").write_text("")  # never fsynced: what a power loss may leave
    error = hub_start_error("--data-dir", str(data_dir))
    assert error is None, error
    hub = start_hub("--data-dir", str(data_dir))
    reads, _ = read_all(hub.address, ["ident"])
    assert len(reads["ident"]) == 5


def test_segment_with_torn_header_does_not_stop_the_hub(start_hub: StartHub, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    hub = start_hub("--data-dir", str(data_dir), "--segment-bytes", "1024")
    publish_batches(hub.address, "roll", 10, 20)  # several segments
    kill9(hub)
    segments = topic_segments(data_dir, "roll")
    assert len(segments) > 1
    last = segments[-1]
    header_end = walk_frames(last)[0][1]
    os.truncate(last, header_end // 2)
    error = hub_start_error("--data-dir", str(data_dir))
    assert error is None, error
    hub = start_hub("--data-dir", str(data_dir))
    reads, _ = read_all(hub.address, ["roll"])
    served = [o for o, _ in reads["roll"]]
    assert served == list(range(len(served))) and len(served) >= 20


# -- 5. replay-to-live seam ---------------------------------------------------------------------------


@pytest.mark.slow
async def test_replay_to_live_seam_under_concurrent_publishing(start_hub: StartHub, tmp_path: Path) -> None:
    hub = start_hub("--data-dir", str(tmp_path / "data"))
    # ~9 MB of messages: more than the 4 MiB tail cache, so a reader starting early
    # replays from the segment files, then from the tail cache, then follows live.
    batches, per_batch = 600, 50
    total = batches * per_batch
    pad = b"." * 300

    def value(i: int) -> bytes:
        return str(i).encode() + pad

    published = 0
    started = trio.Event()

    async def publisher() -> None:
        nonlocal published
        client = await RawClient.connect(hub.address, name="firehose")
        for i in range(batches):
            values = [value(i * per_batch + j) for j in range(per_batch)]
            last = i == batches - 1
            await client.send(publish_frame("seam", values, seq=i + 1, ack=last))
            published = (i + 1) * per_batch
            if i == batches // 2:  # ~4.6 MB published: the start of the log is out of the tail cache
                started.set()
            if i % 20 == 0:
                await trio.lowlevel.checkpoint()
        await client.expect(wire.PublishAck, timeout=30, skip=(wire.Heartbeat,))
        await client.aclose()

    async def subscriber(name: str, start_at: int | None, out: list[tuple[int, bytes]], meta: dict) -> None:
        await started.wait()
        client = await RawClient.connect(hub.address, name=name)
        meta["published_at_sub"] = published
        if start_at is None:
            sub = wire.Sub(sub_id=7, patterns=("seam",), start=wire.StartPosition.EARLIEST)
        else:
            sub = wire.Sub(
                sub_id=7,
                patterns=("seam",),
                start=wire.StartPosition.OFFSET,
                offsets=(wire.TopicOffset(topic="seam", offset=start_at),),
            )
        await client.send(sub)
        ok = await client.expect(wire.SubOk, skip=(wire.Heartbeat,))
        assert isinstance(ok, wire.SubOk)
        meta["sub_ok_offset"] = ok.offsets[0].offset if ok.offsets else None
        while not out or out[-1][0] < total - 1:
            frame = await client.recv(timeout=30)
            if isinstance(frame, wire.Deliver):
                out.extend((o, d) for o, _k, d in frame.batch.messages())
            elif isinstance(frame, wire.Heartbeat):
                if frame.word == "ping":
                    await client.send(wire.PONG)
            else:
                raise AssertionError(f"{name}: unexpected {frame!r}")
        await client.aclose()

    from_earliest: list[tuple[int, bytes]] = []
    from_middle: list[tuple[int, bytes]] = []
    meta_e: dict = {}
    meta_m: dict = {}
    middle = total // 8
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(publisher)
            nursery.start_soon(subscriber, "from-earliest", None, from_earliest, meta_e)
            nursery.start_soon(subscriber, "from-middle", middle, from_middle, meta_m)
    assert 0 < meta_e["published_at_sub"] < total, "the subscriber must join while publishing is under way"
    for got, first in ((from_earliest, 0), (from_middle, middle)):
        offsets = [o for o, _ in got]
        assert offsets == list(range(first, total)), (
            f"from {first}: {len(offsets)} received, first anomaly at "
            f"{next((i for i, o in enumerate(offsets) if o != first + i), None)}"
        )
        assert all(d == value(o) for o, d in got)
    assert meta_m["sub_ok_offset"] == middle


# -- 6. durable resume across a hub restart -------------------------------------------------------------


def wait_consumers_file(data_dir: Path, name: str, topic: str, floor: int, within: float = 5.0) -> None:
    path = data_dir / "consumers.json"

    def recorded() -> bool:
        doc = json.loads(path.read_text())
        return any(c["name"] == name and c["positions"].get(topic) == floor for c in doc["consumers"])

    # Not written yet, or caught half-written: not yet.
    wait_until(recorded, timeout=within, what=f"{path} to record {name} {topic}={floor}",
               retry_on=(OSError, ValueError), interval=0.05)  # fmt: skip


def durable_sub(name: str, topic: str, sub_id: int = 3) -> wire.Sub:
    return wire.Sub(
        sub_id=sub_id,
        patterns=(topic,),
        start=wire.StartPosition.EARLIEST,
        ack_mode=wire.AckMode.EXPLICIT,
        durable=name,
    )


def receive_offsets(client: SyncClient, until: int, within: float = 10.0) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + within
    while not got or got[-1][0] < until - 1:
        frame = client.recv(max(0.01, deadline - time.monotonic()))
        if isinstance(frame, wire.Deliver):
            got.extend((o, d) for o, _k, d in frame.batch.messages())
        elif isinstance(frame, wire.Heartbeat):
            if frame.word == "ping":
                client.send(wire.PONG)
        else:
            raise AssertionError(f"unexpected {frame!r}")
    return got


def test_a_confirmed_durable_name_or_group_survives_an_immediate_kill(start_hub: StartHub, tmp_path: Path) -> None:
    """SUB_OK confirms a durable name (and a group): it is on disk before that, not up to 0.2 s later.

    Forgotten in a crash, it would take its standing interest with it: in a mesh, nothing published
    while the hub was down would be forwarded to it (found by tests/support/faultplan.py)."""
    data_dir = tmp_path / "data"
    hub = start_hub("--data-dir", str(data_dir))
    with SyncClient.connect(hub.address) as client:
        client.send(durable_sub("keep", "kept.topic"))
        client.expect(wire.SubOk)
        client.send(wire.Sub(sub_id=4, patterns=("jobs",), group="workers"))
        client.expect(wire.SubOk)
        kill9(hub)  # at once: well inside the 0.2 s between periodic saves
    saved = json.loads((data_dir / "consumers.json").read_text())["consumers"]
    assert {(c["kind"], c["name"], tuple(c["patterns"])) for c in saved} == {
        ("durable", "keep", ("kept.topic",)), ("group", "workers", ("jobs",))
    }
    hub = start_hub("--data-dir", str(data_dir))
    with SyncClient.connect(hub.address) as client:
        status = client.status()
    assert [d["name"] for d in status["durables"]] == ["keep"]


def test_durable_subscription_resumes_at_first_unacked_after_sigkill(start_hub: StartHub, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    hub = start_hub("--data-dir", str(data_dir))
    publish_batches(hub.address, "dur", 5, 20)  # offsets 0..99
    with SyncClient.connect(hub.address) as client:
        client.send(durable_sub("resumer", "dur"))
        client.expect(wire.SubOk)
        got = receive_offsets(client, 100)
        assert [o for o, _ in got] == list(range(100))
        # Ack 0..39 and a stretch above a hole (60..69): only the floor (40) is durable.
        client.send(
            wire.Ack(
                sub_id=3,
                ranges=(
                    wire.AckRange(topic="dur", first_offset=0, last_offset=39),
                    wire.AckRange(topic="dur", first_offset=60, last_offset=69),
                ),
            )
        )
        wait_consumers_file(data_dir, "resumer", "dur", 40)
    kill9(hub)
    hub, took = restart_timed(start_hub, hub_args(data_dir))
    assert took < SERVE_AGAIN_WITHIN
    publish_batches(hub.address, "dur", 1, 20, tag="late", first_seq=100)  # offsets 100..119
    with SyncClient.connect(hub.address) as client:
        status = client.status()
        (durable,) = [d for d in status["durables"] if d["name"] == "resumer"]
        assert durable["positions"] == {"dur": 40}
        client.send(durable_sub("resumer", "dur"))
        ok = client.expect(wire.SubOk)
        assert [(o.topic, o.offset) for o in ok.offsets] == [("dur", 40)]
        got = receive_offsets(client, 120)
    # At-least-once: nothing below the acked floor again, nothing after it skipped.
    assert [o for o, _ in got] == list(range(40, 120))
    assert [d for _, d in got] == [f"m{i}".encode() for i in range(40, 100)] + [f"late{i}".encode() for i in range(20)]


# -- 7. consumer-group redelivery -----------------------------------------------------------------------


def group_status(address: str, group: str) -> dict | None:
    with SyncClient.connect(address, name="status") as client:
        for g in client.status().get("groups", []):
            if g["group"] == group:
                return g
    return None


@pytest.mark.parametrize("how", ["ack-timeout", "member-leaves"])
def test_group_redelivers_unacked_messages_to_another_member(start_hub: StartHub, tmp_path: Path, how: str) -> None:
    hub = start_hub("--data-dir", str(tmp_path / "data"))
    ack_wait_ms = 300 if how == "ack-timeout" else 60_000
    sub = wire.Sub(
        sub_id=1,
        patterns=("grp",),
        start=wire.StartPosition.EARLIEST,
        ack_mode=wire.AckMode.EXPLICIT,
        group="workers",
        ack_wait_ms=ack_wait_ms,
    )
    a = SyncClient.connect(hub.address, name="member-a")
    b = SyncClient.connect(hub.address, name="member-b")
    try:
        for member in (a, b):
            member.send(sub)
            member.expect(wire.SubOk)
        publish_batches(hub.address, "grp", 10, 10)  # offsets 0..99, one batch each
        a_got: list[int] = []
        b_got: list[int] = []
        b_acks: list[int] = []
        deadline = time.monotonic() + 15
        a_closed = False
        while len(set(b_acks)) < 100:
            assert time.monotonic() < deadline, f"B acked {len(set(b_acks))}/100; A holds {len(a_got)}"
            if not a_closed:
                try:
                    frame = a.recv(0.02)
                    if isinstance(frame, wire.Deliver):
                        a_got.extend(o for o, _k, _d in frame.batch.messages())  # A never acks
                except TimeoutError:
                    pass
                if how == "member-leaves" and a_got and len(a_got) + len(b_got) >= 100:
                    a.close()  # A leaves holding unacknowledged messages
                    a_closed = True
            try:
                frame = b.recv(0.02)
            except TimeoutError:
                continue
            if isinstance(frame, wire.Deliver):
                offsets = [o for o, _k, _d in frame.batch.messages()]
                b_got.extend(offsets)
                b.send(
                    wire.Ack(
                        sub_id=1, ranges=(wire.AckRange(topic="grp", first_offset=offsets[0], last_offset=offsets[-1]),)
                    )
                )
                b_acks.extend(offsets)
        assert a_got, "member A should have been handed some batches"
        assert sorted(b_acks) == list(range(100)), "every message acked exactly once across the group"
        assert set(a_got) <= set(b_got)
        g: dict | None = None

        def settled() -> bool:
            nonlocal g
            g = group_status(hub.address, "workers")
            assert g is not None
            return g["pending_total"] == 0 and g["acked_floor"] == {"grp": 100}

        wait_until(settled, timeout=5, what=lambda: f"the group to settle (last status {g})", interval=0.05)
        assert g is not None
        assert g["redelivered_messages"] >= len(set(a_got))
    finally:
        a.close()
        b.close()


# -- 8. idempotent retry ----------------------------------------------------------------------------------


@pytest.mark.parametrize("durability", ["received", "fsync"])
def test_idempotent_retry_across_reconnect_and_restart(start_hub: StartHub, tmp_path: Path, durability: str) -> None:
    data_dir = tmp_path / "data"
    args = hub_args(data_dir, durability=durability)
    hub = start_hub(*args)
    pid = 0xBEEF
    first = publish_frame("idem", [b"one", b"two"], producer=pid, seq=1)
    second = publish_frame("idem", [b"three"], producer=pid, seq=2)
    multi = publish_frame(("idem", "idem.other"), [b"four"], producer=pid, seq=3)
    with SyncClient.connect(hub.address) as client:
        client.send(first, first)
        ack1, dup1 = client.expect(wire.PublishAck), client.expect(wire.PublishAck)
        assert ack1.status is wire.AckStatus.STORED and [(r.first_offset, r.num) for r in ack1.ranges] == [(0, 2)]
        assert (dup1.status, dup1.sequence, dup1.ranges) == (wire.AckStatus.DUPLICATE, 1, ())
        client.send(second)
        assert client.expect(wire.PublishAck).status is wire.AckStatus.STORED
    # The same PUBLISH after a reconnect: the ack may have been lost with the connection.
    with SyncClient.connect(hub.address) as client:
        client.send(second, first, multi, multi)
        acks = [client.expect(wire.PublishAck) for _ in range(4)]
    assert [(a.sequence, a.status) for a in acks] == [
        (2, wire.AckStatus.DUPLICATE),
        (1, wire.AckStatus.DUPLICATE),
        (3, wire.AckStatus.STORED),
        (3, wire.AckStatus.DUPLICATE),
    ]
    kill9(hub)
    hub = start_hub(*args)
    # ... and after a hub restart: positions are rebuilt from the log.
    with SyncClient.connect(hub.address) as client:
        client.send(first, second, multi, publish_frame("idem", [b"five"], producer=pid, seq=4))
        acks = [client.expect(wire.PublishAck) for _ in range(4)]
    assert [a.status for a in acks] == [wire.AckStatus.DUPLICATE] * 3 + [wire.AckStatus.STORED]
    assert [(r.topic, r.first_offset) for r in acks[3].ranges] == [("idem", 4)]
    # (one subscription per topic: a multi-topic message reaches one subscription once)
    reads, _ = read_all(hub.address, ["idem"])
    assert reads["idem"] == [(0, b"one"), (1, b"two"), (2, b"three"), (3, b"four"), (4, b"five")]
    reads, _ = read_all(hub.address, ["idem.other"])
    assert reads["idem.other"] == [(0, b"four")]
