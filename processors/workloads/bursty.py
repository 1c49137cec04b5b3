"""Bursty arrival times: the ON/OFF flow model of Babcock et al., Sect. 6 (after Willinger et
al.), and piecewise-constant rate schedules.

ON/OFF: flows start as a Poisson process (mean interarrival ``mean_interarrival``); each sends
packets continuously, one every ``1 / rate`` (at a uniformly random phase, so that a flow of
length d sends d * rate packets on average), for a Pareto-distributed duration (density
alpha k^alpha x^(-alpha-1), x >= k; the paper's k = 1, alpha = 2.3). The arrival sequence is
the union of all flows' packets. Everything is vectorised with numpy and is a deterministic
function of the seed (one ``numpy.random.default_rng([seed, i])`` stream each for the flow
starts, the phases and the durations, so that a longer run begins with the same flows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def _check_positive(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    if value <= 0:
        raise ValueError(f"{what} must be positive, got {value!r}")
    return float(value)


def _expand(starts: np.ndarray, counts: np.ndarray, spacing: np.ndarray | float) -> np.ndarray:
    """starts[i] + j * spacing[i] for j < counts[i], all i, without a Python loop."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0)
    first = np.cumsum(counts) - counts
    j = np.arange(total) - np.repeat(first, counts)
    step = np.repeat(np.broadcast_to(spacing, starts.shape), counts)
    return np.repeat(starts, counts) + j * step


@dataclass(frozen=True)
class OnOffWorkload:
    """The ON/OFF generator. Times are in any unit: the flows' mean interarrival sets it."""

    mean_interarrival: float = 1.0
    rate: float = 1.0  # packets per time unit while a flow is ON
    alpha: float = 2.3
    k: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        _check_positive(self.mean_interarrival, "mean_interarrival")
        _check_positive(self.rate, "rate")
        _check_positive(self.alpha, "alpha (Pareto shape)")
        _check_positive(self.k, "k (Pareto scale)")

    @property
    def mean_duration(self) -> float:
        """E[duration] = alpha k / (alpha - 1) (infinite for alpha <= 1)."""
        return math.inf if self.alpha <= 1 else self.alpha * self.k / (self.alpha - 1)

    @property
    def mean_rate(self) -> float:
        """Long-run packets per time unit: rate * E[duration] / mean_interarrival."""
        return self.rate * self.mean_duration / self.mean_interarrival

    def flows(self, duration: float) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of every flow starting in [0, duration)."""
        duration = _check_positive(duration, "duration")
        # one stream per quantity, so that a longer run starts with the same flows
        rng = np.random.default_rng([self.seed, 0])
        expected = duration / self.mean_interarrival
        gaps = rng.exponential(self.mean_interarrival, int(expected + 6 * math.sqrt(expected) + 16))
        starts = np.cumsum(gaps)
        while starts[-1] < duration:  # rare top-up, keeps the draws a prefix-stable sequence
            more = rng.exponential(self.mean_interarrival, len(gaps))
            starts = np.concatenate([starts, starts[-1] + np.cumsum(more)])
        starts = starts[starts < duration]
        # numpy's pareto is the Lomax (Pareto II) law; (X + 1) k is the classical Pareto
        lengths = (
            np.random.default_rng([self.seed, 2]).pareto(self.alpha, len(starts)) + 1
        ) * self.k
        return starts, lengths

    def arrivals(self, duration: float) -> np.ndarray:
        """Sorted packet times in [0, duration)."""
        starts, lengths = self.flows(duration)
        # the phase u of each flow: packets at start + (j + u) / rate while inside the flow
        phase = np.random.default_rng([self.seed, 1]).random(len(starts))
        counts = np.ceil(lengths * self.rate - phase).astype(np.int64)
        times = _expand(starts + phase / self.rate, counts, 1.0 / self.rate)
        times = np.sort(times[times < duration], kind="stable")
        return times


def rate_schedule_arrivals(
    breakpoints: Sequence[float],
    rates: Sequence[float],
    *,
    poisson: bool = False,
    seed: int = 0,
) -> np.ndarray:
    """Arrival times for a piecewise-constant rate: ``rates[i]`` per time unit on
    [breakpoints[i], breakpoints[i+1]). Evenly spaced (first arrival at the piece's start) or,
    with ``poisson``, a seeded Poisson process of that rate."""
    b = np.asarray(breakpoints, dtype=np.float64)
    r = np.asarray(rates, dtype=np.float64)
    if b.ndim != 1 or r.ndim != 1 or len(b) != len(r) + 1:
        raise ValueError(
            f"need one rate per interval: {len(b)} breakpoints, {len(r)} rates "
            f"(expected {len(b) - 1})"
        )
    if not np.all(np.isfinite(b)) or np.any(np.diff(b) <= 0) or (len(b) and b[0] < 0):
        raise ValueError(f"breakpoints must be finite, >= 0 and increasing, got {b.tolist()}")
    if not np.all(np.isfinite(r)) or np.any(r < 0):
        raise ValueError(f"rates must be finite and >= 0, got {r.tolist()}")
    lengths = np.diff(b)
    if not poisson:
        counts = np.ceil(lengths * r - 1e-9).astype(np.int64)
        counts = np.maximum(counts, 0)
        spacing = np.divide(1.0, r, out=np.zeros_like(r), where=r > 0)
        return _expand(b[:-1], counts, spacing)
    rng = np.random.default_rng(seed)
    counts = rng.poisson(lengths * r)
    offsets = rng.random(int(counts.sum()))
    times = np.repeat(b[:-1], counts) + offsets * np.repeat(lengths, counts)
    return np.sort(times, kind="stable")


def steady_with_bursts(
    duration: float,
    base_rate: float,
    bursts: Sequence[tuple[float, float, float]],
    *,
    poisson: bool = False,
    seed: int = 0,
) -> np.ndarray:
    """A steady rate with bursts ``(start, length, rate)`` (non-overlapping) over
    [0, duration)."""
    duration = _check_positive(duration, "duration")
    edges = [0.0]
    rates: list[float] = []
    for start, length, rate in sorted(bursts):
        if start < edges[-1] or length <= 0 or start + length > duration:
            raise ValueError(
                f"burst ({start}, {length}, {rate}) overlaps another or leaves [0, {duration})"
            )
        if start > edges[-1]:
            edges.append(float(start))
            rates.append(base_rate)
        edges.append(float(start + length))
        rates.append(rate)
    if duration > edges[-1]:
        edges.append(duration)
        rates.append(base_rate)
    return rate_schedule_arrivals(edges, rates, poisson=poisson, seed=seed)
