"""Pure parts of the mesh: encoders, the v2 window, the interest table, the known-peers record."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import wire
from hub.core.clock import ManualClock
from hub.core.mesh.config import MeshConfig
from hub.core.mesh.core import MeshCore
from hub.core.mesh.interest import InterestTable, LocalInterest, valid_pattern
from hub.core.mesh.known_peers import KnownPeer, KnownPeers
from hub.core.mesh.link import PeerLink
from hub.core.mesh.peer import topic_chunks
from hub.core.mesh.protocols import encode_forward_batch, encode_forward_set, encode_stored_set, encode_v1_forwards
from hub.core.mesh.window import ForwardWindow, WindowEntry

GOLDEN_FORWARD = bytes.fromhex("060000001a0207746f7069635f3107746f7069635f320000000568656c6c6f")


def test_v1_forward_matches_the_seed_golden_vector() -> None:
    frames, count = encode_v1_forwards(wire.MessageSet.build(["topic_1", "topic_2"], [(b"", b"hello")]))
    assert (frames, count) == (GOLDEN_FORWARD, 1)
    two, n = encode_v1_forwards(wire.MessageSet.build(["topic_1", "topic_2"], [(b"k", b"hello"), (b"", b"hello")]))
    assert (two, n) == (GOLDEN_FORWARD * 2, 2)  # v1 has no keys: they are dropped


def test_forward_batch_is_byte_identical_to_wire() -> None:
    sets = (
        wire.ForwardSet(
            origin_seq=42,
            timestamp=1700000000000000,
            messages=wire.MessageSet.build(["orders.eu"], [(b"k1", b"a"), (b"", b"b")]),
        ),
        wire.ForwardSet(
            origin_seq=44,
            timestamp=1700000000000250,
            messages=wire.MessageSet.build(["orders.eu", "audit"], [(b"", b"c")]),
        ),
    )
    ours = encode_forward_batch(3, [encode_forward_set(s.origin_seq, s.timestamp, s.messages) for s in sets])
    assert ours == wire.ForwardBatch(origin=3, sets=sets).encode()
    assert len(ours) == 5 + 109  # the docs/protocol.md example
    # Sets read back from a log for a replay encode to the same bytes.
    stored = [encode_stored_set(s.origin_seq, s.timestamp, s.messages.topics, s.messages.count, s.messages.records)
              for s in sets]  # fmt: skip
    assert encode_forward_batch(3, stored) == ours


def _entry(first: int, count: int = 1) -> WindowEntry:
    return WindowEntry(first_seq=first, last_seq=first + count - 1, count=count, encoded=b"x" * 10)


def test_window_acks_cumulatively_and_resumes_from_a_position() -> None:
    w = ForwardWindow(max_sets=100, max_bytes=10_000)
    for seq in range(1, 11):
        w.push(_entry(seq))
    assert [e.first_seq for e in w.take_unsent(35, 100)] == [1, 2, 3]  # 3 x 10 bytes fit in 35
    assert w.ack(2) == 2
    assert len(w) == 8 and w.unacked == 1
    w.take_unsent(1000, 100)
    w.resume(6)  # the peer stored up to 6: 7..10 go again, in order
    assert [e.first_seq for e in w.take_unsent(1000, 100)] == [7, 8, 9, 10]


def test_window_bound_counts_what_it_pushes_out() -> None:
    w = ForwardWindow(max_sets=3, max_bytes=10_000)
    for seq in range(1, 6):
        w.push(_entry(seq, count=2))
    assert len(w) == 3
    assert w.evicted.unsent_messages == 4
    # Where the replay from the log must start, and where the window takes over again.
    assert (w.lost_from, w.first_unsent_seq) == (1, 3)
    w.clear_lost()
    w.take_unsent(1000, 100)
    for seq in range(11, 15, 2):
        w.push(_entry(seq, count=2))  # evicts sent ones first: nothing unsent is lost
    assert w.lost_from is None and w.evicted.unacked_sets == 2
    assert w.clear() == 3 and len(w) == 0 and w.bytes == 0


def test_interest_table_is_a_set_with_patterns() -> None:
    t: InterestTable[str] = InterestTable()
    assert t.add("a", ["orders.*", "orders.*", "audit.>"]) == ["orders.*", "audit.>"]
    t.add("b", ["orders.eu"])
    assert t.peers_for(["orders.eu"]) == {"a", "b"}
    assert t.peers_for(["audit.x.y"]) == {"a"}
    assert t.peers_for(["audit"]) == set()
    assert t.remove("a", ["orders.*"]) == ["orders.*"]
    assert t.peers_for(["orders.eu"]) == {"b"}
    assert t.drop_peer("a") == ["audit.>"]
    assert t.peers() == ["b"]


def test_local_interest() -> None:
    local = LocalInterest()
    local.add(["topic_1"])
    assert local.wants(["x", "topic_1"]) and not local.wants(["topic_2"])


def test_peer_interest_follows_the_seed_rule_not_the_client_rule() -> None:
    """A seed peer may announce any 1..255-byte name; it is kept and matches literally."""
    assert all(valid_pattern(name) for name in ("a..b", "has space", "a.>.b", "x" * 255))
    assert not valid_pattern("") and not valid_pattern("x" * 256)
    table: InterestTable[str] = InterestTable()
    assert table.add("seed", ["a..b", "has space", "a.>.b"]) == ["a..b", "has space", "a.>.b"]
    assert table.peers_for(["has space"]) == {"seed"} and table.peers_for(["a.x.b"]) == set()


def test_subscribe_chunks_hold_at_most_255_topics() -> None:
    chunks = topic_chunks([f"t{i}" for i in range(600)])
    assert [len(c) for c in chunks] == [255, 255, 90]


def test_known_peers_persist_and_a_damaged_record_means_every_peer_is_new(tmp_path: Path) -> None:
    peers = KnownPeers(tmp_path)
    assert peers.get("12D3KooWpeer") is None
    peers.add("12D3KooWpeer", since=41, hub_id=0xABCDEF)
    again = KnownPeers(tmp_path)  # a restart reads the record back
    assert again.get("12D3KooWpeer") == KnownPeer(since=41, hub_id=0xABCDEF)
    assert again.peer_with_hub_id(0xABCDEF) == "12D3KooWpeer"
    (tmp_path / "mesh_peers.json").write_text("{not json")
    assert len(KnownPeers(tmp_path)) == 0
    assert len(KnownPeers(None)) == 0  # no data dir: kept in memory only


class _Source:
    """A ReplaySource whose next origin sequence is set by the test."""

    def __init__(self, next_seq: int) -> None:
        self.next_seq = next_seq

    def next_origin_seq(self) -> int:
        return self.next_seq

    def own_sets(self, wants: object, after: int, before: int, on_hole: object) -> Iterator[WindowEntry]:
        return iter(())


def test_replay_starts_after_what_a_known_peer_stored_or_after_its_first_link(tmp_path: Path) -> None:
    """Position 0 from a known peer means "interested, stored nothing yet": it is replayed from when
    it first linked.  A peer never seen before gets live forwards only, whatever position it claims."""
    source = _Source(next_seq=101)

    def core(replay: _Source | None, data_dir: Path | None = tmp_path) -> MeshCore:
        return MeshCore(MeshConfig(data_dir=data_dir, discovery=False), hub_id=7, clock=ManualClock(),
                        on_forward=lambda *a: None, replay=replay)  # fmt: skip

    mesh = core(source)
    link = PeerLink("12D3KooWpeer-b", b"\x00\x0epeer-b", mesh.config)
    assert mesh.replay_after(link, 9, position=1) is None  # first link: recorded at 100, no history
    assert mesh.replay_after(link, 9, position=0) == 100  # known, stored nothing: everything after 100
    source.next_seq = 500
    assert mesh.replay_after(link, 9, position=250) == 250  # known, stored up to 250
    assert mesh.replay_after(link, 9, position=3) == 100  # a low claim does not reach older history
    assert core(source).replay_after(link, 9, position=0) == 100  # the record survives a restart
    assert core(None, data_dir=None).replay_after(link, 9, 0) is None
