"""Online estimators of A-Caching's statistics (Babu et al., ICDE 2005, Sect. 4.3, Appendix A).

Every statistic is the average of its W most recent observations. d_ij and c_ij come from
profiled tuples (each operator's tuples processed and time spent for one delta, no caches on the
way); a used cache's miss probability is observed directly, an unused one's is estimated from
the distinct keys of windows of its probe stream, counted with a Bloom filter.
"""

from __future__ import annotations

import numpy as np

from processors.core.caching.model import PipelineStats
from processors.kernels.bloom import bloom_windows, fold_keys


class WindowAverage:
    """The last ``w`` observations of a scalar, their sum and average (Table 1's W)."""

    def __init__(self, w: int) -> None:
        if w < 1:
            raise ValueError(f"window must be at least 1, got {w}")
        self.w = w
        self._ring = np.zeros(w, np.float64)
        self.count = 0  # observations ever added

    def add(self, values: np.ndarray | float) -> None:
        v = np.atleast_1d(np.asarray(values, np.float64))
        at = (self.count + np.arange(len(v))) % self.w
        self._ring[at[-self.w :]] = v[-self.w :]
        self.count += len(v)

    @property
    def ready(self) -> bool:
        """Whether W observations have been seen (Sect. 4.5, step 2)."""
        return self.count >= self.w

    @property
    def held(self) -> int:
        return min(self.count, self.w)

    @property
    def total(self) -> float:
        return float(self._ring[: self.held].sum())

    @property
    def mean(self) -> float:
        return self.total / self.held if self.held else 0.0


class OperatorProfile:
    """d_ij and c_ij of one pipeline from its profiled tuples (Appendix A).

    For a profiled delta, ``delta[p]`` counts the tuples reaching position p (the last
    position is the pipeline's output) and ``tau[p]`` the time operator p spent on them.
    d_ij = rate x sum(delta_j) / W, c_ij = sum(tau_j) / sum(delta_j), over the last W profiled
    deltas (fewer before W have been seen).
    """

    def __init__(self, n_operators: int, w: int) -> None:
        self.n = n_operators
        self.w = w
        self._delta = np.zeros((w, n_operators + 1), np.float64)
        self._tau = np.zeros((w, n_operators), np.float64)
        self.count = 0

    def record(self, delta: np.ndarray, tau: np.ndarray) -> None:
        """One row per profiled delta: ``delta`` (m x operators + 1), ``tau`` (m x operators)."""
        delta = np.atleast_2d(np.asarray(delta, np.float64))
        tau = np.atleast_2d(np.asarray(tau, np.float64))
        if delta.shape[1] != self.n + 1 or tau.shape != (len(delta), self.n):
            raise ValueError(f"profile rows of {self.n + 1} and {self.n} values expected")
        m = len(delta)
        at = (self.count + np.arange(m)) % self.w
        self._delta[at[-self.w :]] = delta[-self.w :]
        self._tau[at[-self.w :]] = tau[-self.w :]
        self.count += m

    @property
    def ready(self) -> bool:
        return self.count >= self.w

    def d(self, rate: float) -> np.ndarray:
        """Tuples per unit time reaching each position, output included."""
        held = min(self.count, self.w)
        if held == 0:
            return np.zeros(self.n + 1)
        return rate * self._delta[:held].sum(axis=0) / held

    def c(self) -> np.ndarray:
        """Cost per tuple of each operator (0 where no tuple was seen)."""
        held = min(self.count, self.w)
        tuples = self._delta[:held, : self.n].sum(axis=0)
        spent = self._tau[:held].sum(axis=0)
        return np.divide(spent, tuples, out=np.zeros(self.n), where=tuples > 0)

    def stats(self, rate: float) -> PipelineStats:
        """The pipeline's d and c for the cost model."""
        return PipelineStats(tuple(self.d(rate).tolist()), tuple(self.c().tolist()))


def key_words(columns: list[np.ndarray]) -> np.ndarray:
    """One int64 word per probe from the key's int64 columns (the column itself for a
    single-column key)."""
    if len(columns) == 1:
        return np.ascontiguousarray(columns[0], np.int64)
    stacked = np.ascontiguousarray(np.stack(columns, axis=1).astype(np.int64).view(np.uint64))
    out = np.empty(len(stacked), np.uint64)
    fold_keys(stacked, out)
    return out.view(np.int64)


