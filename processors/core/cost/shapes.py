"""The plan shapes the optimizer considers (Ayad & Naughton, Sect. 4, Definition 1; Fig. 3).

A join of n streams runs as a tree of binary symmetric window joins (every unordered binary
tree over the streams, Cartesian products included, as plan (c) of Example 1) or as one MJoin;
filters run either on the inputs (before any join) or on the final result. Trees are listed
exhaustively up to :data:`MAX_EXHAUSTIVE` streams (n = 7 gives 10,395 trees); beyond, only
left-deep trees are (the problem is NP-complete, Sect. 4).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from processors.core.join_tree import JoinTree

MAX_EXHAUSTIVE = 7


@dataclass(frozen=True)
class Leaf:
    stream: str

    @property
    def streams(self) -> frozenset[str]:
        return frozenset({self.stream})

    def text(self) -> str:
        return self.stream


@dataclass(frozen=True)
class Join:
    left: Tree
    right: Tree

    @property
    def streams(self) -> frozenset[str]:
        return self.left.streams | self.right.streams

    def text(self) -> str:
        def side(t: Tree) -> str:
            return t.text() if isinstance(t, Leaf) else f"({t.text()})"

        return f"{side(self.left)} ⋈ {side(self.right)}"


Tree = Leaf | Join
FiltersAt = Literal["inputs", "output"]


@dataclass(frozen=True)
class Shape:
    """One plan: a join tree (``tree``) or an MJoin over ``streams``, and where filters run."""

    streams: tuple[str, ...]
    tree: Tree | None = None  # None: an MJoin
    filters_at: FiltersAt = "inputs"

    @property
    def form(self) -> str:
        if self.tree is None:
            return "mjoin"
        if isinstance(self.tree, Leaf):
            return "single"
        return "left-deep" if _left_deep(self.tree) else "bushy"

    def order(self) -> list[object] | str:
        """Left-deep: the input order (``["A", "B", "C"]``); bushy: nested lists; ``"mjoin"``."""
        if self.tree is None:
            return "mjoin"
        return _order(self.tree)

    def join_tree(self) -> JoinTree | None:
        """The tree as a query's ``join_tree`` setting takes it (None: an MJoin or one stream)."""
        return (
            None if self.tree is None or isinstance(self.tree, Leaf) else _as_join_tree(self.tree)
        )

    def text(self) -> str:
        core = f"MJoin({', '.join(self.streams)})" if self.tree is None else self.tree.text()
        return core if self.filters_at == "inputs" else f"{core}, filters on the result"


def running_shape(streams: Sequence[str], join_tree: JoinTree | None) -> Shape:
    """The shape a plan runs: its ``join_tree`` (Query.join_tree), else an MJoin (one stream:
    the stream itself)."""
    names = tuple(streams)
    if len(names) == 1:
        return Shape(names, Leaf(names[0]))
    if join_tree is None:
        return Shape(names)

    def tree(t: JoinTree) -> Tree:
        return Leaf(t) if isinstance(t, str) else Join(tree(t[0]), tree(t[1]))

    return Shape(names, tree(join_tree))


def _as_join_tree(tree: Tree) -> JoinTree:
    if isinstance(tree, Leaf):
        return tree.stream
    return (_as_join_tree(tree.left), _as_join_tree(tree.right))


def _left_deep(tree: Tree) -> bool:
    return isinstance(tree, Leaf) or (isinstance(tree.right, Leaf) and _left_deep(tree.left))


def _order(tree: Tree) -> list[object]:
    if isinstance(tree, Leaf):
        return [tree.stream]
    if _left_deep(tree):
        return [*_order(tree.left), *_order(tree.right)]
    return [_order(tree.left), _order(tree.right)]


def _arranged(left: Tree, right: Tree, rank: dict[str, int]) -> Join:
    """The larger side on the left (left-deep reads left to right), ties by declaration order."""

    def key(t: Tree) -> tuple[int, int]:
        return (-len(t.streams), min(rank[s] for s in t.streams))

    return Join(left, right) if key(left) <= key(right) else Join(right, left)


def trees(streams: Sequence[str]) -> Iterator[Tree]:
    """Every unordered binary tree over ``streams`` (each once, mirror images not repeated)."""
    rank = {s: i for i, s in enumerate(streams)}
    yield from _trees(tuple(streams), rank)


def _trees(streams: tuple[str, ...], rank: dict[str, int]) -> Iterator[Tree]:
    if len(streams) == 1:
        yield Leaf(streams[0])
        return
    first, rest = streams[0], streams[1:]
    for k in range(len(rest)):  # the left part holds ``first`` and k of the rest
        for chosen in itertools.combinations(rest, k):
            left = (first, *chosen)
            right = tuple(s for s in rest if s not in chosen)
            for lt in _trees(left, rank):
                for rt in _trees(right, rank):
                    yield _arranged(lt, rt, rank)


def left_deep_trees(streams: Sequence[str]) -> Iterator[Tree]:
    """Left-deep trees only, each join order once (the first two inputs commute)."""
    rank = {s: i for i, s in enumerate(streams)}
    for perm in itertools.permutations(streams):
        if len(perm) > 1 and rank[perm[0]] > rank[perm[1]]:
            continue
        tree: Tree = Leaf(perm[0])
        for s in perm[1:]:
            tree = Join(tree, Leaf(s))
        yield tree


def shapes(streams: Sequence[str], with_filters: bool) -> list[Shape]:
    """Every shape the optimizer weighs for a query over ``streams`` (in declaration order)."""
    names = tuple(streams)
    if len(names) == 1:
        found = [Shape(names, Leaf(names[0]))]
    else:
        many = len(names) > MAX_EXHAUSTIVE
        found = [Shape(names, t) for t in (left_deep_trees(names) if many else trees(names))]
        if len(names) > 2:
            found.append(Shape(names))  # the MJoin (of two streams it is the binary join)
    placements: tuple[FiltersAt, ...] = ("inputs", "output") if with_filters else ("inputs",)
    return [Shape(s.streams, s.tree, at) for s in found for at in placements]
