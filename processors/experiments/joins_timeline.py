"""One run of the MJoin experiments: every variant over the same delta batches, bucket by bucket
of event time (:func:`timeline`), its summary per phase and its plot.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from processors.core.plan import Window
from processors.experiments import plotting
from processors.experiments.joins_setup import (
    STYLE,
    Meter,
    Orders,
    Variant,
    expected_probes,
    style_of,
    variants,
)
from processors.stages.window_stage import WindowStage
from processors.workloads.network import (
    NetworkWorkload,
    NetworkWorkloadRun,
    default_phases,
)

_warmed = False


def warm_up() -> None:
    """Run every kernel once (numba compiles or loads its cache) before anything is timed."""
    global _warmed
    if _warmed:
        return
    workload = NetworkWorkload(packets_per_s=500.0, phases=default_phases(4, 4_000), seed=99)
    timeline(workload, window_ms=1_000, bucket_ms=500, scale=0.05, seed=0)
    _warmed = True


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


@dataclass
class Timeline:
    """What :func:`timeline` measured: rows per bucket and variant, and every order change."""

    rows: list[dict[str, Any]]
    changes: list[dict[str, Any]]
    best: list[Orders]
    variants: list[Variant]
    window_ms: int
    bucket_ms: int
    phase_ms: list[int]


def timeline(
    workload: NetworkWorkload,
    window_ms: int,
    bucket_ms: int,
    scale: float = 1.0,
    seed: int = 0,
    chosen: Sequence[Variant] | None = None,
) -> Timeline:
    """Every variant on the same windowed router streams, bucket by bucket of event time.

    Raises if the variants disagree on any bucket's results (count or Example 1's sum of
    sizes): orders may change the work, never the answer.
    """
    routers = workload.routers
    schedule = workload.schedule
    best = workload.best_orders()
    entries = list(chosen) if chosen is not None else variants(workload, scale, seed)
    run = NetworkWorkloadRun(workload)
    windows = [WindowStage(Window(n, "range", window_ms)) for n in run.stream_names]
    clock = [workload.start_ms]  # event time for the stages' change log
    meters = [Meter.create(v, routers, lambda: clock[0]) for v in entries]
    phase_starts = np.cumsum([0] + [p.duration_ms for p in schedule])
    cache: dict[tuple[int, Orders], float] = {}

    def expect(phase: int, orders: Orders) -> float:
        if (phase, orders) not in cache:
            cache[phase, orders] = expected_probes(schedule[phase], routers, orders)
        return cache[phase, orders]

    rows: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    bucket, previous = 0, -1
    while not run.done:
        start = run.now_ms
        offset = (start - workload.start_ms) % workload.cycle_ms
        phase = int(run.phase_at(start))
        steady = offset - int(phase_starts[phase]) >= window_ms
        # the run ends a few ms after the last birth: fold that tail into the last bucket
        span = bucket_ms if run.end_ms - start >= bucket_ms * 3 // 2 else run.end_ms - start
        batches = run.next_batches(span)
        clock[0] = run.now_ms
        deltas = [w.process(b) if len(b) else [] for w, b in zip(windows, batches, strict=True)]
        final = run.done
        if final:
            for i, w in enumerate(windows):
                deltas[i] = [*deltas[i], *w.flush()]
        for m in meters:
            if m.variant.pinned is not None and phase != previous:
                m.pin(m.variant.pinned[phase])
        previous = phase
        k = len(meters)
        for j in range(k):
            meters[(bucket + j) % k].step(deltas, final)
        t_s = (run.now_ms - workload.start_ms) / 1000.0
        optimal = expect(phase, best[phase])
        for m in meters:
            d = m.since_mark()
            n_deltas = sum(d["deltas"])
            n_probes = sum(d["probes"])
            orders = m.orders()
            row: dict[str, Any] = {
                "bucket": bucket,
                "t_s": t_s,
                "phase": phase,
                "steady": steady,
                "variant": m.variant.label,
                "deltas": n_deltas,
                "results": d["results"],
                "net_size": d["net_size"],
                "probes": n_probes,
                "probes_per_delta": n_probes / n_deltas if n_deltas else 0.0,
                # output generation binds every other input for each result (Property 8.1)
                "drop_probes_per_delta": (
                    (n_probes - (routers - 1) * d["results"]) / n_deltas if n_deltas else 0.0
                ),
                "expected_probes_per_delta": expect(phase, orders),
                "optimal_expected_probes_per_delta": optimal,
                "tuples_per_s": n_deltas / (d["spent_ns"] / 1e9) if d["spent_ns"] else 0.0,
                "changes": d["changes"],
                "at_best_orders": orders == best[phase],
                "orders": format_orders(orders),
            }
            for i in range(routers):
                row[f"probes_per_delta_r{i}"] = (
                    d["probes"][i] / d["deltas"][i] if d["deltas"][i] else 0.0
                )
            rows.append(row)
            new = list(m.stage.recent_changes)[-d["changes"] :] if d["changes"] else []
            if d["changes"] > len(new):
                logging.getLogger(__name__).warning(
                    "%s: %d order changes in one bucket, only the last %d kept",
                    m.variant.label, d["changes"], len(new),
                )  # fmt: skip
            for c in new:
                changes.append(
                    {
                        "t_s": (c["time_ms"] - workload.start_ms) / 1000.0,
                        "phase": phase,
                        "variant": m.variant.label,
                        "pipeline": c["pipeline"],
                        "at_delta": c["at_delta"],
                        "from": " ".join(c["from"]),
                        "to": " ".join(c["to"]),
                        "reason": c["reason"],
                    }
                )
            m.mark()
        _check_same_results(rows[-len(meters) :])
        bucket += 1
    return Timeline(
        rows, changes, best, entries, window_ms, bucket_ms, [p.duration_ms for p in schedule]
    )


def format_orders(orders: Orders) -> str:
    """``r0:r1>r3>r2 r1:...``: each pipeline's probe order."""
    return " ".join(f"r{i}:" + ">".join(f"r{j}" for j in o) for i, o in enumerate(orders))


