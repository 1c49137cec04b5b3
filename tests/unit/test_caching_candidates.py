"""Candidate caches (Babu et al., ICDE 2005): the prefix invariant, keys, forests, sharing and
the globally-consistent candidates, checked on the paper's examples and against brute force."""

from __future__ import annotations

import itertools

import pytest
from caching_helpers import FIG5, R, equijoin, names, pipelines
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.core.caching.candidates import (
    global_candidates,
    orders_of,
    prefix_candidates,
    prefix_invariant,
    quota,
    smallest_invariant_superset,
    tree_caches,
    tree_orders,
)
from processors.core.join_tree import JoinTree, leaves
from processors.core.joins.graph import JoinGraph


def sets_of(cs, pipeline: int) -> list[frozenset[int]]:
    return [c.members for c in cs.caches if c.pipeline == pipeline]


def test_fig5_candidate_sets() -> None:
    cs = prefix_candidates(equijoin(6), FIG5)
    assert {c.members for c in cs.caches} == {
        names("R1", "R2"),
        names("R4", "R5"),
        names("R1", "R2", "R3"),
        names("R1", "R2", "R3", "R4", "R5"),
    }
    assert sets_of(cs, R["R4"]) == [names("R1", "R2"), names("R1", "R2", "R3")]
    assert sets_of(cs, R["R6"]) == [
        names("R1", "R2"),
        names("R1", "R2", "R3", "R4", "R5"),
        names("R4", "R5"),
    ]
    assert [len(sets_of(cs, i)) for i in range(6)] == [1, 1, 2, 2, 1, 3]
    assert all(c.key == (0,) for c in cs.caches)  # Example 4.2: every key is A
    assert all(c.kind == "prefix" for c in cs.caches)


def test_fig5_forests() -> None:
    """Fig. 5(b): ΔR4's two caches nest; Fig. 5(c): ΔR6's R1..R5 holds R1R2 and R4R5."""
    cs = prefix_candidates(equijoin(6), FIG5)
    idx = {(c.pipeline, c.members): x for x, c in enumerate(cs.caches)}
    r4 = R["R4"]
    assert cs.parent[idx[(r4, names("R1", "R2"))]] == idx[(r4, names("R1", "R2", "R3"))]
    assert cs.parent[idx[(r4, names("R1", "R2", "R3"))]] == -1
    r6, top = R["R6"], names("R1", "R2", "R3", "R4", "R5")
    assert cs.parent[idx[(r6, top)]] == -1
    assert sorted(cs.children(idx[(r6, top)])) == sorted(
        [idx[(r6, names("R1", "R2"))], idx[(r6, names("R4", "R5"))]]
    )


def test_fig5_shared_groups() -> None:
    """Example 4.2: R1R2 shared by ΔR3, ΔR4, ΔR6; R1R2R3 by ΔR4, ΔR5."""
    cs = prefix_candidates(equijoin(6), FIG5)
    by_set = {cs.caches[g[0]].members: sorted(cs.caches[x].pipeline for x in g) for g in cs.groups}
    assert by_set[names("R1", "R2")] == [R["R3"], R["R4"], R["R6"]]
    assert by_set[names("R1", "R2", "R3")] == [R["R4"], R["R5"]]
    assert by_set[names("R4", "R5")] == [R["R1"], R["R2"], R["R3"], R["R6"]]
    assert by_set[names("R1", "R2", "R3", "R4", "R5")] == [R["R6"]]
    assert cs.shared
    assert sorted(x for g in cs.groups for x in g) == list(range(len(cs.caches)))


def test_example_3_4_three_way() -> None:
    """Fig. 3: R1 ⋈_A R2 ⋈_B R3; ΔR1 probes R2 then R3, ΔR2 R3 first, ΔR3 R2 first. The R2,R3
    segment of ΔR1 is a candidate keyed on A; R2,R1 in ΔR3 is not (Example 3.4)."""
    g = JoinGraph(3, [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))])
    orders = [(1, 2), (2, 0), (1, 0)]
    cs = prefix_candidates(g, orders)
    assert [(c.pipeline, c.relations) for c in cs.caches] == [(0, (1, 2))]
    (c,) = cs.caches
    a = g.class_of[(0, "a")]
    assert c.key == (a,)
    assert c.probe_columns == ((0, "a"),)
    assert c.entry_columns == ((1, "a"),)
    assert c.update_position == 1
    assert not prefix_invariant(frozenset({0, 1}), orders)


