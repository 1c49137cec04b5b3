"""``bench filters``' adaptivity figure: tuples to settle after a change, A-Greedy+ against
the paper's A-Greedy in the same run.

The 8-random-changes runs of Figs 16-18 (:func:`processors.experiments.filters_changes.
timeline`): n = 8, Γ = 2, one random permutation of the group selectivities after 600,000
tuples, batches of 2000, every stage from the identity order, fixed unit costs, Table 1
defaults. Settling is :func:`~processors.experiments.filters_changes.settle_tuples`: tuples
after the change until the expected cost of the order in use is within 5% of the new optimal
order's, and stays so to the end of the run (600,000 tuples after the change).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from processors.experiments.filters_changes import (
    TIMELINE_CHANGE,
    TIMELINE_RUNS,
    settle_tuples,
    timeline,
    timeline_workloads,
)

ALGORITHMS = ("agreedy", "agreedy_exact")


def settle_runs(runs: int = TIMELINE_RUNS, seed: int = 0) -> dict[str, Any]:
    """Per algorithm, the median (and each run's) tuples to settle over ``runs`` changes whose
    old optimal order costs at least 1.1 times the new optimum (as Figs 16-18's summary)."""
    per: dict[str, list[int]] = {a: [] for a in ALGORITHMS}
    seeds = []
    for workload, _ in itertools.islice(timeline_workloads(TIMELINE_CHANGE, seed, 1.1), runs):
        rows, _ = timeline(workload, seed, ALGORITHMS)
        seeds.append(workload.seed)
        for a in ALGORITHMS:
            per[a].append(settle_tuples(rows, a, TIMELINE_CHANGE))
    return {
        "settle_tuples_median": float(np.median(per["agreedy"])),
        "agreedy_exact_settle_tuples_median": float(np.median(per["agreedy_exact"])),
        "settle_runs": {"workload_seeds": seeds, **per},
    }
