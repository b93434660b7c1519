from __future__ import annotations

import pytest

from hub.routing import InvalidTopicError, RoutingTable, check_pattern, check_publish_topic


def test_exact_and_wildcards() -> None:
    table: RoutingTable[str] = RoutingTable()
    table.add("a.b", "exact")
    table.add("a.*", "star")
    table.add("a.>", "rest")
    table.add("*.b", "first-star")
    assert table.match("a.b") == ("exact", "star", "rest", "first-star")
    assert table.match("a.c") == ("star", "rest")
    assert table.match("a.b.c") == ("rest",)
    assert table.match("a") == ()
    assert table.match("x.b") == ("first-star",)


def test_each_subscriber_once_even_with_overlapping_patterns() -> None:
    table: RoutingTable[str] = RoutingTable()
    for pattern in ("a.b", "a.*", "a.>", ">"):
        table.add(pattern, "s")
    assert table.match("a.b") == ("s",)


def test_remove_is_counted_and_clears_cache() -> None:
    table: RoutingTable[str] = RoutingTable()
    table.add("t", "s")
    table.add("t", "s")
    assert table.match("t") == ("s",)
    assert table.remove("t", "s")
    assert table.match("t") == ("s",)
    assert table.remove("t", "s")
    assert table.match("t") == ()
    assert not table.remove("t", "s")
    assert len(table) == 0


def test_wildcard_remove() -> None:
    table: RoutingTable[str] = RoutingTable()
    table.add("x.*", "s")
    assert table.match("x.y") == ("s",)
    table.remove("x.*", "s")
    assert table.match("x.y") == ()
    assert table.patterns() == []


@pytest.mark.parametrize("pattern", ["", "a..b", ".a", "a.", "a.>.b", ">.a"])
def test_bad_patterns(pattern: str) -> None:
    with pytest.raises(InvalidTopicError):
        check_pattern(pattern)


@pytest.mark.parametrize("topic", ["a.*", "*", ">", "a.>.b"])
def test_published_topic_without_wildcards(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        check_publish_topic(topic)
    check_publish_topic("a.b*c.d>")  # wildcards only count as whole tokens


def test_cache_is_bounded() -> None:
    table: RoutingTable[str] = RoutingTable()
    table.add(">", "s")
    for i in range(70_000):
        table.match(f"t{i}")
    assert len(table._cache) <= 65_536