def test_key_is_the_classes_between_before_and_segment() -> None:
    """A chain R0.a=R1.a, R1.b=R2.b, R2.c=R3.c: in R0's pipeline R1 R2 R3, the R1,R2 and
    R1,R2,R3 caches are keyed on a only (b and c link inputs of the segment)."""
    g = JoinGraph(4, [((0, "a"), (1, "a")), ((1, "b"), (2, "b")), ((2, "c"), (3, "c"))])
    orders = [(1, 2, 3), (2, 3, 0), (1, 3, 0), (2, 1, 0)]
    cs = prefix_candidates(g, orders)
    seg = [c for c in cs.caches if c.pipeline == 0]
    assert [c.relations for c in seg] == [(1, 2), (1, 2, 3)]
    assert seg[0].key == seg[1].key == (g.class_of[(0, "a")],)
    assert seg[0].probe_columns == ((0, "a"),) and seg[0].entry_columns == ((1, "a"),)
    # ΔR3's R2,R1 is a candidate too, keyed on c (R3's column), entries read it from R2
    (r3,) = [c for c in cs.caches if c.pipeline == 3]
    assert r3.relations == (2, 1)
    assert r3.key == (g.class_of[(3, "c")],)
    assert r3.entry_columns == ((2, "c"),)
    assert r3.share_key != seg[0].share_key
    # R2,R3 in R0's pipeline (globally consistent only) is probed with R1's b
    (x,) = [c for c in global_candidates(g, orders) if c.pipeline == 0 and c.start == 1]
    assert x.relations == (2, 3) and x.key == (g.class_of[(1, "b")],)
    assert x.probe_columns == ((1, "b"),) and x.entry_columns == ((2, "b"),)


def test_orders_of_streamon_pipelines() -> None:
    g = equijoin(4)
    pipes = [g.pipeline(i) for i in range(4)]
    got = orders_of(pipes, [[2, 0, 1], [0, 1, 2], [1, 2, 0], [0, 1, 2]])
    assert got == [(3, 1, 2), (0, 2, 3), (1, 3, 0), (0, 1, 2)]


def test_bad_orders_rejected() -> None:
    with pytest.raises(ValueError):
        prefix_candidates(equijoin(3), [(1, 2), (0, 2)])
    with pytest.raises(ValueError):
        prefix_candidates(equijoin(3), [(1, 2), (0, 0), (0, 1)])


def test_example_6_1_globally_consistent() -> None:
    """Example 6.1: Fig. 5(a) with ΔR6's pipeline R2 R3 R4 R5 R1; R2,R3 is not a candidate,
    but (R2 ⋈ R3) ⋈ R1 is: R1R2R3 satisfies the prefix invariant."""
    orders = [*FIG5[:5], pipelines("R2 R3 R4 R5 R1")[0]]
    g = equijoin(6)
    assert names("R2", "R3") not in {c.members for c in prefix_candidates(g, orders).caches}
    gc = global_candidates(g, orders)
    (c,) = [c for c in gc if c.pipeline == R["R6"] and c.members == names("R2", "R3")]
    assert c.maintained == names("R1", "R2", "R3")
    assert c.kind == "global"
    assert c.update_position == 2
    assert "⋉ {R1}" in c.label([f"R{k}" for k in range(1, 7)])


def test_fig12_global_cache_holds_root() -> None:
    """Fig. 12: R(A) ⋈ S(A,B) ⋈ T(B) with ΔR probing S then T, ΔS T first, ΔT R first:
    S,T in ΔR is not prefix-invariant ((T ⋈ S) ⋈ R is: the whole set)."""
    g = JoinGraph(3, [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))])
    orders = [(1, 2), (0, 2), (1, 0)]
    assert [(c.pipeline, c.relations) for c in prefix_candidates(g, orders).caches] == [(2, (1, 0))]
    gc = global_candidates(g, orders)
    ts = [c for c in gc if c.pipeline == 0]
    assert [(c.relations, c.maintained) for c in ts] == [((1, 2), frozenset({0, 1, 2}))]
    assert not [c for c in global_candidates(g, orders, root_in_y=False) if c.pipeline == 0]


def test_quota_rule() -> None:
    """Sect. 6: p prefix caches, then X of n-1 inputs, then n-2, ... up to m."""
    g = equijoin(4)
    orders = [(1, 2, 3), (0, 2, 3), (3, 0, 1), (2, 1, 0)]
    p = prefix_candidates(g, orders).caches
    gc = global_candidates(g, orders)
    q = quota(p, gc, m=6)
    assert q is not None and len(q) == min(6, len(p) + len(gc))
    assert q[: len(p)] == p
    lengths = [c.length for c in q[len(p) :]]
    assert lengths == sorted(lengths, reverse=True)
    assert quota(p, gc, m=len(p)) is None


