"""FilterStage: a conjunction of filters over batches, ordered adaptively (Babu et al. 2004).

Per batch: the executor runs the filters in the current order over a selection vector (each
filter sees only the rows every earlier filter passed); the profiler samples dropped tuples
with probability p and evaluates the filters its algorithm needs on them; the re-optimizer
absorbs those profile tuples and may change the order for the next batch. Every order change
is counted and kept in ``stats()`` (and logged: the first at once, then at most one line per
LOG_EVERY_S; see :mod:`processors.stages.plan_changes`), with a run-time breakdown like Table 2.

Filters that all probe hash indexes (Section 9's) run the whole batch, profiling and
A-Greedy's re-optimization in one kernel call (:mod:`processors.stages.filter_index_pass`),
which times its parts with the CPU's cycle counter; other filter kinds run one call per
position.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from processors.core.batch import Batch
from processors.core.ordering import profile as prof
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.profile import CostEstimates, extra_slice
from processors.core.ordering.reoptimizers import OrderChange, make_reoptimizer
from processors.core.plan import LogicalPlan
from processors.core.predicates import InIndex, Predicate, plan_predicates
from processors.kernels.drift import costs_moved
from processors.kernels.profiling import finish_profiles, mark_dropped, profile_step, sample_rows
from processors.stages.base import StageBase
from processors.stages.filter_index_pass import PROFILE_RUN, IndexPass
from processors.stages.plan_changes import PlanChanges

log = logging.getLogger(__name__)

BREAKDOWN = (
    "tuple_processing",
    "profile_tuple_creation",
    "profile_window",
    "view_update",
    "violations",
)
COST_SAMPLE_EVERY = 4  # time the filters on every 4th batch: a_i drifts slowly, clocks cost


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class FilterStage(StageBase):
    """Filters batches through adaptively ordered commutative filters; output keeps row order,
    so it is the same whatever order the filters run in. Its snapshot keeps only its kind: the
    filter order is re-learned from the data after a restore, which changes no result."""

    kind = "filter"

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
        # a timed kernel call's own cost, subtracted from per-position timings (the one-call
        # pass of index filters times each filter inside the kernel and needs none)
        self._call_ns = self._call_overhead_ns()
        self.costs = CostEstimates(self.n, self.config.cost_samples, self.config.costs)
        self.clock_ms = clock_ms
        # SplitMix64 counter for drop-profiling samples, seeded so that runs repeat
        self._rng_state = np.array([self.config.seed * 0x9E3779B97F4A7C15 % 2**64], np.uint64)
        self._profiled = 0  # profile tuples of the current batch, in self._bits
        self._profiled_from = 0  # the first of them to absorb (A-Greedy+ after a drift)
        self._drift_unprofiled = False  # A-Greedy+: this batch drifted and had no samples
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
        # whether this batch's kernel call chose the next p; whether it re-measured the a_i
        self._rate_done, self._recheck = True, False
        # all filters index probes: a batch in one kernel call (processors.stages.
        # filter_index_pass), where the CPU has a cycle counter
        self._index_filters = self.n > 0 and all(type(p) is InIndex for p in self.predicates)
        self._index_pass = IndexPass(self) if self._index_filters else None
        if self._index_pass is not None and not self._index_pass.available:
            self._index_filters = False
        self.profile_tuples = 0
        self.last_evaluations = 0  # filters evaluated for the last batch (main pass)
        self.ns = dict.fromkeys(BREAKDOWN, 0)
        self._cost_ns = 0  # time spent on a_i estimates during the current main pass
        self._reopt_ns = 0  # re-optimizer work inside the current main pass's kernel call
        # order changes: counted, the latest kept for stats(), logged sparingly
        self.plan_changes = PlanChanges(name, "filter order", log)

    @classmethod
    def from_plan(
        cls,
        plan: LogicalPlan,
        stream: str,
        config: OrderingConfig | None = None,
        name: str = "filter",
    ) -> FilterStage:
        """The stage for a stream's filters (ordering settings: the query's unless given)."""
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
        if self.batches == 1 and self.costs.measured:
            self._warm_up(batch)
        sels, counts = self._run(batch, size)
        passed = int(counts[self.n])
        if passed == size:
            out = [batch]
        elif passed == 0:
            out = []
        else:
            out = [batch.take(sels[self.n, :passed].copy())]
        t2 = time.perf_counter_ns()
        self.ns["tuple_processing"] += (t2 - t0) - self._profile_ns - self._cost_ns - self._reopt_ns
        self.ns["profile_tuple_creation"] += self._profile_ns
        self.ns["profile_window"] += self._cost_ns
        self._profile_ns = self._cost_ns = self._reopt_ns = 0
        changed = False
        if self._drift_unprofiled and self._refills_window(size):
            changed = self._reprofile(batch, size, sels, counts)
        elif self._profiled > self._profiled_from:  # (the index path absorbs in its kernel)
            changed = self._absorb(self._profiled, self._profiled_from)
        if self._recheck:
            changed = self._recheck_costs() or changed
        if not self._rate_done:  # A-Greedy+ (per-position path): the next batch's p
            t3 = time.perf_counter_ns()
            self.reoptimizer.advance_rate(changed)
            self.ns["violations"] += time.perf_counter_ns() - t3
        self.tuples_out += passed
        return out

    def _warm_up(self, batch: Batch) -> None:
        """Run every filter once on one row, untimed, before the first timed batch: a kernel's
        first call in a process loads or compiles it (milliseconds), and a first sample that
        large would be a filter's a_i for as long as the filter runs too late in the order to
        be timed again."""
        for predicate in self.predicates:
            predicate.select(batch, self._rows[:1], 1, self._passed)

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
        self._codes = np.zeros(cap, dtype=np.int64)  # the samples' bit patterns
        self._cand = np.empty(cap, dtype=np.int64)
        self._slot = np.empty(cap, dtype=np.int64)
        self._passed = np.empty(cap, dtype=np.int64)

    def _run(self, batch: Batch, size: int) -> tuple[np.ndarray, np.ndarray]:
        """The main pass: each filter narrows the selection left by the previous one.

        Drop profiling (Section 4.1.1) is interleaved with it: rows are sampled before the
        pass, and right after each position runs, the samples it dropped are noted and the
        samples dropped earlier evaluate its filter too, while its data is still in cache.
        When every filter is an index probe (and the probed columns are int64 arrays), all of
        this runs in one kernel call instead (``_run_index_filters``).
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
        self._rate_done = reopt.adaptive is None
        self._drift_unprofiled = False
        self._recheck = False  # (the index filters' kernel checks again when the a_i moved)
        if self._index_filters and self._index_pass is not None:
            cols = self._index_columns(batch)
            if cols is not None:
                return self._index_pass.run(cols, size, measure, profiling)
        self._recheck = measure and reopt.adaptive is not None
        p = reopt.profile_probability  # A-Greedy+ at its floor: 0 on most batches
        n_samples = n_alive = n_dead = before_prev = 0
        if profiling and p > 0:
            start = clock()
            n_samples = sample_rows(size, p, PROFILE_RUN, self._rng_state, self._samples)
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
                    timed[1].append(max(clock() - start - self._call_ns, 0.0))
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
        self._profiled = self._profiled_from = 0
        if n_samples:
            start = clock()
            self._profiled = finish_profiles(dropped_at, n_samples, order, bits)
            self._profile_ns += clock() - start
        if measure:  # the running averages a_i are part of profile-window maintenance
            start = clock()
            self.costs.record_many(*timed)
            self._cost_ns += clock() - start
        if reopt.adaptive is not None:  # A-Greedy+: drift in the pass counters (kernels.drift)
            start = clock()
            reopt.observe_pass(counts)
            if reopt.drifted and n_samples:
                self._profiled_from = self._before_change(sels, counts, size, n_samples)
            self._drift_unprofiled = reopt.drifted and not n_samples
            self._reopt_ns += clock() - start
            self.ns["violations"] += clock() - start
        self.last_evaluations = evaluated
        return sels, counts

    def _index_columns(self, batch: Batch) -> tuple[np.ndarray, ...] | None:
        """The probed columns by filter id when all are int64 arrays (else None: the batch
        takes the per-position path, whose kernels take any numeric column)."""
        cols = []
        for p in self.predicates:
            col = batch.columns.get(p.column)
            if not isinstance(col, np.ndarray) or col.dtype != np.int64 or col.ndim != 1:
                return None
            cols.append(col if col.flags.c_contiguous else np.ascontiguousarray(col))
        return tuple(cols)

    def _absorb(self, m: int, first: int = 0) -> bool:
        """Hand this batch's profile tuples ``first`` to ``m`` to the re-optimizer; returns
        whether it reordered."""
        reopt = self.reoptimizer
        self.profile_tuples += m - first
        t0 = time.perf_counter_ns()
        costs = self.costs.values()
        self.ns["profile_window"] += time.perf_counter_ns() - t0
        before = dict(reopt.ns)
        changes = reopt.absorb(self._bits[first:m], self.clock_ms(), costs)
        for key in ("profile_window", "view_update", "violations"):
            self.ns[key] += reopt.ns[key] - before[key]
        for change in changes:
            self._report(change)
        return bool(changes)

    def _refills_window(self, size: int) -> bool:
        """Whether a batch of ``size`` tuples profiled at p's maximum alone brings the profile
        tuples from which A-Greedy+ backs off (a backlog read as one batch)."""
        return size * self.config.p >= self.reoptimizer.adaptive.enough  # type: ignore[union-attr]

    def _before_change(
        self, sels: np.ndarray, counts: np.ndarray, size: int, n_samples: int
    ) -> int:
        """A-Greedy+ on a batch whose pass counters drifted (per-position path): how many of
        its profile tuples come from rows before the change row (``prof.change_row``). They
        describe the old statistics and are left out; the rest are the emptied window's first
        profile tuples, as in the index filters' kernel."""
        found = int(self.reoptimizer.adaptive.out[0])  # type: ignore[union-attr]
        first = prof.change_row(sels, counts, found, size)
        before = int(np.searchsorted(self._samples[:n_samples], first))
        return int(np.count_nonzero(self._dropped_at[:before] < self.n))

    def _reprofile(self, batch: Batch, size: int, sels: np.ndarray, counts: np.ndarray) -> bool:
        """A-Greedy+ on a batch whose counters drifted and that it did not profile (at p's
        floor, most batches), when the batch alone can refill the emptied window: its rows
        from the change on are profiled at the maximum p, so that the order can change before
        the next batch (a backlog read as one batch may be the last for a while). A smaller
        batch leaves it to the next ones, profiled at the maximum p: this call's fixed costs
        (~130 µs with its change row and absorption) were 3-4% of the stage's time at Fig.
        19's 20,000-tuple period, where most drifts are found between profiled batches."""
        start = time.perf_counter_ns()
        first = prof.change_row(sels, counts, int(self.reoptimizer.adaptive.out[0]), size)  # type: ignore[union-attr]
        k = sample_rows(size - first, self.config.p, PROFILE_RUN, self._rng_state, self._samples)
        rows = self._samples[:k] + first
        cols = self._index_columns(batch) if self._index_filters else None
        if cols is not None and self._index_pass is not None:
            m = self._index_pass.profile_rows(cols, rows)
        else:
            m = prof.profile_rows(self.predicates, batch, rows, self._bits)
        self.ns["profile_tuple_creation"] += time.perf_counter_ns() - start
        return self._absorb(m)

    def _recheck_costs(self) -> bool:
        """A-Greedy+ after a batch that re-measured the a_i: if one moved by 5% since the last
        check, detect again (at p's floor the view rarely changed). Returns whether it reordered."""
        reopt = self.reoptimizer
        t0 = time.perf_counter_ns()
        costs = self.costs.values()
        changes = reopt.reoptimize(costs) if costs_moved(costs, reopt.checked_costs) else []
        for change in changes:
            self._report(change)
        if changes and self._rate_done and reopt.adaptive is not None:  # p back to its maximum
            reopt.adaptive.advance(True, len(reopt.window))
        self.ns["violations"] += time.perf_counter_ns() - t0
        return bool(changes)

    def _report(self, change: OrderChange) -> None:
        """Count, keep (formatted with filter names when stats() asks) and log the change."""
        self.plan_changes.record(
            change, [p.name for p in self.predicates], self.clock_ms(), self.tuples_in,
            "tuples", {"at_tuple": self.tuples_in},
        )  # fmt: skip

    @property
    def mean_profile_probability(self) -> float:
        """The drop-profiling probability in effect (A-Greedy+'s adapts; on average over
        batches when at its floor, where it profiles one batch in several)."""
        adaptive = self.reoptimizer.adaptive
        return self.config.p if adaptive is None else adaptive.mean_p

    @property
    def changes_total(self) -> int:
        """Order changes since the stage started."""
        return self.plan_changes.total

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
        adaptive = self.reoptimizer.adaptive
        costs = self.costs.values()
        return {
            "kind": "filter",
            "algorithm": self.config.algorithm,
            "ordering": self.config.to_json(),
            "order": self.order_names,
            "changes_total": self.changes_total,
            "recent_changes": self.plan_changes.entries(),
            "tuples_in": self.tuples_in,
            "tuples_out": self.tuples_out,
            "batches": self.batches,
            "evaluations": {names[f]: int(c) for f, c in enumerate(self.evaluations)},
            "evaluations_per_tuple": (
                float(self.evaluations.sum()) / self.tuples_in if self.tuples_in else 0.0
            ),
            "profile_tuples": self.profile_tuples,
            "profile_probability": self.mean_profile_probability,
            "drifts": 0 if adaptive is None else adaptive.drifts,
            "drifts_unheeded": 0 if adaptive is None else adaptive.drifts_unheeded,
            "profile_window": len(self.reoptimizer.window),
            "cost_ns": {names[f]: float(costs[f]) for f in range(self.n)},
            "selectivity": _rates(names, self.reoptimizer.window.pass_rates()),
            "breakdown_ns": dict(self.ns),
            "breakdown_percent": self.breakdown(),
        }


def _rates(names: list[str], rates: np.ndarray | None) -> dict[str, float]:
    return {} if rates is None else {n: float(r) for n, r in zip(names, rates, strict=True)}