def _check_same_results(rows: Sequence[dict[str, Any]]) -> None:
    first = rows[0]
    for r in rows[1:]:
        if (r["results"], r["net_size"]) != (first["results"], first["net_size"]):
            raise RuntimeError(
                f"bucket {r['bucket']}: {r['variant']} produced {r['results']} results "
                f"(net size {r['net_size']}) but {first['variant']} {first['results']} "
                f"({first['net_size']}): join orders must not change the answer"
            )


def summarize(tl: Timeline) -> list[dict[str, Any]]:
    """Per variant: each phase over its steady buckets (windows full of the phase's traffic),
    ``steady`` (the steady buckets of every phase) and ``all`` (every bucket): probes per delta
    against the best orders' expectation, tuples/s, order changes, and when the orders last
    became the phase's best."""
    out: list[dict[str, Any]] = []
    phases = sorted({r["phase"] for r in tl.rows})
    for v in tl.variants:
        mine = [r for r in tl.rows if r["variant"] == v.label]
        for p in [*phases, "steady", "all"]:
            if p == "all":
                here = steady = mine
            elif p == "steady":
                here = steady = [r for r in mine if r["steady"]]
            else:
                here = [r for r in mine if r["phase"] == p]
                steady = [r for r in here if r["steady"]]
            if steady:
                out.append(_aggregate(steady, here, p, v.label, tl))
    return out


def _aggregate(
    steady: Sequence[dict[str, Any]],
    here: Sequence[dict[str, Any]],
    phase: int | str,
    label: str,
    tl: Timeline,
) -> dict[str, Any]:
    deltas = sum(r["deltas"] for r in steady)
    probes = sum(r["probes"] for r in steady)
    seconds = sum(r["deltas"] / r["tuples_per_s"] for r in steady if r["tuples_per_s"])
    weight = [r["deltas"] for r in steady]
    exp = float(np.average([r["expected_probes_per_delta"] for r in steady], None, weight))
    opt = float(np.average([r["optimal_expected_probes_per_delta"] for r in steady], None, weight))
    ppd = probes / deltas if deltas else 0.0
    return {
        "phase": phase,
        "variant": label,
        "deltas": deltas,
        "probes_per_delta": ppd,
        "expected_probes_per_delta": exp,
        "optimal_expected_probes_per_delta": opt,
        "excess_work_pct": 100.0 * (ppd / opt - 1.0) if opt else 0.0,
        "tuples_per_s": deltas / seconds if seconds else 0.0,
        "changes": sum(r["changes"] for r in here),
        "best_orders_after_s": _settled(here, tl) if isinstance(phase, int) else "",
        "final_orders": here[-1]["orders"],
    }


