"""Orders from full statistics: the cost of an order (eq. 1), Static Greedy, and Optimal.

Statistics are a boolean matrix ``drops[t, f]`` (filter ``f`` drops tuple ``t``) over a sample of
tuples, weighted equally: exactly what the pipelined-set-cover view of Appendix A needs.
Optimal is an exact search over subsets (dynamic programming on which filters come first),
which visits the same space as trying all n! orders in O(2^n n) instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

MAX_OPTIMAL_FILTERS = 20


def _costs(costs: Sequence[float] | np.ndarray | None, n: int) -> np.ndarray:
    out = np.ones(n) if costs is None else np.asarray(costs, dtype=np.float64)
    if out.shape != (n,):
        raise ValueError(f"costs has shape {out.shape} for {n} filters")
    return out


def order_cost(
    order: Sequence[int], drops: np.ndarray, costs: Sequence[float] | np.ndarray | None = None
) -> float:
    """Expected time per tuple of ``order`` (eq. 1): each filter's cost times the fraction of
    tuples that reach it. With unit costs: the expected number of filters evaluated."""
    drops = np.asarray(drops, dtype=bool)
    m, n = drops.shape
    cost = _costs(costs, n)
    alive = np.ones(m, dtype=bool)
    total = 0.0
    for f in order:
        total += cost[f] * alive.mean() if m else 0.0
        alive &= ~drops[:, f]
    return float(total)


def static_greedy(
    drops: np.ndarray, costs: Sequence[float] | np.ndarray | None = None
) -> list[int]:
    """Static Greedy (Section 4): repeatedly the filter dropping the most surviving tuples per
    unit cost. Ties go to the lowest filter id."""
    drops = np.asarray(drops, dtype=bool)
    m, n = drops.shape
    cost = _costs(costs, n)
    alive = np.ones(m, dtype=bool)
    left = list(range(n))
    order: list[int] = []
    while left:
        counts = drops[alive][:, left].sum(axis=0) / cost[left]
        f = left[int(np.argmax(counts))]
        order.append(f)
        left.remove(f)
        alive &= ~drops[:, f]
    return order


def pass_fractions(drops: np.ndarray) -> np.ndarray:
    """``out[S]`` = fraction of tuples that no filter in bit-set S drops, for every S."""
    drops = np.asarray(drops, dtype=bool)
    m, n = drops.shape
    if n > MAX_OPTIMAL_FILTERS:
        raise ValueError(f"exact optimal order is limited to {MAX_OPTIMAL_FILTERS} filters")
    patterns = (drops.astype(np.int64) << np.arange(n, dtype=np.int64)).sum(axis=1)
    counts = np.bincount(patterns, minlength=1 << n).astype(np.float64)
    # passes(S) = sum of counts[P] over patterns P disjoint from S = subset sum over ~S
    subset_sum = counts.copy()
    idx = np.arange(1 << n)
    for b in range(n):
        has = (idx >> b) & 1 == 1
        subset_sum[has] += subset_sum[idx[has] ^ (1 << b)]
    full = (1 << n) - 1
    return subset_sum[full ^ idx] / max(m, 1)


def optimal_order(
    drops: np.ndarray, costs: Sequence[float] | np.ndarray | None = None
) -> tuple[list[int], float]:
    """The order of least expected cost (eq. 1), exactly, and its cost."""
    drops = np.asarray(drops, dtype=bool)
    return optimal_order_from_passes(pass_fractions(drops), _costs(costs, drops.shape[1]))


def order_cost_from_passes(
    order: Sequence[int], passes: np.ndarray, costs: Sequence[float] | np.ndarray
) -> float:
    """Eq. 1 from ``passes[S]``, the probability of passing every filter in bit-set S."""
    mask = 0
    total = 0.0
    for f in order:
        total += float(costs[f]) * float(passes[mask])
        mask |= 1 << int(f)
    return total


def optimal_order_from_passes(
    passes: np.ndarray, costs: Sequence[float] | np.ndarray
) -> tuple[list[int], float]:
    """The optimal order and its cost from ``passes[S]`` (see ``pass_fractions``): dynamic
    programming over the set of filters placed first. Ties: lowest filter id first."""
    size = len(passes)
    n = size.bit_length() - 1
    best = np.full(size, np.inf)
    last = np.zeros(size, dtype=np.int64)
    best[0] = 0.0
    for s in range(1, size):
        for f in range(n):
            if s >> f & 1:
                prev = s ^ (1 << f)
                c = best[prev] + float(costs[f]) * passes[prev]
                if c < best[s] - 1e-12:
                    best[s] = c
                    last[s] = f
    order: list[int] = []
    s = size - 1
    while s:
        f = int(last[s])
        order.append(f)
        s ^= 1 << f
    return order[::-1], float(best[size - 1])


def brute_force_order(
    drops: np.ndarray, costs: Sequence[float] | np.ndarray | None = None
) -> tuple[list[int], float]:
    """Optimal by trying all n! orders (for checking ``optimal_order`` on small n)."""
    n = np.asarray(drops).shape[1]
    best: tuple[list[int], float] = ([], np.inf)
    for perm in itertools.permutations(range(n)):
        c = order_cost(perm, drops, costs)
        if c < best[1] - 1e-12:
            best = (list(perm), c)
    return best
