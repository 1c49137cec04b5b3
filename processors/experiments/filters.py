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

import itertools
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from processors.bench.filters import workload_predicates
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.static import optimal_order_from_passes, order_cost_from_passes
from processors.experiments import plotting
from processors.stages.filter_stage import BREAKDOWN, FilterStage
from processors.workloads.filters import FilterWorkload, FilterWorkloadRun, copy_probability

LABEL = {
    "optimal": "Optimal",
    "agreedy": "A-Greedy",
    "sweep": "Sweep",
    "independent": "Independent",
    "localswaps": "LocalSwaps",
}
ADAPTIVE = ("agreedy", "sweep", "independent", "localswaps")
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


_warmed = False


def warm_up() -> None:
    """Load every kernel once (numba compiles or reads its cache on first call), so that no
    measured stage pays for it."""
    global _warmed
    if _warmed:
        return
    run = FilterWorkloadRun(FilterWorkload(n=3, window=1000, seed=99))
    preds = workload_predicates(run)
    stages = [
        FilterStage(preds, OrderingConfig(a, profile_probability=0.5, min_profile_tuples=1))  # type: ignore[arg-type]
        for a in (*ADAPTIVE, "fixed")
    ]
    for _ in range(3):
        batch, _ = run.next_batch(2000)
        for stage in stages:
            stage.process(batch)
    _warmed = True


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
        t0 = time.perf_counter_ns()
        self.stage.process(batch)
        self.spent_ns += time.perf_counter_ns() - t0

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
    """Every stage processes the batch; who goes first rotates with ``turn``."""
    k = len(meters)
    for j in range(k):
        meters[(turn + j) % k].process(batch)


def measure_converged(
    workload: FilterWorkload,
    entries: Sequence[Contender],
    warmup: int,
    measure: int,
    batch: int = CONVERGENCE_BATCH,
) -> list[dict[str, Any]]:
    """Rates and breakdowns under stable statistics (Section 9.2-9.3): ``warmup`` tuples to
    converge (not timed), then ``measure`` tuples timed. One row per contender."""
    warm_up()
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
    warm_up()
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


def _notes(name: str, scale: float, seed: int, lines: Sequence[str]) -> list[str]:
    return [
        f"{name}: reproduction of Babu et al. 2004, Section 9 (streamon experiment {name})",
        f"scale={scale:g} seed={seed}; times are stage.process only, on this machine",
        "costs given to the re-optimizers = probes per tuple (fixed, not measured); "
        "Optimal = exact optimal order of the workload's true distribution",
        *lines,
    ]


