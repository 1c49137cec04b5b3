"""JoinTreeStage: the MJoin's n-way windowed equi-join run as a tree of two-way symmetric joins
whose intermediate results are materialized (Ayad & Naughton, Sect. 2 and Fig. 3).

It takes the same delta streams, buffers and releases them exactly as :class:`MJoinStage`
(same epochs, same global sequence numbers), so both give the same results; only the work
differs. A delta of an input joins with its sibling subtree's relation (a leaf's window, or an
internal node's materialized result); what comes out is the change of the parent's relation,
which the parent stores (inserts) or retires (deletes) and passes up; the root's changes are the
results. An arrival at a leaf high in the tree probes one materialized window instead of every
input in turn, at the price of keeping the intermediate results (the trade-off the cost model
weighs, eqs. 7-17).

Intermediate relations are :class:`WindowStore` s holding, per tuple, the window slot of each
input it is made of (the values stay in the inputs' windows) and its join key with the sibling
subtree. A tuple's row id hashes its inputs' row ids (64 bits, as string join keys are). A
tuple is born at the sequence number of the delta that made it and dies at that of the delete
that retires it, so a probe sees exactly what processing the deltas one by one would. Joins of
subtrees no predicate connects are Cartesian products, as plan (c) of Example 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from processors.core.batch import INSERT, ROW_ID, Batch, Column
from processors.core.join_tree import JoinTree, leaves, tree_text
from processors.core.joins.graph import Side
from processors.core.ordering.config import OrderingConfig
from processors.core.state_codec import SnapshotError
from processors.stages.join_store import ALIVE, WindowStore
from processors.stages.mjoin_stage import MJoinStage, wall_ms

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
KEY = "key"  # an intermediate store's column of join keys with the sibling subtree


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function, vectorized (uint64 arithmetic wraps)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@dataclass
class _Node:
    """A subtree: a leaf (``input`` >= 0) or a join of ``left`` and ``right``."""

    inputs: tuple[int, ...]  # the inputs under it, in index order
    input: int = -1
    left: _Node | None = None
    right: _Node | None = None
    store: WindowStore | None = None  # internal nodes but the root: the materialized result
    key: Side | None = None  # the member of the probe class its sibling probes it on
    checks: list[tuple[Side, Side]] = field(default_factory=list)  # equalities at this join


@dataclass
class _Delta:
    """Changes of a subtree's relation: per change its sequence number, sign, time, and the
    window slot of each input it is made of."""

    gen: np.ndarray
    sign: np.ndarray
    ts: np.ndarray
    slots: dict[int, np.ndarray]

    def take(self, rows: np.ndarray) -> _Delta:
        return _Delta(
            self.gen[rows], self.sign[rows], self.ts[rows],
            {i: s[rows] for i, s in self.slots.items()},
        )  # fmt: skip

    @staticmethod
    def concat(parts: list[_Delta]) -> _Delta:
        return _Delta(
            np.concatenate([p.gen for p in parts]), np.concatenate([p.sign for p in parts]),
            np.concatenate([p.ts for p in parts]),
            {i: np.concatenate([p.slots[i] for p in parts]) for i in parts[0].slots},
        )  # fmt: skip


class JoinTreeStage(MJoinStage):
    """The join of ``names`` on ``predicates`` as the binary ``tree`` (see the module
    docstring). Snapshots hold what an MJoin's do plus the tree; intermediate relations are
    rebuilt from the windows on load."""

    kind = "join_tree"
    supports_caches = False  # an XJoin: its intermediate relations are stored, not cached

    def __init__(
        self,
        names: Sequence[str],
        predicates: Sequence[tuple[Side, Side]],
        tree: JoinTree,
        config: OrderingConfig | None = None,
        name: str = "join_tree",
        clock_ms: Callable[[], int] = wall_ms,
        idle_timeout_ms: int = 3_000,
    ) -> None:
        super().__init__(names, predicates, config, name, clock_ms, idle_timeout_ms)
        if sorted(leaves(tree)) != sorted(self.names) or len(leaves(tree)) != self.n:
            raise ValueError(f"{name}: tree {tree_text(tree)!r} does not join {self.names} once")
        self.tree = tree
        self.root = self._build(tree)
        self._internal = self._post_order(self.root)
        self.intermediate_out = 0

    # -- the tree ------------------------------------------------------------------------------
    def _build(self, tree: JoinTree) -> _Node:
        if isinstance(tree, str):
            i = self.names.index(tree)
            return _Node((i,), input=i)
        left, right = self._build(tree[0]), self._build(tree[1])
        node = _Node(tuple(sorted(left.inputs + right.inputs)), left=left, right=right)
        members: dict[int, list[Side]] = {}
        for side, k in sorted(self.graph.class_of.items()):
            if side[0] in node.inputs:
                members.setdefault(k, []).append(side)
        spanning = [k for k, ms in members.items() if _spans(ms, left, right)]
        if spanning:  # the probe class: left and right probe each other on it
            ms = members[spanning[0]]
            left.key = next(s for s in ms if s[0] in left.inputs)
            right.key = next(s for s in ms if s[0] in right.inputs)
        for ms in members.values():  # what a child that is a join has checked already is skipped
            node.checks += [
                (ms[0], s) for s in ms[1:] if not any(
                    c.left is not None and ms[0][0] in c.inputs and s[0] in c.inputs
                    for c in (left, right)
                )
            ]  # fmt: skip
        for child in (left, right):
            if child.left is not None:
                child.store = self._intermediate(child)
        return node

    def _intermediate(self, node: _Node) -> WindowStore:
        """An empty store for ``node``'s relation, its columns declared."""
        keys = [KEY] if node.key is not None else []
        store = WindowStore(f"{self.name}.({tree_text(self._subtree(node))})", keys)
        empty = np.zeros(0, np.int64)
        store.declare_columns(Batch.inserts({**{f"@{i}": empty for i in node.inputs},
                                             **{k: empty for k in keys}}))  # fmt: skip
        return store

    def _subtree(self, node: _Node) -> JoinTree:
        if node.left is None or node.right is None:
            return self.names[node.input]
        return (self._subtree(node.left), self._subtree(node.right))

    def _post_order(self, node: _Node) -> list[_Node]:
        if node.left is None or node.right is None:
            return []
        return [*self._post_order(node.left), *self._post_order(node.right), node]

    # -- epochs --------------------------------------------------------------------------------
    def _join_epoch(
        self, parts: list[Batch | None], gens: list[np.ndarray]
    ) -> list[tuple[np.ndarray, Batch]]:
        """Inserts into the windows, deletes marked, then every join bottom-up."""
        deltas: dict[int, _Delta] = {}
        for i, part in enumerate(parts):
            if part is None:
                continue
            inserts = np.flatnonzero(part.sign == INSERT)
            born = self.stores[i].insert(part.take(inserts), gens[i][inserts])
            rows, slots = self._mark_deletes(i, part, gens[i])
            slots[inserts] = born
            deltas[i] = _Delta(gens[i][rows], part.sign[rows], part.ts[rows], {i: slots[rows]})
        results = self._changes(deltas)
        for store in [*self.stores, *(n.store for n in self._internal if n.store is not None)]:
            store.remove_dying()
        if results is None or len(results.gen) == 0:
            return []
        return [(results.gen, self._results(results))]

    def _changes(self, deltas: dict[int, _Delta]) -> _Delta | None:
        """Each join's changes, children before parents; the root's (None if nothing moved)."""
        changed: dict[int, _Delta] = {}
        for node in self._internal:
            assert node.left is not None and node.right is not None
            found = [
                self._checked(node, self._join(d, side, other))
                for side, other in ((node.left, node.right), (node.right, node.left))
                if (d := self._delta(side, deltas, changed)) is not None
            ]
            out = _Delta.concat(found) if found else None
            if out is not None and node.store is not None:
                self._apply(node, out)
            if out is not None:
                changed[id(node)] = out
        return changed.get(id(self.root))

    @staticmethod
    def _delta(node: _Node, deltas: dict[int, _Delta], changed: dict[int, _Delta]) -> _Delta | None:
        d = deltas.get(node.input) if node.left is None else changed.get(id(node))
        return d if d is not None and len(d.gen) else None

    def _join(self, delta: _Delta, side: _Node, other: _Node) -> _Delta:
        """``delta`` (changes of ``side``) joined with the relation of its sibling ``other`` as
        it was at each change's number."""
        store = self.stores[other.input] if other.left is None else other.store
        assert store is not None
        if other.key is None:  # no predicate between the sides: every live tuple
            live = store.live_slots()
            left = np.repeat(np.arange(len(delta.gen), dtype=np.int64), len(live))
            found = np.tile(live, len(delta.gen))
            g = delta.gen[left]
            alive = (store.born[found] < g) & (g < store.died[found])
            left, found = left[alive], found[alive]
        else:
            assert side.key is not None
            index = store.indexes[other.key[1] if other.left is None else KEY]
            keys = self._keys(side.key, delta.slots)
            left, found = index.expand(store.born, store.died, keys, delta.gen)
        out = delta.take(left)
        if other.left is None:
            out.slots[other.input] = found
        else:
            for i in other.inputs:
                out.slots[i] = store.columns[f"@{i}"][found]  # type: ignore[index]
        return out

    def _keys(self, side: Side, slots: dict[int, np.ndarray]) -> np.ndarray:
        return self.stores[side[0]].keys(side[1], slots[side[0]])

    def _checked(self, node: _Node, delta: _Delta) -> _Delta:
        """The changes that satisfy the equalities this join is the first to see together."""
        keep = np.ones(len(delta.gen), np.bool_)
        for a, b in node.checks:
            if keep.any():
                keep &= self._keys(a, delta.slots) == self._keys(b, delta.slots)
        return delta if keep.all() else delta.take(np.flatnonzero(keep))

    def _apply(self, node: _Node, delta: _Delta) -> None:
        """Store a join's inserts and retire its deletes (inserts first: a change may be undone
        in the epoch that made it)."""
        assert node.store is not None
        rids = self._row_ids(node, delta.slots)
        cols: dict[str, Column] = {f"@{i}": delta.slots[i] for i in node.inputs}
        if node.key is not None:
            cols[KEY] = self._keys(node.key, delta.slots)
        ins = np.flatnonzero(delta.sign == INSERT)
        if len(ins):
            batch = Batch({k: v[ins] for k, v in {**cols, ROW_ID: rids}.items()},  # type: ignore[index]
                          delta.sign[ins], delta.ts[ins])  # fmt: skip
            node.store.insert(batch, delta.gen[ins])
            self.intermediate_out += len(ins)
        dels = np.flatnonzero(delta.sign != INSERT)
        if len(dels):
            node.store.mark_deleted(rids[dels], delta.gen[dels])

    def _row_ids(self, node: _Node, slots: dict[int, np.ndarray]) -> np.ndarray:
        h = np.full(len(next(iter(slots.values()))), _GAMMA, np.uint64)
        for i in node.inputs:
            h = _mix(h ^ self.stores[i].rid[slots[i]].astype(np.uint64)) + _GAMMA
        return h.view(np.int64)

    def _results(self, delta: _Delta) -> Batch:
        """The root's changes as result rows, in the order of the deltas that made them."""
        order = np.argsort(delta.gen, kind="stable")
        cols: dict[str, Column] = {}
        for j in range(self.n):
            slots = delta.slots[j][order]
            for c in self._columns[j] or []:
                cols[f"{self.names[j]}.{c}"] = self.stores[j].take(c, slots)
        return Batch(cols, delta.sign[order], delta.ts[order])

    # -- state and reporting -------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {**super().state(), "tree": tree_text(self.tree)}

    def load_state(self, state: dict[str, Any]) -> None:
        if state.get("tree") != tree_text(self.tree):
            raise SnapshotError(
                f"{self.name}: the snapshot is of join tree {state.get('tree')!r}, not "
                f"{tree_text(self.tree)!r}"
            )
        super().load_state({k: v for k, v in state.items() if k != "tree"})
        self._rebuild()

    def _rebuild(self) -> None:
        """The intermediate relations from the restored windows: every live tuple replayed as
        an insert at the number it was born with (each combination is made once, by its
        youngest part)."""
        for node in self._internal:
            if node.store is not None:
                node.store = self._intermediate(node)
        deltas = {}
        for i, store in enumerate(self.stores):
            live = store.live_slots()
            live = live[store.died[live] == ALIVE]
            live = live[np.argsort(store.born[live], kind="stable")]
            m = len(live)
            deltas[i] = _Delta(
                store.born[live], np.ones(m, np.int8), np.zeros(m, np.int64), {i: live}
            )
        made = self.intermediate_out
        self._changes(deltas)  # the root's changes were results long ago: dropped
        self.intermediate_out = made

    def held_bytes(self) -> int:
        return super().held_bytes() + sum(n.store.nbytes for n in self._internal if n.store)

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        for adaptive in ("algorithm", "orders", "probes_per_delta"):
            out.pop(adaptive)
        return {
            **out,
            "kind": "join_tree",
            "tree": tree_text(self.tree),
            "intermediate_tuples": {
                n.store.name: len(n.store) for n in self._internal if n.store is not None
            },
            "intermediate_out": self.intermediate_out,
            "state_bytes": out["state_bytes"]
            + sum(n.store.nbytes for n in self._internal if n.store),
        }


def _spans(members: list[Side], left: _Node, right: _Node) -> bool:
    return any(s[0] in left.inputs for s in members) and any(s[0] in right.inputs for s in members)
