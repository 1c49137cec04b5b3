"""Candidate caches of an MJoin's pipelines (Babu et al., ICDE 2005, Sects. 3.2, 4.4, 6).

A pipeline is the order in which the deltas of one input probe the others: ``orders[i]`` lists
the other inputs by index (see :func:`orders_of` for streamon's :class:`Pipeline`). A cache on
positions ``start..end`` of pipeline i (0-based; the paper's C_ijk with j = start + 1,
k = end + 1) holds the join of those inputs, keyed by the equivalence classes that link them to
the inputs bound before them (K_ijk, Sect. 3.2). Classes rather than column pairs: two caches
with the same inputs and the same classes hold the same entries, which is what sharing
(Def. 4.1) needs, and an implied equality (``a = b``, ``b = c`` gives ``a = c``) keys a cache
like a written one.

A segment is a candidate when its input set satisfies the prefix invariant (Def. 3.2): each of
its inputs' pipelines starts with the others, so the regular pipelines compute every update of
the cached join. Sets with that property that share an input are nested (the prefixes of one
pipeline), hence the candidates of one pipeline form a containment forest (Sect. 4.4). Only
segments of two or more inputs are candidates (a cache "with at least one join", Example 4.1);
single operators are the zero-length caches of the selection problem (``selection``).

Globally-consistent candidates (Sect. 6) cache X join Y: X a segment that is not a candidate,
X union Y the smallest set containing X that satisfies the prefix invariant, so that the regular
pipelines again compute its updates. Those sets form a chain (they all contain an input of X),
so the smallest is unique; it may hold the pipeline's own input, as in Fig. 12.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from processors.core.join_tree import JoinTree, leaves
from processors.core.joins.graph import JoinGraph, Pipeline, Side

Orders = Sequence[Sequence[int]]


def orders_of(pipelines: Sequence[Pipeline], entity_orders: Sequence[Sequence[int]]) -> Orders:
    """Each pipeline's probe order by input index, from streamon's entity orders
    (``MJoinStage.reopts[i].order``: entity e probes ``pipelines[i].inputs[e]``)."""
    return [
        tuple(p.inputs[e] for e in order) for p, order in zip(pipelines, entity_orders, strict=True)
    ]


def prefix_invariant(members: frozenset[int], orders: Orders) -> bool:
    """Def. 3.2 as a property of the input set: every member's pipeline starts with the other
    members (in some order)."""
    size = len(members) - 1
    return all(frozenset(orders[r][:size]) == members - {r} for r in members)


@dataclass(frozen=True)
class Candidate:
    """One candidate cache: positions ``start..end`` of pipeline ``pipeline``.

    ``key`` holds the ids of the classes joining an earlier input (or the pipeline's own) with
    the segment: K_ijk of Sect. 3.2. ``probe_columns[c]`` is where the probe reads key class
    ``key[c]`` (the pipeline's own input if it has a column there, else the earliest bound
    input); ``entry_columns[c]`` where an entry's tuples hold it (the lowest (input, column) of
    the segment in that class, the same in every pipeline, so shared caches agree).
    ``maintained`` is the set whose pipelines compute the cache's updates: the segment itself
    for a prefix-invariant cache, X union Y for a globally-consistent one (Sect. 6).
    """

    pipeline: int
    start: int
    end: int
    relations: tuple[int, ...]
    key: tuple[int, ...]
    probe_columns: tuple[Side, ...]
    entry_columns: tuple[Side, ...]
    maintained: frozenset[int]

    @property
    def kind(self) -> Literal["prefix", "global"]:
        return "prefix" if self.maintained == self.members else "global"

    @property
    def members(self) -> frozenset[int]:
        return frozenset(self.relations)

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    @property
    def operators(self) -> range:
        """The positions of the pipeline the cache spans."""
        return range(self.start, self.end + 1)

    @property
    def update_position(self) -> int:
        """Where a maintaining pipeline has produced the cache's updates: after its first
        ``len(maintained) - 1`` operators (the CacheUpdate operators of Sect. 3.2)."""
        return len(self.maintained) - 1

    @property
    def share_key(self) -> tuple[frozenset[int], tuple[int, ...], frozenset[int]]:
        """Equal for caches that hold the same entries (Def. 4.1, and Sect. 6's X and Y)."""
        return (self.members, self.key, self.maintained)

    @property
    def ident(self) -> tuple[int, int, int, frozenset[int], tuple[int, ...], frozenset[int]]:
        """Stable across re-enumeration while the pipeline and the key stay the same."""
        return (self.pipeline, self.start, self.end, *self.share_key)

    def overlaps(self, other: Candidate) -> bool:
        """Whether the two share an operator (Sect. 4.2's overlap)."""
        return (
            self.pipeline == other.pipeline and self.start <= other.end and other.start <= self.end
        )

    def contains(self, other: Candidate) -> bool:
        return (
            self.pipeline == other.pipeline and self.start <= other.start and other.end <= self.end
        )

    def label(self, names: Sequence[str]) -> str:
        """E.g. ``Δt: [r ⋈ s] on c0`` or ``Δr: [s ⋈ t] ⋉ {r}`` for a globally-consistent one."""
        seg = " ⋈ ".join(names[r] for r in self.relations)
        key = ",".join(f"c{k}" for k in self.key) or "()"
        extra = self.maintained - self.members
        tail = f" ⋉ {{{', '.join(names[r] for r in sorted(extra))}}}" if extra else ""
        return f"Δ{names[self.pipeline]}: [{seg}]{tail} on {key}"


@dataclass(frozen=True)
class CandidateSet:
    """The prefix-invariant candidates of a set of pipelines, with their structure.

    ``parent[c]``: the smallest candidate of the same pipeline strictly containing c (-1: a
    root of the pipeline's containment forest, Sect. 4.4). ``groups``: the shared groups of
    Def. 4.1, each a tuple of candidate indices in different pipelines; every candidate is in
    exactly one group (alone if not shared), ``group_of[c]`` names it.
    """

    orders: tuple[tuple[int, ...], ...]
    caches: tuple[Candidate, ...]
    parent: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...]
    group_of: tuple[int, ...]

    def in_pipeline(self, i: int) -> list[int]:
        return [c for c, cache in enumerate(self.caches) if cache.pipeline == i]

    def children(self, c: int) -> list[int]:
        return [x for x, p in enumerate(self.parent) if p == c]

    @property
    def shared(self) -> bool:
        """Whether any group has two or more caches (Theorem 4.2's hard case)."""
        return any(len(g) > 1 for g in self.groups)


