"""Synthetic inputs of ``streamon bench caching``: Table 2's sample points D1-D8 (Babu et al.,
ICDE 2005, Sect. 7.3) for the 4-way join R1(A) ⋈ R2(A) ⋈ R3(A) ⋈ R4(A) (R, S, T, U below).

Each input is a ROWS window over an append-only stream, turned into its delta stream (inserts
and the window's deletes) as Sect. 7.1 describes. Rates: stream i's k-th tuple arrives at time
``k * TICK / rate_i``, so the streams interleave at Table 2's relative rates; window sizes are
``rate_i * window`` tuples, so every window spans the same time (a time window). The window
unit is set per point so that an arrival makes about two 4-way results on average
(:func:`window_for`): with Table 2's selectivities, one unit for all points would make some
points' output (and so the run time) thousands of times larger than others'.

Pairwise selectivities on one attribute. Stream i draws A uniformly from its own value set
V_i, so a pair (r, s) joins with probability |V_i ∩ V_j| / (|V_i| |V_j|). The sets are built from
Venn regions of one domain: a region shared by all four inputs (size c, which makes 3- and
4-way results possible), one region per pair (size c_ij, only that pair) and a private region
per input, each V_i of the same size n. Then s_ij = (c + c_ij) / n^2: c = min s_ij n^2,
c_ij = s_ij n^2 - c, and n the largest size whose regions fit (c + sum_j c_ij <= n). Rounding
to whole values moves the selectivities by a few percent; the realised ones are reported. D7
(every selectivity 0) gets disjoint sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations, permutations

import numpy as np

from processors.bench.mjoin import rows_window_deltas
from processors.core.batch import Batch

NAMES = ("R", "S", "T", "U")
PAIRS = tuple(combinations(range(4), 2))  # RS, RT, RU, ST, SU, TU: Table 2's column order
TICK = 120  # divisible by every rate of Table 2 (1, 4, 5, 8, 10, 15)

# Table 2: relative arrival rates (R, S, T, U) and selectivities (RS, RT, RU, ST, SU, TU).
TABLE2: dict[str, tuple[tuple[int, ...], tuple[float, ...]]] = {
    "d1": ((10, 1, 1, 1), (0.004, 0.005, 0.005, 0.007, 0.0045, 0.005)),
    "d2": ((8, 1, 1, 8), (0.004, 0.005, 0.005, 0.007, 0.0045, 0.005)),
    "d3": ((10, 15, 1, 5), (0.003, 0.005, 0.007, 0.0045, 0.006, 0.008)),
    "d4": ((1, 1, 1, 1), (0.003, 0.004, 0.0067, 0.002, 0.0023, 0.0027)),
    "d5": ((4, 1, 1, 4), (0.005, 0.007, 0.005, 0.006, 0.005, 0.002)),
    "d6": ((1, 1, 1, 1), (0.005, 0.0033, 0.0025, 0.0067, 0.005, 0.0075)),
    "d7": ((1, 1, 1, 1), (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    "d8": ((1, 1, 1, 1), (0.001, 0.001, 0.001, 0.001, 0.001, 0.001)),
}


@dataclass(frozen=True)
class KeySets:
    """Each input's value set of A and the selectivities they give."""

    values: tuple[np.ndarray, ...]
    selectivity: tuple[float, ...]  # realised, in PAIRS order


