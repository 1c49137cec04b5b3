"""Oracle for synthetic operators (``Query.operator``), written from their definition: an
operator keeps a tuple floor(s) times, plus once more when the SplitMix64 hash of the tuple's key
xor the operator's seed falls in the first frac(s) of the 64-bit range; the seed folds the
operator's name byte by byte through the same hash. Plain Python integers, no numpy or numba."""

from __future__ import annotations

import math

MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def mix64(z: int) -> int:
    """SplitMix64's finaliser (Steele, Lea and Flood, 2014) on a 64-bit unsigned integer."""
    z &= MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def seed_of(name: str) -> int:
    state = 0
    for byte in name.encode():
        state = mix64(state ^ byte)
    return state


def copies(key: int, name: str, selectivity: float) -> int:
    """How many times operator ``name`` emits the tuple whose key is ``key``."""
    whole = math.floor(selectivity)
    frac = selectivity - whole
    cut = 0 if frac <= 0 else min(int(frac * 2.0**64), MASK)
    return whole + int(mix64((key & MASK) ^ seed_of(name)) < cut)


def surviving(keys: list[int], operators: list[tuple[str, float]]) -> dict[int, int]:
    """Per key, how many result tuples a chain of operators produces for it."""
    out = {}
    for key in keys:
        n = 1
        for name, selectivity in operators:
            n *= copies(key, name, selectivity)
        if n:
            out[key] = n
    return out