def _classes_by_input(graph: JoinGraph) -> list[dict[int, list[str]]]:
    out: list[dict[int, list[str]]] = [{} for _ in range(graph.n)]
    for (inp, col), k in sorted(graph.class_of.items()):
        out[inp].setdefault(k, []).append(col)
    return out


def _make(
    graph: JoinGraph,
    classes: list[dict[int, list[str]]],
    i: int,
    order: Sequence[int],
    start: int,
    end: int,
    maintained: frozenset[int] | None = None,
) -> Candidate:
    before = [i, *order[:start]]
    seg = tuple(order[start : end + 1])
    seg_classes = {k for r in seg for k in classes[r]}
    key, probe, entry = [], [], []
    for k in sorted(seg_classes):
        bound = next((r for r in before if k in classes[r]), None)
        if bound is None:
            continue
        key.append(k)
        probe.append((bound, classes[bound][k][0]))
        entry.append(min((r, col) for r in seg if k in classes[r] for col in classes[r][k]))
    return Candidate(
        pipeline=i,
        start=start,
        end=end,
        relations=seg,
        key=tuple(key),
        probe_columns=tuple(probe),
        entry_columns=tuple(entry),
        maintained=frozenset(seg) if maintained is None else maintained,
    )


def _check_orders(graph: JoinGraph, orders: Orders) -> tuple[tuple[int, ...], ...]:
    out = tuple(tuple(int(r) for r in o) for o in orders)
    if len(out) != graph.n:
        raise ValueError(f"{len(out)} pipeline orders for {graph.n} inputs")
    for i, o in enumerate(out):
        if sorted(o) != [r for r in range(graph.n) if r != i]:
            raise ValueError(f"pipeline {i}'s order {list(o)} is not the other inputs")
    return out


def _forest(caches: Sequence[Candidate]) -> tuple[int, ...]:
    """Each candidate's smallest strict superset in its pipeline (Sect. 4.4)."""
    parent = []
    for c in caches:
        sup = [
            (o.length, x)
            for x, o in enumerate(caches)
            if o is not c and o.contains(c) and o.length > c.length
        ]
        for o in caches:
            if o.overlaps(c) and not (o.contains(c) or c.contains(o)):
                raise AssertionError(f"prefix-invariant caches {c} and {o} cross")
        parent.append(min(sup)[1] if sup else -1)
    return tuple(parent)


def _groups(caches: Sequence[Candidate]) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    by_key: dict[tuple[frozenset[int], tuple[int, ...], frozenset[int]], list[int]] = {}
    for x, c in enumerate(caches):
        by_key.setdefault(c.share_key, []).append(x)
    groups = tuple(tuple(g) for g in by_key.values())
    group_of = [0] * len(caches)
    for g, members in enumerate(groups):
        for x in members:
            group_of[x] = g
    return groups, tuple(group_of)


def _segments(n: int, min_length: int) -> list[tuple[int, int]]:
    return [(s, e) for s in range(n - 1) for e in range(s + min_length - 1, n - 1)]


def prefix_candidates(graph: JoinGraph, orders: Orders, min_length: int = 2) -> CandidateSet:
    """Every segment of ``min_length`` or more operators whose inputs satisfy the prefix
    invariant (Def. 3.2), by pipeline then position, with forest and shared groups."""
    orders = _check_orders(graph, orders)
    classes = _classes_by_input(graph)
    caches = [
        _make(graph, classes, i, o, s, e)
        for i, o in enumerate(orders)
        for s, e in _segments(graph.n, min_length)
        if prefix_invariant(frozenset(o[s : e + 1]), orders)
    ]
    groups, group_of = _groups(caches)
    return CandidateSet(orders, tuple(caches), _forest(caches), groups, group_of)


