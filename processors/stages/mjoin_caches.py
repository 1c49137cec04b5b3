"""Subresult caches inside the pipelines of an MJoin (A-Caching, Babu et al., Sections 3.2-3.3
and 4.5), exact in the stage's epoch model.

A cache sits on a segment of positions ``start..end`` of pipeline i's drop-probing order; its
key is the equivalence classes shared by the segment's inputs and those before it (the root
and the earlier positions: Section 3.2's K_ijk). A CacheLookup before the segment probes it
with every intermediate result's key: a hit binds the cached combinations of the segment's
inputs and skips its probes; for the misses the segment is computed once per distinct key and
becomes the key's entry (create). Every caches must satisfy the prefix invariant
(Definition 3.2): the first |S| - 1 probes of each segment input's own pipeline join the other
segment inputs, so that pipeline's intermediate results there are the segment's changes, which
its CacheUpdate turns into insert/delete calls.

Exactness. An MJoin epoch stores all its inserts first, marks its deletes, then runs each
pipeline over all its deltas at once, a probe for the delta numbered ``g`` seeing the tuples
with ``born < g < died`` (:mod:`processors.stages.mjoin_stage`). Caches keep that model:

- values are combinations of slots with each tuple's ``born``; a probe at ``g`` returns the
  combinations of the entry whose tuples are all alive at ``g``, so one entry answers deltas
  of any sequence number, and deletes need no immediate maintenance;
- an entry is created from the windows as they are during the epoch, with every combination
  that is alive at some number from its first probing delta on (not only at that delta), so
  it already holds every combination with a tuple inserted in this epoch: an entry remembers
  its epoch and this epoch's inserts do not reach it (they would be there twice);
- an entry of an earlier epoch misses the combinations of this epoch's inserts until their
  pipelines have run; it answers only deltas numbered below the first insert of a segment
  input whose pipeline has not run yet (else the probe counts as a miss and the entry is
  computed again). Pipelines run feeders first where the caches allow it
  (:meth:`MJoinCaches.pipelines`), which changes no result: results are put in sequence order;
- deletes are applied at the epoch's end, before the windows free the slots: each combination
  cached with a dying tuple is found by the delete of its first dying tuple (all its others
  are alive then), so no reference to a freed slot survives into the next epoch, where the
  slot may be reused. References carry ``born``, so a reference that did survive would be
  recognised and skipped (``unlinked`` in the stats, 0 when maintenance is exact).

Existence-only probes inside a segment bind (a cached value is a set of complete
combinations); a feeding pipeline expands its existence-only segment inputs on a copy of its
intermediate results. Caches are dropped when their pipeline's join order changes
(Section 4.5, step 5) or when another pipeline's new order breaks their prefix invariant; every
placement and drop is reported like a join-order change. Caches are not part of snapshots:
after a restore they start empty and are filled again by the following deltas.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from processors.core.batch import INSERT, Batch
from processors.core.caching.candidates import Orders, orders_of, prefix_invariant
from processors.core.ordering.reoptimizers import OrderChange
from processors.kernels.subresult_cache import cache_distribute, merge_rows
from processors.stages.join_cache import SubresultCache
from processors.stages.plan_changes import PlanChanges

if TYPE_CHECKING:
    from processors.stages.mjoin_stage import MJoinStage, _Run

log = logging.getLogger(__name__)

NEVER = np.iinfo(np.int64).max
DEFAULT_BUCKETS = 4096


@dataclass(frozen=True)
class CacheSpec:
    """A cache on positions ``start..end`` (inclusive) of pipeline ``pipeline``'s order."""

    pipeline: int
    start: int
    end: int
    buckets: int = DEFAULT_BUCKETS


def prefix_invariant_violation(orders: Orders, i: int, start: int, end: int) -> str | None:
    """Why the segment ``start..end`` of pipeline i breaks the prefix invariant (Definition
    3.2; :func:`processors.core.caching.candidates.prefix_invariant`), or None. ``orders[x]``:
    pipeline x's order as input indices."""
    segment = frozenset(orders[i][start : end + 1])
    if prefix_invariant(segment, orders):
        return None
    size = len(segment) - 1
    x = next(x for x in sorted(segment) if frozenset(orders[x][:size]) != segment - {x})
    return (
        f"pipeline {x} probes {list(orders[x][:size])} first, not the other segment inputs "
        f"{sorted(segment - {x})}"
    )