def brute_prefix_sets(orders: list[tuple[int, ...]]) -> set[frozenset[int]]:
    """Def. 3.2 read literally, over every subset of two or more inputs."""
    n = len(orders)
    out = set()
    for size in range(2, n + 1):
        for s in itertools.combinations(range(n), size):
            members = set(s)
            if all(set(orders[r][: size - 1]) == members - {r} for r in s):
                out.add(frozenset(s))
    return out


@st.composite
def random_orders(draw: st.DrawFn, max_n: int = 6) -> list[tuple[int, ...]]:
    n = draw(st.integers(3, max_n))
    return [tuple(draw(st.permutations([r for r in range(n) if r != i]))) for i in range(n)]


@settings(max_examples=150, deadline=None)
@given(random_orders())
def test_candidates_match_brute_force(orders: list[tuple[int, ...]]) -> None:
    n = len(orders)
    g = equijoin(n)
    cs = prefix_candidates(g, orders)
    sets = brute_prefix_sets(orders)
    want = {
        (i, s, e)
        for i, o in enumerate(orders)
        for s in range(n - 1)
        for e in range(s + 1, n - 1)
        if frozenset(o[s : e + 1]) in sets
    }
    assert {(c.pipeline, c.start, c.end) for c in cs.caches} == want
    for x, c in enumerate(cs.caches):  # forest: smallest strict superset, laminar
        sups = [y for y, o in enumerate(cs.caches) if o.contains(c) and o.length > c.length]
        assert cs.parent[x] == (min(sups, key=lambda y: cs.caches[y].length) if sups else -1)
        for o in cs.caches:
            assert not o.overlaps(c) or o.contains(c) or c.contains(o)
    for grp in cs.groups:  # shared groups: one set and key, distinct pipelines
        assert len({cs.caches[x].share_key for x in grp}) == 1
        assert len({cs.caches[x].pipeline for x in grp}) == len(grp)
    gc = global_candidates(g, orders)
    for c in gc:
        sup = c.maintained
        assert sup in sets and c.members < sup
        assert not [s for s in sets if c.members <= s and len(s) < len(sup)]
        assert smallest_invariant_superset(c.members, orders) == sup
    assert len(gc) + len(cs.caches) == n * (n - 2) * (n - 1) // 2


def test_tree_orders_and_caches_of_a_bushy_tree() -> None:
    """((R1, R2), (R3, R4)): each pipeline probes its sibling, then the other pair, whose join
    the XJoin stores and the MJoin caches (shared by the pair's two pipelines)."""
    names4 = ["R1", "R2", "R3", "R4"]
    tree = (("R1", "R2"), ("R3", "R4"))
    orders = tree_orders(tree, names4)
    assert list(orders) == pipelines("R2 R3 R4", "R1 R3 R4", "R4 R1 R2", "R3 R1 R2")
    caches = tree_caches(prefix_candidates(equijoin(4), orders).caches, tree, names4)
    assert {(c.pipeline, c.start, c.end, c.members) for c in caches} == {
        (R["R1"], 1, 2, names("R3", "R4")),
        (R["R2"], 1, 2, names("R3", "R4")),
        (R["R3"], 1, 2, names("R1", "R2")),
        (R["R4"], 1, 2, names("R1", "R2")),
    }


@st.composite
def random_trees(draw: st.DrawFn) -> JoinTree:
    n = draw(st.integers(2, 6))
    order = draw(st.permutations([f"R{k}" for k in range(1, n + 1)]))

    def split(xs: list[str]) -> JoinTree:
        if len(xs) == 1:
            return xs[0]
        cut = draw(st.integers(1, len(xs) - 1))
        return (split(xs[:cut]), split(xs[cut:]))

    return split(list(order))


@settings(max_examples=100, deadline=None)
@given(random_trees())
def test_tree_caches_are_the_trees_subtrees(tree: JoinTree) -> None:
    """Under a tree's orders, every subtree of two or more inputs that a leaf meets on its way
    up is a prefix-invariant candidate in that leaf's pipeline, placed where it is probed."""
    names_n = sorted(leaves(tree), key=lambda x: int(x[1:]))
    orders = tree_orders(tree, names_n)
    caches = tree_caches(prefix_candidates(equijoin(len(names_n)), orders).caches, tree, names_n)
    want = set()

    def walk(t: JoinTree, siblings: list[JoinTree]) -> None:
        if isinstance(t, str):
            at = 0
            for s in reversed(siblings):
                members = frozenset(R[x] for x in leaves(s))
                if len(members) > 1:
                    want.add((R[t], at, at + len(members) - 1, members))
                at += len(members)
            return
        walk(t[0], [*siblings, t[1]])
        walk(t[1], [*siblings, t[0]])

    walk(tree, [])
    assert {(c.pipeline, c.start, c.end, c.members) for c in caches} == want
    assert all(c.kind == "prefix" for c in caches)
