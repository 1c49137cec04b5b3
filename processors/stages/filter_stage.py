"""FilterStage: a conjunction of filters over batches, ordered adaptively (Babu et al. 2004).

Per batch: the executor runs the filters in the current order over a selection vector (each
filter sees only the rows every earlier filter passed); the profiler samples dropped tuples
with probability p and evaluates the filters its algorithm needs on them; the re-optimizer
absorbs those profile tuples and may change the order for the next batch. Every order change
is logged, counted and kept in ``stats()``, with a run-time breakdown like Table 2.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from processors.core.batch import Batch
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.profile import CostEstimates
from processors.core.ordering.reoptimizers import OrderChange, make_reoptimizer
from processors.core.plan import LogicalPlan
from processors.core.predicates import InIndex, Predicate, plan_predicates
from processors.kernels.profile_view import (
    DIAGONAL_AND_COLUMN,
    TWO_DIAGONALS,
    finish_profiles,
    mark_dropped,
    ns_per_cycle,
    profile_step,
    sample_rows,
    start_profiles,
)

log = logging.getLogger(__name__)

BREAKDOWN = (
    "tuple_processing",
    "profile_tuple_creation",
    "profile_window",
    "view_update",
    "violations",
)
RECENT_CHANGES = 20
PROFILE_RUN = 16  # profiled rows come in runs of neighbours (see kernels.profile_view)
COST_SAMPLE_EVERY = 4  # time the filters on every 4th batch: a_i drifts slowly, clocks cost


def extra_slice(mode: int, k: int, j: int, prev_start: int, n_dead: int) -> tuple[int, int]:
    """Which samples dropped before position ``k`` evaluate it too, as a slice of the dead
    list (samples in the order they were dropped; ``prev_start`` is where position k-1's
    began): all of them for A-Greedy and Independent, those dropped at k-1 for LocalSwaps,
    all of them at the profiled position only for Sweep."""
    if k == 0:
        return 0, 0
    if mode == TWO_DIAGONALS:
        return prev_start, n_dead
    if mode == DIAGONAL_AND_COLUMN and k != j:
        return 0, 0
    return 0, n_dead


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class FilterStage:
    """Filters batches through adaptively ordered commutative filters; output keeps row order,
    so it is the same whatever order the filters run in."""

    def __init__(
        self,
        predicates: Sequence[Predicate],
        config: OrderingConfig | None = None,
        name: str = "filter",
        initial_order: Sequence[int] | None = None,
        clock_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.name = name
        self.predicates = list(predicates)
        self.n = len(self.predicates)
        self.config = config or OrderingConfig()
        if self.config.costs is not None and len(self.config.costs) != self.n:
            raise ValueError(
                f"ordering costs has {len(self.config.costs)} entries for {self.n} filters"
            )
        order = None if initial_order is None else list(initial_order)
        self.reoptimizer = make_reoptimizer(self.n, self.config, order)
        self.costs = CostEstimates(
            self.n, self.config.cost_samples, self.config.costs, self._call_overhead_ns()
        )
        self.clock_ms = clock_ms
        # SplitMix64 counter for drop-profiling samples, seeded so that runs repeat
        self._rng_state = np.array([self.config.seed * 0x9E3779B97F4A7C15 % 2**64], np.uint64)
        self._profiled = 0  # profile tuples of the current batch, in self._bits
        self._profile_ns = 0
        self._sels = np.empty((self.n + 1, 0), dtype=np.int64)
        self._rows = np.empty(0, dtype=np.int64)
        self.tuples_in = 0
        self.tuples_out = 0
        self.batches = 0
        self.evaluations = np.zeros(self.n, dtype=np.int64)  # main pass, per filter id
        self.profile_evaluations = np.zeros(self.n, dtype=np.int64)
        # profiling evaluations that repeat the main pass's (up to the drop position), made
        # by the one-call profiling of index filters instead of looking the drops up
        self.profile_repeats = np.zeros(self.n, dtype=np.int64)
        self._hits = np.zeros(1, dtype=np.int64)
        # all filters index probes: profile a batch in one kernel call (see _profile_indexes)
        self._index_filters = self.n > 0 and all(type(p) is InIndex for p in self.predicates)
        self._ticks = np.zeros(1, dtype=np.int64)  # cycles of profiling inside main-pass calls
        self._ns_per_cycle = ns_per_cycle() if self._index_filters else 0.0
        if self._index_filters and not self._ns_per_cycle:  # no cycle counter: per-position path
            self._index_filters = False
        self._samples_pending = 0  # samples of the last batch (index filters) to absorb
        self.profile_tuples = 0
        self.last_evaluations = 0  # filters evaluated for the last batch (main pass)
        self.ns = dict.fromkeys(BREAKDOWN, 0)
        self._cost_ns = 0  # time spent on a_i estimates during the current main pass
        self.changes_total = 0
        self.recent_changes: deque[dict[str, Any]] = deque(maxlen=RECENT_CHANGES)

    @classmethod
    def from_plan(
        cls,
        plan: LogicalPlan,
        stream: str,
        config: OrderingConfig | None = None,
        name: str = "filter",
    ) -> FilterStage:
        """The stage for a stream's filters; the ordering settings come from the query unless
        given."""
        if config is None:
            config = getattr(plan, "ordering", None)
        return cls(plan_predicates(plan, stream), config, name)

    @staticmethod
    def _call_overhead_ns() -> float:
        """What timing an empty kernel call costs, so that it is not charged to filters."""
        from processors.kernels.select import select_between

        col = np.zeros(1)
        sel = np.zeros(1, dtype=np.int64)
        samples = []
        for _ in range(50):
            t0 = time.perf_counter_ns()
            select_between(col, 0.0, 1.0, sel, 0, sel)
            samples.append(time.perf_counter_ns() - t0)
        return float(np.median(samples))

    # -- the plan ---------------------------------------------------------------------------
    @property
    def order(self) -> list[int]:
        return [int(f) for f in self.reoptimizer.order]

    @property
    def order_names(self) -> list[str]:
        return [self.predicates[f].name for f in self.reoptimizer.order]

    # -- processing -------------------------------------------------------------------------
    def process(self, batch: Batch) -> list[Batch]:
        size = len(batch)
        self.batches += 1
        self.tuples_in += size
        if size == 0:
            return []
        if self.n == 0:
            self.tuples_out += size
            return [batch]
        t0 = time.perf_counter_ns()
        self._ensure_buffers(size)
        sels, counts = self._run(batch, size)
        passed = int(counts[self.n])
        if passed == size:
            out = [batch]
        elif passed == 0:
            out = []
        else:
            out = [batch.take(sels[self.n, :passed].copy())]
        t2 = time.perf_counter_ns()
        self.ns["tuple_processing"] += (t2 - t0) - self._profile_ns - self._cost_ns
        self.ns["profile_tuple_creation"] += self._profile_ns
        self.ns["profile_window"] += self._cost_ns
        self._profile_ns = self._cost_ns = 0
        if self._samples_pending:
            self._absorb_samples(self._samples_pending)
            self._samples_pending = 0
        elif self._profiled:
            self._absorb(self._profiled)
        self.tuples_out += passed
        return out

    def _ensure_buffers(self, size: int) -> None:
        if self._sels.shape[1] >= size:
            return
        cap = max(size, 2 * self._sels.shape[1])
        self._sels = np.empty((self.n + 1, cap), np.int64)
        self._rows = np.arange(cap, dtype=np.int64)
        self._samples = np.empty(cap, dtype=np.int64)
        self._dropped_at = np.empty(cap, dtype=np.int64)
        self._alive = np.empty(cap, dtype=np.int64)
        self._bits = np.zeros((cap, self.n), dtype=np.uint8)
        self._cand = np.empty(cap, dtype=np.int64)
        self._slot = np.empty(cap, dtype=np.int64)
        self._passed = np.empty(cap, dtype=np.int64)

    def _run(self, batch: Batch, size: int) -> tuple[np.ndarray, np.ndarray]:
        """The main pass: each filter narrows the selection left by the previous one.

        Drop profiling (Section 4.1.1) is interleaved with it: rows are sampled before the
        pass, and right after each position runs, the samples it dropped are noted and the
        samples dropped earlier evaluate its filter too, while its data is still in cache.
        """
        reopt = self.reoptimizer
        sels = self._sels
        sels[0, :size] = self._rows[:size]
        counts = np.zeros(self.n + 1, dtype=np.int64)
        counts[0] = size
        clock = time.perf_counter_ns
        measure = self.costs.measured and self.batches % COST_SAMPLE_EVERY == 1
        order = reopt.order
        profiling = reopt.profiles and self.config.p > 0
        if profiling and self._index_filters:
            return self._run_index_filters(batch, size, measure)
        n_samples = n_alive = n_dead = before_prev = 0
        if profiling:
            start = clock()
            n_samples = sample_rows(
                size, self.config.p, PROFILE_RUN, self._rng_state, self._samples
            )
            samples = self._samples[:n_samples]
            dropped_at = self._dropped_at[:n_samples]
            dropped_at[:] = self.n
            bits = self._bits[:n_samples]
            bits[:] = 0
            self._alive[:n_samples] = self._rows[:n_samples]
            n_alive = n_samples
            self._profile_ns += clock() - start
        timed: tuple[list[int], list[float], list[int]] = ([], [], [])
        m = size
        evaluated = 0
        for k in range(self.n):
            f = int(order[k])
            predicate = self.predicates[f]
            if m:
                start = clock()
                m_next = predicate.select(batch, sels[k], m, sels[k + 1])
                if measure:
                    timed[0].append(f)
                    timed[1].append(clock() - start)
                    timed[2].append(m)
                self.evaluations[f] += m
                evaluated += m
                counts[k + 1] = m_next
                m = m_next
            if n_samples:
                start = clock()
                # the samples dropped before k that the variant evaluates at k: a dead-list slice
                lo, hi = extra_slice(reopt.mode, k, reopt.column, before_prev, n_dead)
                before_prev = n_dead
                n_alive, n_dead = profile_step(
                    k, sels[k + 1], m, samples, dropped_at, self._alive, n_alive,
                    self._cand, self._slot, n_dead,
                )  # fmt: skip
                if hi > lo:
                    cand, slot = self._cand[lo:hi], self._slot[lo:hi]
                    kept = predicate.select(batch, cand, hi - lo, self._passed)
                    mark_dropped(cand, self._passed, kept, slot, bits, f)
                    self.profile_evaluations[f] += hi - lo
                self._profile_ns += clock() - start
            elif not m:
                break
        self._profiled = 0
        if n_samples:
            start = clock()
            self._profiled = finish_profiles(dropped_at, n_samples, order, bits)
            self._profile_ns += clock() - start
        if measure:  # the running averages a_i are part of profile-window maintenance
            start = clock()
            self.costs.record_many(*timed)
            self._cost_ns += clock() - start
        self.last_evaluations = evaluated
        return sels, counts

    def _run_index_filters(
        self, batch: Batch, size: int, measure: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """The main pass with drop profiling when every filter is an index probe: each
        position's kernel call profiles the samples right after its selection (see
        ``kernels.profile_view.select_in_index_profiled``), so that profiling adds no call per
        position. The kernel counts the cycles of its profiling part, which are charged to
        profile-tuple creation and not to the call's filter (nor to tuple processing)."""
        reopt = self.reoptimizer
        order = reopt.order
        mode, column = reopt.mode, reopt.column
        sels = self._sels
        sels[0, :size] = self._rows[:size]
        counts = np.zeros(self.n + 1, dtype=np.int64)
        counts[0] = size
        clock = time.perf_counter_ns
        start = clock()
        n_samples = start_profiles(
            size, self.config.p, PROFILE_RUN, self._rng_state, self._samples,
            self._dropped_at, self._bits,
        )  # fmt: skip
        self._profile_ns += clock() - start
        samples, dropped_at, bits = self._samples, self._dropped_at, self._bits
        extras, repeats = self.profile_evaluations, self.profile_repeats
        ticks = self._ticks
        ticks[0] = 0
        scale = self._ns_per_cycle
        timed: tuple[list[int], list[float], list[int]] = ([], [], [])
        m = size
        evaluated = 0
        for k in range(self.n):
            f = int(order[k])
            predicate = self.predicates[f]
            if measure:
                start, before = clock(), int(ticks[0])
            m_next = predicate.select_profiled(  # type: ignore[attr-defined]
                batch, sels[k], m, sels[k + 1],
                k, f, samples, n_samples, dropped_at, bits, mode, column, extras, repeats,
                ticks,
            )  # fmt: skip
            if measure:
                spent = clock() - start - (int(ticks[0]) - before) * scale
                timed[0].append(f)
                timed[1].append(spent)
                timed[2].append(m)
            self.evaluations[f] += m
            evaluated += m
            counts[k + 1] = m_next
            m = m_next
        self._profile_ns += int(ticks[0] * scale)
        self._samples_pending = n_samples
        if measure:
            start = clock()
            self.costs.record_many(*timed)
            self._cost_ns += clock() - start
        self.last_evaluations = evaluated
        return sels, counts

    def _absorb_samples(self, n_samples: int) -> None:
        """Hand this batch's samples to the re-optimizer in one call (index filters)."""
        reopt = self.reoptimizer
        t0 = time.perf_counter_ns()
        costs = self.costs.values()
        self.ns["profile_window"] += time.perf_counter_ns() - t0
        ns = reopt.ns
        view_ns, violations_ns = ns["view_update"], ns["violations"]
        m, changes = reopt.absorb_samples(
            self._bits, self._dropped_at, n_samples, self.clock_ms(), costs
        )
        self.profile_tuples += m
        self.ns["view_update"] += ns["view_update"] - view_ns
        self.ns["violations"] += ns["violations"] - violations_ns
        for change in changes:
            self._report(change)

    def _absorb(self, m: int) -> None:
        """Hand this batch's profile tuples to the re-optimizer, which may reorder."""
        reopt = self.reoptimizer
        self.profile_tuples += m
        t0 = time.perf_counter_ns()
        costs = self.costs.values()
        self.ns["profile_window"] += time.perf_counter_ns() - t0
        before = dict(reopt.ns)
        changes = reopt.absorb(self._bits[:m], self.clock_ms(), costs)
        for key in ("profile_window", "view_update", "violations"):
            self.ns[key] += reopt.ns[key] - before[key]
        for change in changes:
            self._report(change)

    def _report(self, change: OrderChange) -> None:
        names = [p.name for p in self.predicates]
        entry = {
            "at_tuple": self.tuples_in,
            "time_ms": self.clock_ms(),
            "from": [names[f] for f in change.before],
            "to": [names[f] for f in change.after],
            "position": change.position,
            "reason": change.reason,
        }
        self.changes_total += 1
        self.recent_changes.append(entry)
        log.info(
            "%s: filter order changed after %d tuples (%s): %s -> %s",
            self.name, self.tuples_in, change.reason, entry["from"], entry["to"],
        )

    # -- reporting --------------------------------------------------------------------------
    def breakdown(self) -> dict[str, float]:
        """Share of stage time per task of Section 4.4 (percent), as in Table 2.

        ``profile_window`` is the maintenance of the cost estimates a_i; inserting into and
        expiring from the window itself happens in the same kernel pass as the view update and
        is counted under ``view_update``.
        """
        total = sum(self.ns.values())
        return {k: (100.0 * v / total if total else 0.0) for k, v in self.ns.items()}

    @property
    def overhead_fraction(self) -> float:
        """Time spent adapting (everything but tuple processing) over all stage time."""
        total = sum(self.ns.values())
        return (total - self.ns["tuple_processing"]) / total if total else 0.0

    def stats(self) -> dict[str, Any]:
        names = [p.name for p in self.predicates]
        costs = self.costs.values()
        return {
            "kind": "filter",
            "algorithm": self.config.algorithm,
            "ordering": self.config.to_json(),
            "order": self.order_names,
            "changes_total": self.changes_total,
            "recent_changes": list(self.recent_changes),
            "tuples_in": self.tuples_in,
            "tuples_out": self.tuples_out,
            "batches": self.batches,
            "evaluations": {names[f]: int(c) for f, c in enumerate(self.evaluations)},
            "evaluations_per_tuple": (
                float(self.evaluations.sum()) / self.tuples_in if self.tuples_in else 0.0
            ),
            "profile_tuples": self.profile_tuples,
            "profile_window": len(self.reoptimizer.window),
            "cost_ns": {names[f]: float(costs[f]) for f in range(self.n)},
            "breakdown_ns": dict(self.ns),
            "breakdown_percent": self.breakdown(),
        }
