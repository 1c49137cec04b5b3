"""Equivalence classes of a query's joins: which streams are connected, and the join key.

Equality is transitive, so ``a.x = b.y`` and ``b.y = c.z`` put the three columns in one class;
a class with a column of every stream is a key the MJoin can be partitioned by.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from processors.core.plan import ColumnRef, JoinPredicate, StreamSpec


class Components:
    """Union-find, for connected streams and for join-key equivalence classes."""

    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}

    def find(self, x: Any) -> Any:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: Any, b: Any) -> None:
        self.parent[self.find(a)] = self.find(b)

    def groups(self, items: Iterable[Any]) -> list[list[Any]]:
        out: dict[Any, list[Any]] = {}
        for item in items:
            out.setdefault(self.find(item), []).append(item)
        return list(out.values())


def join_key(
    streams: Iterable[StreamSpec], joins: Iterable[JoinPredicate]
) -> tuple[ColumnRef, ...] | None:
    """One column per stream, all equal through the joins (first such class), or None."""
    names = [s.name for s in streams]
    classes = Components()
    cols: list[ColumnRef] = []
    for j in joins:
        classes.union(j.left, j.right)
        cols += [j.left, j.right]
    for group in classes.groups(cols):
        first: dict[str, ColumnRef] = {}
        for c in group:
            first.setdefault(c.stream, c)
        if set(first) == set(names):
            return tuple(first[n] for n in names)
    return None