def _series(
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


def _breakdown_plot(
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


# ---------------------------------------------------------------------------------------------
# The experiments
# ---------------------------------------------------------------------------------------------

WARMUP = 1_000_000
MEASURE = 4_000_000


def _convergence_sweep(
    x: str,
    xs: Sequence[Any],
    make: Callable[[Any], FilterWorkload],
    algorithms: Sequence[str],
    scale: float,
    seed: int,
    p: float | None = None,
) -> list[dict[str, Any]]:
    rows = []
    for xv in xs:
        workload = make(xv)
        optimal, _ = exact_optimal(pass_table(workload), workload.probes)
        entries = contenders(algorithms, workload.probes, seed, p, optimal)
        for row in measure_converged(
            workload,
            entries,
            scaled(WARMUP, scale, CONVERGENCE_BATCH),
            scaled(MEASURE, scale, CONVERGENCE_BATCH),
        ):
            rows.append({x: xv, **row})
    return rows


def _rate_plot(
    path: Path, title: str, rows: list[dict[str, Any]], x: str, xs: Sequence[Any], xlabel: str
) -> Path:
    return plotting.line_plot(
        path,
        title,
        xlabel,
        "rate (million tuples/s of stage time)",
        list(xs),
        _series(rows, x, "tuples_per_s", xs, 1e-6),
    )


def _sizes_note(scale: float) -> str:
    return (
        f"per point: {scaled(WARMUP, scale, CONVERGENCE_BATCH):,} tuples to converge (untimed), "
        f"then {scaled(MEASURE, scale, CONVERGENCE_BATCH):,} timed, batches of "
        f"{CONVERGENCE_BATCH:,}"
    )


def _convergence_figure(
    out: Path,
    name: str,
    x: str,
    xs: Sequence[Any],
    make_workload: Callable[[Any], FilterWorkload],
    setup: Sequence[str],
    title: str,
    xlabel: str,
    scale: float,
    seed: int,
) -> list[Path]:
    """Figs 9-11: A-Greedy, Independent and Optimal under stable statistics, one x per point."""
    rows = _convergence_sweep(x, xs, make_workload, ("agreedy", "independent"), scale, seed)
    notes = _notes(name, scale, seed, [*setup, _sizes_note(scale)])
    return [
        plotting.write_csv(out / f"{name}.csv", rows, [x, *CONVERGENCE_COLUMNS], notes),
        _rate_plot(out / f"{name}.png", title, rows, x, xs, xlabel),
    ]


def fig9(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Fig 9: rate vs number of filters n under stable statistics (Table 1 defaults)."""
    return _convergence_figure(
        out, "fig9", "n", list(range(2, 11)), lambda n: FilterWorkload(n=n, seed=seed),
        [
            "Γ=2, selectivity 0.5, cost 1 probe, p=0.01 (A-Greedy) / 0.005 (Independent)",
            "Optimal shown for every n (exact DP), not only small n",
        ],
        "Fig 9: effect of the number of filters", "number of filters n", scale, seed,
    )  # fmt: skip


def fig10(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Fig 10: rate vs the filters' (unconditional) selectivity, n = 8."""
    return _convergence_figure(
        out, "fig10", "selectivity", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
        lambda sel: FilterWorkload(n=8, selectivity=sel, seed=seed),
        ["n=8, Γ=2, every group the same selectivity, cost 1 probe, Table 1 p"],
        "Fig 10: effect of selectivity (n=8)", "filter selectivity", scale, seed,
    )  # fmt: skip


def fig11(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Fig 11: rate vs the correlation factor Γ, n = 8."""
    return _convergence_figure(
        out, "fig11", "gamma", list(range(1, 9)),
        lambda g: FilterWorkload(n=8, gamma=g, seed=seed),
        ["n=8, selectivity 0.5, cost 1 probe, Table 1 p"],
        "Fig 11: effect of correlation (n=8)", "correlation factor Γ", scale, seed,
    )  # fmt: skip


def table2(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Table 2: A-Greedy's run-time breakdown (percent of stage time) for n = 3, 8 and
    p = 0.01, 0.05; both p of one n run on the same batches."""
    rows = []
    for n in (3, 8):
        workload = FilterWorkload(n=n, seed=seed)
        entries = [
            Contender(
                "agreedy",
                OrderingConfig("agreedy", profile_probability=p, costs=(1.0,) * n, seed=seed),
            )
            for p in (0.01, 0.05)
        ]
        measured = measure_converged(
            workload,
            entries,
            scaled(WARMUP, scale, CONVERGENCE_BATCH),
            scaled(MEASURE, scale, CONVERGENCE_BATCH),
        )
        for p, row in zip((0.01, 0.05), measured, strict=True):
            total = sum(row[f"{k}_ns"] for k in BREAKDOWN)
            rows.append(
                {
                    "n": n,
                    "p": p,
                    "tuples": row["tuples"],
                    "tuples_per_s": row["tuples_per_s"],
                    **{k: 100.0 * row[f"{k}_ns"] / total for k in BREAKDOWN},
                    "probes_per_tuple": row["probes_per_tuple"],
                    "profile_evaluations_per_tuple": row["profile_evaluations_per_tuple"],
                }
            )
    columns = [
        "n",
        "p",
        "tuples",
        "tuples_per_s",
        *BREAKDOWN,
        "probes_per_tuple",
        "profile_evaluations_per_tuple",
    ]
    notes = _notes(
        "table2",
        scale,
        seed,
        [
            "columns tuple_processing..violations: percent of A-Greedy's stage time (Section 4.4)",
            _sizes_note(scale),
        ],
    )
    groups = [f"n={r['n']}, p={r['p']}" for r in rows]
    values = {
        (g, "A-Greedy", k): float(r[k])
        for g, r in zip(groups, rows, strict=True)
        for k in BREAKDOWN
    }
    return [
        plotting.write_csv(out / "table2.csv", rows, columns, notes),
        plotting.stacked_bars(
            out / "table2.png",
            "Table 2: A-Greedy run-time breakdown",
            "percent of stage time",
            groups,
            ["A-Greedy"],
            list(BREAKDOWN),
            values,
        ),
    ]


def fig12_13(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Figs 12-13: all four algorithms and Optimal vs n at p = 0.05: rates and breakdowns."""
    xs = list(range(2, 11))
    rows = _convergence_sweep(
        "n",
        xs,
        lambda n: FilterWorkload(n=n, seed=seed),
        ADAPTIVE,
        scale,
        seed,
        p=0.05,
    )
    notes = _notes(
        "fig12_13",
        scale,
        seed,
        [
            "Γ=2, selectivity 0.5, cost 1 probe, p=0.05 for every algorithm, Table 1 windows",
            "*_ns columns: stage time per tuple in each task of Section 4.4 (Fig 13)",
            _sizes_note(scale),
        ],
    )
    return [
        plotting.write_csv(out / "fig12_13.csv", rows, ["n", *CONVERGENCE_COLUMNS], notes),
        _rate_plot(
            out / "fig12.png",
            "Fig 12: all algorithms (p=0.05)",
            rows,
            "n",
            xs,
            "number of filters n",
        ),
        _breakdown_plot(
            out / "fig13.png",
            "Fig 13: run-time breakdown for Fig 12",
            rows,
            "n",
            [2, 4, 6, 8, 10],
            "number of filters n",
        ),
    ]


EXPENSIVE_COSTS = (1, 10, 50, 100)


def _cost_split(c: int) -> list[int]:
    """n = 8: filters F1-F4 (groups 1-2) cost one probe, F5-F8 (groups 3-4) cost c."""
    return [1, 1, 1, 1, c, c, c, c]


def fig14_15(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Figs 14-15: n = 8, four filters of cost 1 and four of cost c: rates and breakdowns."""
    xs = list(EXPENSIVE_COSTS)
    rows = _convergence_sweep(
        "cost",
        xs,
        lambda c: FilterWorkload(n=8, costs=_cost_split(c), seed=seed),
        ADAPTIVE,
        scale,
        seed,
    )
    notes = _notes(
        "fig14_15",
        scale,
        seed,
        [
            "n=8, Γ=2, selectivity 0.5; F1-F4 one probe, F5-F8 c probes; Table 1 p and windows",
            "probes_per_tuple and order_cost are in probes (cost-weighted evaluations)",
            _sizes_note(scale),
        ],
    )
    return [
        plotting.write_csv(out / "fig14_15.csv", rows, ["cost", *CONVERGENCE_COLUMNS], notes),
        plotting.line_plot(
            out / "fig14.png",
            "Fig 14: effect of filter cost (n=8)",
            "cost c of the expensive filters (probes)",
            "rate (million tuples/s of stage time)",
            xs,
            _series(rows, "cost", "tuples_per_s", xs, 1e-6),
            logy=True,
        ),
        _breakdown_plot(
            out / "fig15.png",
            "Fig 15: run-time breakdown for Fig 14",
            rows,
            "cost",
            xs,
            "cost c of the expensive filters",
        ),
    ]


TIMELINE_SELECTIVITY = (0.2, 0.4, 0.6, 0.8)  # per group of Γ = 2
TIMELINE_CHANGE = 600_000
TIMELINE_RUNS = 8  # changes averaged in fig16_18_summary.csv


def timeline_workloads(
    change: int, seed: int, min_ratio: float, skip: int = 0
) -> Iterator[tuple[FilterWorkload, float]]:
    """Timeline workloads (n = 8, one change after ``change`` tuples) whose change matters:
    workload seeds ``seed * 1000 + k``, k = ``skip``, ``skip`` + 1, ..., kept when the old
    optimal order costs at least ``min_ratio`` times the new optimum after the permutation.
    Yields each with that ratio."""
    costs = [1] * 8
    for k in range(skip, 1000):
        workload = FilterWorkload(
            n=8,
            gamma=2,
            selectivity=TIMELINE_SELECTIVITY,
            change_every=change,
            seed=seed * 1000 + k,
        )
        before, after = (pass_table(workload, s) for s in selectivity_sequence(workload, 1))
        old, _ = exact_optimal(before, costs)
        ratio = expected_cost(old, after, costs) / exact_optimal(after, costs)[1]
        if ratio >= min_ratio:
            yield workload, ratio


def timeline(
    workload: FilterWorkload, seed: int = 0
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Figs 16-18's run: the four algorithms from the identity order on a workload with one
    change at ``change_every``, for twice that many tuples, in batches of 2000.

    Per batch: each algorithm's filters evaluated (``last_evaluations``) and the expected
    number for the order it used (``*_expected``); ``optimal`` is the phase's optimal order on
    the same batch.
    """
    warm_up()
    batch = TIMELINE_BATCH
    costs = [1] * workload.n
    change = int(workload.change_every or 0)
    total = 2 * change
    phases = selectivity_sequence(workload, 1)
    tables = [pass_table(workload, s) for s in phases]
    optimal = [exact_optimal(t, costs) for t in tables]
    run = FilterWorkloadRun(workload)
    preds = workload_predicates(run)
    meters = [Meter(c, preds) for c in contenders(ADAPTIVE, costs, seed)]
    rows: list[dict[str, Any]] = []
    done = 0
    while done < total:
        b, passes = run.next_batch(batch)
        phase = 0 if done < change else 1
        drops = ~passes
        row: dict[str, Any] = {
            "tuples": done + batch,
            "phase": phase,
            "optimal": _evaluated(optimal[phase][0], drops),
            "optimal_expected": optimal[phase][1] * batch,
        }
        for m in meters:
            order = m.stage.order
            m.process(b)
            key = m.contender.key
            row[key] = m.stage.last_evaluations
            if row[key] != _evaluated(order, drops):
                raise RuntimeError(f"{key}: evaluations disagree with the workload's truth")
            row[f"{key}_expected"] = expected_cost(order, tables[phase], costs) * batch
        rows.append(row)
        done += batch
    info = {
        "workload_seed": workload.seed,
        "change_at": change,
        "selectivities": [s.tolist() for s in phases],
        "optimal_orders": [o for o, _ in optimal],
        "optimal_costs": [c for _, c in optimal],
        "old_order_after_change": expected_cost(optimal[0][0], tables[1], costs),
        "final_orders": {m.contender.key: m.stage.order for m in meters},
    }
    return rows, info


def _evaluated(order: Sequence[int], drops: np.ndarray) -> int:
    """Filters evaluated on a batch by a fixed order, from the batch's truth."""
    alive = np.ones(len(drops), dtype=bool)
    total = 0
    for f in order:
        total += int(alive.sum())
        alive &= ~drops[:, f]
    return total


def timeline_summary(rows: Sequence[dict[str, Any]], change: int) -> list[dict[str, Any]]:
    """Per algorithm: steady-state means (last half of each phase), the post-change mean over
    the optimal's, and how long after the change its expected cost settled (within 5% of
    where it ends, for good)."""
    before = [r for r in rows if r["phase"] == 0 and r["tuples"] > change / 2]
    after_all = [r for r in rows if r["phase"] == 1]
    after = [r for r in after_all if r["tuples"] > change * 1.5]
    out = []
    for key in ("optimal", *ADAPTIVE):
        exp = f"{key}_expected"
        final = after_all[-1][exp]
        settle = 0
        for r in after_all:
            if r[exp] > 1.05 * final:
                settle = r["tuples"] - change
        out.append(
            {
                "algorithm": LABEL[key],
                "before_mean": float(np.mean([r[key] for r in before])),
                "after_mean": float(np.mean([r[key] for r in after])),
                "after_phase_over_optimal": float(
                    np.sum([r[key] for r in after_all]) / np.sum([r["optimal"] for r in after_all])
                ),
                "settle_tuples": settle,
                "final_expected": final,
            }
        )
    return out


def fig16_18(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Figs 16-18: filters evaluated per 2000 input tuples around one change, A-Greedy against
    Sweep (16), LocalSwaps (17) and Independent (18); plus a summary over several changes.

    The plotted change is the first whose old optimal order costs at least 1.5 times the new
    optimum (a change worth adapting to); the summary averages ``TIMELINE_RUNS`` changes that
    cost at least 1.1 times, so that one permutation does not decide the comparison.
    """
    change = scaled(TIMELINE_CHANGE, scale, TIMELINE_BATCH)
    workload, _ = next(timeline_workloads(change, seed, 1.5))
    rows, info = timeline(workload, seed)
    summary: list[dict[str, Any]] = []
    for i, (w, ratio) in enumerate(
        itertools.islice(timeline_workloads(change, seed, 1.1), TIMELINE_RUNS)
    ):
        runs = rows if w.seed == workload.seed else timeline(w, seed)[0]
        for r in timeline_summary(runs, change):
            summary.append({"run": i, "workload_seed": w.seed, "change_ratio": ratio, **r})
    for label in [r["algorithm"] for r in summary if r["run"] == 0]:
        mine = [r for r in summary if r["algorithm"] == label and r["run"] != "mean"]
        mean: dict[str, Any] = {"run": "mean", "workload_seed": "", "algorithm": label}
        for k in (
            "change_ratio",
            "before_mean",
            "after_mean",
            "after_phase_over_optimal",
            "settle_tuples",
            "final_expected",
        ):
            mean[k] = float(np.mean([r[k] for r in mine]))
        summary.append(mean)
    columns = ["tuples", "phase", "optimal", "optimal_expected"]
    for key in ADAPTIVE:
        columns += [key, f"{key}_expected"]
    notes = _notes(
        "fig16_18",
        scale,
        seed,
        [
            f"n=8, Γ=2, group selectivities {info['selectivities'][0]} -> "
            f"{info['selectivities'][1]} after {change:,} tuples (workload seed "
            f"{info['workload_seed']}); Table 1 p and windows; every stage starts in order F1..F8",
            "values: filters evaluated per batch of 2000 tuples; *_expected: expected for the "
            "order used (exact); optimal: the phase's optimal order on the same batch",
            f"optimal orders {info['optimal_orders']} costs {info['optimal_costs']} per tuple; "
            f"old optimal order after the change {info['old_order_after_change']:.4f}",
        ],
    )
    paths = [plotting.write_csv(out / "fig16_18.csv", rows, columns, notes)]
    paths.append(
        plotting.write_csv(
            out / "fig16_18_summary.csv",
            summary,
            [
                "run",
                "workload_seed",
                "change_ratio",
                "algorithm",
                "before_mean",
                "after_mean",
                "after_phase_over_optimal",
                "settle_tuples",
                "final_expected",
            ],
            [
                *notes[:2],
                f"{TIMELINE_RUNS} runs, each one random permutation after {change:,} tuples "
                "whose old optimal order costs >= 1.1x the new optimum (change_ratio); filters "
                "evaluated per 2000 tuples",
                "before/after_mean: last half of each phase; after_phase_over_optimal: evaluations "
                "after the change over the optimal's; settle_tuples: tuples after the change until "
                "the expected cost stays within 5% of its final value",
            ],
        )
    )
    x = [r["tuples"] for r in rows]
    for number, other in ((16, "sweep"), (17, "localswaps"), (18, "independent")):
        paths.append(
            plotting.line_plot(
                out / f"fig{number}.png",
                f"Fig {number}: adaptivity of A-Greedy vs {LABEL[other]} (change at {change:,})",
                "input tuples processed",
                "filters evaluated per 2000 tuples",
                x,
                {
                    "A-Greedy": [r["agreedy"] for r in rows],
                    LABEL[other]: [r[other] for r in rows],
                    "Optimal": [r["optimal"] for r in rows],
                },
                markers=False,
            )
        )
    return paths


PERIODS = (20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)
CHANGE_TUPLES = 6_000_000


def _change_workload(c: int, period: int, seed: int) -> FilterWorkload:
    return FilterWorkload(
        n=8,
        gamma=2,
        selectivity=TIMELINE_SELECTIVITY,
        costs=_cost_split(c),
        change_every=period,
        seed=seed,
    )


def _change_notes(name: str, scale: float, seed: int, extra: str) -> list[str]:
    return _notes(
        name,
        scale,
        seed,
        [
            f"n=8, Γ=2, group selectivities {list(TIMELINE_SELECTIVITY)} permuted at random every "
            f"period; F1-F4 one probe, F5-F8 c probes; Table 1 p and windows; {extra}",
            f"{scaled(CHANGE_TUPLES, scale, CHANGE_BATCH):,} tuples per run in batches of "
            f"{CHANGE_BATCH:,}; every stage starts in order F1..F8",
            "total_s: total stage time; processing_s: its tuple-processing part (no profiling or "
            "re-optimizing); oracle_probes_per_tuple: each phase in its exact optimal order",
        ],
    )


def fig19(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Fig 19: total processing time vs the period of change (n = 8, costs 1 and 10)."""
    rows = []
    tuples = scaled(CHANGE_TUPLES, scale, CHANGE_BATCH)
    for period in PERIODS:
        entries = contenders(ADAPTIVE, _cost_split(10), seed)
        for row in measure_total(_change_workload(10, period, seed), entries, tuples):
            rows.append({"period": period, **row})
    columns = [
        "period",
        "algorithm",
        "tuples",
        "total_s",
        "processing_s",
        "probes_per_tuple",
        "oracle_probes_per_tuple",
        "overhead_pct",
        "changes",
        "selectivity_changes",
    ]
    xs = list(PERIODS)
    return [
        plotting.write_csv(
            out / "fig19.csv", rows, columns, _change_notes("fig19", scale, seed, "c=10")
        ),
        plotting.line_plot(
            out / "fig19.png",
            "Fig 19: varying the rate of change (c=10)",
            "period of change (tuples)",
            "total stage time (s)",
            xs,
            _series(rows, "period", "total_s", xs),
            logx=True,
            xticks=xs,
        ),
    ]


def fig20_21(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Figs 20-21: total time vs the expensive filters' cost at periods 100,000 and 1,000,000."""
    rows = []
    tuples = scaled(CHANGE_TUPLES, scale, CHANGE_BATCH)
    costs = (1, 10, 25, 50, 100)
    for period in (100_000, 1_000_000):
        for c in costs:
            entries = contenders(ADAPTIVE, _cost_split(c), seed)
            for row in measure_total(_change_workload(c, period, seed), entries, tuples):
                rows.append({"period": period, "cost": c, **row})
    columns = [
        "period",
        "cost",
        "algorithm",
        "tuples",
        "total_s",
        "processing_s",
        "probes_per_tuple",
        "oracle_probes_per_tuple",
        "overhead_pct",
        "changes",
        "selectivity_changes",
    ]
    paths = [
        plotting.write_csv(
            out / "fig20_21.csv",
            rows,
            columns,
            _change_notes("fig20_21", scale, seed, f"c in {list(costs)}"),
        )
    ]
    for number, period in ((20, 100_000), (21, 1_000_000)):
        sub = [r for r in rows if r["period"] == period]
        paths.append(
            plotting.line_plot(
                out / f"fig{number}.png",
                f"Fig {number}: varying filter cost, period {period:,}",
                "cost c of the expensive filters (probes)",
                "total stage time (s)",
                list(costs),
                _series(sub, "cost", "total_s", costs),
            )
        )
    return paths


Experiment = Callable[[Path, float, int], list[Path]]

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


def run_experiment(name: str, out_dir: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Run one experiment by name; returns the files written (CSVs first, then PNGs)."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}")
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    # stages log every order change at INFO; experiments make thousands of them
    stage_log = logging.getLogger("processors.stages.filter_stage")
    level = stage_log.level
    stage_log.setLevel(logging.WARNING)
    try:
        return EXPERIMENTS[name](Path(out_dir), scale, seed)
    finally:
        stage_log.setLevel(level)