def key_sets(sel: tuple[float, ...], disjoint_size: int = 1_000) -> KeySets:
    """Value sets of equal size whose pairwise overlaps give ``sel`` (module docstring)."""
    if max(sel) == 0:
        n = disjoint_size
        values = tuple(np.arange(i * n, (i + 1) * n, dtype=np.int64) for i in range(4))
        return KeySets(values, (0.0,) * len(PAIRS))
    low = min(sel)
    row = [sum(s for (a, b), s in zip(PAIRS, sel, strict=True) if i in (a, b)) for i in range(4)]
    n = int(1 / max(max(r - 2 * low for r in row), 1e-12))
    n = min(n, int(1 / low)) if low > 0 else n  # c <= n
    while True:
        common = round(low * n * n)
        pair = [max(round(s * n * n) - common, 0) for s in sel]
        used = [common + sum(c for (a, b), c in zip(PAIRS, pair, strict=True) if i in (a, b))
                for i in range(4)]  # fmt: skip
        if max(used) <= n:
            break
        n -= 1
    nxt = common
    regions: list[list[np.ndarray]] = [[np.arange(common, dtype=np.int64)] for _ in range(4)]
    for (a, b), c in zip(PAIRS, pair, strict=True):
        block = np.arange(nxt, nxt + c, dtype=np.int64)
        regions[a].append(block)
        regions[b].append(block)
        nxt += c
    values = []
    for i in range(4):
        private = n - used[i]
        regions[i].append(np.arange(nxt, nxt + private, dtype=np.int64))
        nxt += private
        values.append(np.concatenate(regions[i]))
    real = tuple(
        len(np.intersect1d(values[a], values[b])) / (len(values[a]) * len(values[b]))
        for a, b in PAIRS
    )
    return KeySets(tuple(values), real)


def results_per_arrival(sets: KeySets, rates: tuple[int, ...], window: float) -> float:
    """Expected 4-way results per arrival with windows of ``rate * window`` tuples: an arrival
    at input i with value v joins prod_j W_j / |V_j| tuples if v is in every V_j."""
    n = len(sets.values[0])
    common = set(sets.values[0].tolist())
    for v in sets.values[1:]:
        common &= set(v.tolist())
    per_key = [rate * window / n for rate in rates]
    total = sum(rates)
    out = 0.0
    for i, rate in enumerate(rates):
        others = np.prod([per_key[j] for j in range(4) if j != i])
        out += rate / total * len(common) / n * float(others)
    return out


def window_for(point: str, target: float = 2.0, zero_window: int = 1_000) -> int:
    """The window unit giving about ``target`` results per arrival (results grow as its cube);
    ``zero_window`` for D7, which has none."""
    rates, sel = TABLE2[point]
    sets = key_sets(sel)
    one = results_per_arrival(sets, rates, 1.0)
    return zero_window if one == 0 else max(int(round((target / one) ** (1 / 3))), 1)


def point_inputs(
    point: str, tuples: int, window: int | None = None, seed: int = 1
) -> tuple[list[Batch], KeySets, list[int]]:
    """The delta streams of ``point`` with about ``tuples`` arrivals in all, split by Table 2's
    rates, each input a ROWS window of ``rate * window`` tuples (``window_for`` by default);
    the key sets and window sizes."""
    rates, sel = TABLE2[point]
    sets = key_sets(sel)
    window = window_for(point) if window is None else window
    rng = np.random.default_rng(seed)
    total = sum(rates)
    out, sizes = [], []
    for i, rate in enumerate(rates):
        count = max(tuples * rate // total, 1)
        keys = sets.values[i][rng.integers(0, len(sets.values[i]), count)]
        ts = np.arange(count, dtype=np.int64) * (TICK // rate) * 4 + i
        sizes.append(rate * window)
        out.append(rows_window_deltas(keys, ts, rate * window))
    return out, sets, sizes


def static_orders(sets: KeySets, sizes: list[int]) -> tuple[tuple[int, ...], ...]:
    """Each pipeline's order with the fewest expected probes when probes stop at the first
    window without the key (the MJoin's drop probing): value v is in window j with probability
    1 - (1 - 1/|V_j|)^W_j if v is in V_j, else 0, independently given v; arrivals at i draw v
    uniformly from V_i. The model's optimum, for the "M/static" plan and its caches."""
    dom = int(max(int(v.max()) for v in sets.values)) + 1
    present = np.zeros((4, dom))
    for j, v in enumerate(sets.values):
        present[j, v] = 1.0 - (1.0 - 1.0 / len(v)) ** sizes[j]
    out = []
    for i in range(4):
        arrivals = sets.values[i]
        best: tuple[float, tuple[int, ...]] | None = None
        for order in permutations([j for j in range(4) if j != i]):
            reach = np.ones(len(arrivals))
            cost = 0.0
            for j in order:
                cost += float(reach.mean())
                reach = reach * present[j, arrivals]
            if best is None or cost < best[0] - 1e-12:
                best = (cost, order)
        assert best is not None
        out.append(best[1])
    return tuple(out)
