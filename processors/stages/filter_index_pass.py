"""The filter stage's path for filters that all probe hash indexes (Section 9's): the main pass,
its drop profiling and the re-optimizer's part of a batch in one kernel call
(:mod:`processors.kernels.index_filters`), which times its parts with the CPU's cycle counter.

Two departures from the paper for A-Greedy+ (docs/adaptive-filters.md, sections 6 and 7):

- its a_i come from the profiling's probes, not the main pass's: at position k a filter runs
  on the rows the k filters before it left, scattered over the batch, and its time per row
  grows with k however cheap the filter is, so a_i measured in place keep late filters late
  (Section 4's a_i is a property of the filter). Profiling evaluates every sample at every
  filter on the same rows, so its times compare filters and not positions;
- a batch it does not profile (15 in 16 at p's floor) runs Optimal's main-pass kernel and then
  the drift test alone, without the profile window's arguments: with no sample the window and
  its view cannot change, so there is nothing to check.

On a drifting batch A-Greedy+ keeps the samples from the change row on (in the kernel); a
drifting batch it did not profile is profiled from the change row on in one call
(``profile_rows``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from processors.kernels.index_filters import (
    WATCH_COSTS_MOVED,
    profile_index_rows,
    run_index_filters,
    run_index_filters_absorbing,
    run_index_filters_adaptive,
    watch_drift,
)
from processors.kernels.intrinsics import ns_per_cycle

if TYPE_CHECKING:
    from processors.stages.filter_stage import FilterStage

PROFILE_RUN = 16  # profiled rows come in runs of neighbours (see kernels.profile_view)
#: profiling evaluations per filter that make one a_i sample: the first few samples at
#: CostEstimates' minimum (a small partition's a_i come soon), then more (each sample costs a
#: kernel call with a median per filter: once a profiled batch at p's floor was 0.4% of the
#: stage's time)
PROFILE_COST_EVALUATIONS = (64, 1024)
PROFILE_COST_FIRST_SAMPLES = 8


class IndexPass:
    """Buffers and kernel calls of one :class:`FilterStage` whose filters all probe indexes
    (``available`` False: no cycle counter here, the stage runs its per-position path)."""

    def __init__(self, stage: FilterStage) -> None:
        self.stage = stage
        n = stage.n
        self.indexes = [getattr(p, "index", None) for p in stage.predicates]
        self.probes = tuple(int(getattr(p, "probes", 1)) for p in stage.predicates)
        # cycles of profiling in the main-pass kernel call, the batch's number of samples, and
        # what the re-optimizer's part of the call returned (run_index_filters_absorbing)
        self.ticks = np.zeros(8, dtype=np.int64)
        self.evals = np.zeros(n, dtype=np.int64)
        self.main_cycles = np.zeros(n, dtype=np.int64)
        self.cost_buf = np.zeros(n, dtype=np.float64)
        self.profile_cycles = np.zeros(n, dtype=np.int64)  # per filter, this batch's profiling
        # A-Greedy+'s a_i from the profiling: cycles and evaluations not yet recorded
        self.pending_cycles = np.zeros(n, dtype=np.float64)
        self.pending_evals = np.zeros(n, dtype=np.float64)
        self.cost_samples = 0
        self.watch_parts: tuple[np.ndarray, ...] | None = None  # watch_drift's window arrays
        self.ns_per_cycle = ns_per_cycle()
        self.available = self.ns_per_cycle > 0.0

    def run(
        self, cols: tuple[np.ndarray, ...], size: int, measure: bool, profiling: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """The batch's main pass (``size`` rows of ``cols``, the probed columns by filter id),
        its profiling and the re-optimizer's part; the selections and counts per position."""
        st = self.stage
        reopt = st.reoptimizer
        adaptive = reopt.adaptive
        sels = st._sels
        sels[0, :size] = st._rows[:size]
        counts = np.zeros(st.n + 1, dtype=np.int64)
        evals, cyc, ticks = self.evals, self.main_cycles, self.ticks
        evals[:] = 0
        cyc[:] = 0
        p = reopt.profile_probability if profiling else 0.0
        before = None
        if p > 0.0:
            self.profile_cycles[:] = 0
            # A-Greedy+ takes its a_i from this batch's profiling (see the module's docstring)
            if adaptive is not None and st.costs.measured:
                before = st.profile_evaluations + st.profile_repeats
        # plain tuples in the field order of IndexFilters, MainPass and Sampling: numba types
        # them faster per call than the NamedTuples
        head = (
            self._filters(cols),
            (reopt.order, sels, size, counts, evals, cyc, st._hits, ticks),
            (
                p, PROFILE_RUN, st._rng_state, st._samples, st._dropped_at, st._bits, st._codes,
                reopt.mode, reopt.column, st.profile_evaluations, st.profile_repeats,
                self.profile_cycles,
            ),
        )  # fmt: skip
        scale = self.ns_per_cycle
        costs = st.costs.values()
        if adaptive is not None and profiling and p == 0.0:
            # A-Greedy+ between profiled batches: the drift test alone (a few hundred cycles,
            # left in tuple processing); an a_i that moved is checked by the stage, in Python
            if self.watch_parts is None:  # the re-optimizer's arrays are never replaced
                window = reopt.window
                parts = (window.state, reopt.patterns, reopt.hist, reopt.view, reopt.checkpoint)
                self.watch_parts = parts
            run_index_filters(*head)
            found = watch_drift(
                counts, reopt.order, ticks, adaptive.args, self.watch_parts, costs,
                reopt.checked_costs,
            )  # fmt: skip
            st._rate_done, st._drift_unprofiled = True, found >= 0
            adaptive.booked(found)
            if found == WATCH_COSTS_MOVED:
                st._recheck = True
        elif reopt.profiles and profiling:  # the samples go to the re-optimizer in the same call
            self._absorbing(head, costs)
        else:
            run_index_filters(*head)
        st._profile_ns += int(ticks[0] * scale)
        st.evaluations += evals
        if measure and adaptive is None:  # filters that ran on fewer than min_tuples: skipped
            start = time.perf_counter_ns()
            st.costs.record_all(np.multiply(cyc, scale, out=self.cost_buf), evals)
            st._cost_ns += time.perf_counter_ns() - start
        if before is not None and ticks[1] > 0:
            start = time.perf_counter_ns()
            self._profile_costs(st.profile_evaluations + st.profile_repeats - before)
            st._cost_ns += time.perf_counter_ns() - start
        st.last_evaluations = int(counts[: st.n].sum())
        return sels, counts

    def profile_rows(self, cols: tuple[np.ndarray, ...], rows: np.ndarray) -> int:
        """Profile tuples of ``rows`` (ascending) of the batch whose probed columns are
        ``cols``, each evaluated on every filter, into the stage's bit rows; how many (A-Greedy+
        on a drifting batch it did not profile: one call instead of two per filter)."""
        return int(profile_index_rows(self._filters(cols), rows, len(rows), self.stage._bits))

    def _filters(self, cols: tuple[np.ndarray, ...]) -> tuple[object, ...]:
        """The kernels' IndexFilters bundle for the batch's probed ``cols`` (the indexes' arrays
        are read at each batch: an index over a sliding window may reallocate them)."""
        indexes = self.indexes
        return (
            cols, tuple(ix.keys for ix in indexes), tuple(ix.mask for ix in indexes),
            tuple(ix.zero_slot for ix in indexes), self.probes,
        )  # fmt: skip

    def _absorbing(self, head: tuple[tuple[object, ...], ...], costs: np.ndarray) -> None:
        """The kernel call that also absorbs the samples and checks for (A-Greedy: corrects)
        a violation; A-Greedy+'s also tests drift and chooses the next p."""
        st = self.stage
        reopt = st.reoptimizer
        t0 = time.perf_counter_ns()
        window = reopt.kernel_window(st.clock_ms(), costs)
        t1 = time.perf_counter_ns()
        adaptive = reopt.adaptive
        if adaptive is None:
            run_index_filters_absorbing(*head, window)
        else:  # A-Greedy+: drift test and the next p in the same call
            run_index_filters_adaptive(*head, window, adaptive.args)
            adaptive.booked(int(adaptive.out[0]))
            st._rate_done = True
        t2 = time.perf_counter_ns()
        m, found, moved, size, window_cycles, check_cycles = self.ticks[2:].tolist()
        changes = reopt.absorbed(m, found, moved, size, window_cycles, check_cycles, costs)
        st.profile_tuples += m
        for change in changes:
            st._report(change)
        # the re-optimizer's part of the call is not tuple processing; nor is the Python
        # that sets it up, books it and reports changes (charged to violation handling)
        scale = self.ns_per_cycle
        window_ns, check_ns = int(window_cycles * scale), int(check_cycles * scale)
        glue_ns = (t1 - t0) + (time.perf_counter_ns() - t2)
        st._reopt_ns += window_ns + check_ns + glue_ns
        st.ns["view_update"] += window_ns
        st.ns["violations"] += check_ns + glue_ns

    def _profile_costs(self, evaluations: np.ndarray) -> None:
        """A-Greedy+: this batch's profiling cycles per filter join the pending ones, which
        become a_i samples once every filter has PROFILE_COST_EVALUATIONS evaluations."""
        self.pending_cycles += self.profile_cycles
        self.pending_evals += evaluations
        few, many = PROFILE_COST_EVALUATIONS
        if self.pending_evals.min() < (
            few if self.cost_samples < PROFILE_COST_FIRST_SAMPLES else many
        ):
            return
        self.cost_samples += 1
        ns = np.multiply(self.pending_cycles, self.ns_per_cycle, out=self.cost_buf)
        self.stage.costs.record_all(ns, self.pending_evals)
        self.pending_cycles[:] = 0.0
        self.pending_evals[:] = 0.0
