"""Section 9 under stable statistics: Figs 9-15 and Table 2 (rates, overhead breakdowns and the
cost of expensive filters after convergence; see :mod:`processors.experiments.filters`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from processors.core.ordering.config import OrderingConfig
from processors.experiments import plotting
from processors.experiments.filters_measure import (
    ADAPTIVE,
    CONVERGENCE_BATCH,
    CONVERGENCE_COLUMNS,
    Contender,
    breakdown_plot,
    contenders,
    cost_split,
    exact_optimal,
    label_series,
    measure_converged,
    pass_table,
    run_notes,
    scaled,
)
from processors.stages.filter_stage import BREAKDOWN
from processors.workloads.filters import FilterWorkload

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
        label_series(rows, x, "tuples_per_s", xs, 1e-6),
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
    rows = _convergence_sweep(x, xs, make_workload, ("agreedy_exact", "independent"), scale, seed)
    notes = run_notes(name, scale, seed, [*setup, _sizes_note(scale)])
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
                "agreedy_exact",
                OrderingConfig("agreedy_exact", profile_probability=p, costs=(1.0,) * n, seed=seed),
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
    notes = run_notes(
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
    notes = run_notes(
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
        breakdown_plot(
            out / "fig13.png",
            "Fig 13: run-time breakdown for Fig 12",
            rows,
            "n",
            [2, 4, 6, 8, 10],
            "number of filters n",
        ),
    ]


EXPENSIVE_COSTS = (1, 10, 50, 100)


def fig14_15(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Figs 14-15: n = 8, four filters of cost 1 and four of cost c: rates and breakdowns."""
    xs = list(EXPENSIVE_COSTS)
    rows = _convergence_sweep(
        "cost",
        xs,
        lambda c: FilterWorkload(n=8, costs=cost_split(c), seed=seed),
        ADAPTIVE,
        scale,
        seed,
    )
    notes = run_notes(
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
            label_series(rows, "cost", "tuples_per_s", xs, 1e-6),
            logy=True,
        ),
        breakdown_plot(
            out / "fig15.png",
            "Fig 15: run-time breakdown for Fig 14",
            rows,
            "cost",
            xs,
            "cost c of the expensive filters",
        ),
    ]
