"""The set-up of the scheduling experiments (:mod:`processors.experiments.scheduling` says how they
run): sizes, charts, plans and ON/OFF arrivals, a simulated run per policy, and its memory and
latency series.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
