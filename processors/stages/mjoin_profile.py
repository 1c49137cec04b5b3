"""Profiling of an MJoin pipeline's sampled deltas (Babu et al., Sections 4 and 8.2), moved
out of :mod:`processors.stages.mjoin_stage` unchanged: which deltas to profile, and for the
dropped ones which paths of the spanning tree drop each, every path evaluated on its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from processors.core.batch import Batch
from processors.core.ordering.reoptimizers import OrderChange, Reoptimizer
from processors.kernels.profiling import sample_rows
from processors.stages.join_store import join_keys

if TYPE_CHECKING:
    from processors.stages.mjoin_stage import MJoinStage


def profile_samples(stage: MJoinStage, m: int, reopt: Reoptimizer) -> np.ndarray:
    """The rows of a pass of ``m`` deltas to profile (none when the re-optimizer does not)."""
    if not reopt.profiles or stage.config.p <= 0:
        return np.zeros(0, np.int64)
    out = np.empty(m, np.int64)
    taken = sample_rows(m, stage.config.p, 1, stage._rng_state, out)
    return out[:taken]


def profile_dropped(
    stage: MJoinStage, i: int, delta: Batch, gen: np.ndarray, rows: np.ndarray
) -> list[OrderChange]:
    """Profile tuples for dropped sampled deltas: which paths drop each (Section 8.2), each
    path evaluated on its own, then handed to the re-optimizer; its order changes."""
    if len(rows) == 0:
        return []
    pipe = stage.pipelines[i]
    bits = np.zeros((len(rows), pipe.size), np.uint8)
    reach: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for e in pipe.default_order():
        pcol, ecol = pipe.probe[e]
        p = pipe.parent[e]
        if p < 0:
            origin = np.arange(len(rows), dtype=np.int64)
            col = delta.columns[pcol]
            keys = join_keys(col, pcol)[rows]
        else:
            origin, pslots = reach[p]
            keys = stage.stores[pipe.inputs[p]].keys(pcol, pslots)
        store = stage.stores[pipe.inputs[e]]
        left, slots = store.indexes[ecol].expand(store.born, store.died, keys, gen[rows][origin])
        reach[e] = (origin[left], slots)
        hit = np.zeros(len(rows), np.bool_)
        hit[origin[left]] = True
        bits[:, e] = ~hit
    return stage.reopts[i].absorb(bits, stage.clock_ms(), stage.costs[i].values())
