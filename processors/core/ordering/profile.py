"""The A-Greedy profiler's state: the profile window and the processing-time estimates a_i.

Section 4.1 of Babu et al.: a sliding window of profile tuples (bits b_1..b_n of which filters
drop a sampled dropped tuple), tuple-based or time-based, and running averages of per-filter
processing times.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from processors.kernels.costs import record_costs
from processors.kernels.drift import change_row as drift_change_row
from processors.kernels.profile_view import DIAGONAL_AND_COLUMN, TWO_DIAGONALS
from processors.kernels.profiling import mark_dropped


class ProfileWindow:
    """A ring buffer of profile tuples; ``bits[t, f] == 1`` when filter ``f`` dropped tuple t.

    It holds at most ``capacity`` tuples and, when ``window_ms`` is set, only those profiled in
    the last ``window_ms`` milliseconds. Rows ``live_rows()`` are the current window (their
    order does not matter to the matrix view, only their multiset). Tuples enter and expire in
    ``kernels.profile_view.window_absorb``, together with the view update.
    """

    def __init__(
        self, n_filters: int, capacity: int, window_ms: int | None = None, patterned: bool = False
    ) -> None:
        self.n = n_filters
        self.capacity = capacity
        self.window_ms = window_ms
        # patterned (few filters, see kernels.profile_view.PATTERN_MAX_N): each slot keeps its
        # bit pattern in ``codes`` only, and ``ring`` is not written; else ``ring`` holds bits
        self.patterned = patterned
        self.ring = np.zeros((1 if patterned else capacity, n_filters), dtype=np.uint8)
        self.ts = np.zeros(capacity, dtype=np.int64)
        self.codes = np.zeros(capacity, dtype=np.int64)
        self.state = np.zeros(2, dtype=np.int64)  # [slot of the oldest tuple, tuples held]
        self.inserted_total = 0

    @property
    def bits(self) -> np.ndarray:
        """The profile tuples' bits by slot (``bits[live_rows()]`` is the window)."""
        if not self.patterned:
            return self.ring
        shifts = np.arange(self.n, dtype=np.int64)
        return ((self.codes[:, None] >> shifts) & 1).astype(np.uint8)

    @property
    def start(self) -> int:
        return int(self.state[0])

    @start.setter
    def start(self, value: int) -> None:
        self.state[0] = value

    @property
    def size(self) -> int:
        return int(self.state[1])

    @size.setter
    def size(self, value: int) -> None:
        self.state[1] = value

    def __len__(self) -> int:
        return self.size

    def live_rows(self) -> np.ndarray:
        return (self.start + np.arange(self.size, dtype=np.int64)) % self.capacity

    def clear(self) -> None:
        self.start = 0
        self.size = 0

    def pass_rates(self) -> np.ndarray | None:
        """Each filter's share of the window's profile tuples it passed (its selectivity,
        measured on tuples every filter was evaluated on); None for an empty window."""
        if self.size == 0:
            return None
        return 1.0 - self.bits[self.live_rows()].mean(axis=0)


class CostEstimates:
    """Per-filter processing time a_i: the median time per tuple of the last K timed calls
    (a median, so one call stalled by the scheduler does not reorder the filters).

    Timing is per batch call (or, for index filters run in one kernel call, per filter from the
    kernel's cycle counts), not per tuple: one clock read costs more than one hash probe, so
    per-tuple samples (as in Section 4.1.2) would cost more than they measure. A call's fixed
    overhead (``call_overhead_ns``, measured once) is subtracted, and calls on fewer than
    ``min_tuples`` tuples are not used, so a filter late in the order is not charged for the
    call rather than for its work.
    """

    def __init__(
        self,
        n_filters: int,
        samples: int = 64,
        fixed: tuple[float, ...] | None = None,
        call_overhead_ns: float = 0.0,
        min_tuples: int = 64,
    ) -> None:
        if fixed is not None and len(fixed) != n_filters:
            raise ValueError(f"costs has {len(fixed)} entries for {n_filters} filters")
        self.fixed = None if fixed is None else np.asarray(fixed, dtype=np.float64)
        self.ns = np.zeros((n_filters, samples), dtype=np.float64)
        self.tuples = np.zeros((n_filters, samples), dtype=np.float64)
        self.next = np.zeros(n_filters, dtype=np.int64)
        self.call_overhead_ns = call_overhead_ns
        self.min_tuples = min_tuples
        self.sums = np.zeros((2, n_filters), dtype=np.float64)  # ns and tuples over each ring
        self._values = np.ones(n_filters, dtype=np.float64)
        # one kernel call records and averages (a few numpy calls per batch cost more than
        # the main pass of a small batch spends on a filter)
        self._f = np.zeros(n_filters, dtype=np.int64)
        self._ns = np.zeros(n_filters, dtype=np.float64)
        self._m = np.zeros(n_filters, dtype=np.float64)
        self._all = np.arange(n_filters, dtype=np.int64)

    @property
    def measured(self) -> bool:
        return self.fixed is None

    def record(self, f: int, ns: float, tuples: int) -> None:
        self.record_many([f], [ns], [tuples])

    def record_many(self, filters: list[int], ns: list[float], tuples: list[int]) -> None:
        """One timed call per entry: filter id, nanoseconds, tuples evaluated."""
        if self.fixed is not None or not filters:
            return
        k = len(filters)
        if k > len(self._f):
            self._f = np.zeros(k, dtype=np.int64)
            self._ns = np.zeros(k, dtype=np.float64)
            self._m = np.zeros(k, dtype=np.float64)
        self._f[:k] = filters
        self._ns[:k] = ns
        self._m[:k] = tuples
        record_costs(
            self.ns, self.tuples, self.next, self.sums, self._f, self._ns, self._m, k,
            float(self.call_overhead_ns), float(self.min_tuples), self._values,
        )  # fmt: skip

    def record_all(self, ns: np.ndarray, tuples: np.ndarray) -> None:
        """One timed sample per filter id (``ns[f]`` over ``tuples[f]`` tuples), in one call."""
        if self.fixed is not None:
            return
        record_costs(
            self.ns, self.tuples, self.next, self.sums, self._all, ns, tuples, len(self._all),
            float(self.call_overhead_ns), float(self.min_tuples), self._values,
        )  # fmt: skip

    def values(self) -> np.ndarray:
        """a_i per filter id; a filter never timed gets the mean of the timed ones (or 1).
        The array is updated in place by later records: copy it to keep it."""
        if self.fixed is not None:
            return self.fixed
        return self._values


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


def profile_rows(predicates: Sequence[Any], batch: Any, rows: np.ndarray, bits: np.ndarray) -> int:
    """Profile tuples (Section 4.1.1) of ``rows`` (ascending) of ``batch``, each evaluated on
    every filter: the rows some filter drops are written to ``bits`` (1: filter f drops it),
    first to last; returns how many."""
    m = len(rows)
    found = np.zeros((m, len(predicates)), dtype=np.uint8)
    passed = np.empty(m, dtype=np.int64)
    slots = np.arange(m, dtype=np.int64)
    for f, predicate in enumerate(predicates):
        mark_dropped(rows, passed, predicate.select(batch, rows, m, passed), slots, found, f)
    dropped = found[found.any(axis=1)]
    bits[: len(dropped)] = dropped
    return len(dropped)


def change_row(sels: np.ndarray, counts: np.ndarray, k: int, size: int) -> int:
    """The first row of a drifting batch from which position ``k``'s pass rate is new
    (:func:`processors.kernels.drift.change_row`: CUSUM over its pass indicators)."""
    return int(drift_change_row(sels, counts, k, size))
