"""Scheduling experiments that compare policies on one mixed chart: Fig. 20 (sched-mixed) and
Table 1's trade-off between memory and latency (sched-table1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from processors.core.scheduling import (
    SchedulingPlan,
    plan_from_charts,
)
from processors.experiments import plotting
from processors.experiments.sched_outputs import (
    color_of,
    latency_outputs,
    memory_outputs,
    run_notes,
    save_png,
    summary_csv,
)
from processors.experiments.sched_setup import (
    MIXED_CHART,
    MIXED_GAMMAS,
    UTILIZATION,
    Run,
    duration_us,
    flush_label,
    on_off,
    round_ms,
    run_policy,
)


def _mixed_runs(plan: SchedulingPlan, arrivals: Mapping[str, np.ndarray]) -> list[Run]:
    runs = [
        run_policy(plan, arrivals, "Chain", "chain"),
        run_policy(plan, arrivals, "FIFO", "fifo"),
    ]
    for g in MIXED_GAMMAS:
        runs.append(run_policy(plan, arrivals, f"Mixed({g:g})", "mixed", gamma=g))
    return runs


def sched_mixed(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Figs. 19-20: Chain, FIFO and Mixed(0.0001, 0.0002, 0.0008) on the chart (0,1),
    (1000,0.3), (1990,0.2), (3490,0.1), (5490,0)."""
    d = duration_us(scale)
    plan = plan_from_charts({"q": MIXED_CHART})
    arrivals = {"q": on_off(seed, MIXED_CHART[-1][0], UTILIZATION, d)}
    runs = _mixed_runs(plan, arrivals)
    end = max(r.result.end for r in runs)
    notes = run_notes("sched-mixed", scale, seed, f"chart {MIXED_CHART}", d)
    stem = "sched_mixed"
    mem_csv, mem_png = memory_outputs(
        out_dir, stem, "Mixed, four operators (Fig. 19): queue size", runs, end, notes
    )
    lat_csv, lat_png = latency_outputs(
        out_dir,
        f"{stem}_latency",
        "Mixed, four operators (Fig. 20): output latency",
        runs,
        end,
        notes,
    )
    return [summary_csv(out_dir, stem, runs, notes), mem_csv, lat_csv, mem_png, lat_png]


# the paper's Table 1, (peak queue KB, peak latency ms), for the CSV's comparison columns
TABLE1_PAPER = {
    "Chain": (2.5, 76.2),
    "FIFO": (17.1, 24.1),
    "Chain-Flush (high threshold)": (9.2, 50.9),
    "Chain-Flush (low threshold)": (17.6, 10.6),
    "Mixed(0.0001)": (2.9, 48.0),
    "Mixed(0.0002)": (6.3, 34.4),
    "Mixed(0.0008)": (17.1, 24.2),
}


def _labelled_scatter(ax: Any, points: Sequence[tuple[str, float, float]]) -> None:
    """One dot per (label, x, y); labels of coinciding dots joined, so none is hidden."""
    xs = [p[1] for p in points]
    ys = [p[2] for p in points]
    near_x = 0.02 * (max(xs) - min(xs) or 1.0)
    near_y = 0.02 * (max(ys) - min(ys) or 1.0)
    groups: dict[tuple[float, float], list[str]] = {}
    for label, x, y in points:
        key = next(
            (k for k in groups if abs(k[0] - x) <= near_x and abs(k[1] - y) <= near_y), (x, y)
        )
        groups.setdefault(key, []).append(label)
    for i, ((x, y), labels) in enumerate(groups.items()):
        ax.scatter([x], [y], color=color_of(labels[0], i), zorder=3)
        ax.annotate(
            " = ".join(labels), (x, y), fontsize=6, xytext=(4, 2), textcoords="offset points"
        )
    ax.margins(x=0.25, y=0.1)


def sched_table1(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Table 1: Chain-Flush and Mixed at two latency and three slope thresholds on the Mixed
    chart. The paper's thresholds (50 and 10 ms) sit between FIFO's and Chain's peak latency
    and below FIFO's; ours are placed the same way: halfway between FIFO's and Chain's peak
    latency, and 0.4 times FIFO's."""
    d = duration_us(scale)
    plan = plan_from_charts({"q": MIXED_CHART})
    arrivals = {"q": on_off(seed, MIXED_CHART[-1][0], UTILIZATION, d)}
    runs = _mixed_runs(plan, arrivals)
    chain, fifo = runs[0].summary(), runs[1].summary()
    hi = round_ms((chain["peak_latency_ms"] + fifo["peak_latency_ms"]) / 2 * 1000)
    lo = round_ms(0.4 * fifo["peak_latency_ms"] * 1000)
    flush = [
        (
            "Chain-Flush (high threshold)",
            run_policy(plan, arrivals, flush_label(hi), "chain-flush", latency_threshold=hi),
        ),
        (
            "Chain-Flush (low threshold)",
            run_policy(plan, arrivals, flush_label(lo), "chain-flush", latency_threshold=lo),
        ),
    ]
    ordered = [("Chain", runs[0]), ("FIFO", runs[1]), *flush]
    ordered += [(r.label, r) for r in runs[2:]]
    rows = []
    for key, run in ordered:
        s = run.summary()
        paper_kb, paper_ms = TABLE1_PAPER[key]
        rows.append(
            {
                "algorithm": run.label,
                "peak_kb": s["peak_kb"],
                "peak_latency_ms": s["peak_latency_ms"],
                "mean_latency_ms": s["mean_latency_ms"],
                "paper_peak_kb": paper_kb,
                "paper_peak_latency_ms": paper_ms,
            }
        )
    notes = run_notes(
        "sched-table1",
        scale,
        seed,
        f"chart {MIXED_CHART}; Chain-Flush thresholds {hi / 1000:g} and {lo / 1000:g} ms "
        "(paper: 50 and 10 ms, on the real data set)",
        d,
    )
    csv = plotting.write_csv(
        out_dir / "sched_table1.csv",
        rows,
        [
            "algorithm",
            "peak_kb",
            "peak_latency_ms",
            "mean_latency_ms",
            "paper_peak_kb",
            "paper_peak_latency_ms",
        ],
        notes,
    )
    fig, axes = plotting.plt.subplots(1, 2, figsize=(9.0, 3.8), dpi=plotting.DPI)
    paper_names = {
        "Chain-Flush (high threshold)": "Chain-Flush (50 ms)",
        "Chain-Flush (low threshold)": "Chain-Flush (10 ms)",
    }
    ours = [(r["algorithm"], r["peak_latency_ms"], r["peak_kb"]) for r in rows]
    theirs = [(paper_names.get(k, k), *TABLE1_PAPER[k][::-1]) for k, _ in ordered]
    for ax, points, title in (
        (axes[0], ours, "ours (synthetic ON/OFF)"),
        (axes[1], theirs, "the paper's (real data)"),
    ):
        _labelled_scatter(ax, points)
        ax.set_title(f"Table 1, peak queue vs peak latency: {title}", fontsize=9)
        ax.set_xlabel("peak latency (ms)")
        ax.set_ylabel("peak queue size (KB)")
        ax.grid(True, alpha=0.3)
    png = save_png(fig, out_dir / "sched_table1.png")
    return [csv, png]


Experiment = Callable[[Path, float, int], list[Path]]
