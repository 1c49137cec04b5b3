"""Reproductions of Section 9 of Babu et al. (SIGMOD 2004): Figs 9-21 and Table 2.

Every experiment runs :class:`FilterStage` on the Section 9 workload
(:mod:`processors.workloads.filters`: n index-probe filters, correlation factor Γ, Table 1
defaults) and writes a CSV and PNG(s) into an output directory. ``scale`` multiplies the tuple
counts (1.0 = full size, a minute or so per experiment on a 2-core VM; tests use ~0.01). The
x-axis values never scale.

How the measurements are made, and why:

- Time is ``stage.process`` only (perf_counter around the call): data generation and window
  sliding happen in ``next_batch``, outside the timer. Rates are tuples per second of that time.
- Stages compared in one experiment point process the *same* batches, taking turns at going
  first (the one going second finds the batch in cache), as ``bench filters`` does.
- The re-optimizers get the filters' costs as fixed numbers (probes per tuple, the paper's c)
  instead of measured times, so that every order, count and change is a deterministic function
  of the seed; only the timing columns vary between runs.
- Optimal is a fixed-order stage running the exact optimal order for the workload's true
  distribution. The distribution is known in closed form (:func:`pass_table`), so the order is
  found by dynamic programming over subsets instead of a search over a sample; expected costs
  (``order_cost``, ``*_expected``) come from the same closed form.
"""

from __future__ import annotations

from processors.experiments.filters_changes import (
    fig16_18,
    fig19,
    fig20_21,
    timeline,
    timeline_workloads,
)
from processors.experiments.filters_convergence import (
    fig9,
    fig10,
    fig11,
    fig12_13,
    fig14_15,
    table2,
)
from processors.experiments.filters_measure import (
    CONVERGENCE_COLUMNS,
    exact_optimal,
    expected_cost,
    pass_table,
    scaled,
    selectivity_sequence,
)
from processors.experiments.runner import Experiment, runner

__all__ = [
    "CONVERGENCE_COLUMNS",
    "EXPERIMENTS",
    "exact_optimal",
    "expected_cost",
    "pass_table",
    "run_experiment",
    "scaled",
    "selectivity_sequence",
    "timeline",
    "timeline_workloads",
]

EXPERIMENTS: dict[str, Experiment] = {
    "fig9": fig9,
    "fig10": fig10,
    "fig11": fig11,
    "table2": table2,
    "fig12_13": fig12_13,
    "fig14_15": fig14_15,
    "fig16_18": fig16_18,
    "fig19": fig19,
    "fig20_21": fig20_21,
}

run_experiment = runner(EXPERIMENTS)
