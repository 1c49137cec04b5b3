"""Section 9 under changing statistics: Figs 16-18 (timelines around a change) and Figs 19-21
(total time as the statistics change every period; see :mod:`processors.experiments.filters`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from processors.bench.filters import workload_predicates
from processors.experiments import plotting
from processors.experiments.filters_measure import (
    ADAPTIVE,
    CHANGE_BATCH,
    LABEL,
    TIMELINE_BATCH,
    Meter,
    contenders,
    cost_split,
    exact_optimal,
    expected_cost,
    label_series,
    measure_total,
    pass_table,
    run_notes,
    scaled,
    selectivity_sequence,
    warm_up,
)
from processors.workloads.filters import FilterWorkload, FilterWorkloadRun

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
    workload: FilterWorkload, seed: int = 0, algorithms: Sequence[str] = ADAPTIVE
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Figs 16-18's run: the adaptive algorithms (``algorithms``) from the identity order on
    a workload with one change at ``change_every``, for twice that many tuples, in batches of
    2000.

    Per batch: each algorithm's filters evaluated (``last_evaluations``) and the expected
    number for the order it used (``*_expected``); ``optimal`` is the phase's optimal order on
    the same batch.
    """
    warm_up(workload)
    batch = TIMELINE_BATCH
    costs = [1] * workload.n
    change = int(workload.change_every or 0)
    total = 2 * change
    phases = selectivity_sequence(workload, 1)
    tables = [pass_table(workload, s) for s in phases]
    optimal = [exact_optimal(t, costs) for t in tables]
    run = FilterWorkloadRun(workload)
    preds = workload_predicates(run)
    meters = [Meter(c, preds) for c in contenders(algorithms, costs, seed)]
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


def settle_tuples(rows: Sequence[dict[str, Any]], key: str, change: int) -> int:
    """Tuples after the change until the expected cost (eq. 1, exact for the new
    selectivities) of the order ``key`` runs is within 5% of the new optimal order's, and
    stays so to the end of the run: the end of the last batch after the change that ran an
    order more than 5% worse (0: none; the batch ends at ``tuples``, so a batch straddling
    the change counts from the change). Never settling counts the whole phase."""
    settle = 0
    for r in rows:
        if r["phase"] == 1 and r[f"{key}_expected"] > 1.05 * r["optimal_expected"]:
            settle = r["tuples"] - change
    return settle


def timeline_summary(
    rows: Sequence[dict[str, Any]], change: int, algorithms: Sequence[str] = ADAPTIVE
) -> list[dict[str, Any]]:
    """Per algorithm: steady-state means (last half of each phase), the post-change mean over
    the optimal's, how long after the change its expected cost settled (within 5% of where it
    ends, for good: ``settle_tuples``, as before) and how long until it stayed within 5% of
    the new optimum (``settle_optimal_tuples``, :func:`settle_tuples`)."""
    before = [r for r in rows if r["phase"] == 0 and r["tuples"] > change / 2]
    after_all = [r for r in rows if r["phase"] == 1]
    after = [r for r in after_all if r["tuples"] > change * 1.5]
    out = []
    for key in ("optimal", *algorithms):
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
                "settle_optimal_tuples": settle_tuples(rows, key, change),
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
            "settle_optimal_tuples",
            "final_expected",
        ):
            mean[k] = float(np.mean([r[k] for r in mine]))
        summary.append(mean)
    columns = ["tuples", "phase", "optimal", "optimal_expected"]
    for key in ADAPTIVE:
        columns += [key, f"{key}_expected"]
    notes = run_notes(
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
                "settle_optimal_tuples",
                "final_expected",
            ],
            [
                *notes[:2],
                f"{TIMELINE_RUNS} runs, each one random permutation after {change:,} tuples "
                "whose old optimal order costs >= 1.1x the new optimum (change_ratio); filters "
                "evaluated per 2000 tuples",
                "before/after_mean: last half of each phase; after_phase_over_optimal: evaluations "
                "after the change over the optimal's; settle_tuples: tuples after the change until "
                "the expected cost stays within 5% of its final value; settle_optimal_tuples: "
                "until it stays within 5% of the new optimal order's",
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
                    "A-Greedy": [r["agreedy_exact"] for r in rows],
                    "A-Greedy+": [r["agreedy"] for r in rows],
                    LABEL[other]: [r[other] for r in rows],
                    "Optimal": [r["optimal"] for r in rows],
                },
                markers=False,
            )
        )
    return paths


PERIODS = (20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)
CHANGE_TUPLES = 6_000_000
# the columns of Figs 19-21 after their x-axis columns
TOTAL_COLUMNS = [
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


def _change_workload(c: int, period: int, seed: int) -> FilterWorkload:
    return FilterWorkload(
        n=8,
        gamma=2,
        selectivity=TIMELINE_SELECTIVITY,
        costs=cost_split(c),
        change_every=period,
        seed=seed,
    )


def _change_notes(name: str, scale: float, seed: int, extra: str) -> list[str]:
    return run_notes(
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
        entries = contenders(ADAPTIVE, cost_split(10), seed)
        for row in measure_total(_change_workload(10, period, seed), entries, tuples):
            rows.append({"period": period, **row})
    columns = ["period", *TOTAL_COLUMNS]
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
            label_series(rows, "period", "total_s", xs),
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
            entries = contenders(ADAPTIVE, cost_split(c), seed)
            for row in measure_total(_change_workload(c, period, seed), entries, tuples):
                rows.append({"period": period, "cost": c, **row})
    columns = ["period", "cost", *TOTAL_COLUMNS]
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
                label_series(sub, "cost", "total_s", costs),
            )
        )
    return paths
