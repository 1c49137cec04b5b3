"""How the Section 9 experiments measure (:mod:`.filters` says why): the closed-form
pass table and optimal order, the contenders, meters that time ``stage.process`` of stages
taking turns on the same batches, and the shared output helpers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from processors.bench.filters import turns_both_parities, workload_predicates
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.static import optimal_order_from_passes, order_cost_from_passes
from processors.experiments import plotting
from processors.stages.filter_stage import BREAKDOWN, FilterStage
from processors.workloads.filters import FilterWorkload, FilterWorkloadRun, copy_probability

LABEL = {
    "optimal": "Optimal",
    "agreedy_exact": "A-Greedy",
    "agreedy": "A-Greedy+",
    "sweep": "Sweep",
    "independent": "Independent",
    "localswaps": "LocalSwaps",
}
# the paper's algorithms (A-Greedy exactly as published) and streamon's default, A-Greedy+
ADAPTIVE = ("agreedy_exact", "agreedy", "sweep", "independent", "localswaps")
OVERHEAD = BREAKDOWN[1:]  # everything but tuple processing: the cost of adapting

CONVERGENCE_BATCH = 65_536  # as in `bench filters`: per-batch Python overhead is a small share
TIMELINE_BATCH = 2_000  # Figs 16-18 plot filters evaluated per 2000 input tuples
CHANGE_BATCH = 10_000  # Figs 19-21: small enough that a period spans several batches

CONVERGENCE_COLUMNS = [
    "algorithm", "tuples", "tuples_per_s", "ns_per_tuple",
    *(f"{part}_ns" for part in BREAKDOWN),
    "overhead_pct", "probes_per_tuple", "profile_evaluations_per_tuple", "excess_work_pct",
    "order_cost", "optimal_cost", "is_optimal", "order", "changes",
]  # fmt: skip

# ---------------------------------------------------------------------------------------------
# The workload's distribution in closed form
# ---------------------------------------------------------------------------------------------


def group_pass_probability(selectivity: float, agreement: float, k: int) -> float:
    """P(k given members of one group all pass).

    Members copy the group's shared bit (probability q) or draw their own (selectivity s), so
    given the shared bit they are independent: s (q + (1-q) s)^k + (1-s) ((1-q) s)^k.
    """
    if k == 0:
        return 1.0
    s = float(selectivity)
    q = copy_probability(s, agreement)
    return s * (q + (1 - q) * s) ** k + (1 - s) * ((1 - q) * s) ** k


def pass_table(
    workload: FilterWorkload, group_selectivities: Sequence[float] | None = None
) -> np.ndarray:
    """``out[S]`` = P(no filter in bit-set S drops a tuple), exactly, for every S (2^n).

    Groups are independent, so it is the product over groups of
    :func:`group_pass_probability` for the members of S in the group.
    """
    n = workload.n
    sel = (
        workload.group_selectivities
        if group_selectivities is None
        else np.asarray(group_selectivities, np.float64)
    )
    group_of = workload.group_of
    per_group = [
        [group_pass_probability(s, workload.agreement, k) for k in range(n + 1)] for s in sel
    ]
    out = np.ones(1 << n)
    for mask in range(1, 1 << n):
        counts = np.bincount(group_of[[i for i in range(n) if mask >> i & 1]], minlength=len(sel))
        out[mask] = math.prod(per_group[g][int(k)] for g, k in enumerate(counts))
    return out


# eq. 1 and Optimal over a pass table: the same functions the bench and tests use
expected_cost = order_cost_from_passes
exact_optimal = optimal_order_from_passes


def selectivity_sequence(workload: FilterWorkload, changes: int) -> list[np.ndarray]:
    """The group selectivities of phases 0..changes of a workload with ``change_every``.

    The workload draws its permutations from one seeded generator whatever the window and
    period, so a run with a 1-key window changing after every tuple replays them cheaply.
    """
    probe = FilterWorkloadRun(replace(workload, window=1, window_rate=0.0, change_every=1))
    out = [probe.group_selectivities]
    probe.next_batch(1)
    for _ in range(changes):
        probe.next_batch(1)
        out.append(probe.group_selectivities)
    return out


# ---------------------------------------------------------------------------------------------
# Running stages
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    """One stage of a comparison: an algorithm key (``LABEL``), its config and first order."""

    key: str
    config: OrderingConfig
    initial_order: tuple[int, ...] | None = None

    @property
    def label(self) -> str:
        return LABEL[self.key]


def contenders(
    algorithms: Sequence[str],
    costs: Sequence[int],
    seed: int,
    p: float | None = None,
    optimal: Sequence[int] | None = None,
) -> list[Contender]:
    """Optimal (if its order is given) and the adaptive algorithms with fixed costs; ``p`` None
    means the Table 1 default of each algorithm."""
    fixed = tuple(float(c) for c in costs)
    out = (
        []
        if optimal is None
        else [  # fixed costs: no timing either, so no overhead at all
            Contender(
                "optimal", OrderingConfig("fixed", costs=fixed), tuple(int(f) for f in optimal)
            )
        ]
    )
    for a in algorithms:
        config = OrderingConfig(a, profile_probability=p, costs=fixed, seed=seed)  # type: ignore[arg-type]
        out.append(Contender(a, config))
    return out


def scaled(tuples: int, scale: float, batch: int) -> int:
    """``tuples * scale`` rounded to whole batches, at least one batch."""
    return max(batch, round(tuples * scale / batch) * batch)


_warmed: set[int] = set()  # the numbers of filters warmed up


def warm_up(workload: FilterWorkload | None = None) -> None:
    """Load every kernel once for ``workload``'s number of filters (numba compiles or reads
    its cache on first call, once per signature, and a tuple of n columns is a type of its
    own), so that no measured stage pays for it (the first of Fig. 19's periods once paid
    15-60 ms of it, a fifth of a stage's time there)."""
    workload = workload or FilterWorkload(n=3)
    n = workload.n
    if n in _warmed:
        return
    # its selectivities changing every 20,000 tuples: A-Greedy+ also reaches p's floor (its
    # unprofiled batches' own kernel) and detects drift (emptying the window, profiling the
    # rest of the batch again), at a high p and at the default one
    run = FilterWorkloadRun(replace(workload, change_every=20_000, seed=99))
    preds = workload_predicates(run)
    stages = [
        FilterStage(preds, OrderingConfig(a, profile_probability=p, min_profile_tuples=1))  # type: ignore[arg-type]
        for a in (*ADAPTIVE, "fixed")
        for p in (0.5, None)
    ]
    for _ in range(12):
        batch, _ = run.next_batch(10_000)
        for stage in stages:
            stage.process(batch)
    _warmed.add(n)


class Meter:
    """A stage, the stage time spent in it, and the counters at the start of a measurement."""

    def __init__(self, contender: Contender, predicates: list[Any]) -> None:
        self.contender = contender
        order = None if contender.initial_order is None else list(contender.initial_order)
        self.stage = FilterStage(predicates, contender.config, contender.label, order)
        self.spent_ns = 0
        self.mark()

    def mark(self) -> None:
        s = self.stage
        self.spent_ns = 0
        self.ns0 = dict(s.ns)
        self.eval0 = s.evaluations.copy()
        self.prof0 = s.profile_evaluations.copy()
        self.changes0 = s.changes_total
        self.tuples0 = s.tuples_in

    def process(self, batch: Any) -> None:
        # the thread's CPU time, as ``bench filters``: on the shared 2-core machine wall time
        # charged whichever stage was running with the moments other processes had the core
        t0 = time.thread_time_ns()
        self.stage.process(batch)
        self.spent_ns += time.thread_time_ns() - t0

    def summary(self, probes: Sequence[int], table: np.ndarray) -> dict[str, Any]:
        """Rate, breakdown (ns per tuple), probes per tuple and the order, since ``mark``."""
        s = self.stage
        tuples = s.tuples_in - self.tuples0
        parts = {k: s.ns[k] - self.ns0[k] for k in BREAKDOWN}
        total = sum(parts.values())
        evals = s.evaluations - self.eval0
        order_cost = expected_cost(s.order, table, probes)
        row: dict[str, Any] = {
            "algorithm": self.contender.label,
            "tuples": tuples,
            "tuples_per_s": tuples / (self.spent_ns / 1e9) if self.spent_ns else 0.0,
            "ns_per_tuple": self.spent_ns / tuples if tuples else 0.0,
            "overhead_pct": 100.0 * sum(parts[k] for k in OVERHEAD) / total if total else 0.0,
            "probes_per_tuple": float(evals @ np.asarray(probes)) / tuples if tuples else 0.0,
            "profile_evaluations_per_tuple": (
                float((s.profile_evaluations - self.prof0).sum()) / tuples if tuples else 0.0
            ),
            "order_cost": order_cost,
            "order": " ".join(s.order_names),
            "changes": s.changes_total - self.changes0,
        }
        for k in BREAKDOWN:
            row[f"{k}_ns"] = parts[k] / tuples if tuples else 0.0
        return row


def process_in_turns(meters: Sequence[Meter], batch: Any, turn: int) -> None:
    """Every stage processes the batch, in the order of ``turn`` in a design balanced for
    carry-over, each row on batches of both parities (``bench.filters.turns_both_parities``).

    Not a rotation: with the stages in a fixed cycle each always ran right after the same other
    stage, and what that one left in the caches moved a stage's time by several percent (two
    copies of A-Greedy+, behaving identically, measured 5.6% apart at Fig. 19's period of
    20,000 by their places in the list; docs/experiments.md)."""
    rows = turns_both_parities(len(meters))
    for j in rows[turn % len(rows)]:
        meters[j].process(batch)


def measure_converged(
    workload: FilterWorkload,
    entries: Sequence[Contender],
    warmup: int,
    measure: int,
    batch: int = CONVERGENCE_BATCH,
) -> list[dict[str, Any]]:
    """Rates and breakdowns under stable statistics (Section 9.2-9.3): ``warmup`` tuples to
    converge (not timed), then ``measure`` tuples timed. One row per contender."""
    warm_up(workload)
    run = FilterWorkloadRun(workload)
    preds = workload_predicates(run)
    meters = [Meter(c, preds) for c in entries]
    done = 0
    while done < warmup:
        b, _ = run.next_batch(batch)
        for m in meters:
            m.stage.process(b)
        done += len(b)
    for m in meters:
        m.mark()
    done, turn = 0, 0
    while done < measure:
        b, _ = run.next_batch(batch)
        process_in_turns(meters, b, turn)
        done += len(b)
        turn += 1
    table = pass_table(workload)
    _, optimal_cost = exact_optimal(table, workload.probes)
    rows = []
    for m in meters:
        row = m.summary(workload.probes, table)
        row["optimal_cost"] = optimal_cost
        row["is_optimal"] = row["order_cost"] <= optimal_cost * (1 + 1e-9)
        # the work of the orders used while measured, over the optimum's (sampling noise ~0.1%)
        row["excess_work_pct"] = 100.0 * (row["probes_per_tuple"] / optimal_cost - 1.0)
        rows.append(row)
    return rows


def measure_total(
    workload: FilterWorkload, entries: Sequence[Contender], tuples: int, batch: int = CHANGE_BATCH
) -> list[dict[str, Any]]:
    """Total stage time over a workload whose selectivities change (Section 9.4), every stage
    starting from the identity order; plus what per-phase optimal orders would cost."""
    warm_up(workload)
    run = FilterWorkloadRun(workload)
    preds = workload_predicates(run)
    meters = [Meter(c, preds) for c in entries]
    done, turn = 0, 0
    while done < tuples:
        b, _ = run.next_batch(min(batch, tuples - done))
        process_in_turns(meters, b, turn)
        done += len(b)
        turn += 1
    # the oracle: each phase run in its own exact optimal order (no adapting, no overhead)
    period = workload.change_every or tuples
    phases = (
        selectivity_sequence(workload, (tuples - 1) // period)
        if workload.change_every
        else [workload.group_selectivities]
    )
    oracle = 0.0
    for i, sel in enumerate(phases):
        length = min(period, tuples - i * period)
        oracle += length * exact_optimal(pass_table(workload, sel), workload.probes)[1]
    rows = []
    for m in meters:
        row = m.summary(workload.probes, pass_table(workload, phases[-1]))
        rows.append(
            {
                "algorithm": row["algorithm"],
                "tuples": row["tuples"],
                "total_s": m.spent_ns / 1e9,
                "processing_s": row["tuple_processing_ns"] * row["tuples"] / 1e9,
                "probes_per_tuple": row["probes_per_tuple"],
                "oracle_probes_per_tuple": oracle / tuples,
                "overhead_pct": row["overhead_pct"],
                "changes": row["changes"],
                "selectivity_changes": len(phases) - 1,
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------
# Output helpers
# ---------------------------------------------------------------------------------------------


def run_notes(name: str, scale: float, seed: int, lines: Sequence[str]) -> list[str]:
    return [
        f"{name}: reproduction of Babu et al. 2004, Section 9 (streamon experiment {name})",
        f"scale={scale:g} seed={seed}; times are stage.process only, on this machine",
        "costs given to the re-optimizers = probes per tuple (fixed, not measured); "
        "Optimal = exact optimal order of the workload's true distribution",
        *lines,
    ]


def label_series(
    rows: Sequence[dict[str, Any]], x: str, y: str, xs: Sequence[Any], scale_y: float = 1.0
) -> dict[str, list[float | None]]:
    """``{label: [y at each x]}`` from long-format rows."""
    out: dict[str, list[float | None]] = {}
    for label in LABEL.values():
        values: list[float | None] = []
        for xv in xs:
            hit = [r[y] for r in rows if r["algorithm"] == label and r[x] == xv]
            values.append(float(hit[0]) * scale_y if hit else None)
        if any(v is not None for v in values):
            out[label] = values
    return out


def breakdown_plot(
    path: Path,
    title: str,
    rows: Sequence[dict[str, Any]],
    x: str,
    xs: Sequence[Any],
    group_label: str,
) -> Path:
    """Stacked bars per x and algorithm: tuple processing and the four overhead tasks (ns per
    tuple), as in Figs 13 and 15."""
    labels = [lab for lab in LABEL.values() if any(r["algorithm"] == lab for r in rows)]
    values = {}
    for r in rows:
        for part in BREAKDOWN:
            values[(str(r[x]), r["algorithm"], part)] = float(r[f"{part}_ns"])
    return plotting.stacked_bars(
        path,
        title,
        "stage time (ns per tuple)",
        [str(v) for v in xs],
        labels,
        list(BREAKDOWN),
        values,
        group_label,
    )


def cost_split(c: int) -> list[int]:
    """n = 8: filters F1-F4 (groups 1-2) cost one probe, F5-F8 (groups 3-4) cost c."""
    return [1, 1, 1, 1, c, c, c, c]
