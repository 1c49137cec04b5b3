"""MJoinStage: an n-way windowed equi-join with one adaptively ordered pipeline per input.

Inputs are delta streams (inserts and deletes of window relations, each tuple with its window
row id). The stage merges them in the order of docs/windows-and-joins.md, ``(ts, input,
position)``, and releases a delta only once every input has shown a later timestamp, so results
do not depend on how batches arrive.

Released deltas are processed an *epoch* at a time: all inserts enter the window stores first
with their global sequence number as ``born``, deletes mark ``died``, and then each input's
deltas run through its pipeline in one vectorized pass whose probes see only tuples alive at
each delta's sequence number. The results are exactly those of processing the deltas one by one
(MJoin, A-Caching paper Section 3.1), without per-tuple Python.

Each pipeline runs in two phases (Babu et al., Section 8.1): drop-probing in the current order
(an existence probe for inputs nothing else hangs on; a join for the others, whose matches are
kept for output generation), then output generation for the surviving deltas. The order of
drop-probing is chosen by the A-Greedy machinery of the filter stage, treating each probed
input (each path of the spanning tree, Section 8.2) as a filter that drops a delta when it has
no match; the tree's precedence constraints are respected. Every order change is counted and
reported in ``stats()`` and logged sparingly (:mod:`processors.stages.plan_changes`).
Subresult caches (A-Caching, :meth:`MJoinStage.use_caches`) hook into the pipelines' probing
loop: lookups, update points and the pass's end (:mod:`processors.stages.mjoin_caches`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from processors.core.batch import DELETE, INSERT, ROW_ID, Batch, Column, VarColumn
from processors.core.joins.graph import JoinGraph, Pipeline, Side
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.profile import CostEstimates
from processors.core.ordering.reoptimizers import OrderChange, Reoptimizer, make_reoptimizer
from processors.stages.base import StageBase
from processors.stages.idleness import Idleness
from processors.stages.join_store import WindowStore, join_keys
from processors.stages.mjoin_cache_plan import CacheSpec
from processors.stages.mjoin_caches import MJoinCaches
from processors.stages.mjoin_profile import profile_dropped, profile_samples
from processors.stages.mjoin_report import mjoin_stats
from processors.stages.mjoin_state import load_mjoin_state, mjoin_state
from processors.stages.pinned_columns import filled
from processors.stages.pipeline_run import PipelineRun, whole_or_take
from processors.stages.plan_changes import PlanChanges

log = logging.getLogger(__name__)

EPOCH_SLICE = 16_384  # deltas per pipeline pass


def wall_ms() -> int:
    """The wall clock in ms (what plan-change reports are stamped with)."""
    return time.time_ns() // 1_000_000


class MJoinStage(StageBase):
    """Joins n delta streams on equality predicates (see the module docstring). Snapshots
    (:meth:`snapshot`, :meth:`load_snapshot`) hold the tree of :mod:`.mjoin_state`."""

    kind = "mjoin"
    SNAPSHOT_VERSION = 1
    supports_caches = True  # subresult caches (:meth:`use_caches`)
    #: while set, :meth:`process` buffers (input and event-time progress) without joining and
    #: the caller releases once: a join step's turn is one epoch (``JoinedChain.drain``), the
    #: same results in (ts, input) order, at one epoch's fixed cost (docs/benchmarks.md)
    deferring = False

    def __init__(
        self,
        names: Sequence[str],
        predicates: Sequence[tuple[Side, Side]],
        config: OrderingConfig | None = None,
        name: str = "mjoin",
        clock_ms: Callable[[], int] = wall_ms,
        idle_timeout_ms: int = 3_000,
    ) -> None:
        self.name = name
        self.names = list(names)
        self.n = len(self.names)
        self.graph = JoinGraph(self.n, predicates, self.names)
        self.config = (config or OrderingConfig()).for_joins()  # A-Greedy+ is for filters
        self.clock_ms = clock_ms
        key_columns: list[list[str]] = [[] for _ in range(self.n)]
        for inp, col in sorted(self.graph.class_of):
            key_columns[inp].append(col)
        self.stores = [WindowStore(self.names[i], key_columns[i]) for i in range(self.n)]
        self.pipelines = [self.graph.pipeline(i) for i in range(self.n)]
        self.reopts: list[Reoptimizer] = [
            make_reoptimizer(p.size, self.config, p.default_order(), list(p.parent))
            for p in self.pipelines
        ]
        self.costs = [
            CostEstimates(p.size, self.config.cost_samples, None, 0.0, min_tuples=1)
            for p in self.pipelines
        ]
        self._rng_state = np.array([self.config.seed * 0x9E3779B97F4A7C15 % 2**64 + 1], np.uint64)
        self._buffers: list[list[Batch]] = [[] for _ in range(self.n)]
        self._shown = [np.iinfo(np.int64).min] * self.n  # largest timestamp pushed per input
        self.idleness = Idleness(self.n, idle_timeout_ms)  # inputs not waited for
        self._next_gen = 1
        self._columns: list[list[str] | None] = [None] * self.n
        self.dead_letters: list[tuple[Batch, str]] = []
        self.deltas_in = [0] * self.n
        self.results_out = 0
        self.probes = [np.zeros(p.size, np.int64) for p in self.pipelines]
        self._entity_names = [[self.names[inp] for inp in p.inputs] for p in self.pipelines]
        self.plan_changes = PlanChanges(name, "join order", log)
        self.result_columns: frozenset[str] | None = None  # None: every input column
        self.caches = MJoinCaches(name)

    # -- input --------------------------------------------------------------------------------
    def input_index(self, stream: str) -> int:
        try:
            return self.names.index(stream)
        except ValueError:
            raise ValueError(f"{self.name}: no join input {stream!r} ({self.names})") from None

    def push(self, i: int, batch: Batch) -> None:
        """Buffer a delta batch of input ``i`` (timestamps must not go back)."""
        if len(batch) == 0:
            return
        ts = batch.ts
        if len(ts) > 1 and bool((np.diff(ts) < 0).any()):
            raise ValueError(
                f"{self.name}: input {self.names[i]} goes back in time (deltas must come in "
                "timestamp order per input)"
            )
        batch = self._check_input(i, batch)
        behind = int(np.searchsorted(ts, self._shown[i], side="left"))
        if behind:  # replayed after a crash, or late after an idle spell: not joined again
            self.dead_letters.append(
                (batch.slice(0, behind), f"{self.name}: deltas of {self.names[i]} at ts "
                 f"{int(ts[0])}..{int(ts[behind - 1])}, below the {self._shown[i]} it already "
                 "showed (replayed after a restart, or late)")
            )  # fmt: skip
            if behind == len(batch):
                return
            batch = batch.slice(behind, len(batch))
            ts = batch.ts
        self._buffers[i].append(batch)
        self._shown[i] = int(ts[-1])
        self.deltas_in[i] += len(batch)

    def _check_input(self, i: int, batch: Batch) -> Batch:
        """Row ids and join keys present; the first batch fixes the input's columns (a batch
        without some of them, which the query no longer reads, gets them as zeros:
        :mod:`.pinned_columns`). Returns the batch to store."""
        if ROW_ID not in batch.columns:
            raise ValueError(f"{self.name}: input {self.names[i]} has no {ROW_ID} column")
        cols = [c for c in batch.columns if c != ROW_ID]
        if self._columns[i] is None:
            for c in self.stores[i].key_columns:
                if c not in batch.columns:
                    raise ValueError(f"{self.name}: input {self.names[i]} has no column {c!r}")
                join_keys(batch.columns[c], f"{self.names[i]}.{c}")
            self._columns[i] = cols
            self.stores[i].declare_columns(batch)
        elif cols != self._columns[i]:
            pinned = [(c, self.stores[i].column_type(c)) for c in self._columns[i]]
            fitted = filled(batch, pinned, ROW_ID)
            if fitted is None:
                raise ValueError(
                    f"{self.name}: input {self.names[i]} changed its columns to {cols}"
                )
            return fitted
        return batch

    def advance(self, i: int, ts: int) -> None:
        """Input ``i`` promises no delta earlier than ``ts`` (a watermark for an idle input)."""
        self._shown[i] = max(self._shown[i], int(ts))

    def process(self, batch: Batch) -> list[Batch]:
        """Stage contract: the input is named by ``batch.meta['stream']``. An empty batch is
        that input's progress: ``meta['wm']`` (no later delta is older) or ``meta['idle']``
        (its sources went quiet: do not wait for it until it sends again). An input back from
        idle makes every input count again (:mod:`processors.stages.idleness`)."""
        i = self.input_index(batch.meta.get("stream", ""))
        was_idle = bool(self.idleness.idle[i])
        if self.idleness.saw(i, batch):
            log.info("%s: input %s is back: waiting for every input again", self.name,
                     self.names[i])  # fmt: skip
        elif self.idleness.idle[i] and not was_idle:
            log.info("%s: input %s is idle: not waited for until it sends again", self.name,
                     self.names[i])  # fmt: skip
        if len(batch):
            self.push(i, batch)
        elif "wm" in batch.meta:
            self.advance(i, int(batch.meta["wm"]))
        return [] if self.deferring else self.release()

    def flush(self) -> list[Batch]:
        """Release everything buffered (end of input)."""
        return self.release(final=True)

    # -- epochs -------------------------------------------------------------------------------
    def release(self, final: bool = False) -> list[Batch]:
        """Join every buffered delta that no input can still precede."""
        low = None if final else self._least_waited()
        parts = [self._take_released(i, low) for i in range(self.n)]
        if all(p is None for p in parts):
            return []
        results = self._join_epoch(parts, self._number(parts))
        return [self._assemble(results)] if results else []

    def _join_epoch(
        self, parts: list[Batch | None], gens: list[np.ndarray]
    ) -> list[tuple[np.ndarray, Batch]]:
        """One epoch's deltas into the windows and through the pipelines: (sequence numbers,
        results) pieces, and the windows left without this epoch's deletes."""
        born = [np.zeros(0, np.int64)] * self.n
        for i, part in enumerate(parts):
            if part is not None:
                inserts = np.flatnonzero(part.sign == INSERT)
                born[i] = self.stores[i].insert(whole_or_take(part, inserts), gens[i][inserts])
        live = [
            None if p is None else self._mark_deletes(i, p, gens[i]) for i, p in enumerate(parts)
        ]
        self.caches.begin_epoch(parts, gens)
        results = []
        for i in self.caches.pipelines(self.n):  # 0..n-1 without caches (any order is exact)
            part, marked = parts[i], live[i]
            if part is not None and marked is not None and len(rows := marked[0]):
                slots = marked[1]  # each delta's slot (for caches' updates)
                if self.caches.placed:
                    slots[part.sign == INSERT] = born[i]
                # slices of deltas, so that one call's intermediate results stay bounded
                for lo in range(0, len(rows), EPOCH_SLICE):
                    chunk = rows[lo : lo + EPOCH_SLICE]
                    out = self._pipeline(
                        i, whole_or_take(part, chunk), gens[i][chunk], slots[chunk]
                    )
                    if out is not None:
                        results.append(out)
        self.caches.end_epoch(self)
        for store in self.stores:
            store.remove_dying()
        return results

    def _take_released(self, i: int, low: int | None) -> Batch | None:
        if not self._buffers[i]:
            return None
        whole = Batch.concat(self._buffers[i])
        cut = len(whole) if low is None else int(np.searchsorted(whole.ts, low, side="left"))
        self._buffers[i] = [] if cut == len(whole) else [whole.slice(cut, len(whole))]
        return None if cut == 0 else whole.slice(0, cut)

    def _number(self, parts: list[Batch | None]) -> list[np.ndarray]:
        """Global sequence numbers in the order (ts, input, position)."""
        ts = [p.ts if p is not None else np.zeros(0, np.int64) for p in parts]
        sizes = [len(t) for t in ts]
        all_ts = np.concatenate(ts)
        # stable: ties stay in (input, position) order, as a lexsort of all three would
        order = np.argsort(all_ts, kind="stable")
        gen = np.empty(len(all_ts), np.int64)
        gen[order] = self._next_gen + np.arange(len(all_ts), dtype=np.int64)
        self._next_gen += len(all_ts)
        bounds = np.cumsum([0, *sizes])
        return [gen[bounds[i] : bounds[i + 1]] for i in range(self.n)]

    def _mark_deletes(self, i: int, part: Batch, gen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mark this epoch's deletes of input i: the rows that join and each row's slot (-1
        but for deletes). Deletes of unknown row ids go to the dead letters."""
        slots = np.full(len(part), -1, np.int64)
        deletes = np.flatnonzero(part.sign == DELETE)
        if len(deletes):
            rids = part.columns[ROW_ID][deletes]
            slots[deletes] = self.stores[i].mark_deleted(rids, gen[deletes])  # type: ignore[arg-type]
        unknown = deletes[slots[deletes] < 0]
        if len(unknown) == 0:
            return np.arange(len(part), dtype=np.int64), slots
        self.dead_letters.append(
            (part.take(unknown), f"{self.name}: delete of a tuple not in the window of "
             f"{self.names[i]} (unknown {ROW_ID})")
        )  # fmt: skip
        keep = np.ones(len(part), np.bool_)
        keep[unknown] = False
        return np.flatnonzero(keep), slots

    # -- one pipeline -------------------------------------------------------------------------
    def _values(
        self, pipe: Pipeline, delta: Batch, run: PipelineRun, e: int, col: str
    ) -> np.ndarray:
        """Join keys of column ``col`` of entity ``e`` (-1: the delta) for every result."""
        if e < 0:
            return join_keys(delta.columns[col], f"{self.names[pipe.root]}.{col}")[run.origin]
        return self.stores[pipe.inputs[e]].keys(col, run.bound[e])

    def _probe(
        self,
        pipe: Pipeline,
        delta: Batch,
        gen: np.ndarray,
        run: PipelineRun,
        e: int,
        bind: bool = False,
    ) -> None:
        """Bind entity e (join) or keep the results that have a match in it (existence)."""
        pcol, ecol = pipe.probe[e]
        keys = self._values(pipe, delta, run, pipe.parent[e], pcol)
        store = self.stores[pipe.inputs[e]]
        index = store.indexes[ecol]
        if pipe.existence_only[e] and not bind:
            run.keep(index.exists(store.born, store.died, keys, gen[run.origin]))
            return
        left, slots = index.expand(store.born, store.died, keys, gen[run.origin])
        run.keep(left)
        run.bound[e] = slots
        self._check_classes(pipe, delta, run, e)

    def _check_classes(self, pipe: Pipeline, delta: Batch, run: PipelineRun, e: int) -> None:
        """Equalities the tree edge does not imply (cyclic joins, Section 8.2; several columns
        of one input in a class)."""
        for x, xcol, col in pipe.checks(e, run.bound):
            if len(run.origin) == 0:
                return
            mine = self._values(pipe, delta, run, e, col)
            theirs = self._values(pipe, delta, run, x, xcol)
            run.keep(mine == theirs)

    def _self_consistent(self, pipe: Pipeline, delta: Batch) -> np.ndarray | None:
        """The deltas whose own columns agree within each class (None: all of them)."""
        if not pipe.root_checks:
            return None
        what = self.names[pipe.root]
        keep = np.ones(len(delta), np.bool_)
        for a, b in pipe.root_checks:
            keep &= join_keys(delta.columns[a], f"{what}.{a}") == join_keys(
                delta.columns[b], f"{what}.{b}"
            )
        return None if keep.all() else np.flatnonzero(keep)

    def _pipeline(
        self, i: int, delta: Batch, gen: np.ndarray, slots: np.ndarray
    ) -> tuple[np.ndarray, Batch] | None:
        """Join input i's deltas (in window ``slots``) with the other windows; (sequence
        numbers, results). Cache lookups and updates (:mod:`.mjoin_caches`) are hooked in."""
        pipe = self.pipelines[i]
        reopt = self.reopts[i]
        rows = self._self_consistent(pipe, delta)
        if rows is not None:
            if len(rows) == 0:
                return None
            delta, gen = delta.take(rows), gen[rows]
            slots = slots[rows]
        m = len(delta)
        run = PipelineRun(m)
        samples = profile_samples(self, m, reopt)
        dropped_at = np.full(len(samples), pipe.size, np.int64)
        costs: tuple[list[int], list[float], list[int]] = ([], [], [])
        cached = self.caches.involved(self, i)
        order, k, k_next = reopt.order.tolist(), 0, 0
        while k < pipe.size:
            if len(run.origin) == 0:
                dropped_at[dropped_at == pipe.size] = k
                break
            if cached:
                self.caches.feed(self, i, k, delta, gen, slots, run)
            if cached and (segment := self.caches.segment_at(i, k)) is not None:
                k_next = self.caches.lookup(self, segment, delta, gen, run)
            else:
                e, k_next = order[k], k + 1
                before_rows = run.alive_rows()
                probes = len(run.origin)
                self._probe(pipe, delta, gen, run, e)
                self.probes[i][e] += probes
                costs[0].append(e)
                costs[1].append(float(probes))
                costs[2].append(before_rows)
            if len(samples):  # origins stay sorted: a binary search per sample
                at = np.minimum(np.searchsorted(run.origin, samples), max(len(run.origin) - 1, 0))
                alive = (
                    run.origin[at] == samples if len(run.origin) else np.zeros(len(samples), bool)
                )
                dropped_at[(~alive) & (dropped_at == pipe.size)] = k
            k = k_next
        if cached:  # the pass's end (adaptive caching times the last operator)
            self.caches.feed(self, i, pipe.size, delta, gen, slots, run)
        self.costs[i].record_many(*costs)
        if len(samples):
            for change in profile_dropped(self, i, delta, gen, samples[dropped_at < pipe.size]):
                self._report(i, change)
        for e in range(pipe.size):  # output generation
            if e not in run.bound and len(run.origin):
                self.probes[i][e] += len(run.origin)
                self._probe(pipe, delta, gen, run, e, bind=True)
        if len(run.origin) == 0:
            return None
        return gen[run.origin], self._results(pipe, delta, run)

    def _results(self, pipe: Pipeline, delta: Batch, run: PipelineRun) -> Batch:
        """Each combination's columns (of ``result_columns`` only, if set)."""
        cols: dict[str, Column] = {}
        entity = {inp: e for e, inp in enumerate(pipe.inputs)}
        wanted = self.result_columns
        for j in range(self.n):
            for c in self._columns[j] or []:
                name = f"{self.names[j]}.{c}"
                if wanted is not None and name not in wanted:
                    continue
                if j != pipe.root:
                    cols[name] = self.stores[j].take(c, run.bound[entity[j]])
                elif isinstance(col := delta.columns[c], VarColumn):
                    cols[name] = col.take(run.origin)
                else:
                    cols[name] = col[run.origin]
        return Batch(cols, delta.sign[run.origin], delta.ts[run.origin])

    def _assemble(self, results: list[tuple[np.ndarray, Batch]]) -> Batch:
        """One batch of results in the order of the deltas that produced them."""
        gen = np.concatenate([g for g, _ in results])
        batch = Batch.concat([b for _, b in results]) if len(results) > 1 else results[0][1]
        if len(results) > 1:
            batch = batch.take(np.argsort(gen, kind="stable"))
        self.results_out += len(batch)
        return batch

    # -- reporting ----------------------------------------------------------------------------
    def _report(self, i: int, change: OrderChange) -> None:
        self.plan_changes.record(
            change, self._entity_names[i], self.clock_ms(), self.deltas_in[i], "deltas",
            {"pipeline": self.names[i], "at_delta": self.deltas_in[i]},
            what=f"join order of {self.names[i]}",
        )  # fmt: skip

    @property
    def changes_total(self) -> int:
        """Join order changes since the stage started, over all pipelines."""
        return self.plan_changes.total

    @property
    def recent_changes(self) -> list[dict[str, Any]]:
        """The latest join order changes, oldest first (as in ``stats()``)."""
        return self.plan_changes.entries()

    def use_caches(self, specs: Sequence[CacheSpec | tuple[Any, ...]]) -> None:
        """Run exactly these subresult caches from now on, each empty: ``(pipeline input,
        first position, last position[, buckets])`` in the pipeline's current order (or
        prefix-invariant ``Candidate``s of :mod:`processors.core.caching.candidates`);
        ValueError if one breaks the prefix invariant (A-Caching, :mod:`.mjoin_caches`)."""
        self.caches.force(self, specs)

    def orders(self) -> dict[str, list[str]]:
        """Each pipeline's current drop-probing order, by input name."""
        return {
            self.names[i]: [self.names[p.inputs[e]] for e in self.reopts[i].order.tolist()]
            for i, p in enumerate(self.pipelines)
        }

    def state(self) -> dict[str, Any]:
        """The state tree of :meth:`snapshot` (layout in :mod:`processors.stages.mjoin_state`)."""
        return mjoin_state(self)

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a decoded snapshot; ``SnapshotError`` if it does not fit this stage."""
        load_mjoin_state(self, state)
        self.caches.reset(self)  # caches are not in snapshots: they start empty

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        out, self.dead_letters = self.dead_letters, []
        return out

    def held_bytes(self) -> int:
        held = sum(s.nbytes for s in self.stores) + self.caches.nbytes
        return held + sum(self.waiting_bytes().values())

    def _least_waited(self) -> int | None:
        """The least time shown by the inputs waited for (not idle); None: none is."""
        waited = [s for s, quiet in zip(self._shown, self.idleness.idle, strict=True) if not quiet]
        return min(waited) if waited else None

    def waiting_bytes(self) -> dict[str, int]:
        """Deltas buffered until every input has shown their time, of the inputs that run
        ahead: those at the least time shown are the ones waited for, and never listed
        (pausing them would stop the join)."""
        low = self._least_waited()
        return {
            self.names[i]: sum(b.nbytes() for b in batches)
            for i, batches in enumerate(self._buffers)
            if batches and low is not None and self._shown[i] > low
        }

    def stats(self) -> dict[str, Any]:
        return mjoin_stats(self)
