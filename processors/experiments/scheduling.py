"""Operator scheduling in the simulator: Babcock et al., *Operator Scheduling in Data Stream
Systems* (VLDB J. 2004), Section 6 (Figs. 4-20 and Table 1) on the synthetic bursty workload.

How the runs are made, and why:

- The simulator (:mod:`processors.core.scheduling.simulator`) runs one operator at a time over
  the paper's progress charts; chart times are microseconds per memory unit, and a unit is 100
  tuples of 24 bytes (Sect. 6.1.1), so queue memory is reported in KB of 2,400-byte units.
- Arrivals are the ON/OFF model of Sect. 6 (:class:`OnOffWorkload`): flows start as a Poisson
  process with mean interarrival ``FLOW_SCALE_US`` and last a Pareto time with k = that scale
  and alpha = 2.3, each sending units evenly at a rate such that the processor is
  ``UTILIZATION`` busy on average: about 1.8 flows are on at once, three or more overload it,
  so bursts build queues that drain afterwards. Each input stream is its own ON/OFF source.
- A sliding-window join takes its inputs in timestamp order and waits while an input is empty
  only if a tuple older than its head is still upstream of that input (``join_wait="older"``):
  timestamps are arrival times (Sect. 5.2), so nothing arriving later can be older. With the
  paper's literal rule (wait whenever an input is empty) the last tuple of a burst on one
  stream waits for the other stream's next flow, hundreds of ms in an OFF period, and that
  sets every policy's peak latency alike.
- Round-Robin gives each ready operator ``RR_QUANTUM_US`` at a time (Sect. 6: one time unit),
  Chain-Flush's p_q is the chart's remaining time of a unit (:func:`chart_remaining_times`).
- Latency is a unit's exit time minus its arrival time, averaged over consecutive blocks of
  ``LATENCY_BLOCK`` output units (400 tuples, as the paper's Figs. 13-16 do).
- The paper's real data set (DEC-PKT) is not used: every figure here is the synthetic one.
- ``scale`` multiplies the simulated time (``BASE_DURATION_US`` at 1.0).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from processors.core.scheduling import (
    SchedulingPlan,
    plan_from_charts,
)
from processors.experiments import plotting
from processors.experiments.runner import Experiment, runner
from processors.experiments.sched_mixed import (
    sched_mixed,
    sched_table1,
)
from processors.experiments.sched_outputs import (
    SUMMARY_COLUMNS,
    latency_outputs,
    memory_outputs,
    run_notes,
    save_png,
    summary_csv,
)
from processors.experiments.sched_setup import (
    BIN_US,
    BYTES_PER_UNIT,
    COLORS,
    FOUR_OPS,
    KB,
    MIXED_CHART,
    STORED_JOIN,
    TWO_OPS,
    UTILIZATION,
    Run,
    baselines,
    duration_us,
    flush_label,
    memory_bins,
    multi_query_arrivals,
    multi_query_plan,
    on_off,
    round_ms,
    run_policy,
    window_join_arrivals,
    window_join_plan,
)


def _timeline_experiment(
    name: str,
    stem: str,
    title: str,
    setup: str,
    plan: SchedulingPlan,
    arrivals: Mapping[str, np.ndarray],
    out_dir: Path,
    scale: float,
    seed: int,
    duration: float,
) -> list[Path]:
    runs = baselines(plan, arrivals)
    end = max(r.result.end for r in runs)
    notes = run_notes(name, scale, seed, setup, duration)
    mem_csv, mem_png = memory_outputs(out_dir, stem, f"{title}: queue size", runs, end, notes)
    lat_csv, lat_png = latency_outputs(
        out_dir, f"{stem}_latency", f"{title}: output latency", runs, end, notes
    )
    return [summary_csv(out_dir, stem, runs, notes), mem_csv, lat_csv, mem_png, lat_png]


# -- the experiments ----------------------------------------------------------------------------


def _one_chart(
    name: str, title: str, chart: list[tuple[float, float]], out_dir: Path, scale: float, seed: int
) -> tuple[list[Path], SchedulingPlan, dict[str, np.ndarray], float]:
    """The timeline experiment of one query over ``chart`` with ON/OFF arrivals: its files,
    plan, arrivals and simulated duration (for a flush-latency follow-up)."""
    d = duration_us(scale)
    plan = plan_from_charts({"q": chart})
    arrivals = {"q": on_off(seed, chart[-1][0], UTILIZATION, d)}
    paths = _timeline_experiment(
        name, name.replace("-", "_"), title, f"chart {chart}", plan, arrivals, out_dir, scale,
        seed, d,
    )  # fmt: skip
    return paths, plan, arrivals, d


def sched_two_ops(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Figs. 4-5: the two-operator chart (0,1), (500,0.3), (4000,0)."""
    title = "Two operators (Figs. 4-5)"
    paths, *_ = _one_chart("sched-two-ops", title, TWO_OPS, out_dir, scale, seed)
    return paths


