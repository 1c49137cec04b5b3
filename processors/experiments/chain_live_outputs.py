"""What ``streamon experiment chain-live`` writes: the JSON summary, the CSVs and the PNGs of
queued bytes and latency per policy.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from processors.bench.machine import machine_info
from processors.experiments.chain_live_setup import (
    LiveChart,
    LiveSetup,
    RunResult,
    Schedule,
)


def summary_of(
    runs: list[RunResult], cal: dict[str, float], schedule: Schedule, setup: LiveSetup,
    threshold_ms: float, points: list[tuple[float, float]],
) -> dict[str, Any]:  # fmt: skip
    by = {r.policy: r for r in runs}
    out: dict[str, Any] = {}
    for r in runs:
        key = r.policy.replace("-", "_")
        out[f"{key}_peak_bytes"] = r.peak_bytes
        out[f"{key}_peak_tuples"] = r.peak_tuples
        out[f"{key}_peak_latency_ms"] = r.peak_latency_ms
        out[f"{key}_mean_latency_ms"] = r.mean_latency_ms
    out["flush_threshold_ms"] = threshold_ms
    out["flush_peak_latency_ms"] = by["chain-flush"].peak_latency_ms
    out["flush_peak_bytes"] = by["chain-flush"].peak_bytes
    out["chain_vs_fifo_peak_bytes"] = by["chain"].peak_bytes / max(by["fifo"].peak_bytes, 1)
    out["chain_vs_greedy_peak_bytes"] = by["chain"].peak_bytes / max(by["greedy"].peak_bytes, 1)
    out["flush_latency_over_threshold"] = by["chain-flush"].peak_latency_ms / threshold_ms
    decisions = sum(r.arbiter().get("decisions", 0) for r in runs)
    decision_ns = sum(
        r.arbiter().get("decisions", 0) * r.arbiter().get("decision_ns_avg", 0.0) for r in runs
    )
    busy_ns = sum(
        sum(a["busy_ns"] for a in r.status.get("stats", {}).get("agents", [])) for r in runs
    )
    out["arbiter_decisions"] = decisions
    out["arbiter_decision_us_avg"] = decision_ns / max(decisions, 1) / 1000
    out["arbiter_decision_us_max"] = (
        max((r.arbiter().get("decision_ns_max", 0) for r in runs), default=0) / 1000
    )
    out["arbiter_share_of_busy_time"] = decision_ns / max(busy_ns, 1)
    out["runs"] = {
        r.policy: {
            "settings": r.settings,
            "results": r.results,
            "missing": r.missing,
            "duplicates": r.duplicates,
            "drained_s": r.drained_s,
            "arbiter": {k: v for k, v in r.arbiter().items() if k != "agents"},
            "waits": r.arbiter().get("agents", {}),
        }
        for r in runs
    }
    out["calibration"] = cal
    out["workload"] = {
        "records": len(schedule.offsets),
        "base_rate_per_s": schedule.base_rate,
        "burst_rate_per_s": schedule.burst_rate,
        "burst": list(schedule.burst),
        "chart": points,
    }
    out["setup"] = asdict(setup)
    out["machine"] = machine_info()
    return out


def write_outputs(
    out_dir: Path, runs: list[RunResult], summary: dict[str, Any], schedule: Schedule,
    chart: LiveChart,
) -> list[Path]:  # fmt: skip
    from processors.experiments.plotting import figure, save, write_csv

    notes = [
        f"streamon experiment {chart.name.replace('_', '-')}: Babcock et al. Sect. 6 chart "
        f"{', '.join(f'({t:g},{s:g})' for t, s in chart.points)} ({chart.title}) as synthetic "
        "operators on one worker",
        f"steady {schedule.base_rate:.0f}/s, burst {schedule.burst_rate:.0f}/s at "
        f"{schedule.burst[0]:g}-{schedule.burst[0] + schedule.burst[1]:g} s; "
        f"{len(schedule.offsets)} records (seeded Poisson)",
        f"machine: {summary['machine']}",
    ]
    queue_rows = [
        {
            "policy": policy_label(r),
            "t_s": s["t"],
            "queued_bytes": s["queued_bytes"],
            "queued_tuples": s["queued_tuples"],
        }  # fmt: skip
        for r in runs
        for s in r.samples
    ]
    agent_rows = [
        {
            "policy": policy_label(r),
            "t_s": s["t"],
            "agent": agent,
            "queued_bytes": nbytes,
            "queued_tuples": s["per_agent_tuples"].get(agent, 0),
        }  # fmt: skip
        for r in runs
        for s in r.samples
        for agent, nbytes in s["per_agent_bytes"].items()
    ]
    latency_rows = []
    for r in runs:
        for t, lat in _binned_latency(r.latencies):
            latency_rows.append({"policy": policy_label(r), "t_s": t, "latency_ms": lat})
    summary_rows = [
        {
            "policy": policy_label(r),
            "peak_queued_bytes": r.peak_bytes,
            "peak_queued_tuples": r.peak_tuples,
            "peak_latency_ms": r.peak_latency_ms,
            "mean_latency_ms": r.mean_latency_ms,
            "results": r.results,
        }  # fmt: skip
        for r in runs
    ]
    paths = [
        write_csv(
            out_dir / f"{chart.name}_queue.csv",
            queue_rows,
            ["policy", "t_s", "queued_bytes", "queued_tuples"],
            notes,
        ),  # fmt: skip
        write_csv(
            out_dir / f"{chart.name}_queue_agents.csv",
            agent_rows,
            ["policy", "t_s", "agent", "queued_bytes", "queued_tuples"],
            notes,
        ),  # fmt: skip
        write_csv(
            out_dir / f"{chart.name}_latency.csv",
            latency_rows,
            ["policy", "t_s", "latency_ms"],
            notes,
        ),  # fmt: skip
        write_csv(
            out_dir / f"{chart.name}_summary.csv",
            summary_rows,
            [
                "policy",
                "peak_queued_bytes",
                "peak_queued_tuples",
                "peak_latency_ms",
                "mean_latency_ms",
                "results",
            ],
            notes,
        ),  # fmt: skip
    ]
    fig, ax = figure(f"Queued data vs time (live, {chart.title})", "time (s)", "queued KB")
    for r in runs:
        ax.plot([s["t"] for s in r.samples], [s["queued_bytes"] / 1024 for s in r.samples],
                label=policy_label(r), linewidth=1.2)  # fmt: skip
    _shade_burst(ax, schedule)
    ax.legend(fontsize=8)
    paths.append(save(fig, out_dir / f"{chart.name}_queue.png"))
    fig, ax = figure(f"Output latency vs time (live, {chart.title})", "time (s)", "latency (ms)")
    for r in runs:
        binned = _binned_latency(r.latencies)
        ax.plot(
            [t for t, _ in binned], [v for _, v in binned], label=policy_label(r), linewidth=1.2
        )
    ax.axhline(summary["flush_threshold_ms"], color="grey", linestyle=":", linewidth=1)
    _shade_burst(ax, schedule)
    ax.legend(fontsize=8)
    paths.append(save(fig, out_dir / f"{chart.name}_latency.png"))
    return paths


def policy_label(run: RunResult) -> str:
    if run.policy == "chain-flush":
        return f"chain-flush ({run.settings.get('latency_ms')} ms)"
    return run.policy


def _shade_burst(ax: Any, schedule: Schedule) -> None:
    start, length = schedule.burst
    ax.axvspan(start, start + length, color="grey", alpha=0.12, linewidth=0)


def _binned_latency(latencies: np.ndarray, width_s: float = 0.25) -> list[tuple[float, float]]:
    """Mean latency of the outputs of each ``width_s`` interval (as the paper averages blocks
    of outputs), in output-time order."""
    if not len(latencies):
        return []
    bins = np.floor(latencies[:, 0] / width_s).astype(np.int64)
    out = []
    for b in np.unique(bins):
        mask = bins == b
        out.append((float((b + 0.5) * width_s), float(latencies[mask, 1].mean())))
    return out