def _settled(rows: Sequence[dict[str, Any]], tl: Timeline) -> float | str:
    """Seconds from the phase's start to the end of the first bucket from which on the orders
    are the phase's best ('never' if the phase ends otherwise)."""
    if not rows[-1]["at_best_orders"]:
        return "never"
    k = len(rows) - 1
    while k > 0 and rows[k - 1]["at_best_orders"]:
        k -= 1
    phase_start = rows[0]["t_s"] - tl.bucket_ms / 1000.0
    return rows[k]["t_s"] - phase_start


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------


def timeline_plot(
    path: Path,
    tl: Timeline,
    column: str,
    title: str,
    ylabel: str,
    scale_y: float = 1.0,
    expected: bool = False,
    smooth: int = 1,
) -> Path:
    """One line per variant over event time; dotted lines at phase starts, the first window
    length of each phase shaded (windows still hold the previous phase's traffic), A-Greedy's
    order changes as ticks on the x axis. ``smooth`` > 1: tuples/s over that many buckets
    centred on each (deltas over time), for timings noisier than a bucket's work."""
    fig, ax = plotting.figure(title, "event time (s)", ylabel, size=(7.5, 4.8))
    t_end = max(r["t_s"] for r in tl.rows)
    start = 0
    k = 0
    while start / 1000.0 < t_end:
        x0 = start / 1000.0
        ax.axvline(x0, color="grey", linestyle=":", linewidth=0.8)
        ax.axvspan(x0, x0 + tl.window_ms / 1000.0, color="grey", alpha=0.12, linewidth=0)
        start += tl.phase_ms[k % len(tl.phase_ms)]
        k += 1
    for v in tl.variants:
        mine = [r for r in tl.rows if r["variant"] == v.label]
        xs = [r["t_s"] for r in mine]
        ys = [r[column] * scale_y for r in mine]
        if smooth > 1:
            ys = [y * scale_y for y in _rolling_rate(mine, smooth)]
        ax.plot(xs, ys, label=v.label, linewidth=0.9, **style_of(v.label, markers=False))
    if expected:
        mine = [r for r in tl.rows if r["variant"] == tl.variants[0].label]
        ax.plot(
            [r["t_s"] for r in mine],
            [r["optimal_expected_probes_per_delta"] for r in mine],
            label="best orders, expected",
            color="grey",
            linewidth=2.5,
            alpha=0.5,
            drawstyle="steps-pre",
        )
    ticks = [c["t_s"] for c in tl.changes if c["variant"] == "A-Greedy"]
    if ticks:
        ax.plot(
            ticks,
            [0.0] * len(ticks),
            "|",
            color=STYLE["A-Greedy"]["color"],
            markersize=10,
            transform=ax.get_xaxis_transform(),
            clip_on=False,
            label="A-Greedy order change",
        )
    ax.set_xlim(0, t_end)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
    return plotting.save(fig, path)


def _rolling_rate(rows: Sequence[dict[str, Any]], k: int) -> list[float]:
    """Deltas per second over the ``k`` buckets centred on each bucket (fewer at the ends)."""
    deltas = np.array([r["deltas"] for r in rows], np.float64)
    rates = np.array([r["tuples_per_s"] for r in rows], np.float64)
    seconds = np.divide(deltas, rates, out=np.zeros_like(deltas), where=rates > 0)
    out = []
    for i in range(len(rows)):
        lo, hi = max(0, i - k // 2), min(len(rows), i + k // 2 + 1)
        t = seconds[lo:hi].sum()
        out.append(float(deltas[lo:hi].sum() / t) if t > 0 else 0.0)
    return out


# ---------------------------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------------------------


def scaled_ms(ms: int, scale: float) -> int:
    return max(1, round(ms * scale))
