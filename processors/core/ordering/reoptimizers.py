"""Re-optimizers: keep a filter order that satisfies an invariant over the profile window.

One class per algorithm of Babu et al.: A-Greedy keeps the Greedy Invariant (Definition 4.1)
with violation detection (Fig. 4) and correction (Fig. 5), exactly as the paper does
(``agreedy_exact``) or with the departures of A-Greedy+ (``agreedy``, the default; see
docs/adaptive-filters.md); Sweep (Section 5), Independent (Section 6) and LocalSwaps (Section 7)
keep weaker invariants from fewer statistics; Fixed never reorders (the baseline). All share the
profile window and the matrix view; each says which view entries it keeps and which extra
filters a profiled tuple must be evaluated on.

Positions are 0-based here (the paper's are 1-based). ``order[c]`` is the filter id at position
``c``. Detection runs once per batch of profile tuples rather than once per tuple: the order
only matters to the next batch, and the view is exactly the counts of the current window for
the current order either way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from processors.core.ordering.adaptive_rate import AdaptiveRate
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.profile import ProfileWindow
from processors.kernels.drift import new_checkpoint, resort_due, resort_restart
from processors.kernels.intrinsics import ns_per_cycle
from processors.kernels.profile_view import (
    DIAGONAL_AND_COLUMN,
    FIRST_ROW,
    FULL,
    PATTERN_MAX_N,
    TWO_DIAGONALS,
    find_violation,
    greedy_correct,
    hist_rebuild,
    view_from_hist,
    view_from_patterns,
    view_row,
    window_absorb,
)

NO_PATTERNS = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class OrderChange:
    """One plan change: the order before and after, and why."""

    before: tuple[int, ...]
    after: tuple[int, ...]
    position: int  # the (0-based) position whose invariant was violated
    reason: str


class Reoptimizer:
    """The shared machinery; subclasses define the invariant, its check and its correction."""

    name: ClassVar[str] = "base"
    mode: ClassVar[int] = FULL
    profiles: ClassVar[bool] = True  # False: no drop profiling at all
    # True: absorb_samples corrects a violation inside its kernel call (Fig. 5 for A-Greedy)
    kernel_corrects: ClassVar[bool] = False
    # > 0: a violation must be that many standard deviations significant (A-Greedy+ only)
    z: float = 0.0
    # A-Greedy+'s adaptive profiling rate (None: profile at the configured p throughout)
    adaptive: AdaptiveRate | None = None
    drifted = False  # A-Greedy+: this batch's pass counters drifted (per-position path)

    def __init__(
        self,
        n_filters: int,
        config: OrderingConfig,
        order: list[int] | None = None,
        parents: list[int] | None = None,
    ):
        self.n = n_filters
        self.config = config
        # parents[f]: a filter that must run before f (a join path's first hops, Section 8.2)
        self.parents = (
            np.full(n_filters, -1, np.int64)
            if parents is None
            else np.array(parents, dtype=np.int64)
        )
        self.alpha = config.alpha
        self.order = (
            np.arange(n_filters, dtype=np.int64)
            if order is None
            else np.array(order, dtype=np.int64)
        )
        if sorted(self.order.tolist()) != list(range(n_filters)):
            raise ValueError(f"order {list(self.order)} is not a permutation of 0..{n_filters - 1}")
        if not self.respects_precedence(self.order):
            raise ValueError(f"order {list(self.order)} puts a filter before its parent")
        self.window = ProfileWindow(
            n_filters, config.window, config.window_ms, patterned=n_filters <= PATTERN_MAX_N
        )
        self.view = np.zeros((n_filters, n_filters), dtype=np.int64)
        # profile tuples by (drop position, dropping position): the view is its running sums
        self.hist = np.zeros((n_filters, n_filters), dtype=np.int64)
        # or, for few filters, live profile tuples by bit pattern (kernels.profile_view)
        self.patterns = (
            np.zeros(1 << n_filters, dtype=np.int64) if n_filters <= PATTERN_MAX_N else NO_PATTERNS
        )
        self.ns = {"profile_window": 0, "view_update": 0, "violations": 0}
        self._ns_per_cycle = ns_per_cycle()
        # the base detection (find_violation) runs inside absorb_samples' kernel call
        self._kernel_checks = n_filters >= 2 and type(self).violation is Reoptimizer.violation
        self._no_after_check = type(self).after_check is Reoptimizer.after_check
        self._before = np.zeros(n_filters, dtype=np.int64)  # the order a kernel correction left
        self._now = np.zeros(1, dtype=np.int64)  # the batch's clock (ms) for kernel_window
        self._window_args: tuple[object, ...] | None = None
        # A-Greedy+'s re-sort points as its window fills (kernels.drift.resort_due); never
        self.checkpoint = np.array([-1, 0, 0], dtype=np.int64)
        self.checks = 0
        self.violations = 0
        self.checked_costs = np.zeros(n_filters)  # the a_i of the last check (A-Greedy+)

    def respects_precedence(self, order: np.ndarray) -> bool:
        seen: set[int] = set()
        for f in order:
            p = int(self.parents[f])
            if p >= 0 and p not in seen:
                return False
            seen.add(int(f))
        return True

    # -- what profiling must evaluate -------------------------------------------------------
    @property
    def profile_probability(self) -> float:
        """The drop-profiling probability for the next batch (Section 4.1.1's p)."""
        return self.adaptive.p if self.adaptive is not None else self.config.p

    def observe_pass(self, counts: np.ndarray) -> None:
        """A batch's main-pass counters (``counts[k]``: tuples that reached position k), before
        its profile tuples are absorbed: A-Greedy+ tests them for drift (per-position path)."""
        if self.adaptive is not None:
            state, order = self.window.state, self.order
            found = self.adaptive.observe(counts, order, state, self.patterns, self.hist, self.view)
            if found >= 0:
                resort_restart(self.checkpoint)
            self.drifted = found >= 0

    def advance_rate(self, changed: bool) -> None:
        """After a batch (per-position path): A-Greedy+ chooses the next batch's p."""
        if self.adaptive is not None:
            self.adaptive.advance(changed or self.drifted, len(self.window))
            self.drifted = False

    @property
    def column(self) -> int:
        """The profiled position (Sweep); -1 when every position is profiled."""
        return -1

    # -- maintenance ------------------------------------------------------------------------
    def absorb(
        self, bits: np.ndarray, now_ms: int, costs: np.ndarray, reoptimize: bool = True
    ) -> list[OrderChange]:
        """Insert new profile tuples (rows of filter-id bits), expire old ones, re-optimize."""
        if not self.profiles:
            return []
        t0 = time.perf_counter_ns()
        window = self.window
        window_absorb(
            window.ring, window.ts, window.state, np.ascontiguousarray(bits, dtype=np.uint8),
            len(bits), now_ms, window.window_ms or 0, self.hist, self.view, self.order,
            self.mode, self.column, self.patterns, window.codes,
        )  # fmt: skip
        window.inserted_total += len(bits)
        self.ns["view_update"] += time.perf_counter_ns() - t0
        return self.reoptimize(costs) if reoptimize else []

    def reoptimize(self, costs: np.ndarray) -> list[OrderChange]:
        """Detect a violation of the invariant (with thrash avoidance, eq. 4) and correct it."""
        t0 = time.perf_counter_ns()
        position = None
        if len(self.window) >= self.config.min_profile_tuples:
            self.checks += 1
            self.checked_costs[:] = costs
            position = self.violation(costs)
        changes = self._correct_at(position, costs)
        self.ns["violations"] += time.perf_counter_ns() - t0
        return changes

    def kernel_window(self, now_ms: int, costs: np.ndarray) -> tuple[object, ...]:
        """The arguments of ``kernels.profiling.absorb_samples`` after the order, mode and
        profiled position: the filter stage passes them to the kernel call that profiles its
        batch, which then also absorbs the samples and detects (A-Greedy: corrects) a
        violation; ``absorbed`` does the rest with what that call returns. The tuple is built
        once (its arrays are updated in place; the time goes in ``now``)."""
        self._now[0] = now_ms
        if self._window_args is None or self._window_args[10] is not costs:
            window = self.window
            minimum = self.config.min_profile_tuples if self._kernel_checks else -1
            self._window_args = (
                window.ring, window.ts, window.state, self._now, window.window_ms or 0,
                self.hist, self.view, self.patterns, window.codes, minimum, costs, self.alpha,
                self.parents, self.kernel_corrects, self._before, self.z, self.checkpoint,
                self.checked_costs,
            )  # fmt: skip
        return self._window_args

    def absorbed(
        self,
        m: int,
        found: int,
        moved: int,
        size: int,
        window_cycles: int,
        check_cycles: int,
        costs: np.ndarray,
    ) -> list[OrderChange]:
        """Book what a kernel call with ``kernel_window``'s arguments did: ``m`` profile
        tuples inserted (the window now holds ``size``), ``found`` the position of a violation
        (-1: none; corrected inside the call for A-Greedy, where ``moved`` filters moved), and
        the cycles its parts took. Corrects in Python what the kernel did not."""
        self.window.inserted_total += m
        scale = self._ns_per_cycle
        ns = self.ns
        ns["view_update"] += int(window_cycles * scale)
        ns["violations"] += int(check_cycles * scale)
        if size < self.config.min_profile_tuples:
            return self.after_check()
        self.checks += 1
        if found < 0 and self._no_after_check:  # the common case
            return []
        t0 = time.perf_counter_ns()
        changes: list[OrderChange] = []
        if found >= 0 and self.kernel_corrects:  # corrected inside the kernel
            self.violations += 1
            if moved:
                changes.append(self._change(int(found)))
            changes.extend(self.after_check())
        else:
            position = int(found) if self._kernel_checks else self.violation(costs)
            if position is not None and position < 0:
                position = None
            changes = self._correct_at(position, costs)
        ns["violations"] += time.perf_counter_ns() - t0
        return changes

    def _change(self, position: int) -> OrderChange:
        """The change a correction inside ``absorb_samples`` made (A-Greedy's Fig. 5): kept
        short, as it may come once a batch near a tie (the orders say what moved)."""
        return OrderChange(
            tuple(self._before.tolist()),
            tuple(self.order.tolist()),
            position,
            f"greedy invariant violated at position {position}",
        )

    def _correct_at(self, position: int | None, costs: np.ndarray) -> list[OrderChange]:
        changes: list[OrderChange] = []
        if position is not None:
            self.violations += 1
            before = tuple(self.order.tolist())
            reason = self.correct(position, costs)
            after = tuple(self.order.tolist())
            self._sync_histogram()
            if after != before:
                changes.append(OrderChange(before, after, position, reason))
        changes.extend(self.after_check())
        return changes

    def violation(self, costs: np.ndarray) -> int | None:
        """The first position violating the invariant by more than alpha (eq. 4), if any."""
        if self.n < 2:
            return None
        found = find_violation(
            self.view,
            self.order,
            costs,
            self.alpha,
            self.mode,
            self.column,
            self.parents,
            self.z,
        )
        # A-Greedy+ (as absorb_samples does): Fig. 5 from position 0 once the window doubled
        if self.kernel_corrects and resort_due(
            self.checkpoint, len(self.window), self.window.capacity
        ):
            found = 0 if found < 0 else found
        return None if found < 0 else int(found)

    def after_check(self) -> list[OrderChange]:
        return []

    def _sync_histogram(self) -> None:
        """After a reorder: the view (and histogram) for the new order."""
        if len(self.patterns):
            view_from_patterns(self.patterns, self.order, self.view, self.mode, self.column)
            return
        hist_rebuild(self.hist, self.order, self.window.ring, self.window.live_rows())
        view_from_hist(self.hist, self.view, self.mode, self.column)

    def recompute_view(self) -> None:
        """Every kept row of the view from the window (after a reorder or for checking)."""
        rows = self.window.live_rows()
        self.view[:] = 0
        for r in range(self.n if self.mode != FIRST_ROW else min(1, self.n)):
            view_row(self.view, r, self.order, self.window.bits, rows, self.mode, self.column)

    def reset_statistics(self) -> None:
        self.window.clear()
        self.view[:] = 0
        self.hist[:] = 0
        self.patterns[:] = 0

    def ratios(self, costs: np.ndarray) -> np.ndarray:
        """V[r, c] / a_{f(c)}: conditional drop counts per unit of processing time."""
        return self.view / costs[self.order][None, :]

    # -- the correction ---------------------------------------------------------------------
    def correct(self, position: int, costs: np.ndarray) -> str:
        raise NotImplementedError


class AGreedy(Reoptimizer):
    """Maintains the Greedy Invariant over the full matrix view (Section 4), as the paper does."""

    name = "agreedy_exact"
    mode = FULL
    kernel_corrects = True

    def correct(self, position: int, costs: np.ndarray) -> str:
        """Fig. 5 (see ``greedy_correct``)."""
        before = self.order.copy()
        rows = NO_PATTERNS if len(self.patterns) else self.window.live_rows()
        greedy_correct(
            self.view, self.order, self.window.ring, rows, costs, position, self.parents,
            self.patterns,
        )  # fmt: skip
        moved = [int(f) for k, f in enumerate(self.order) if f != before[k]]
        return f"greedy invariant violated at position {position}; reordered {moved}"


class AGreedyPlus(AGreedy):
    """A-Greedy with two departures from the paper (docs/adaptive-filters.md has the evidence):

    - detection (Fig. 4, eq. 4) reports a violation only when it is significant given the
      view's counts (``confidence_z`` standard deviations), so that the noise of deep rows,
      which hold few profile tuples, does not reorder filters of equal drop rate;
    - the profiling probability adapts (:class:`AdaptiveRate`): it backs off while the order
      holds and the main pass's pass counters show no drift, and returns to the configured p at
      once (with an emptied window) when they do.
    Correction is Fig. 5 unchanged.
    """

    name = "agreedy"

    def _change(self, position: int) -> OrderChange:
        change = super()._change(position)
        if self.checkpoint[1]:
            reason = f"re-sorted on {len(self.window)} profile tuples (the window doubled)"
            change = OrderChange(change.before, change.after, position, reason)
        return change

    def __init__(
        self,
        n_filters: int,
        config: OrderingConfig,
        order: list[int] | None = None,
        parents: list[int] | None = None,
    ):
        super().__init__(n_filters, config, order, parents)
        self.z = config.confidence_z
        self.drifted = False
        self.checkpoint = new_checkpoint(config.min_profile_tuples)
        if config.p_floor < 1.0:
            self.adaptive = AdaptiveRate(
                n_filters,
                config.p,
                config.p_floor,
                config.drift_effect,
                config.window,
                config.min_profile_tuples,
            )


class Independent(Reoptimizer):
    """Orders by unconditional drop rate per unit time (first row of V only, Section 6)."""

    name = "independent"
    mode = FIRST_ROW

    def correct(self, position: int, costs: np.ndarray) -> str:
        first = self.ratios(costs)[0]
        perm = np.argsort(-first, kind="stable")
        if (self.parents >= 0).any():  # best ratio first among the filters allowed next
            perm = self._precedence_sort(first)
        self.order = self.order[perm]
        self.view[0] = self.view[0, perm]
        return f"independent invariant violated at position {position}; re-sorted"

    def _precedence_sort(self, ratio: np.ndarray) -> np.ndarray:
        placed: list[int] = []
        done: set[int] = set()
        while len(placed) < self.n:
            ready = [
                c
                for c in range(self.n)
                if c not in placed
                and (self.parents[self.order[c]] < 0 or int(self.parents[self.order[c]]) in done)
            ]
            best = max(ready, key=lambda c: (ratio[c], -c))
            placed.append(best)
            done.add(int(self.order[best]))
        return np.array(placed, dtype=np.int64)


class Sweep(Reoptimizer):
    """Profiles one position j per stage and moves its filter forward on a violation (Sec. 5).

    A stage ends at a violation or after ``window`` profile tuples without one; the next stage
    profiles the next position (2..n, cyclically) on a fresh window, because the bits of the
    new position were not collected by the old stage.
    """

    name = "sweep"
    mode = DIAGONAL_AND_COLUMN

    def __init__(
        self,
        n_filters: int,
        config: OrderingConfig,
        order: list[int] | None = None,
        parents: list[int] | None = None,
    ):
        super().__init__(n_filters, config, order, parents)
        self.j = 1
        self.stages = 0

    @property
    def column(self) -> int:
        return self.j

    def correct(self, position: int, costs: np.ndarray) -> str:
        f = int(self.order[self.j])
        self.order = np.insert(np.delete(self.order, self.j), position, f)
        reason = f"sweep invariant violated: filter {f} moved from position {self.j} to {position}"
        self._next_stage()
        return reason

    def after_check(self) -> list[OrderChange]:
        if self.n >= 2 and len(self.window) >= self.window.capacity:
            self._next_stage()  # a full stage without violation
        return []

    def _next_stage(self) -> None:
        self.stages += 1
        self.j = self.j + 1 if self.j + 1 < self.n else 1
        self.reset_statistics()


class LocalSwaps(Reoptimizer):
    """Swaps adjacent filters that violate the LocalSwaps Invariant (Section 7).

    After a swap the window is cleared: the profile tuples dropped just before the swapped pair
    were not evaluated on the filter that now follows them.
    """

    name = "localswaps"
    mode = TWO_DIAGONALS

    def correct(self, position: int, costs: np.ndarray) -> str:
        i = position
        self.order[[i, i + 1]] = self.order[[i + 1, i]]
        self.reset_statistics()
        return f"local swap of positions {i} and {i + 1}"


class Fixed(Reoptimizer):
    """Never profiles and never reorders: the fixed-order baseline."""

    name = "fixed"
    profiles = False

    def violation(self, costs: np.ndarray) -> int | None:
        return None

    def correct(self, position: int, costs: np.ndarray) -> str:
        return ""


REOPTIMIZERS: dict[str, type[Reoptimizer]] = {
    cls.name: cls for cls in (AGreedyPlus, AGreedy, Independent, Sweep, LocalSwaps, Fixed)
}


def make_reoptimizer(
    n_filters: int,
    config: OrderingConfig,
    order: list[int] | None = None,
    parents: list[int] | None = None,
) -> Reoptimizer:
    return REOPTIMIZERS[config.algorithm](n_filters, config, order, parents)
