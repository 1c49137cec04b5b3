"""Join graphs and the per-input pipelines an MJoin runs (Babu et al., Section 8).

Equality predicates put (input, column) pairs into equivalence classes: a natural join of
S_0..S_4 on A is one class, so its graph is the star of Fig. 8(c) from any input's point of view
(predicate transitivity, Section 8). For the pipeline of input i the stage probes the other
inputs along a spanning tree rooted at i, found breadth first over the classes: every input that
shares a class with i is probed directly with i's value; the others hang under the input through
which they are first reached (Section 8.2's paths, which give precedence constraints). Equalities
the tree does not use are checked once both sides are bound (the cyclic case of Section 8.2).

A class may hold several columns of one input (``r.a = s.k`` and ``r.c = s.k`` imply
``r.a = r.c``). Every column of a class must then equal the class's value, so the pipeline
checks each column against one already bound member of its class as soon as its input is bound:
the root's own columns before any probe (:attr:`Pipeline.root_checks`), the others by
:meth:`Pipeline.checks`, whatever the order the re-optimizer picked.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Side = tuple[int, str]  # (input index, column)


class JoinGraphError(ValueError):
    """A join that the MJoin cannot run; the message names the inputs or columns at fault."""


@dataclass(frozen=True)
class Pipeline:
    """How deltas of ``root`` are joined with the other inputs.

    Entities are the other inputs in increasing index; entity e probes input ``inputs[e]``.
    ``parent[e]`` is the entity that must be bound first (-1: the root itself), ``probe[e]``
    the (parent column, probed column) of the tree edge. An ``existence_only`` entity has no
    children and no other equality to check, so drop-probing only asks whether a match exists
    and output generation expands it later (the two phases of Section 8.1).
    """

    root: int
    inputs: tuple[int, ...]
    parent: tuple[int, ...]
    probe: tuple[tuple[str, str], ...]
    existence_only: tuple[bool, ...]
    # per entity: (class id, its column) for every class it belongs to, for extra checks
    classes: tuple[tuple[tuple[int, str], ...], ...]
    root_classes: tuple[tuple[int, str], ...]
    edge_class: tuple[int, ...]
    # (column, column) pairs of the root that share a class: a delta failing one joins nothing
    root_checks: tuple[tuple[str, str], ...] = ()

    @property
    def size(self) -> int:
        return len(self.inputs)

    def checks(self, e: int, bound: Iterable[int]) -> list[tuple[int, str, str]]:
        """The equalities to check when entity ``e`` is bound after the entities ``bound``:
        ``(x, x's column, e's column)`` with ``x`` the root (-1) or a bound entity.

        Each of e's columns is compared with one earlier bound member of its class (the root's
        first, else the lowest bound entity's, else e's own first column in that class); the
        tree edge's column is skipped, the probe having matched it. Since the bound members of
        a class are already equal to each other, this implies every equality of the class.
        """
        known: dict[int, tuple[int, str]] = {}
        for k, col in self.root_classes:
            known.setdefault(k, (-1, col))
        for x in sorted(bound):
            if x != e:
                for k, col in self.classes[x]:
                    known.setdefault(k, (x, col))
        out = []
        edge = (self.edge_class[e], self.probe[e][1])
        for k, col in self.classes[e]:
            if (k, col) == edge:
                known.setdefault(k, (e, col))
            elif k in known:
                out.append((*known[k], col))
            else:
                known[k] = (e, col)
        return out

    def default_order(self) -> list[int]:
        """Breadth first: parents before children, then by input index."""
        order: list[int] = []
        placed: set[int] = set()
        while len(order) < self.size:
            for e in range(self.size):
                if e not in placed and (self.parent[e] < 0 or self.parent[e] in placed):
                    order.append(e)
                    placed.add(e)
        return order


class JoinGraph:
    """Inputs 0..n-1 and equality predicates between their columns."""

    def __init__(
        self,
        n_inputs: int,
        predicates: Sequence[tuple[Side, Side]],
        names: Sequence[str] | None = None,
    ):
        if n_inputs < 2:
            raise JoinGraphError(f"a join needs at least 2 inputs, got {n_inputs}")
        self.n = n_inputs
        self.names = list(names) if names is not None else [f"input{i}" for i in range(n_inputs)]
        self.predicates = [tuple(p) for p in predicates]
        parent: dict[Side, Side] = {}

        def find(x: Side) -> Side:
            parent.setdefault(x, x)
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for a, b in self.predicates:
            if a[0] == b[0]:
                raise JoinGraphError(
                    f"join predicate {self._side(a)} = {self._side(b)} compares one input with "
                    "itself; use a filter"
                )
            for side in (a, b):
                if not 0 <= side[0] < n_inputs:
                    raise JoinGraphError(f"join predicate names input {side[0]} of {n_inputs}")
            parent[find(a)] = find(b)
        roots = sorted({find(x) for x in parent})
        self.class_of: dict[Side, int] = {x: roots.index(find(x)) for x in parent}
        self.members: list[list[Side]] = [[] for _ in roots]
        for side, k in sorted(self.class_of.items()):
            self.members[k].append(side)
        self._check_connected()

    def _side(self, side: Side) -> str:
        return f"{self.names[side[0]]}.{side[1]}"

    def _check_connected(self) -> None:
        reached = {0}
        frontier = [0]
        while frontier:
            i = frontier.pop()
            for j in self._neighbours(i):
                if j not in reached:
                    reached.add(j)
                    frontier.append(j)
        missing = [self.names[i] for i in range(self.n) if i not in reached]
        if missing:
            raise JoinGraphError(
                f"no join predicate connects {', '.join(missing)} to {self.names[0]}: "
                "a cross product is not supported"
            )

    def _classes(self, i: int) -> list[tuple[int, str]]:
        return sorted((k, col) for (inp, col), k in self.class_of.items() if inp == i)

    def _neighbours(self, i: int) -> list[int]:
        out = set()
        for k, _ in self._classes(i):
            out.update(inp for inp, _ in self.members[k] if inp != i)
        return sorted(out)

    @property
    def kind(self) -> str:
        """star (one input takes part in every equality class), acyclic, or cyclic (the
        classes link the inputs more times than a tree would: n - 1)."""
        inputs = [{inp for inp, _ in members} for members in self.members]
        links = sum(len(group) - 1 for group in inputs)
        if links > self.n - 1:
            return "cyclic"
        if set.intersection(*inputs):
            return "star"
        return "acyclic"

    def pipeline(self, root: int) -> Pipeline:
        """The spanning tree rooted at ``root``, breadth first over the classes."""
        others = [i for i in range(self.n) if i != root]
        entity = {inp: e for e, inp in enumerate(others)}
        parent = [-2] * len(others)
        probe: list[tuple[str, str]] = [("", "")] * len(others)
        edge_class = [-1] * len(others)
        bound = {root}
        queue = deque([root])
        while queue:
            u = queue.popleft()
            for k, col_u in self._classes(u):
                for v, col_v in self.members[k]:
                    if v in bound:
                        continue
                    bound.add(v)
                    e = entity[v]
                    parent[e] = -1 if u == root else entity[u]
                    probe[e] = (col_u, col_v)
                    edge_class[e] = k
                    queue.append(v)
        classes = tuple(tuple(self._classes(v)) for v in others)
        has_child = {p for p in parent if p >= 0}
        existence_only = tuple(
            e not in has_child
            and len(classes[e]) == 1
            and self._one_column(others[e], classes[e][0][0])
            for e in range(len(others))
        )
        return Pipeline(
            root=root,
            inputs=tuple(others),
            parent=tuple(parent),
            probe=tuple(probe),
            existence_only=existence_only,
            classes=classes,
            root_classes=tuple(self._classes(root)),
            edge_class=tuple(edge_class),
            root_checks=self._own_checks(root),
        )

    def _own_checks(self, inp: int) -> tuple[tuple[str, str], ...]:
        """Pairs (first column, other column) of ``inp`` in one class, per class."""
        first: dict[int, str] = {}
        out = []
        for k, col in self._classes(inp):
            if k in first:
                out.append((first[k], col))
            else:
                first[k] = col
        return tuple(out)

    def _one_column(self, inp: int, k: int) -> bool:
        return sum(1 for i, _ in self.members[k] if i == inp) == 1
