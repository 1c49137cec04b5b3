"""``streamon experiment acache-memory``: Babu et al. (ICDE 2005) Sect. 7.5, Fig. 13.

How the plans use the memory they may give to join subresults, at Table 2's point D8 (the
inputs of ``streamon bench caching``, :mod:`processors.bench.caching_data`), the budget on the
x axis:

- ``MJoin``: A-Greedy without caches; it stores no subresults, so the budget changes nothing;
- ``XJoin``: the fastest of the 15 binary join trees whose intermediate relations fit the
  budget (none below the smallest tree's need: the paper's infeasible region). Each tree runs
  once and its peak subresult memory is measured, so this is the step function the paper says
  its XJoin curve should be;
- ``adaptive``: A-Greedy with adaptive caching under the budget
  (``OrderingConfig(caching=True, cache_memory_mb=...)``, Sects. 4.4 and 5: it chooses its
  caches from the profiled statistics and allocates the budget by priority). Its subresult
  memory is sampled after every chunk of deltas; the experiment fails if it ever exceeds the
  budget (the issue's "memory never above the budget").

Every plan's result rows must equal the MJoin's. Rate: input deltas per second of stage time,
in process, over the same chunks of deltas (as ``bench caching`` drives them). The budgets
are fractions of the smallest XJoin's need, so the figure has the paper's shape whatever this
machine's byte counts are; ``scale`` multiplies the number of arrivals (200,000 at 1).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from processors.bench.caching_data import NAMES, point_inputs
from processors.bench.caching_plans import (
    Run,
    agreedy_plan,
    alternate,
    drive,
    star_predicates,
    time_chunks,
    tree_plans,
)
from processors.core.ordering.config import OrderingConfig
from processors.experiments import plotting
from processors.experiments.runner import Experiment, runner
from processors.stages.mjoin_stage import MJoinStage

POINT = "d8"
TUPLES = 200_000
PER_CHUNK = 16_384
#: runs of the MJoin and of adaptive caching at each budget, taking turns (the best counts)
ROUNDS = 3
#: budgets, as fractions of the smallest XJoin's peak subresult memory
BUDGET_FRACTIONS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0)
COLUMNS = ["budget_kb", "MJoin", "XJoin", "adaptive", "adaptive_peak_kb", "xjoin_tree", "caches"]


def _adaptive(budget_bytes: int, seed: int) -> MJoinStage:
    config = OrderingConfig(seed=seed, caching=True, cache_memory_mb=budget_bytes / 2**20)
    return MJoinStage(list(NAMES), star_predicates(len(NAMES)), config)


def _check(run: Run, ref: Run, label: str) -> None:
    if (run.results, run.inserts) != (ref.results, ref.inserts):
        raise RuntimeError(f"acache-memory: {label} gave {run.results:,} result rows, "
                           f"the MJoin {ref.results:,}")  # fmt: skip


def measure(tuples: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The figure's rows (one per budget) and what they were measured on."""
    inputs, _sets, sizes = point_inputs(POINT, tuples, seed=seed + 1)
    chunks = time_chunks(inputs, PER_CHUNK)
    warm = time_chunks(point_inputs(POINT, max(tuples // 10, 2_000), seed=seed + 2)[0],
                       PER_CHUNK)  # fmt: skip
    mjoin = agreedy_plan(list(NAMES), seed)
    drive(mjoin.make(), warm)  # the kernels compile outside every timed run
    drive(_adaptive(1 << 20, seed), warm)
    ref = drive(mjoin.make(), chunks)
    trees = []
    for plan in tree_plans(list(NAMES)):
        run = drive(plan.make(), chunks, sample_every=1)
        _check(run, ref, plan.label)
        trees.append((plan.label, run))
    least = min(run.peak_bytes for _, run in trees)
    rows = []
    for fraction in BUDGET_FRACTIONS:
        budget = int(least * fraction)
        adaptive = partial(_adaptive, budget, seed)
        m_runs, a_runs = alternate([mjoin.make, adaptive], chunks, ROUNDS, sample_every=1)
        for again in m_runs:
            _check(again, ref, mjoin.label)
        for run in a_runs:
            _check(run, ref, f"adaptive caching at {budget:,} B")
            if run.peak_bytes > budget:
                raise RuntimeError(f"acache-memory: adaptive caching held {run.peak_bytes:,} B "
                                   f"of subresults under a budget of {budget:,} B")  # fmt: skip
        best_m = max([ref, *m_runs], key=lambda r: r.rate)
        run = max(a_runs, key=lambda r: r.rate)
        fitting = [(label, r) for label, r in trees if r.peak_bytes <= budget]
        best = max(fitting, key=lambda t: t[1].rate, default=None)
        caches = run.stats.get("caches", {})
        rows.append({
            "budget_kb": budget / 1024,
            "MJoin": best_m.rate,
            "XJoin": best[1].rate if best else None,
            "adaptive": run.rate,
            "adaptive_peak_kb": run.peak_bytes / 1024,
            "xjoin_tree": best[0] if best else "infeasible",
            "caches": " ".join(sorted(caches)) or "none",
        })  # fmt: skip
    about = {
        "point": POINT,
        "window_sizes": sizes,
        "deltas": ref.deltas,
        "results": ref.results,
        "least_xjoin_kb": least / 1024,
        "xjoins": {label: (run.rate, run.peak_bytes) for label, run in trees},
    }
    return rows, about


def memory(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Fig. 13: rates of the MJoin, the best fitting XJoin and adaptive caching by budget."""
    tuples = max(20_000, int(TUPLES * scale))
    rows, about = measure(tuples, seed)
    notes = [
        f"acache-memory: A-Caching Sect. 7.5 Fig. 13 at Table 2's {POINT}, {tuples:,} arrivals, "
        f"{about['deltas']:,} deltas, {about['results']:,} result rows from every plan",
        f"the smallest XJoin needs {about['least_xjoin_kb']:.1f} KB of subresults; budgets are "
        f"fractions {list(BUDGET_FRACTIONS)} of it",
        "rates: input deltas per second of stage time, in process; XJoin: the fastest tree "
        "that fits (empty: none fits)",
    ]
    table = [{**r, "XJoin": "" if r["XJoin"] is None else r["XJoin"]} for r in rows]
    csv = plotting.write_csv(out / "acache-memory.csv", table, COLUMNS, notes)
    xs = [r["budget_kb"] for r in rows]
    png = plotting.line_plot(
        out / "acache-memory.png", "Fig. 13: adaptivity to the memory budget (D8)",
        "memory for join subresults (KB)", "deltas / s", xs,
        {k: [r[k] for r in rows] for k in ("MJoin", "XJoin", "adaptive")},
    )  # fmt: skip
    return [csv, png]


EXPERIMENTS: dict[str, Experiment] = {"acache-memory": memory}

run_experiment = runner(EXPERIMENTS)
