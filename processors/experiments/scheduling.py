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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from processors.core.scheduling import (
    OpNode,
    SchedulingPlan,
    SimResult,
    Stream,
    WindowJoin,
    chart_remaining_times,
    make_policy,
    merge_plans,
    plan_from_charts,
    query_plan,
    simulate,
)
from processors.experiments import plotting
from processors.workloads.bursty import OnOffWorkload

BYTES_PER_UNIT = 2400  # Sect. 6.1.1: a chart "tuple" holds 100 tuples of 24 bytes
KB = 1024
BASE_DURATION_US = 60e6
MIN_DURATION_US = 0.5e6
UTILIZATION = 0.65
FLOW_SCALE_US = 100_000.0
RR_QUANTUM_US = 100.0
LATENCY_BLOCK = 4
BIN_US = 100_000.0  # CSVs and the whole-run panels: the peak in each 100 ms
ZOOM_US = 2e6  # the lower panel of a timeline: 2 s around the largest queue

# Sect. 6 progress charts, (microseconds, size)
TWO_OPS = [(0, 1.0), (500, 0.3), (4000, 0.0)]
FOUR_OPS = [(0, 1.0), (400, 0.9), (2000, 0.88), (2200, 0.1), (4000, 0.0)]
STORED_JOIN = [(0, 1.0), (400, 0.9), (1300, 2.0), (1500, 0.2), (4000, 0.0)]
MIXED_CHART = [(0, 1.0), (1000, 0.3), (1990, 0.2), (3490, 0.1), (5490, 0.0)]
MIXED_GAMMAS = (0.0001, 0.0002, 0.0008)