class BloomMissEstimator:
    """miss_prob of a cache not in use (Appendix A): per non-overlapping window of
    ``window`` probe keys, the keys whose bit in an ``alpha * window``-bit filter is not yet
    set; the estimate is the average of misses / window over the last ``w`` windows, and
    ``distinct`` (the bits set) sizes the cache (Sect. 4.3).

    ``horizon`` (a departure, 0 for the paper's estimate): the windows before this one whose
    keys still count as cached. The paper's cache holds a key from its first probe in the
    window on; streamon's entries stay until a collision or a drop replaces them, so a key
    that recurs a few windows later hits, which the one-window filter counts as a miss. The
    filter then has ``alpha * window * (horizon + 1)`` bits, and a window counts only once
    ``horizon`` windows have gone before it (the first ones would see every key as new)."""

    def __init__(
        self, window: int, alpha: float = 2.0, w: int = 10, seed: int = 0, horizon: int = 0
    ) -> None:
        if window < 1 or alpha < 1 or horizon < 0:
            raise ValueError("the window must be positive, alpha at least 1, horizon >= 0")
        self.window = window
        self.horizon = horizon
        self.n_bits = max(64, int(np.ceil(alpha * window * (horizon + 1))))
        self._last = np.zeros(self.n_bits, np.int64)
        self._state = np.zeros(4, np.int64)  # filled, misses, bits set, windows closed
        self._seed = np.uint64(seed % 2**64)
        self.windows = WindowAverage(w)
        self._distinct = WindowAverage(w)

    def observe(self, keys: np.ndarray) -> int:
        """Feed probe keys (int64 words); returns how many windows closed."""
        k = np.ascontiguousarray(keys, np.int64).view(np.uint64)
        before = int(self._state[3])
        misses = np.empty(len(k) // self.window + 1, np.int64)
        distinct = np.empty_like(misses)
        done = bloom_windows(
            k, self._seed, self._last, self.window, self.horizon, self._state, misses, distinct
        )
        skip = max(0, self.horizon - before)  # windows without a full horizon before them
        if done > skip:
            self.windows.add(misses[skip:done].astype(np.float64))
            self._distinct.add(distinct[skip:done].astype(np.float64))
        return int(done)

    @property
    def ready(self) -> bool:
        return self.windows.ready

    @property
    def open_window(self) -> tuple[int, int, int]:
        """The open window's keys so far, its misses and its bits set."""
        return int(self._state[0]), int(self._state[1]), int(self._state[2])

    @property
    def miss_prob(self) -> float:
        return self.windows.mean / self.window

    @property
    def distinct(self) -> float:
        """Distinct keys over a window and its horizon (the bits set, on average)."""
        return self._distinct.mean


class ObservedMissRate:
    """miss_prob of a cache in use, observed directly (Appendix A): misses per window of
    ``window`` probes, averaged over the last ``w`` windows. The first ``skip`` windows are
    the new cache's warm-up (every key's first probe misses once) and are left out: the
    steady state is what decides whether the cache stays (Sect. 4.5 a)."""

    def __init__(self, window: int, w: int = 10, skip: int = 0) -> None:
        self.window = window
        self.windows = WindowAverage(w)
        self._skip = skip
        self._probes = 0
        self._misses = 0

    def observe(self, missed: np.ndarray) -> None:
        """One bool per probe, in probe order (True: a miss)."""
        m = np.asarray(missed, np.bool_)
        at = 0
        while at < len(m):
            take = min(self.window - self._probes, len(m) - at)
            self._misses += int(m[at : at + take].sum())
            self._probes += take
            at += take
            if self._probes == self.window:
                if self._skip:
                    self._skip -= 1
                else:
                    self.windows.add(self._misses / self.window)
                self._probes = self._misses = 0

    @property
    def ready(self) -> bool:
        return self.windows.ready

    @property
    def miss_prob(self) -> float:
        return self.windows.mean
