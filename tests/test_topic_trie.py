"""The token trie against the plain matcher (``wire.topics.pattern_matches`` is the specification)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hub.core.routing import RoutingTable
from hub.core.topic_trie import TopicTrie
from wire.topics import pattern_matches, pattern_tokens

# A small alphabet, so patterns and topics collide often.
TOKENS = st.sampled_from(["a", "b", "c", "*", ">"])
TOPIC_TOKENS = st.sampled_from(["a", "b", "c", "*"])  # a literal '*' may come from a seed peer


def pattern() -> st.SearchStrategy[str]:
    return st.lists(TOKENS, min_size=1, max_size=5).map(".".join)


def topic() -> st.SearchStrategy[str]:
    return st.lists(TOPIC_TOKENS, min_size=1, max_size=6).map(".".join)


def plain(patterns: dict[str, int], name: str) -> set[int]:
    """The scan the trie replaced: every held pattern tried one by one."""
    hits = set()
    for p, value in patterns.items():
        tokens = pattern_tokens(p)
        if (tokens is not None and pattern_matches(tokens, name.split("."))) or (tokens is None and p == name):
            hits.add(value)
    return hits


@settings(max_examples=400)
@given(
    ops=st.lists(st.tuples(st.booleans(), pattern()), max_size=40),
    topics=st.lists(topic(), min_size=1, max_size=10),
)
def test_the_trie_matches_what_the_plain_matcher_matches(ops: list[tuple[bool, str]], topics: list[str]) -> None:
    """Any sequence of inserts and removes, then any topics: the same values as a scan."""
    trie: TopicTrie[int] = TopicTrie()
    held: dict[str, int] = {}
    for n, (add, p) in enumerate(ops):
        tokens = pattern_tokens(p)
        if tokens is None:
            continue  # literal names live in the routing table's dict, not in the trie
        if add:
            trie.insert(tokens, n)
            held[p] = n
        else:
            trie.remove(tokens)
            held.pop(p, None)
    assert len(trie) == len(held)
    for name in topics:
        found = list(trie.match(name.split(".")))
        assert len(found) == len(set(found))  # each pattern once
        assert set(found) == plain(held, name)


@settings(max_examples=300)
@given(
    ops=st.lists(st.tuples(st.booleans(), pattern(), st.integers(0, 3)), max_size=40),
    topics=st.lists(topic(), min_size=1, max_size=10),
)
def test_the_routing_table_matches_every_subscriber_once(ops: list[tuple[bool, str, int]], topics: list[str]) -> None:
    """Counted adds and removes of subscribers, exact names and patterns mixed, the cache in between."""
    table: RoutingTable[int] = RoutingTable()
    counts: dict[tuple[str, int], int] = {}
    for add, p, sub in ops:
        if add:
            table.add(p, sub)
            counts[(p, sub)] = counts.get((p, sub), 0) + 1
        elif table.remove(p, sub):
            counts[(p, sub)] -= 1
        table.match(topics[0])  # fills the cache the next change must clear
    live = {key for key, n in counts.items() if n > 0}
    assert sorted(table.patterns()) == sorted({p for p, _ in live})
    for name in topics:
        want = {sub for p, sub in live if plain({p: sub}, name)}
        got = table.match(name)
        assert len(got) == len(set(got)) and set(got) == want


def test_removing_prunes_the_nodes_nobody_needs() -> None:
    trie: TopicTrie[str] = TopicTrie()
    trie.insert(("a", "*", "c"), "x")
    trie.insert(("a", ">"), "y")
    trie.remove(("a", "*", "c"))
    assert list(trie.match(["a", "b", "c"])) == ["y"]
    assert trie._root.children["a"].children == {}
    trie.remove(("a", ">"))
    assert trie._root.children == {} and len(trie) == 0
