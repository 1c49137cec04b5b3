"""Subresult caches inside the pipelines of an MJoin (A-Caching, Babu et al., Sections 3.2-3.3,
4.5 and 6), exact in the stage's epoch model.

A cache sits on a segment X of pipeline i's drop-probing order, keyed by the equivalence
classes linking X to the inputs before it (:mod:`processors.stages.mjoin_cache_plan`). A
CacheLookup before the segment probes it with every intermediate result's key: a hit binds
the cached combinations of X's inputs and skips its probes; for the misses the segment is
computed once per distinct key and becomes the key's entry (create). The pipelines of the
cache's maintaining set M (X itself under the prefix invariant, Definition 3.2; the smallest
prefix-invariant superset for a globally-consistent cache, Section 6) have, after their first
|M| - 1 probes, the changes of M's join; their CacheUpdate turns them into insert/delete calls
(a globally-consistent cache takes their part on X, once).

Exactness. An MJoin epoch stores all its inserts first, marks its deletes, then runs each
pipeline over all its deltas at once, a probe for the delta numbered ``g`` seeing the tuples
with ``born < g < died`` (:mod:`processors.stages.mjoin_stage`). Caches keep that model:

- values are combinations of slots with each tuple's ``born``; a probe at ``g`` returns the
  combinations of the entry whose tuples are all alive at ``g``, so one entry answers deltas
  of any sequence number, and deletes need no immediate maintenance;
- an entry is created from the windows as they are during the epoch, with every combination
  of X that is alive at some number of the epoch (not only at its probing delta's), so it
  answers every delta of the epoch, from whichever pipeline sharing the cache, and already
  holds every combination with a tuple inserted in this epoch: an entry remembers its epoch
  and this epoch's inserts do not reach it (they would be there twice);
- an entry of an earlier epoch misses the combinations of this epoch's inserts until their
  pipelines have run; it answers only deltas numbered below the first insert of an input of M
  whose pipeline has not run yet (else the probe counts as a miss and the entry is computed
  again). Pipelines run feeders first where the caches allow it (:meth:`MJoinCaches.pipelines`),
  which changes no result: results are put in sequence order;
- deletes are applied at the epoch's end, before the windows free the slots: under the prefix
  invariant each combination cached with a dying tuple is found by the delete of its first
  dying tuple (all its others are alive then); a globally-consistent cache, whose feeders only
  see X's combinations that join the rest of M, is swept for combinations with a dying tuple.
  So no reference to a freed slot survives into the next epoch, where the slot may be reused.
  References carry ``born``, so a reference that did survive would be recognised and skipped
  (``unlinked`` in the stats, 0 when maintenance is exact).

Caches that hold the same entries (the same inputs, key classes and maintaining set, in
different pipelines: Definition 4.1's sharing) use one table (:func:`.mjoin_cache_plan.share`):
it is updated once per change, counted once against the memory, and a cache dropped while its
table lives on hands the epoch's pending deletes to a cache that keeps it.

A globally-consistent entry holds X's combinations that existed when it was created or joined
the rest of M since: a superset of those that join every other input, a subset of X's join
(Definition 6.1), so the probes after the segment give exact results. Existence-only probes
inside a segment bind (a cached value is a set of complete combinations); a feeding pipeline
binds its existence-only inputs of X in its intermediate results at the update point, so the
output generation does not bind them again (on a copy, each was bound twice: with probes that
scan their window, Fig. 10's setting, that made the caches cost more than they saved). Caches are
dropped when their pipeline's join order changes (Section 4.5, step 5) or when another
pipeline's new order changes their maintenance; every placement and drop is reported like a
join-order change. Caches are not part of snapshots: after a restore they start empty and are
filled again by the following deltas.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from processors.core.batch import INSERT, Batch
from processors.core.ordering.reoptimizers import OrderChange
from processors.kernels.subresult_cache import cache_distribute, merge_rows
from processors.stages.mjoin_adaptive_caching import AdaptiveCaching
from processors.stages.mjoin_cache_plan import (
    CacheSpec,
    Placed,
    index,
    resolve,
    share,
    spec_of,
    still_valid,
)
from processors.stages.plan_changes import PlanChanges

if TYPE_CHECKING:
    from processors.stages.mjoin_stage import MJoinStage
    from processors.stages.pipeline_run import PipelineRun

log = logging.getLogger(__name__)

NEVER = np.iinfo(np.int64).max


class MJoinCaches:
    """The caches of one MJoin stage and the hooks its epochs and pipelines call."""

    def __init__(self, stage_name: str) -> None:
        self.placed: list[Placed] = []
        self.plan_changes = PlanChanges(stage_name, "caches", log)
        self.epoch = 0
        self._first_insert: np.ndarray | None = None
        self._epoch_parts: tuple[Sequence[Batch | None], Sequence[np.ndarray]] = ((), ())
        self._ran = np.zeros(0, np.bool_)
        self._segments: dict[tuple[int, int], Placed] = {}
        self._feeds: dict[tuple[int, int], list[Placed]] = {}
        self._zeros: dict[int, np.ndarray] = {}
        self.feeders_first = True  # False: pipelines in index order (as exact, fewer hits)
        self.adaptive: AdaptiveCaching | None = None  # A-Caching at run time, when enabled

    # -- placing ------------------------------------------------------------------------------
    def force(self, stage: MJoinStage, specs: Sequence[Any]) -> None:
        """Use exactly these caches from now on, empty (ValueError if one is not allowed)."""
        if specs and not stage.supports_caches:
            raise ValueError(f"{stage.name}: a {stage.kind} stage does not run caches")
        placed = share([resolve(stage, spec_of(stage, s)) for s in specs])
        try:
            self._segments, self._feeds = index(placed)
        except ValueError as exc:
            self._segments, self._feeds = index(self.placed)
            raise ValueError(f"{stage.name}: {exc}") from None
        for c in self.placed:
            self._record(stage, c, "drop", "caches replaced")
        for c in placed:
            self._record(stage, c, "add", "forced")
        self.placed = placed

    def change(
        self, stage: MJoinStage, add: Sequence[tuple[Any, CacheSpec]], drop: Sequence[Placed],
        why: str,
    ) -> tuple[list[tuple[Any, Placed]], list[tuple[Any, str]]]:  # fmt: skip
        """Drop ``drop`` and add the caches of ``add`` ((tag, spec) pairs), keeping the others
        and their entries; (the added, by tag) and (the refused, by tag, with why)."""
        for c in drop:
            if c in self.placed:
                self._remove(c)
                self._record(stage, c, "drop", why)
        added, refused = [], []
        for tag, spec in add:
            try:
                c = resolve(stage, spec_of(stage, spec))
                index([*self.placed, c])
            except ValueError as exc:
                refused.append((tag, str(exc)))
                continue
            share([*self.placed, c])  # a table another cache holds already: its entries too
            self.placed.append(c)
            added.append((tag, c))
            self._record(stage, c, "add", why)
        self._segments, self._feeds = index(self.placed)
        return added, refused

    def _drop(self, stage: MJoinStage, c: Placed, why: str) -> None:
        self._remove(c)
        self._segments, self._feeds = index(self.placed)
        self._record(stage, c, "drop", why)

    def _remove(self, c: Placed) -> None:
        """Take ``c`` out; a cache sharing its table takes over the epoch's pending deletes
        (else they would be lost with ``c`` and the table keep dead tuples' slots)."""
        self.placed.remove(c)
        heir = next((d for d in self.placed if d.cache is c.cache), None)
        if heir is not None:
            heir.pending += c.pending
        c.pending = []

    def _record(self, stage: MJoinStage, c: Placed, action: str, why: str) -> None:
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
        """Drop the caches whose pipeline's order changed, or whose maintenance another
        pipeline's new order broke (Section 4.5, step 5)."""
        for c in list(self.placed):
            now = {x: tuple(stage.reopts[x].order.tolist()) for x in c.orders}
            if now == c.orders:
                continue
            why = still_valid(stage, c, now)
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
        self._ran = np.zeros(len(parts), np.bool_)
        self._epoch_parts = (parts, gens)
        self._first_insert = None  # computed when a cache first needs it this epoch

    def _first_inserts(self) -> np.ndarray:
        """Per input, the sequence number of this epoch's first insert (NEVER: none). Lazy:
        an MJoin without caches never pays for it (a cache placed mid-epoch by the adaptive
        selector still gets it)."""
        if self._first_insert is None:
            parts, gens = self._epoch_parts
            first = np.full(len(parts), NEVER, np.int64)
            for x, part in enumerate(parts):
                if part is not None:
                    ins = gens[x][part.sign == INSERT]
                    first[x] = ins.min() if len(ins) else NEVER
            self._first_insert = first
        return self._first_insert

    def pipelines(self, n: int) -> Iterator[int]:
        """The pipelines in the order to run them this epoch: each cache's feeders before its
        pipeline where possible (the order changes no result); marks each as run."""
        # without caches (yet) the pipelines run in index order and are not marked: a cache
        # placed mid-epoch then takes every feeder as not run, which only makes it miss more
        return self._ordered(n) if self.placed else iter(range(n))

    def _ordered(self, n: int) -> Iterator[int]:
        after: dict[int, set[int]] = {x: set() for x in range(n)}
        for c in self.placed if self.feeders_first else ():
            after[c.spec.pipeline].update(c.maintained)
        order: list[int] = []
        while len(order) < n:
            ready = [x for x in range(n) if x not in order and after[x] <= set(order)]
            order.append(ready[0] if ready else next(x for x in range(n) if x not in order))
        for x in order:
            yield x
            self._ran[x] = True

    def end_epoch(self, stage: MJoinStage) -> None:
        """This epoch's deletes reach the caches, before the windows free their slots: as
        the changes the feeding pipelines computed (prefix-invariant caches), or by a sweep
        for the combinations with a dying tuple (globally consistent ones, whose feeders see
        only the combinations that join the rest of M)."""
        self._epoch_parts = ((), ())  # the epoch's deltas are not kept past it
        swept: set[int] = set()
        for c in self.placed:
            dying = any(stage.stores[x].dying for x in c.rels)
            if c.is_global and dying and id(c.cache) not in swept:
                swept.add(id(c.cache))
                c.cache.sweep(self._lifetimes(stage, c)[1])
            if c.pending:
                keys, slots, borns = (np.concatenate(p) for p in zip(*c.pending, strict=True))
                c.cache.delete(keys, slots, borns)
                c.pending = []
        if self.adaptive is not None:
            self.adaptive.tick(stage)

    def _epoch_first(self) -> int:
        """The least sequence number of this epoch: an entry made now holds every combination
        alive at some number from it on, so it answers every delta of the epoch, whichever
        pipeline (of those sharing the cache) probes it first."""
        gens = [g for g in self._epoch_parts[1] if len(g)]
        return min((int(g.min()) for g in gens), default=0)

    def _fresh_below(self, c: Placed) -> int:
        first = self._first_inserts()
        waiting = [int(first[x]) for x in c.maintained if not self._ran[x]]
        return min(waiting, default=NEVER)

    # -- the pipeline hooks -------------------------------------------------------------------
    def involved(self, stage: MJoinStage, i: int) -> bool:
        """Whether pipeline i looks up or updates a cache, or adaptive caching profiles it
        (orders checked first)."""
        if self.adaptive is None and stage.config.caches_on and stage.supports_caches:
            self.adaptive = AdaptiveCaching(stage, self)
        if self.adaptive is not None:
            self.check_orders(stage)
            self.adaptive.sync(stage)
            return True
        if not self.placed:
            return False
        self.check_orders(stage)
        return any(key[0] == i for key in (*self._segments, *self._feeds))

    def segment_at(self, i: int, k: int) -> Placed | None:
        return self._segments.get((i, k))

    def lookup(
        self, stage: MJoinStage, c: Placed, delta: Batch, gen: np.ndarray, run: PipelineRun
    ) -> int:
        """CacheLookup: bind the segment's inputs for every intermediate result, from the
        cache or computed for the keys that miss (then cached); the position after it."""
        t0, spent = time.perf_counter_ns(), 0
        pipe = stage.pipelines[c.spec.pipeline]
        keys = np.empty((len(run.origin), len(c.classes)), np.int64)
        for n, (x, col) in enumerate(c.probe_keys):
            keys[:, n] = stage._values(pipe, delta, run, x, col)
        g = gen[run.origin]
        borns, dieds = self._lifetimes(stage, c)
        buckets = c.cache.lookup(keys, g, self.epoch, self._fresh_below(c))
        left, combos = c.cache.expand(buckets, g, borns, dieds)
        miss = np.flatnonzero(buckets < 0)
        computed = miss[:0]  # the misses whose key's segment is computed (once per key)
        if len(miss):
            uniq, owner = _unique_rows(keys[miss])
            computed = miss[np.unique(owner, return_index=True)[1]]
            first = np.full(len(uniq), self._epoch_first(), np.int64)
            t1 = time.perf_counter_ns()
            which, made = self._segment(stage, c, uniq, first)
            spent = time.perf_counter_ns() - t1
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
        if self.adaptive is not None:
            handled = len(keys) + len(left)
            ns = time.perf_counter_ns() - t0 - spent
            self.adaptive.looked_up(c, len(keys), computed, handled, ns)
            self.adaptive.enforce(stage)
        return c.spec.end + 1

    def _segment(
        self, stage: MJoinStage, c: Placed, keys: np.ndarray, first: np.ndarray
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
        slots: np.ndarray, run: PipelineRun,
    ) -> None:  # fmt: skip
        """CacheUpdate before position k of pipeline i: its intermediate results are the
        changes of the join of the maintaining set M of the caches it feeds there; their
        segment's part is inserted now (once: globally consistent caches project M's
        combinations onto X, which repeats them), deleted at the epoch's end. Adaptive caching
        profiles here too."""
        if self.adaptive is not None:
            self.adaptive.observe(stage, i, k, delta, gen, run)
        for c in self._feeds.get((i, k), ()):
            t0 = time.perf_counter_ns()
            if not len(run.origin):
                return
            pipe = stage.pipelines[i]
            entity = {inp: e for e, inp in enumerate(pipe.inputs)}
            for x in c.rels:  # existence-only probes so far: bound here, once, for the output too
                if x != i and entity[x] not in run.bound:
                    stage._probe(pipe, delta, gen, run, entity[x], bind=True)
            combos = np.stack(
                [slots[run.origin] if x == i else run.bound[entity[x]] for x in c.rels], axis=1
            )
            borns = np.stack([stage.stores[x].born[combos[:, n]] for n, x in enumerate(c.rels)],
                             axis=1)  # fmt: skip
            keys = np.stack(
                [stage.stores[c.rels[n]].keys(col, combos[:, n]) for n, col in c.update_keys],
                axis=1,
            )
            ins = delta.sign[run.origin] == INSERT
            c.cache.insert(keys[ins], combos[ins], borns[ins], self.epoch, unique=c.is_global)
            if not ins.all() and not c.is_global:
                c.pending.append((keys[~ins], combos[~ins], borns[~ins]))
            if self.adaptive is not None:
                self.adaptive.updated(len(combos), time.perf_counter_ns() - t0)
        if self.adaptive is not None and self._feeds.get((i, k)):
            self.adaptive.enforce(stage)

    def _lifetimes(self, stage: MJoinStage, c: Placed) -> tuple[tuple[np.ndarray, ...], ...]:
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
        tables = {id(c.cache): c for c in self.placed}.values()
        return sum(c.cache.invalid_refs(self._lifetimes(stage, c)[0]) for c in tables)

    @property
    def nbytes(self) -> int:
        """The tables' bytes, each shared table once."""
        return sum({id(c.cache): c.cache.nbytes for c in self.placed}.values())

    def stats(self, stage: MJoinStage | None = None) -> dict[str, Any]:
        out = {
            "caches": {c.name: c.cache.stats() for c in self.placed},
            "cache_changes_total": self.plan_changes.total,
            "recent_cache_changes": self.plan_changes.entries(),
        }
        if self.adaptive is not None and stage is not None:
            out["adaptive_caching"] = self.adaptive.stats(stage)
        return out


def _unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct key rows and each row's index among them."""
    if keys.shape[1] == 1:
        uniq, inverse = np.unique(keys[:, 0], return_inverse=True)
        return uniq.reshape(-1, 1), inverse.reshape(-1).astype(np.int64)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    return np.ascontiguousarray(uniq), inverse.reshape(-1).astype(np.int64)
