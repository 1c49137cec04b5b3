"""A-Greedy+'s profiling rate: drift detection on the main pass's counters, and p's backoff.

The paper's profiler samples at a fixed p (Section 4.1.1, Table 1: 0.01), and Section 10 leaves
an adaptive rate open. Here p is at its maximum (the configured p) until the profile window
holds ``STABLE_TUPLES``, then at a floor (``p_floor`` times the maximum, profiled as one batch
in ``FLOOR_EVERY`` at that many times the floor), and returns to the maximum at once on drift
or an order change. Drift is
read from counters the main pass keeps anyway (tuples in and out per position), so watching
costs no profiling; on drift the window is emptied, since its profile tuples describe the old
statistics (the kernels are in :mod:`processors.kernels.drift`).
"""

from __future__ import annotations

import numpy as np

from processors.kernels.drift import (
    ENOUGH,
    NEVER_DRIFTED,
    P_NEXT,
    P_NOW,
    clear_window,
    drift_check,
    heeded_drift,
    new_reference,
    next_rate,
)

DRIFT_Z = 5.0  # standard deviations: a batch of 65,536 tuples tests ~10^4 times a minute
DRIFT_MIN_TUPLES = 200  # a position's pending tuples are tested once there are this many
# against a reference of at least this many tuples (a small partition's last batch before a
# change may be all a position's reference holds: untested, the change became the reference)
DRIFT_MIN_REF = 30
REFERENCE_CAP = 1_000_000.0  # tuples: the reference halves beyond this, to follow slow change
# profile tuples at p_max after a reset; measured (docs/adaptive-filters.md): 1000 (Table 1's
# window, then halving p per batch) profiled too long at short periods of change (Fig. 19 at
# 20,000 tuples: +7-17% over the lowest total)
STABLE_TUPLES = 250
# at the floor, profile one batch in 16 at 16 times the floor (the maximum p at the default
# p_floor): as many samples as one in 8 at 8 times, half the per-batch costs (bench filters:
# overhead 0.9% -> 0.6% at n = 3..5; docs/adaptive-filters.md)
FLOOR_EVERY = 16
# a drift is heeded only this many refills (ENOUGH profile tuples at p_max) after the last
# one: at Fig. 19's periods of 20,000 and 50,000 tuples heeding every drift kept p at its
# maximum and the orders on a few hundred profile tuples (+5-8% over LocalSwaps' total time),
# ignoring them all was lowest there but +6.5% at 100,000 and +15% at 500,000
# (docs/adaptive-filters.md)
DRIFT_SPACING_REFILLS = 3.0


class AdaptiveRate:
    """The state of the rate: the reference pass rates per position and p now.

    ``args`` is the tuple the adaptive index-filter kernel takes
    (``kernels.index_filters.run_index_filters_adaptive``); the per-position path calls
    :meth:`observe` and :meth:`advance` instead.
    """

    def __init__(
        self, n: int, p_max: float, floor: float, effect: float, capacity: int, checked: int
    ) -> None:
        self.n = n
        self.ref = new_reference(n)
        self.params = np.array(
            [DRIFT_Z, effect, DRIFT_MIN_TUPLES, REFERENCE_CAP, DRIFT_MIN_REF], np.float64
        )
        # backing off before the window holds what the re-optimizer checks from (``checked``,
        # min_profile_tuples) would leave it waiting at the floor
        enough = max(min(capacity, STABLE_TUPLES), min(checked, capacity))
        spacing = DRIFT_SPACING_REFILLS * enough / p_max if p_max > 0 else 0.0
        self.rate = np.array(
            [p_max, p_max * floor, p_max, NEVER_DRIFTED, enough, FLOOR_EVERY, 0.0, p_max,
             spacing], np.float64,
        )  # fmt: skip
        self.out = np.array([-1, 0], dtype=np.int64)  # drifting position, drift not heeded
        self.args = (self.ref, self.params, self.rate, self.out)
        self.drifts = 0  # batches in which drift was detected and heeded
        self.drifts_unheeded = 0  # ... detected too soon after the last (heeded_drift)

    @property
    def p(self) -> float:
        """The profiling probability for the next batch."""
        return float(self.rate[P_NEXT])

    @property
    def enough(self) -> float:
        """Profile tuples from which p is at its floor (a window refilled after a drift)."""
        return float(self.rate[ENOUGH])

    @property
    def mean_p(self) -> float:
        """The profiling probability in effect, on average over batches."""
        return float(self.rate[P_NOW])

    def observe(
        self,
        counts: np.ndarray,
        order: np.ndarray,
        state: np.ndarray,
        patterns: np.ndarray,
        hist: np.ndarray,
        view: np.ndarray,
    ) -> int:
        """Test a batch's pass counters (``counts[k]`` tuples reached position k of ``order``,
        the order the batch ran in); on drift,
        empty the window (``state``, ``patterns``, ``hist``) and its ``view``. Returns the
        drifting position or -1."""
        found = int(drift_check(counts, order, self.ref, self.params))
        found = int(heeded_drift(self.rate, found, counts[0], self.out))
        self.out[0] = found  # as the index filters' kernel leaves it
        if found >= 0:
            clear_window(state, patterns, hist, view)
        self.booked(found)
        return found

    def booked(self, found: int) -> None:
        """Count a drift the kernel found (``out[1]``: one it did not heed)."""
        if found >= 0:
            self.drifts += 1
        self.drifts_unheeded += int(self.out[1])

    def advance(self, reset: bool, size: int) -> float:
        """The next batch's p (see ``kernels.drift.next_rate``). (After an order change the
        next drift test restarts every position's reference: ``kernels.drift.align_reference``.)"""
        return float(next_rate(self.rate, reset, size))
