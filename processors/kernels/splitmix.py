"""SplitMix64 (Steele, Lea, Flood 2014): the one mixing function the kernels use for
reproducible pseudo-random words (profiling samples, workload draws, extra index probes)."""

from __future__ import annotations

import numpy as np
from numba import njit

GAMMA = np.uint64(0x9E3779B97F4A7C15)  # the generator's increment, 2^64 / golden ratio
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S27 = np.uint64(27)
_S30 = np.uint64(30)
_S31 = np.uint64(31)


@njit(cache=True, inline="always")
def mix64(z: np.uint64) -> np.uint64:
    """SplitMix64's output function: a well-spread 64-bit word from the state ``z``."""
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)