def sched_four_ops(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Figs. 6-7 (queue size) and 13-14 (latency; Chain-Flush at two thresholds)."""
    stem = "sched_four_ops"
    paths, plan, arrivals, d = _one_chart(
        "sched-four-ops", "Four operators (Figs. 6-7, 13)", FOUR_OPS, out_dir, scale, seed
    )
    return _with_flush_latency(
        paths,
        "sched-four-ops",
        stem,
        "Four operators (Fig. 14)",
        plan,
        arrivals,
        out_dir,
        scale,
        seed,
        d,
        f"chart {FOUR_OPS}",
    )


def _with_flush_latency(
    paths: list[Path],
    name: str,
    stem: str,
    title: str,
    plan: SchedulingPlan,
    arrivals: Mapping[str, np.ndarray],
    out_dir: Path,
    scale: float,
    seed: int,
    d: float,
    setup: str,
) -> list[Path]:
    """Chain against Chain-Flush at two thresholds a third and two thirds of the way from
    FIFO's peak latency to Chain's (the paper's 120 and 180 ms lie between its FIFO's ~100 ms
    and its Chain's peak, Figs. 13-14)."""
    chain = run_policy(plan, arrivals, "Chain", "chain")
    fifo = run_policy(plan, arrivals, "FIFO", "fifo")
    fifo_peak = fifo.summary()["peak_latency_ms"] * 1000
    chain_peak = chain.summary()["peak_latency_ms"] * 1000
    runs = [chain]
    thresholds = [round_ms(fifo_peak + f * (chain_peak - fifo_peak)) for f in (1 / 3, 2 / 3)]
    for th in thresholds:
        runs.append(
            run_policy(plan, arrivals, flush_label(th), "chain-flush", latency_threshold=th)
        )
    end = max(r.result.end for r in runs)
    notes = run_notes(name, scale, seed, setup, d)
    notes.append(
        f"Chain-Flush thresholds {', '.join(f'{t / 1000:g} ms' for t in thresholds)}: 1/3 and "
        f"2/3 of the way from FIFO's peak latency ({fifo_peak / 1000:.3g} ms) to Chain's "
        f"({chain_peak / 1000:.3g} ms)"
    )
    csv, png = latency_outputs(
        out_dir,
        f"{stem}_flush_latency",
        f"{title}: Chain-Flush latency",
        runs,
        end,
        notes,
        thresholds_ms=[t / 1000 for t in thresholds],
    )
    flush_summary = plotting.write_csv(
        out_dir / f"{stem}_flush_summary.csv", [r.summary() for r in runs], SUMMARY_COLUMNS, notes
    )
    csvs = [p for p in paths if p.suffix == ".csv"]
    pngs = [p for p in paths if p.suffix == ".png"]
    return [*csvs, flush_summary, csv, *pngs, png]


def sched_stored_join(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Fig. 8: a join with a stored relation (selectivity 20/9 > 1) as the second operator."""
    title = "Join with a stored relation, s > 1 (Fig. 8)"
    paths, *_ = _one_chart("sched-stored-join", title, STORED_JOIN, out_dir, scale, seed)
    return paths


def _window_join_setup(plan: SchedulingPlan) -> str:
    return (
        "R -> sigma1(400us, 0.9) -> window join with S (alphas 2, 2; 300 us per tuple) -> "
        "sigma2(100us, 0.1) -> sigma3(1500us, 0.9); charts "
        + "; ".join(
            f"{p}: " + ", ".join(f"({float(t):.0f},{float(s):.3g})" for t, s in plan.chart(p))
            for p in plan.paths
        )
    )


def sched_window_join(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Figs. 9-10: a sliding-window join between R and S with three selections."""
    d = duration_us(scale)
    plan = window_join_plan()
    arrivals = window_join_arrivals(plan, seed, UTILIZATION, d)
    return _timeline_experiment(
        "sched-window-join",
        "sched_window_join",
        "Sliding-window join and three selections (Figs. 9-10)",
        _window_join_setup(plan),
        plan,
        arrivals,
        out_dir,
        scale,
        seed,
        d,
    )


def sched_multi_query(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Figs. 11-12 (queue size), 15 (latency) and 16 (Chain-Flush): the window-join query and
    the two- and four-operator queries together, each a third of the load."""
    d = duration_us(scale)
    plan = multi_query_plan()
    arrivals = multi_query_arrivals(plan, seed, d)
    setup = "queries: window join (Sect. 6.1.3) + two-operator + four-operator charts"
    stem = "sched_multi_query"
    paths = _timeline_experiment(
        "sched-multi-query",
        stem,
        "Three queries (Figs. 11-12, 15)",
        setup,
        plan,
        arrivals,
        out_dir,
        scale,
        seed,
        d,
    )
    return _with_flush_latency(
        paths,
        "sched-multi-query",
        stem,
        "Three queries (Fig. 16)",
        plan,
        arrivals,
        out_dir,
        scale,
        seed,
        d,
        setup,
    )


def flush_sweep(
    plan: SchedulingPlan, arrivals: Mapping[str, np.ndarray], points: int = 10
) -> tuple[Run, Run, list[tuple[float, Run]]]:
    """Chain, FIFO and Chain-Flush at thresholds from half of FIFO's peak latency to a bit
    above Chain's (evenly spaced)."""
    chain = run_policy(plan, arrivals, "Chain", "chain")
    fifo = run_policy(plan, arrivals, "FIFO", "fifo")
    lo = 0.5 * fifo.summary()["peak_latency_ms"] * 1000
    hi = 1.1 * max(chain.summary()["peak_latency_ms"] * 1000, lo * 2)
    out = []
    for th in sorted({round_ms(x) for x in np.linspace(lo, hi, points)}):
        out.append(
            (th, run_policy(plan, arrivals, flush_label(th), "chain-flush", latency_threshold=th))
        )
    return chain, fifo, out


def sched_flush_threshold(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Figs. 17-18: Chain-Flush's peak queue size against its latency threshold, on the
    four-operator chart and on the three queries."""
    d = duration_us(scale)
    cases = []
    four = plan_from_charts({"q": FOUR_OPS})
    cases.append(("four operators (Fig. 17)", four, {"q": on_off(seed, 4000, UTILIZATION, d)}))
    multi = multi_query_plan()
    cases.append(("three queries (Fig. 18)", multi, multi_query_arrivals(multi, seed, d)))
    rows = []
    fig, axes = plotting.plt.subplots(1, 2, figsize=(9.0, 3.8), dpi=plotting.DPI)
    for ax, (label, plan, arrivals) in zip(axes, cases, strict=True):
        chain, fifo, sweep = flush_sweep(plan, arrivals)
        c, f = chain.summary(), fifo.summary()
        for th, run in sweep:
            s = run.summary()
            rows.append(
                {
                    "workload": label,
                    "threshold_ms": th / 1000,
                    "peak_kb": s["peak_kb"],
                    "peak_latency_ms": s["peak_latency_ms"],
                    "flushes": s["flushes"],
                    "chain_peak_kb": c["peak_kb"],
                    "chain_peak_latency_ms": c["peak_latency_ms"],
                    "fifo_peak_kb": f["peak_kb"],
                    "fifo_peak_latency_ms": f["peak_latency_ms"],
                }
            )
        xs = [th / 1000 for th, _ in sweep]
        ax.plot(xs, [r.peak_kb for _, r in sweep], marker="o", color="tab:red", label="Chain-Flush")
        ax.axhline(c["peak_kb"], color=COLORS["Chain"], ls="--", label="Chain")
        ax.axhline(f["peak_kb"], color=COLORS["FIFO"], ls="--", label="FIFO")
        ax.axvline(f["peak_latency_ms"], color="0.6", ls=":", lw=0.8)
        ax.set_title(f"Peak queue size vs latency threshold: {label}", fontsize=9)
        ax.set_xlabel("latency threshold (ms); dotted: FIFO's peak latency")
        ax.set_ylabel("peak queue size (KB)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    notes = run_notes("sched-flush-threshold", scale, seed, "four-operator chart; three queries", d)
    csv = plotting.write_csv(
        out_dir / "sched_flush_threshold.csv",
        rows,
        [
            "workload",
            "threshold_ms",
            "peak_kb",
            "peak_latency_ms",
            "flushes",
            "chain_peak_kb",
            "chain_peak_latency_ms",
            "fifo_peak_kb",
            "fifo_peak_latency_ms",
        ],
        notes,
    )
    png = save_png(fig, out_dir / "sched_flush_threshold.png")
    return [csv, png]


__all__ = [
    "BIN_US",
    "BYTES_PER_UNIT",
    "EXPERIMENTS",
    "FOUR_OPS",
    "KB",
    "MIXED_CHART",
    "TWO_OPS",
    "UTILIZATION",
    "baselines",
    "flush_sweep",
    "memory_bins",
    "multi_query_arrivals",
    "multi_query_plan",
    "on_off",
    "run_experiment",
]

EXPERIMENTS: dict[str, Experiment] = {
    "sched-two-ops": sched_two_ops,
    "sched-four-ops": sched_four_ops,
    "sched-stored-join": sched_stored_join,
    "sched-window-join": sched_window_join,
    "sched-multi-query": sched_multi_query,
    "sched-flush-threshold": sched_flush_threshold,
    "sched-mixed": sched_mixed,
    "sched-table1": sched_table1,
}

run_experiment = runner(EXPERIMENTS)