def smallest_invariant_superset(members: frozenset[int], orders: Orders) -> frozenset[int]:
    """The smallest input set containing ``members`` that satisfies the prefix invariant (the
    whole input set always does). Such sets all contain a member r, so each is ``{r}`` plus a
    prefix of r's pipeline: one try per size."""
    r = min(members)
    for size in range(len(members), len(orders) + 1):
        s = frozenset(orders[r][: size - 1]) | {r}
        if members <= s and prefix_invariant(s, orders):
            return s
    raise AssertionError("the whole input set satisfies the prefix invariant")


def global_candidates(
    graph: JoinGraph, orders: Orders, min_length: int = 2, root_in_y: bool = True
) -> tuple[Candidate, ...]:
    """Sect. 6's X join Y caches: every segment X (``min_length`` or more operators) that is not
    a prefix-invariant candidate, with X union Y the smallest superset satisfying the prefix
    invariant. ``root_in_y=False`` leaves out those whose Y holds the pipeline's own input (the
    lower bound of Def. 6.1 ranges over the other inputs only; such caches need their entries
    dropped when the key's last own-input tuple leaves, see docs/caching.md)."""
    orders = _check_orders(graph, orders)
    classes = _classes_by_input(graph)
    out = []
    for i, o in enumerate(orders):
        for s, e in _segments(graph.n, min_length):
            x = frozenset(o[s : e + 1])
            if prefix_invariant(x, orders):
                continue
            sup = smallest_invariant_superset(x, orders)
            if i in sup and not root_in_y:
                continue
            out.append(_make(graph, classes, i, o, s, e, maintained=sup))
    return tuple(out)


def quota(
    prefix: Sequence[Candidate], global_: Sequence[Candidate], m: int = 6
) -> tuple[Candidate, ...] | None:
    """The m candidates Sect. 6 searches exhaustively, or None when the p prefix-invariant ones
    already reach m (then Sect. 4.5's algorithm runs on them alone): all p, then
    globally-consistent ones with X of n - 1 inputs, then n - 2, ..., until m (within a size,
    by pipeline and position: the paper picks arbitrarily)."""
    if len(prefix) >= m:
        return None
    extra = sorted(global_, key=lambda c: (-c.length, c.pipeline, c.start))
    return (*prefix, *extra[: m - len(prefix)])


def selection_candidates(
    graph: JoinGraph, orders: Orders, global_m: int | None = None
) -> tuple[Candidate, ...]:
    """What the offline algorithm chooses from: the prefix-invariant candidates (the paper's P
    plans), or with ``global_m`` Sect. 6's m candidates (G plans; search them exhaustively)."""
    prefix = prefix_candidates(graph, orders).caches
    if global_m is None:
        return prefix
    chosen = quota(prefix, global_candidates(graph, orders), global_m)
    return prefix if chosen is None else chosen


def groups_of(caches: Sequence[Candidate]) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """Shared groups (Def. 4.1 and equal X, Y for Sect. 6) of any list of candidates."""
    return _groups(caches)


def _leaf_paths(tree: JoinTree) -> list[tuple[str, list[JoinTree]]]:
    """Each leaf of ``tree`` with the sibling subtrees it meets on its way up to the root."""
    out: list[tuple[str, list[JoinTree]]] = []

    def walk(t: JoinTree, siblings: list[JoinTree]) -> None:
        if isinstance(t, str):
            out.append((t, siblings[::-1]))
            return
        walk(t[0], [*siblings, t[1]])
        walk(t[1], [*siblings, t[0]])

    walk(tree, [])
    return out


def tree_orders(tree: JoinTree, names: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """The pipeline orders under which an MJoin's caches can hold what the binary join tree
    ``tree`` stores (the spectrum between MJoin and XJoin, Sects. 1 and 6): each input's
    pipeline probes, from its leaf up, the inputs of each sibling subtree in turn."""
    index = {name: i for i, name in enumerate(names)}
    orders = {
        index[leaf]: tuple(index[x] for s in siblings for x in leaves(s))
        for leaf, siblings in _leaf_paths(tree)
    }
    return tuple(orders[i] for i in range(len(names)))


def tree_caches(
    candidates: Sequence[Candidate], tree: JoinTree, names: Sequence[str]
) -> tuple[Candidate, ...]:
    """Of the prefix-invariant ``candidates`` under :func:`tree_orders` of ``tree``, the caches
    of each sibling subtree of two or more inputs: with them the MJoin keeps every intermediate
    result the tree stores, each where the tree probes it."""
    index = {name: i for i, name in enumerate(names)}
    wanted = {
        (index[leaf], frozenset(index[x] for x in leaves(s)))
        for leaf, siblings in _leaf_paths(tree)
        for s in siblings
        if not isinstance(s, str)
    }
    return tuple(c for c in candidates if (c.pipeline, c.members) in wanted)
