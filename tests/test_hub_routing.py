from __future__ import annotations

import pytest

from hub.core.routing import RoutingTable


def test_exact_and_wildcards() -> None:
    table: RoutingTable[str] = RoutingTable()
    table.add("a.b", "exact")
    table.add("a.*", "star")
    table.add("a.>", "rest")
    table.add("*.b", "first-star")
    hit = table.match("a.b")  # exact matches first; wildcard matches in no promised order
    assert hit[0] == "exact" and sorted(hit[1:]) == ["first-star", "rest", "star"]
    assert sorted(table.match("a.c")) == ["rest", "star"]
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


@pytest.mark.parametrize("name", ["a..b", "a.>.b", "has space", "a.b*", ">.a"])
def test_names_that_are_not_valid_patterns_match_literally(name: str) -> None:
    # The table does not judge names: a mesh peer held to the seed's rule may announce any
    # 1..255-byte name, and it means exactly that name.
    table: RoutingTable[str] = RoutingTable()
    table.add(name, "peer")
    assert table.match(name) == ("peer",)
    assert table.match("a.x.b") == table.match("a.b") == ()
    assert table.remove(name, "peer") and len(table) == 0


def test_cache_is_bounded() -> None:
    table: RoutingTable[str] = RoutingTable()
    table.add(">", "s")
    for i in range(70_000):
        table.match(f"t{i}")
    assert len(table._cache) <= 65_536