@dataclass
class _Placed:
    """A cache in use: its segment, key and feeds, resolved against the stage's pipelines."""

    spec: CacheSpec
    name: str
    rels: tuple[int, ...]  # the segment's inputs, sorted: the columns of a combination
    entities: tuple[int, ...]  # pipeline i's entities of the segment, in probing order
    prefix: frozenset[int]  # pipeline i's entities before the segment
    classes: tuple[int, ...]  # the key's equivalence classes
    probe_keys: tuple[tuple[int, str], ...]  # per class: pipeline i's (entity | -1, column)
    update_keys: tuple[tuple[int, str], ...]  # per class: (index into rels, column)
    orders: dict[int, tuple[int, ...]]  # the orders it was checked against, by pipeline
    cache: SubresultCache
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)


class MJoinCaches:
    """The caches of one MJoin stage and the hooks its epochs and pipelines call."""

    def __init__(self, stage_name: str) -> None:
        self.placed: list[_Placed] = []
        self.plan_changes = PlanChanges(stage_name, "caches", log)
        self.epoch = 0
        self._first_insert = np.zeros(0, np.int64)
        self._ran = np.zeros(0, np.bool_)
        self._segments: dict[tuple[int, int], _Placed] = {}
        self._feeds: dict[tuple[int, int], list[_Placed]] = {}
        self._zeros: dict[int, np.ndarray] = {}
        self.feeders_first = True  # False: pipelines in index order (as exact, fewer hits)

    # -- placing ------------------------------------------------------------------------------
    def force(self, stage: MJoinStage, specs: Sequence[Any]) -> None:
        """Use exactly these caches from now on, empty (ValueError if one is not allowed)."""
        if specs and not stage.supports_caches:
            raise ValueError(f"{stage.name}: a {stage.kind} stage does not run caches")
        wanted = [self._spec(stage, s) for s in specs]
        orders = _orders(stage)
        for s in wanted:
            why = prefix_invariant_violation(orders, s.pipeline, s.start, s.end)
            if why:
                raise ValueError(
                    f"{stage.name}: cache on {_segment_name(stage, s)} breaks the prefix "
                    f"invariant: {why}"
                )
        for a in wanted:
            for b in wanted:
                same = a is not b and a.pipeline == b.pipeline
                if same and a.start <= b.end and b.start <= a.end:
                    raise ValueError(f"{stage.name}: caches {a} and {b} overlap")
        placed = [self._resolve(stage, s) for s in wanted]
        self._index(placed)  # raises before anything changed if a feed falls inside a segment
        for c in self.placed:
            self._record(stage, c, "drop", "caches replaced")
        for c in placed:
            self._record(stage, c, "add", "forced")
        self.placed = placed

    def _spec(self, stage: MJoinStage, s: Any) -> CacheSpec:
        """A CacheSpec from a CacheSpec, a tuple (pipeline index or input name, start, end[,
        buckets]) or anything with ``pipeline``, ``start``, ``end`` (a model's Candidate)."""
        if isinstance(s, tuple):
            first = stage.input_index(s[0]) if isinstance(s[0], str) else int(s[0])
            s = CacheSpec(first, *(int(x) for x in s[1:]))
        elif not isinstance(s, CacheSpec):
            if getattr(s, "kind", "prefix") != "prefix":
                raise ValueError(f"{stage.name}: only prefix-invariant caches run, not {s}")
            s = CacheSpec(int(s.pipeline), int(s.start), int(s.end))
        if not 0 <= s.pipeline < stage.n:
            raise ValueError(f"{stage.name}: no pipeline {s.pipeline}")
        size = stage.pipelines[s.pipeline].size
        if not 0 <= s.start <= s.end < size:
            raise ValueError(f"{stage.name}: positions {s.start}..{s.end} outside 0..{size - 1}")
        return s

    def _resolve(self, stage: MJoinStage, s: CacheSpec) -> _Placed:
        pipe = stage.pipelines[s.pipeline]
        order = stage.reopts[s.pipeline].order.tolist()
        entities = tuple(order[s.start : s.end + 1])
        prefix = frozenset(order[: s.start])
        rels = tuple(sorted(pipe.inputs[e] for e in entities))
        before = {s.pipeline} | {pipe.inputs[e] for e in prefix}
        classes = tuple(
            k for k, members in enumerate(stage.graph.members)
            if any(x in before for x, _ in members) and any(x in rels for x, _ in members)
        )  # fmt: skip
        probe_keys, update_keys = [], []
        for k in classes:
            members = stage.graph.members[k]
            sources = [(-1, c) for x, c in members if x == s.pipeline] + [
                (e, c) for e in sorted(prefix) if not pipe.existence_only[e]
                for x, c in members if x == pipe.inputs[e]
            ]  # fmt: skip
            probe_keys.append(sources[0])  # an existence-only one's parent is in its class
            update_keys.append(next((rels.index(x), c) for x, c in members if x in rels))
        return _Placed(
            s, _segment_name(stage, s), rels, entities, prefix, classes, tuple(probe_keys),
            tuple(update_keys),
            {x: tuple(stage.reopts[x].order.tolist()) for x in {s.pipeline, *rels}},
            SubresultCache(len(rels), len(classes), s.buckets),
        )  # fmt: skip

    def _index(self, placed: list[_Placed]) -> None:
        """The lookup and update points by (pipeline, position)."""
        segments = {(c.spec.pipeline, c.spec.start): c for c in placed}
        feeds: dict[tuple[int, int], list[_Placed]] = {}
        for c in placed:
            for x in c.rels:
                at = len(c.rels) - 1
                inside = [d for d in placed if d.spec.pipeline == x
                          and d.spec.start < at <= d.spec.end]  # fmt: skip
                if inside:
                    raise ValueError(f"the changes of {c.name} are inside cache {inside[0].name}")
                feeds.setdefault((x, at), []).append(c)
        self._segments, self._feeds = segments, feeds

    def _drop(self, stage: MJoinStage, c: _Placed, why: str) -> None:
        self.placed.remove(c)
        self._index(self.placed)
        self._record(stage, c, "drop", why)

    def _record(self, stage: MJoinStage, c: _Placed, action: str, why: str) -> None:
        i = c.spec.pipeline
        seg = tuple(c.entities)
        change = OrderChange(() if action == "add" else seg, seg if action == "add" else (),
                             c.spec.start, why)  # fmt: skip
        self.plan_changes.record(
            change, stage._entity_names[i], stage.clock_ms(), stage.deltas_in[i], "deltas",
            {"pipeline": stage.names[i], "cache": c.name, "action": action},
            what=f"caches of {stage.names[i]}",
        )  # fmt: skip

    def check_orders(self, stage: MJoinStage) -> None:
        """Drop the caches whose pipeline's order changed, or whose prefix invariant another
        pipeline's new order broke (Section 4.5, step 5)."""
        for c in list(self.placed):
            now = {x: tuple(stage.reopts[x].order.tolist()) for x in c.orders}
            if now == c.orders:
                continue
            i = c.spec.pipeline
            why = (
                f"join order of {stage.names[i]} changed" if now[i] != c.orders[i]
                else prefix_invariant_violation(_orders(stage), i, c.spec.start, c.spec.end)
            )  # fmt: skip
            if why:
                self._drop(stage, c, why)
            else:
                c.orders = now

    def reset(self, stage: MJoinStage) -> None:
        """After a restore: every cache empty, the ones the restored orders break dropped."""
        self.epoch = 0
        for c in self.placed:
            c.cache.clear()
            c.pending = []
        self.check_orders(stage)

    # -- epochs -------------------------------------------------------------------------------
    def begin_epoch(self, parts: Sequence[Batch | None], gens: Sequence[np.ndarray]) -> None:
        """A new epoch: its deltas are numbered and its inserts stored."""
        self.epoch += 1
        self._first_insert = np.full(len(parts), NEVER, np.int64)
        for x, part in enumerate(parts):
            if part is not None and self.placed:
                ins = gens[x][part.sign == INSERT]
                self._first_insert[x] = ins.min() if len(ins) else NEVER
        self._ran = np.zeros(len(parts), np.bool_)

    def pipelines(self, n: int) -> Iterator[int]:
        """The pipelines in the order to run them this epoch: each cache's feeders before its
        pipeline where possible (the order changes no result); marks each as run."""
        after: dict[int, set[int]] = {x: set() for x in range(n)}
        for c in self.placed if self.feeders_first else ():
            after[c.spec.pipeline].update(c.rels)
        order: list[int] = []
        while len(order) < n:
            ready = [x for x in range(n) if x not in order and after[x] <= set(order)]
            order.append(ready[0] if ready else next(x for x in range(n) if x not in order))
        for x in order:
            yield x
            self._ran[x] = True

    def end_epoch(self) -> None:
        """This epoch's deletes reach the caches, before the windows free their slots."""
        for c in self.placed:
            if c.pending:
                keys, slots, borns = (np.concatenate(p) for p in zip(*c.pending, strict=True))
                c.cache.delete(keys, slots, borns)
                c.pending = []

    def _fresh_below(self, c: _Placed) -> int:
        waiting = [int(self._first_insert[x]) for x in c.rels if not self._ran[x]]
        return min(waiting, default=NEVER)

    # -- the pipeline hooks -------------------------------------------------------------------
    def involved(self, stage: MJoinStage, i: int) -> bool:
        """Whether pipeline i looks up or updates a cache (orders checked first)."""
        if not self.placed:
            return False
        self.check_orders(stage)
        return any(key[0] == i for key in (*self._segments, *self._feeds))

    def segment_at(self, i: int, k: int) -> _Placed | None:
        return self._segments.get((i, k))

    def lookup(
        self, stage: MJoinStage, c: _Placed, delta: Batch, gen: np.ndarray, run: _Run
    ) -> int:
        """CacheLookup: bind the segment's inputs for every intermediate result, from the
        cache or computed for the keys that miss (then cached); the position after it."""
        pipe = stage.pipelines[c.spec.pipeline]
        keys = np.empty((len(run.origin), len(c.classes)), np.int64)
        for n, (x, col) in enumerate(c.probe_keys):
            keys[:, n] = stage._values(pipe, delta, run, x, col)
        g = gen[run.origin]
        borns, dieds = self._lifetimes(stage, c)
        buckets = c.cache.lookup(keys, g, self.epoch, self._fresh_below(c))
        left, combos = c.cache.expand(buckets, g, borns, dieds)
        miss = np.flatnonzero(buckets < 0)
        if len(miss):
            uniq, owner = _unique_rows(keys[miss])
            first = np.full(len(uniq), NEVER, np.int64)
            np.minimum.at(first, owner, g[miss])
            which, made = self._segment(stage, c, uniq, first)
            starts = np.searchsorted(which, np.arange(len(uniq) + 1)).astype(np.int64)
            born = np.stack([b[made[:, n]] for n, b in enumerate(borns)], axis=1)
            died = np.stack([d[made[:, n]] for n, d in enumerate(dieds)], axis=1)
            c.cache.create(uniq, starts, made, born, self.epoch)
            at, rows = cache_distribute(owner, starts, born.max(axis=1), died.min(axis=1), g[miss])
            left, combos = merge_rows(left, combos, miss[at], np.ascontiguousarray(made.T[:, rows]))
        run.keep(left)
        entity = {inp: e for e, inp in enumerate(pipe.inputs)}
        for n, x in enumerate(c.rels):
            run.bound[entity[x]] = combos[n]
        return c.spec.end + 1

    def _segment(
        self, stage: MJoinStage, c: _Placed, keys: np.ndarray, first: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The segment's combinations for each key row: (key row, slots per input of
        ``rels``), key rows in order, every combination alive at some number from ``first``
        of its key on (each tuple dies after it, and the newest is born before the first
        dies)."""
        pipe = stage.pipelines[c.spec.pipeline]
        column = {k: n for n, k in enumerate(c.classes)}
        origin = np.arange(len(keys), dtype=np.int64)
        bound: dict[int, np.ndarray] = {}
        for e in c.entities:
            pcol, ecol = pipe.probe[e]
            parent = pipe.parent[e]
            if parent in bound:
                values = stage.stores[pipe.inputs[parent]].keys(pcol, bound[parent])
            else:
                values = keys[origin, column[pipe.edge_class[e]]]
            store = stage.stores[pipe.inputs[e]]
            stage.probes[c.spec.pipeline][e] += len(origin)
            left, slots = store.indexes[ecol].expand(
                self._zeros_for(store.capacity), store.died, values, first[origin]
            )
            origin, bound = origin[left], {x: s[left] for x, s in bound.items()}
            bound[e] = slots
            for x, xcol, col in pipe.checks(e, c.prefix | set(bound)):
                mine = store.keys(col, bound[e])
                if x in bound:
                    theirs = stage.stores[pipe.inputs[x]].keys(xcol, bound[x])
                else:
                    inp = c.spec.pipeline if x < 0 else pipe.inputs[x]
                    theirs = keys[origin, column[stage.graph.class_of[(inp, xcol)]]]
                keep = mine == theirs
                origin, bound = origin[keep], {y: s[keep] for y, s in bound.items()}
        entity = {inp: e for e, inp in enumerate(pipe.inputs)}
        made = np.stack([bound[entity[x]] for x in c.rels], axis=1)
        lo = np.max([stage.stores[x].born[made[:, n]] for n, x in enumerate(c.rels)], axis=0)
        hi = np.min([stage.stores[x].died[made[:, n]] for n, x in enumerate(c.rels)], axis=0)
        keep = lo < hi
        return origin[keep], np.ascontiguousarray(made[keep])

    def feed(
        self, stage: MJoinStage, i: int, k: int, delta: Batch, gen: np.ndarray,
        slots: np.ndarray, run: _Run,
    ) -> None:  # fmt: skip
        """CacheUpdate before position k of pipeline i: its intermediate results are the
        changes of the segments of the caches it feeds there (prefix invariant). Inserts
        reach the caches now, deletes at the epoch's end."""
        for c in self._feeds.get((i, k), ()):
            if not len(run.origin):
                return
            pipe = stage.pipelines[i]
            entity = {inp: e for e, inp in enumerate(pipe.inputs)}
            side = run
            unbound = [entity[x] for x in c.rels if x != i and entity[x] not in run.bound]
            if unbound:  # existence-only probes so far: bind them on a copy
                side = copy.copy(run)
                side.bound = dict(run.bound)
                for e in unbound:
                    stage._probe(pipe, delta, gen, side, e, bind=True)
            combos = np.stack(
                [slots[side.origin] if x == i else side.bound[entity[x]] for x in c.rels], axis=1
            )
            borns = np.stack([stage.stores[x].born[combos[:, n]] for n, x in enumerate(c.rels)],
                             axis=1)  # fmt: skip
            keys = np.stack(
                [stage.stores[c.rels[n]].keys(col, combos[:, n]) for n, col in c.update_keys],
                axis=1,
            )
            ins = delta.sign[side.origin] == INSERT
            c.cache.insert(keys[ins], combos[ins], borns[ins], self.epoch)
            if not ins.all():
                c.pending.append((keys[~ins], combos[~ins], borns[~ins]))

    def _lifetimes(self, stage: MJoinStage, c: _Placed) -> tuple[tuple[np.ndarray, ...], ...]:
        return (tuple(stage.stores[x].born for x in c.rels),
                tuple(stage.stores[x].died for x in c.rels))  # fmt: skip

    def _zeros_for(self, capacity: int) -> np.ndarray:
        """``born`` for probes that see every stored tuple born so far."""
        if capacity not in self._zeros:
            self._zeros = {capacity: np.zeros(capacity, np.int64), **self._zeros}
        return self._zeros[capacity]

    # -- reporting ----------------------------------------------------------------------------
    def invalid_refs(self, stage: MJoinStage) -> int:
        """Cached references to freed or reused slots over all caches (tests: always 0)."""
        return sum(c.cache.invalid_refs(self._lifetimes(stage, c)[0]) for c in self.placed)

    @property
    def nbytes(self) -> int:
        return sum(c.cache.nbytes for c in self.placed)

    def stats(self) -> dict[str, Any]:
        return {
            "caches": {c.name: c.cache.stats() for c in self.placed},
            "cache_changes_total": self.plan_changes.total,
            "recent_cache_changes": self.plan_changes.entries(),
        }


def _orders(stage: MJoinStage) -> Orders:
    """Each pipeline's order as input indices."""
    return orders_of(stage.pipelines, [r.order.tolist() for r in stage.reopts])


def _segment_name(stage: MJoinStage, s: CacheSpec) -> str:
    order = _orders(stage)[s.pipeline]
    names = [stage.names[x] for x in order[s.start : s.end + 1]]
    return f"{stage.names[s.pipeline]}:{s.start}-{s.end}[{','.join(names)}]"


def _unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct key rows and each row's index among them."""
    if keys.shape[1] == 1:
        uniq, inverse = np.unique(keys[:, 0], return_inverse=True)
        return uniq.reshape(-1, 1), inverse.reshape(-1).astype(np.int64)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    return np.ascontiguousarray(uniq), inverse.reshape(-1).astype(np.int64)
