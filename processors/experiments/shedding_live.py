"""``streamon experiment shedding``: load shedding on a live overload (issue 18, docs/shedding.md).

One worker runs a network-monitoring join (:mod:`processors.experiments.shedding_live_setup`)
on the broker. A staircase of steady rates measures its capacity C on this machine; then the
same ramp (``low`` x C, up to ``high`` x C, back) runs twice, once with ``shed(500 ms)`` and
once without. Every result is checked against the records written (precision, recall); the
output latency of a result is the time it was written (its Kafka timestamp) less the time its
newer input was written. Writes ``shedding_timeline.csv`` (latency, backlog, kept fraction and
output rate per second of each run), ``shedding.png`` and the JSON summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from processors.experiments.shedding_live_run import (
    STREAMS,
    LiveRun,
    calibrate,
    calibrate_kept,
    result_latencies,
    run_ramp,
)
from processors.experiments.shedding_live_setup import (
    Ramp,
    Sent,
    ShedSetup,
    check_results,
    exact_pairs,
    sampled,
)

#: the run without shedding is not waited for to work off its backlog (minutes): its latency
#: during the overload is what it shows
NOSHED_SETTLE_S = 5.0
#: ... and its results (tens of millions) are read in this many runs of records spread over
#: the partition
NOSHED_RUNS = 40


def run_shedding_live(
    out_dir: Path, scale: float = 1.0, seed: int = 0, json_path: Path | None = None,
    setup: ShedSetup | None = None, bootstrap: str | None = None,
) -> list[Path]:  # fmt: skip
    """Calibrate, run the ramp with and without shedding, write CSV, PNG and JSON."""
    from processors.runtime.config import load_settings, resolve_bootstrap

    setup = (setup or ShedSetup(seed=seed)).scaled(scale)
    settings = load_settings()
    bootstrap = bootstrap or resolve_bootstrap(settings)
    state_dir = settings.state_dir / "shedding-live"
    state_dir.mkdir(parents=True, exist_ok=True)

    _say("calibrating: a staircase of steady rates, no shedding")
    cal = calibrate(bootstrap, state_dir, setup)
    ramp = Ramp(cal["capacity_per_s"], setup)
    bounded = cal["capacity_within_bound_per_s"] or 0
    _say(f"capacity {ramp.capacity:,.0f} records/s per input ({bounded:,.0f} within the "
         f"latency bound); ramp {setup.low:g}x -> {setup.high:g}x -> {setup.low:g}x over "
         f"{ramp.duration_s:.0f} s")  # fmt: skip
    _say(f"calibrating: the shares kept up with at {setup.high:g}x, set by hand")
    cal["kept"] = calibrate_kept(bootstrap, state_dir, setup, ramp.capacity)
    _say(
        f"at {cal['kept']['offered_per_s']:,.0f} records/s per input the worker keeps up "
        f"with {cal['kept']['kept_per_s']:,.0f} (share {cal['kept']['keep']:.3f}; within the "
        f"latency bound {cal['kept']['kept_within_bound_per_s'] or 0:,.0f})"
    )
    runs = {}
    for shed in (True, False):
        _say(f"running the ramp {'with' if shed else 'without'} shedding")
        runs[shed] = run_ramp(bootstrap, state_dir, setup, ramp.rate, ramp.duration_s, shed,
                              settle_s=60.0 if shed else NOSHED_SETTLE_S,
                              runs=None if shed else NOSHED_RUNS)  # fmt: skip
    summary = summarize(runs[True], runs[False], ramp, cal)
    paths = write_outputs(Path(out_dir), runs[True], runs[False], ramp, summary)
    if json_path is not None:
        from processors.experiments.plotting import write_json  # matplotlib: on use

        paths.append(write_json(json_path, summary))
    _say(
        f"p99 latency in the overload: {summary['shed_p99_latency_ms']:,.0f} ms with shedding "
        f"(bound {summary['latency_bound_ms']} ms), {summary['noshed_p99_latency_ms']:,.0f} ms "
        f"without; kept {summary['kept_fraction']:.3f} of {summary['feasible_kept_fraction']:.3f}"
        f" feasible (capacity / offered), of {summary['feasible_kept_fraction_measured']:.3f} "
        f"measured at the top, of {summary.get('feasible_kept_fraction_within_bound', 0):.3f} "
        f"within the latency bound; precision {summary['precision']:.4f}, "
        f"recall {summary['recall']:.3f}; "
        f"lifted {summary['lift_after_ramp_s']} s after the ramp"
    )
    return paths


def latencies(run: LiveRun) -> tuple[np.ndarray, np.ndarray]:
    """(seconds since the ramp's start when written, latency ms) per result."""
    return result_latencies(run.results, run.start_t)


def in_sample(run: LiveRun, setup: ShedSetup) -> tuple[Sent, Sent]:
    """The records written whose results are in the partitions read back."""
    return (sampled(run.sent["a"], setup.partitions, setup.sampled_partitions),
            sampled(run.sent["b"], setup.partitions, setup.sampled_partitions))  # fmt: skip


def run_figures(run: LiveRun, ramp: Ramp, prefix: str) -> dict[str, Any]:
    """The overload's p99 latency, the peak backlog, precision and recall of one run (over
    the results of the partitions read back, against the exact join of their records)."""
    window = ramp.setup.window_ms
    t, lat = latencies(run)
    o0, o1 = ramp.overload()
    during = lat[(t >= o0) & (t <= o1)]
    a, b = in_sample(run, ramp.setup)
    valid, duplicates = check_results(a, b, run.results["a_dst"], run.results["b_dst"], window)
    exact = exact_pairs(a, b, window)
    correct = int(valid.sum()) - duplicates
    backlog = [s["source_backlog"] + s["join_backlog"] for s in run.samples]
    return {
        f"{prefix}_p99_latency_ms": float(np.percentile(during, 99)) if len(during) else None,
        f"{prefix}_max_latency_ms": float(lat.max()) if len(lat) else None,
        f"{prefix}_p99_latency_ms_whole_run": float(np.percentile(lat, 99)) if len(lat) else None,
        f"{prefix}_peak_backlog": int(max(backlog, default=0)),
        f"{prefix}_results": run.results_written,
        f"{prefix}_results_checked": len(lat),
        f"{prefix}_exact_results": exact,
        f"{prefix}_precision": float(valid.mean()) if len(valid) else 1.0,
        # a run read in runs of results has no recall (and duplicates only within runs)
        f"{prefix}_recall": (correct / exact if exact else 1.0) if run.sampled else None,
        f"{prefix}_duplicates": duplicates,
    }


def shedding_figures(run: LiveRun, ramp: Ramp) -> dict[str, Any]:
    """Kept fraction in the overload, when the boxes were lifted, and exactness after."""
    o0, o1 = ramp.overload()
    inside = [s for s in run.samples if o0 <= s["t"] <= o1]
    kept = dropped = 0
    if len(inside) >= 2:
        for stream in STREAMS:
            kept += inside[-1]["kept"][stream] - inside[0]["kept"][stream]
            dropped += inside[-1]["dropped"][stream] - inside[0]["dropped"][stream]
    shed_at = [s["t"] for s in run.samples if any(k < 1.0 for k in s["keep"].values())]
    lift_t = None
    if shed_at:
        after = [s["t"] for s in run.samples if s["t"] > shed_at[-1]]
        lift_t = after[0] if after else None
    out: dict[str, Any] = {
        "kept_fraction": kept / (kept + dropped) if kept + dropped else 1.0,
        "feasible_kept_fraction": ramp.feasible_kept_fraction((o0, o1)),
        "first_shed_s": shed_at[0] if shed_at else None,
        "lifted_s": lift_t,
        "lift_after_overload_s": None if lift_t is None else round(lift_t - o1, 2),
        "lift_after_ramp_s": None if lift_t is None else round(max(lift_t - ramp.ramp_end_s, 0), 2),
        "changes": len(run.changes),
        # what the controller decided and why, in seconds since the ramp's start
        "change_log": [
            {
                "t_s": round(c["time_ms"] / 1000 - run.start_t, 2),
                "keep": c["to"],
                "reason": c["reason"],
            }
            for c in run.changes
            if "time_ms" in c
        ],
    }
    if lift_t is not None:  # records written a second after the lift (the boxes read it)
        since_ms = int((run.start_t + lift_t + 1.0) * 1000)
        r = run.results
        late = (r["a_ts"] >= since_ms) & (r["b_ts"] >= since_ms)
        a, b = in_sample(run, ramp.setup)
        valid, duplicates = check_results(a, b, r["a_dst"][late], r["b_dst"][late],
                                          ramp.setup.window_ms)  # fmt: skip
        exact = exact_pairs(a, b, ramp.setup.window_ms, since_ms)
        out["recall_after_lift"] = (int(valid.sum()) - duplicates) / exact if exact else None
        out["precision_after_lift"] = float(valid.mean()) if len(valid) else None
    return out


def summarize(shed: LiveRun, noshed: LiveRun, ramp: Ramp, cal: dict[str, Any]) -> dict[str, Any]:
    from processors.bench.machine import machine_info

    o0, o1 = ramp.overload()
    out: dict[str, Any] = {"latency_bound_ms": ramp.setup.max_latency_ms}
    out |= run_figures(shed, ramp, "shed") | run_figures(noshed, ramp, "noshed")
    out |= shedding_figures(shed, ramp)
    out["precision"] = out["shed_precision"]
    out["recall"] = out["shed_recall"]
    out["kept_vs_feasible"] = out["kept_fraction"] / out["feasible_kept_fraction"]
    # the same with what the worker kept up with at the top, reading the rest (calibrate_kept)
    out["feasible_kept_fraction_measured"] = ramp.feasible_kept_fraction(
        (o0, o1), cal["kept"]["kept_per_s"]
    )
    out["kept_vs_feasible_measured"] = out["kept_fraction"] / out["feasible_kept_fraction_measured"]
    # the same with the rates kept up with within the latency bound (calibration.judge_latency)
    bounded, top_bounded = (
        cal.get("capacity_within_bound_per_s"),
        cal["kept"].get("kept_within_bound_per_s"),
    )
    if bounded is not None:
        out["feasible_kept_fraction_within_bound"] = ramp.feasible_kept_fraction(
            (o0, o1), top_bounded, capacity=bounded
        )
        out["kept_vs_feasible_within_bound"] = (
            out["kept_fraction"] / out["feasible_kept_fraction_within_bound"]
        )
    out["capacity_per_s"] = ramp.capacity
    out["overload_s"] = [round(o0, 2), round(o1, 2)]
    out["ramp_end_s"] = ramp.ramp_end_s
    out["calibration"] = cal
    out["setup"] = {k: v for k, v in ramp.setup.__dict__.items()}
    out["machine"] = machine_info()
    return out


def timeline(run: LiveRun, ramp: Ramp, label: str) -> list[dict[str, Any]]:
    """Per second: offered rate, output latency p99, backlog, kept fraction, output rate."""
    t, lat = latencies(run)
    end = int(max(t.max(initial=0), max((s["t"] for s in run.samples), default=0))) + 1
    rows = []
    by_second: dict[int, dict[str, Any]] = {}
    for s in run.samples:
        by_second[int(s["t"])] = s
    second = np.floor(t).astype(np.int64)
    prev = None
    for k in range(max(end, 0)):
        mine = lat[second == k]
        s = by_second.get(k)
        row: dict[str, Any] = {"run": label, "t_s": k, "offered_per_s": float(ramp.rate(k + 0.5)),
                               "results_per_s": int(len(mine))}  # fmt: skip
        if len(mine):
            row["latency_p99_ms"] = float(np.percentile(mine, 99))
        if s is not None:
            row["backlog"] = s["source_backlog"] + s["join_backlog"]
            row["keep_a"], row["keep_b"] = s["keep"]["a"], s["keep"]["b"]
            if prev is not None:
                kept = sum(s["kept"][x] - prev["kept"][x] for x in STREAMS)
                read = kept + sum(s["dropped"][x] - prev["dropped"][x] for x in STREAMS)
                row["kept_fraction"] = kept / read if read else None
            prev = s
        rows.append(row)
    return rows


def write_outputs(
    out_dir: Path, shed: LiveRun, noshed: LiveRun, ramp: Ramp, summary: dict[str, Any]
) -> list[Path]:
    from processors.experiments.plotting import save, write_csv

    notes = [
        "streamon experiment shedding: a 2-way RANGE join of packet streams on one worker, "
        f"capacity {ramp.capacity:.0f} records/s per input (measured), offered "
        f"{ramp.setup.low:g}x -> {ramp.setup.high:g}x -> {ramp.setup.low:g}x, "
        f"shed(max_latency_ms={ramp.setup.max_latency_ms})",
        f"machine: {summary['machine']}",
    ]
    rows = timeline(shed, ramp, "shed") + timeline(noshed, ramp, "noshed")
    columns = ["run", "t_s", "offered_per_s", "results_per_s", "latency_p99_ms", "backlog",
               "keep_a", "keep_b", "kept_fraction"]  # fmt: skip
    paths = [write_csv(out_dir / "shedding_timeline.csv", rows, columns, notes)]
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(7.0, 9.0), dpi=80, sharex=True)
    panels = [
        ("latency_p99_ms", "latency p99 (ms)", True),
        ("backlog", "records waiting", True),
        ("kept_fraction", "kept fraction", False),
        ("results_per_s", "results / s", False),
    ]
    o0, o1 = ramp.overload()
    for ax, (key, label, log) in zip(axes, panels, strict=True):
        for run_label, style in (("shed", "tab:blue"), ("noshed", "tab:red")):
            pts = [(r["t_s"], r[key]) for r in rows if r["run"] == run_label
                   and r.get(key) is not None and (r[key] > 0 or not log)]  # fmt: skip
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, color=style, linewidth=1.0,
                        label="with shedding" if run_label == "shed" else "without")  # fmt: skip
        ax.axvspan(o0, o1, color="grey", alpha=0.15)
        if key == "latency_p99_ms":
            ax.axhline(ramp.setup.max_latency_ms, color="black", linestyle="--", linewidth=0.8)
        if key == "kept_fraction":
            t = np.arange(0, ramp.duration_s, 0.5)
            ax.plot(t, np.minimum(1.0, ramp.capacity / np.maximum(ramp.rate(t), 1e-9)),
                    color="grey", linestyle=":", label="capacity / offered")  # fmt: skip
        if log:
            ax.set_yscale("log")
            ax.set_ylim(bottom=10)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    axes[-1].set_xlabel("seconds since the ramp's start (grey: offered load over capacity)")
    axes[0].set_title("Load shedding on a live overload (streamon experiment shedding)",
                      fontsize=10)  # fmt: skip
    paths.append(save(fig, out_dir / "shedding.png"))
    return paths


def _say(text: str) -> None:
    print(f"[shedding] {text}", flush=True)