BASELINES = ("Chain", "FIFO", "Greedy", "Round-Robin")
COLORS = {
    "Chain": "tab:blue",
    "FIFO": "black",
    "Greedy": "tab:green",
    "Round-Robin": "tab:orange",
}
EXTRA_COLORS = ("tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


# -- workloads and plans ------------------------------------------------------------------------


def duration_us(scale: float) -> float:
    return max(BASE_DURATION_US * scale, MIN_DURATION_US)


def on_off(
    seed: int, work_us: float, utilization: float, duration: float, stream: int = 0
) -> np.ndarray:
    """Arrival times (us) of one ON/OFF stream whose units need ``work_us`` each and keep the
    processor ``utilization`` busy on average (rate = utilization / (E[flows on] * work))."""
    probe = OnOffWorkload(mean_interarrival=FLOW_SCALE_US, k=FLOW_SCALE_US)
    flows_on = probe.mean_duration / FLOW_SCALE_US
    rate = utilization / (flows_on * work_us)
    w = OnOffWorkload(
        mean_interarrival=FLOW_SCALE_US, rate=rate, k=FLOW_SCALE_US, seed=seed * 101 + stream
    )
    return w.arrivals(duration)


def window_join_query(prefix: str = "") -> OpNode:
    """Sect. 6.1.3: R passes sigma1 (not very selective), joins S in a sliding window (both
    semijoin selectivities 2), then sigma2 (very selective) and sigma3 (not very selective,
    relatively slow). Per-tuple times in us."""
    sigma1 = OpNode(f"{prefix}sigma1", t=400, s=0.9, inputs=(Stream(f"{prefix}R"),))
    join = OpNode(
        f"{prefix}join",
        inputs=(sigma1, Stream(f"{prefix}S")),
        join=WindowJoin(alphas=(2.0, 2.0), times=(300.0, 300.0)),
    )
    sigma2 = OpNode(f"{prefix}sigma2", t=100, s=0.1, inputs=(join,))
    return OpNode(f"{prefix}sigma3", t=1500, s=0.9, inputs=(sigma2,))


def window_join_plan() -> SchedulingPlan:
    plan = query_plan({"wj": window_join_query()})
    plan.remaining_time = chart_remaining_times(plan)
    return plan


def window_join_arrivals(plan: SchedulingPlan, seed: int, utilization: float, duration: float):
    """R and S: independent ON/OFF streams, each half of the load."""
    return {
        path: on_off(seed, plan.chart(path)[-1][0], utilization / 2, duration, stream=10 + i)
        for i, path in enumerate(("wj/R", "wj/S"))
    }


def multi_query_plan() -> SchedulingPlan:
    """Sect. 6.1.4: the window-join query and two single-stream queries like Sect. 6.1.1's."""
    singles = plan_from_charts(
        {"two": TWO_OPS, "four": FOUR_OPS}, query_of={"two": "two", "four": "four"}
    )
    return merge_plans([window_join_plan(), singles])


def multi_query_arrivals(plan: SchedulingPlan, seed: int, duration: float):
    share = UTILIZATION / 3
    out = window_join_arrivals(plan, seed, share, duration)
    out["two"] = on_off(seed, TWO_OPS[-1][0], share, duration, stream=1)
    out["four"] = on_off(seed, FOUR_OPS[-1][0], share, duration, stream=2)
    return out


# -- runs ---------------------------------------------------------------------------------------


@dataclass
class Run:
    label: str
    result: SimResult
    settings: dict[str, Any] = field(default_factory=dict)
    flushes: int = 0

    @property
    def peak_kb(self) -> float:
        return float(self.result.peak_memory) * BYTES_PER_UNIT / KB

    @property
    def mean_kb(self) -> float:
        t = np.asarray(self.result.times, dtype=np.float64)
        m = np.asarray(self.result.memory, dtype=np.float64)
        if len(t) < 2 or t[-1] <= t[0]:
            return 0.0
        return float((m[:-1] * np.diff(t)).sum() / (t[-1] - t[0])) * BYTES_PER_UNIT / KB

    def latencies_ms(self) -> np.ndarray:
        out = np.asarray(self.result.out_time, dtype=np.float64)
        arr = np.asarray(self.result.out_arrival, dtype=np.float64)
        return (out - arr) / 1000.0

    def summary(self) -> dict[str, Any]:
        lat = self.latencies_ms()
        return {
            "policy": self.label,
            "peak_kb": self.peak_kb,
            "mean_kb": self.mean_kb,
            "peak_latency_ms": float(lat.max()) if len(lat) else 0.0,
            "mean_latency_ms": float(lat.mean()) if len(lat) else 0.0,
            "outputs": len(lat),
            "decisions": self.result.decisions,
            "switches": self.result.switches,
            "flushes": self.flushes,
        }


def run_policy(
    plan: SchedulingPlan, arrivals: Mapping[str, np.ndarray], label: str, name: str, **settings
) -> Run:
    """Simulate one policy (Round-Robin with the time quantum) to the end of the backlog."""
    if name == "round-robin":
        settings.setdefault("quantum", RR_QUANTUM_US)
    policy = make_policy(name, plan, **settings)
    res = simulate(plan, policy, arrivals, join_wait="older")
    return Run(label, res, dict(settings), int(getattr(policy, "flushes", 0)))


def baselines(plan: SchedulingPlan, arrivals: Mapping[str, np.ndarray]) -> list[Run]:
    """Chain, FIFO, Greedy and Round-Robin (Sect. 6.1)."""
    names = {"Chain": "chain", "FIFO": "fifo", "Greedy": "greedy", "Round-Robin": "round-robin"}
    return [run_policy(plan, arrivals, label, names[label]) for label in BASELINES]


def flush_label(threshold_us: float) -> str:
    return f"Chain-Flush ({threshold_us / 1000:g} ms)"


def round_ms(us: float) -> float:
    """A threshold in us, rounded to a readable number of ms (two significant digits)."""
    ms = max(us / 1000.0, 0.1)
    digits = 1 - int(np.floor(np.log10(ms)))
    return round(ms, digits) * 1000.0


# -- series, CSVs and plots ---------------------------------------------------------------------


def memory_bins(res: SimResult, edges: np.ndarray) -> np.ndarray:
    """The largest queued memory (units) in each bin [edges[i], edges[i+1])."""
    times = np.asarray(res.times, dtype=np.float64)
    mem = np.asarray(res.memory, dtype=np.float64)
    out = np.zeros(len(edges) - 1)
    if not len(times):
        return out
    carried = np.searchsorted(times, edges[:-1], side="right") - 1
    out = np.where(carried >= 0, mem[np.maximum(carried, 0)], 0.0)
    b = np.searchsorted(edges, times, side="right") - 1
    inside = (b >= 0) & (b < len(out))
    np.maximum.at(out, b[inside], mem[inside])
    return out


def latency_blocks(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """(exit time in ms, mean latency in ms) per block of LATENCY_BLOCK consecutive outputs."""
    out = np.asarray(run.result.out_time, dtype=np.float64) / 1000.0
    lat = run.latencies_ms()
    n = len(lat) // LATENCY_BLOCK * LATENCY_BLOCK
    if n == 0:
        return out[:0], lat[:0]
    lat_b = lat[:n].reshape(-1, LATENCY_BLOCK).mean(axis=1)
    out_b = out[LATENCY_BLOCK - 1 : n : LATENCY_BLOCK]
    return out_b, lat_b


def _save(fig: Any, path: Path) -> Path:
    """plotting.save, then the PNG reduced to a 256-colour palette: the timelines' thousands
    of steps make a full-colour PNG three times larger, for no visible difference."""
    from PIL import Image

    plotting.save(fig, path)
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
    small.save(path, optimize=True)
    return path


def _edges(end_us: float) -> np.ndarray:
    return np.arange(0.0, end_us + BIN_US, BIN_US)


def latency_bins(x_ms: np.ndarray, y_ms: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The largest y among the points whose x falls in each bin (NaN: none)."""
    out = np.full(len(edges) - 1, -np.inf)
    b = np.searchsorted(edges / 1000, x_ms, side="right") - 1
    inside = (b >= 0) & (b < len(out))
    np.maximum.at(out, b[inside], y_ms[inside])
    out[np.isinf(out)] = np.nan
    return out


def _color(label: str, i: int) -> str:
    return COLORS.get(label, EXTRA_COLORS[i % len(EXTRA_COLORS)])


def _style(label: str, i: int) -> dict[str, Any]:
    """FIFO dashed and on top: it often coincides with Greedy."""
    if label == "FIFO":
        return {"color": COLORS["FIFO"], "ls": "--", "zorder": 3}
    return {"color": _color(label, i)}


def _zoom_window(runs: Sequence[Run], end_us: float) -> tuple[float, float]:
    """ZOOM_US around the time of the largest queue of any run."""
    best_t, best_m = 0.0, -1.0
    for run in runs:
        mem = run.result.memory
        if mem:
            i = int(np.argmax(np.asarray(mem, dtype=np.float64)))
            if float(mem[i]) > best_m:
                best_t, best_m = float(run.result.times[i]), float(mem[i])
    lo = max(0.0, min(best_t - ZOOM_US / 2, end_us - ZOOM_US))
    return lo, lo + ZOOM_US


def memory_outputs(
    out_dir: Path, stem: str, title: str, runs: Sequence[Run], end_us: float, notes: list[str]
) -> tuple[Path, Path]:
    """``<stem>_memory.csv`` (peak KB per 100 ms per policy) and ``<stem>_memory.png`` (whole
    run above, 2 s around the largest queue below, as step lines)."""
    edges = _edges(end_us)
    cols = {run.label: memory_bins(run.result, edges) * BYTES_PER_UNIT / KB for run in runs}
    rows = [
        {"time_ms": float(edges[i] / 1000), **{k: float(v[i]) for k, v in cols.items()}}
        for i in range(len(edges) - 1)
    ]
    csv = plotting.write_csv(
        out_dir / f"{stem}_memory.csv",
        rows,
        ["time_ms", *cols],
        [*notes, f"total queue size: peak KB per {BIN_US / 1000:g} ms from time_ms on"],
    )
    fig, (top, bottom) = plotting.plt.subplots(2, 1, figsize=(7.0, 6.0), dpi=plotting.DPI)
    top.set_title(title, fontsize=10)
    lo, hi = _zoom_window(runs, end_us)
    for i, run in enumerate(runs):
        style = _style(run.label, i)
        top.plot(edges[:-1] / 1000, cols[run.label], label=run.label, lw=0.7, **style)
        t = np.asarray(run.result.times, dtype=np.float64)
        m = np.asarray(run.result.memory, dtype=np.float64) * BYTES_PER_UNIT / KB
        sel = (t >= lo) & (t <= hi)
        if sel.any():
            bottom.step(t[sel] / 1000, m[sel], where="post", lw=0.8, **style)
    top.axvspan(lo / 1000, hi / 1000, color="0.9", zorder=0)
    for ax, label in (
        (top, f"whole run (peak per {BIN_US / 1000:g} ms)"),
        (bottom, "zoom: the largest burst"),
    ):
        ax.set_xlabel(f"time (ms); {label}")
        ax.set_ylabel("total queue size (KB)")
        ax.grid(True, alpha=0.3)
    top.legend(fontsize=8)
    png = _save(fig, out_dir / f"{stem}_memory.png")
    return csv, png


def latency_outputs(
    out_dir: Path,
    stem: str,
    title: str,
    runs: Sequence[Run],
    end_us: float,
    notes: list[str],
    thresholds_ms: Sequence[float] = (),
) -> tuple[Path, Path]:
    """``<stem>.csv`` (per 100 ms and policy, the largest mean latency of a block of 4 outputs
    leaving then) and ``<stem>.png`` (that, over the whole run; every block in the zoom
    window)."""
    edges = _edges(end_us)
    series = {run.label: latency_blocks(run) for run in runs}
    binned = {label: latency_bins(x, y, edges) for label, (x, y) in series.items()}
    rows = [
        {
            "time_ms": float(edges[i] / 1000),
            **{k: float(v[i]) for k, v in binned.items() if not np.isnan(v[i])},
        }
        for i in range(len(edges) - 1)
    ]
    csv = plotting.write_csv(
        out_dir / f"{stem}.csv",
        rows,
        ["time_ms", *binned],
        [
            *notes,
            f"output latency (ms): the largest mean over a block of {LATENCY_BLOCK} output "
            f"units among the blocks leaving in each {BIN_US / 1000:g} ms (empty: none left)",
        ],
    )
    fig, (top, bottom) = plotting.plt.subplots(2, 1, figsize=(7.0, 6.0), dpi=plotting.DPI)
    top.set_title(title, fontsize=10)
    lo, hi = _zoom_window(runs, end_us)
    for i, run in enumerate(runs):
        x, y = series[run.label]
        style = _style(run.label, i)
        b = binned[run.label]
        keep = ~np.isnan(b)
        top.plot(edges[:-1][keep] / 1000, b[keep], label=run.label, lw=0.7, **style)
        sel = (x >= lo / 1000) & (x <= hi / 1000)
        bottom.plot(x[sel], y[sel], lw=0.9, **style)
    for th in thresholds_ms:
        for ax in (top, bottom):
            ax.axhline(th, color="0.5", ls=":", lw=0.8)
    top.axvspan(lo / 1000, hi / 1000, color="0.9", zorder=0)
    for ax, label in (
        (top, f"whole run (peak per {BIN_US / 1000:g} ms)"),
        (bottom, "zoom: the largest burst"),
    ):
        ax.set_xlabel(f"time (ms); {label}")
        ax.set_ylabel("output latency (ms)")
        ax.grid(True, alpha=0.3)
    top.legend(fontsize=8)
    png = _save(fig, out_dir / f"{stem}.png")
    return csv, png


SUMMARY_COLUMNS = [
    "policy",
    "peak_kb",
    "mean_kb",
    "peak_latency_ms",
    "mean_latency_ms",
    "outputs",
    "decisions",
    "switches",
    "flushes",
]


def summary_csv(out_dir: Path, stem: str, runs: Sequence[Run], notes: list[str]) -> Path:
    return plotting.write_csv(
        out_dir / f"{stem}_summary.csv", [r.summary() for r in runs], SUMMARY_COLUMNS, notes
    )


def _notes(name: str, scale: float, seed: int, setup: str, duration: float) -> list[str]:
    return [
        f"streamon experiment {name} (Babcock et al., VLDB J. 2004, Sect. 6), simulator",
        f"scale={scale} seed={seed} simulated={duration / 1e6:g} s utilization={UTILIZATION}",
        f"ON/OFF arrivals: flows every {FLOW_SCALE_US / 1000:g} ms (Poisson), Pareto k="
        f"{FLOW_SCALE_US / 1000:g} ms alpha=2.3; memory unit {BYTES_PER_UNIT} bytes; "
        f"Round-Robin quantum {RR_QUANTUM_US:g} us",
        setup,
    ]


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
    notes = _notes(name, scale, seed, setup, duration)
    mem_csv, mem_png = memory_outputs(out_dir, stem, f"{title}: queue size", runs, end, notes)
    lat_csv, lat_png = latency_outputs(
        out_dir, f"{stem}_latency", f"{title}: output latency", runs, end, notes
    )
    return [summary_csv(out_dir, stem, runs, notes), mem_csv, lat_csv, mem_png, lat_png]


# -- the experiments ----------------------------------------------------------------------------


def sched_two_ops(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Figs. 4-5: the two-operator chart (0,1), (500,0.3), (4000,0)."""
    d = duration_us(scale)
    plan = plan_from_charts({"q": TWO_OPS})
    arrivals = {"q": on_off(seed, TWO_OPS[-1][0], UTILIZATION, d)}
    return _timeline_experiment(
        "sched-two-ops",
        "sched_two_ops",
        "Two operators (Figs. 4-5)",
        f"chart {TWO_OPS}",
        plan,
        arrivals,
        out_dir,
        scale,
        seed,
        d,
    )


def sched_four_ops(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Figs. 6-7 (queue size) and 13-14 (latency; Chain-Flush at two thresholds)."""
    d = duration_us(scale)
    plan = plan_from_charts({"q": FOUR_OPS})
    arrivals = {"q": on_off(seed, FOUR_OPS[-1][0], UTILIZATION, d)}
    stem = "sched_four_ops"
    paths = _timeline_experiment(
        "sched-four-ops",
        stem,
        "Four operators (Figs. 6-7, 13)",
        f"chart {FOUR_OPS}",
        plan,
        arrivals,
        out_dir,
        scale,
        seed,
        d,
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
    notes = _notes(name, scale, seed, setup, d)
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
    d = duration_us(scale)
    plan = plan_from_charts({"q": STORED_JOIN})
    arrivals = {"q": on_off(seed, STORED_JOIN[-1][0], UTILIZATION, d)}
    return _timeline_experiment(
        "sched-stored-join",
        "sched_stored_join",
        "Join with a stored relation, s > 1 (Fig. 8)",
        f"chart {STORED_JOIN}",
        plan,
        arrivals,
        out_dir,
        scale,
        seed,
        d,
    )


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
    notes = _notes("sched-flush-threshold", scale, seed, "four-operator chart; three queries", d)
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
    png = _save(fig, out_dir / "sched_flush_threshold.png")
    return [csv, png]


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
    notes = _notes("sched-mixed", scale, seed, f"chart {MIXED_CHART}", d)
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
        ax.scatter([x], [y], color=_color(labels[0], i), zorder=3)
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
    notes = _notes(
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
    png = _save(fig, out_dir / "sched_table1.png")
    return [csv, png]


Experiment = Callable[[Path, float, int], list[Path]]

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


def run_experiment(name: str, out_dir: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Run one scheduling experiment by name; returns the files written (CSVs, then PNGs)."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}")
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    return EXPERIMENTS[name](Path(out_dir), scale, seed)
