"""Kernels of the synthetic operator: a known CPU cost and a known selectivity per tuple.

The scheduling papers describe operators only by (processing time, selectivity); to run their
progress charts on real agents, a synthetic operator spends a calibrated number of mixing steps
per tuple and keeps each tuple a number of times fixed by a hash of its key, so that the output
is exactly predictable (tests recompute it independently).
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from processors.kernels.splitmix import GAMMA, mix64

_TWO_64 = 18446744073709551616.0


@njit(cache=True, nogil=True)
def spin(iterations: int, state: np.uint64) -> np.uint64:
    """Burn CPU: ``iterations`` dependent mixing steps (the result keeps them from being elided)."""
    for _ in range(iterations):
        state = mix64(state + GAMMA)
    return state


@njit(cache=True, nogil=True)
def synthetic_counts(keys, seed, whole, fraction_cut, iterations, counts):  # type: ignore[no-untyped-def]
    """Per tuple: spin ``iterations`` steps, then keep it ``whole`` times, plus once more when
    the hash of (key, seed) falls below ``fraction_cut`` (a uint64 threshold). Returns the sum."""
    total = 0
    state = np.uint64(0)
    for i in range(keys.shape[0]):
        state = spin(iterations, state ^ np.uint64(keys[i]))
        extra = 1 if mix64(np.uint64(keys[i]) ^ seed) < fraction_cut else 0
        counts[i] = whole + extra
        total += whole + extra
    if state == np.uint64(1):  # practically never: makes ``state`` observable
        counts[0] += 0
    return total


def fraction_threshold(fraction: float) -> np.uint64:
    """The uint64 cut below which a uniform 64-bit hash falls with probability ``fraction``."""
    if fraction <= 0.0:
        return np.uint64(0)
    if fraction >= 1.0:
        return np.uint64(2**64 - 1)
    return np.uint64(min(int(fraction * _TWO_64), 2**64 - 1))


def calibrate_iterations_per_ns(rounds: int = 3, iterations: int = 2_000_000) -> float:
    """Mixing steps per nanosecond on this core (best of ``rounds``; the first call compiles)."""
    spin(10, np.uint64(1))
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter_ns()
        spin(iterations, np.uint64(rounds))
        best = min(best, time.perf_counter_ns() - start)
    return iterations / max(best, 1.0)
