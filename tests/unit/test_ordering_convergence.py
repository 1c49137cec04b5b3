"""Under stable statistics A-Greedy converges to the Greedy Invariant order, and so does Sweep.

The oracle is Static Greedy over the exact statistics (an enumeration of the value domain).
Instances are drawn at random and kept only when every greedy choice wins by a clear margin,
so that the GI order is unique and sampling noise cannot make a second order valid.
"""

from __future__ import annotations

import numpy as np
import pytest

from processors.core.batch import Batch
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.static import static_greedy
from processors.core.predicates import IsIn
from processors.stages.filter_stage import FilterStage

DOMAIN = 200


def greedy_margins(drops: np.ndarray, costs: np.ndarray, order: list[int]) -> float:
    """The smallest ratio best / runner-up over the greedy choices that still have a choice."""
    alive = np.ones(len(drops), dtype=bool)
    worst = np.inf
    left = list(range(drops.shape[1]))
    for f in order[:-1]:
        scores = sorted((drops[alive][:, g].sum() / costs[g] for g in left), reverse=True)
        worst = min(worst, scores[0] / max(scores[1], 1e-9))
        left.remove(f)
        alive &= ~drops[:, f]
    return float(worst)


def instance(seed: int, n: int) -> tuple[list[set[int]], np.ndarray, list[int]]:
    """Random filters with a clear GI order; values below 20 pass every filter."""
    rng = np.random.default_rng(seed)
    while True:
        sets = []
        for _ in range(n):
            keep = rng.random(DOMAIN) < rng.uniform(0.2, 0.9)
            keep[:20] = True
            sets.append(set(np.flatnonzero(keep).tolist()))
        costs = rng.choice([1.0, 2.0, 3.0], size=n)
        drops = np.array([[v not in s for s in sets] for v in range(DOMAIN)])
        order = static_greedy(drops, costs)
        if greedy_margins(drops, costs, order) > 1.5:
            return sets, costs, order


def run(stage: FilterStage, seed: int, batches: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(batches):
        v = rng.integers(0, DOMAIN, 10_000)
        stage.process(Batch({"v": v}, np.ones(len(v), np.int8), np.zeros(len(v), np.int64)))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_agreedy_and_sweep_converge_to_the_static_greedy_order(seed: int) -> None:
    n = 5
    sets, costs, greedy = instance(seed, n)
    start = greedy[::-1]  # as far from the answer as possible
    final = {}
    for algorithm in ("agreedy_exact", "sweep"):
        config = OrderingConfig(
            algorithm,
            profile_probability=0.5,
            window_tuples=4000,
            min_profile_tuples=1000,
            costs=tuple(costs),
            seed=seed,
        )
        stage = FilterStage(
            [IsIn("v", sorted(s), name=f"F{i}") for i, s in enumerate(sets)],
            config,
            initial_order=start,
        )
        run(stage, seed, 80)
        final[algorithm] = stage.order
        assert stage.changes_total > 0
    assert final["agreedy_exact"] == greedy
    assert final["sweep"] == greedy
