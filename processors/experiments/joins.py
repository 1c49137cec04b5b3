"""Adaptive vs fixed join orders in an MJoin: Babu et al. (SIGMOD 2004), Example 1 and Section 8.

Example 1 motivates adaptive ordering with four routers whose windows are joined on the packet
id: which window should probe which first depends on how much traffic the routers share, and
that changes. Section 8 orders each MJoin pipeline's drop-probing with A-Greedy, treating every
probed window as a filter (a natural join is a star, so Theorem 4.1 applies). The paper has no
join experiment (Section 9 measures synthetic filters only); these experiments check the claim
on :class:`MJoinStage` with the Example 1 workload (:mod:`processors.workloads.network`), whose
overlap changes so that every router's best order changes at every phase.

How the measurements are made, and why:

- One workload run feeds one RANGE :class:`WindowStage` per router; the same delta batches go to
  every variant's MJoin, bucket by bucket of event time, the variants taking turns at going
  first. Time is ``push`` + ``release`` only (perf_counter), so tuples/s is input delta tuples
  (window inserts and deletes) per second of join time.
- Probes are the stage's own counters (``probes``, one per index lookup per intermediate
  result), so every probe count, order and order change is a deterministic function of the seed
  (A-Greedy's costs are probes per row, not times); only the timing columns vary between runs.
- Expected probes come from the workload's closed form (:meth:`OverlapPhase.expected_probes`,
  eq. 1 with unit costs) plus output generation, (n-1) probes per delta that survives
  drop-probing, the same for every order (Property 8.1). They hold once a phase's traffic fills
  the windows: deletes during the first window length of a phase still carry the previous
  phase's packets (``steady`` marks the buckets after that).
- Optimal pins each phase's best orders (:meth:`NetworkWorkload.best_orders`) at the phase's
  start: an oracle that knows the distribution and pays no profiling.
- ``scale`` multiplies every event-time length (window, phases, buckets) and the A-Greedy
  profile window (in profile tuples), the packet rate staying fixed: a smaller run is the same
  experiment compressed in time, with fewer tuples per window and noisier statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from processors.experiments import plotting
from processors.experiments.joins_setup import (
    BUCKET_MS,
    CHANGE_COLUMNS,
    PACKETS_PER_S,
    PHASE_MS,
    ROUTERS,
    SUMMARY_COLUMNS,
    TIMELINE_COLUMNS,
    WINDOW_MS,
    default_orders,
    expected_probes,
    style_of,
)
from processors.experiments.joins_timeline import (
    _check_same_results,
    format_orders,
    scaled_ms,
    summarize,
    timeline,
    timeline_plot,
    warm_up,
)
from processors.experiments.runner import Experiment, runner
from processors.workloads.network import (
    NetworkWorkload,
    OverlapPhase,
    default_phases,
)


def mjoin_adaptivity(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Example 1's four routers through a 4-way MJoin; the overlap between routers changes
    every phase (default_phases: router i takes the role of router i-1), and A-Greedy, the
    default and the phase-0 best orders and the per-phase optimum process the same deltas."""
    warm_up()
    bucket_ms = scaled_ms(BUCKET_MS, scale)  # phases and windows: whole buckets
    window_ms = bucket_ms * (WINDOW_MS // BUCKET_MS)
    phase_ms = bucket_ms * (PHASE_MS // BUCKET_MS)
    workload = NetworkWorkload(
        routers=ROUTERS,
        packets_per_s=PACKETS_PER_S,
        phases=default_phases(ROUTERS, phase_ms),
        seed=seed,
    )
    tl = timeline(workload, window_ms, bucket_ms, scale, seed)
    summary = summarize(tl)
    v = {x.key: x for x in tl.variants}
    notes = [
        "mjoin_adaptivity: Babu et al. 2004 Example 1 / Section 8, adaptive vs fixed MJoin "
        "orders (streamon experiment mjoin_adaptivity)",
        f"scale={scale:g} seed={seed}; {ROUTERS} routers, {PACKETS_PER_S:g} packets/s, RANGE "
        f"{window_ms} ms windows, {len(workload.schedule)} phases of {phase_ms} ms "
        f"(default_phases), buckets of {bucket_ms} ms of event time",
        f"A-Greedy: p={v['agreedy'].config.p:g}, profile window {v['agreedy'].config.window}, "
        f"min {v['agreedy'].config.min_profile_tuples}; Table 1 variant: "
        f"p={v['agreedy_table1'].config.p:g}, window {v['agreedy_table1'].config.window}",
        "best orders per phase (router i: others in probe order): "
        + " | ".join(format_orders(b) for b in tl.best),
        "probes: index lookups per delta tuple (inserts and deletes), drop-probing plus output "
        "generation; drop_probes_per_delta subtracts output generation ((n-1) per result)",
        "expected_*: closed form for the orders in use at the bucket's end (valid when steady: "
        "the phase began at least one window earlier); tuples_per_s: deltas per second of "
        "push+release, this machine",
        "results: join results in the bucket; net_size: Example 1's sum(size) over the join so "
        "far (inserts minus deletes); both equal for every variant, checked per bucket",
    ]
    paths = [
        plotting.write_csv(out / "mjoin_adaptivity.csv", tl.rows, TIMELINE_COLUMNS, notes),
        plotting.write_csv(
            out / "mjoin_adaptivity_summary.csv",
            summary,
            SUMMARY_COLUMNS,
            [
                *notes[:3],
                "per phase: steady buckets only (windows full of the phase's traffic); "
                "'steady': those of every phase; 'all': every bucket; excess_work_pct: probes "
                "over the best orders' expectation; best_orders_after_s: from the phase's start "
                "until the orders became (and stayed) the phase's best",
            ],
        ),
        plotting.write_csv(
            out / "mjoin_adaptivity_changes.csv",
            tl.changes,
            CHANGE_COLUMNS,
            [notes[0], notes[1], "every order change (t_s: end of the bucket it happened in)"],
        ),
    ]
    paths.append(
        timeline_plot(
            out / "mjoin_adaptivity.png",
            tl,
            "probes_per_delta",
            f"MJoin probes per delta tuple, overlap changing every {phase_ms / 1000:g} s",
            f"probes per delta tuple (per {bucket_ms / 1000:g} s)",
            expected=True,
        )
    )
    paths.append(
        timeline_plot(
            out / "mjoin_adaptivity_rate.png",
            tl,
            "tuples_per_s",
            "MJoin throughput, same deltas for every variant (5-bucket moving rate)",
            "thousand delta tuples / s of join time",
            scale_y=1e-3,
            smooth=5,
        )
    )
    return paths


OVERLAP_STRENGTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
SWEEP_COLUMNS = [
    "strength", "variant", "deltas", "probes_per_delta", "expected_probes_per_delta",
    "optimal_expected_probes_per_delta", "excess_work_pct", "tuples_per_s", "changes",
    "stale_order_excess_pct",
]  # fmt: skip


def blended_phases(routers: int, phase_ms: int, strength: float) -> tuple[OverlapPhase, ...]:
    """:func:`default_phases` with only a share ``strength`` of each phase's traffic following
    the rotating pattern; the rest takes any route through two or more routers, all equally
    likely, the same in every phase. 0: nothing changes (all orders cost the same); 1: the
    default schedule."""
    if not 0.0 <= strength <= 1.0:
        raise ValueError(f"strength must be in [0, 1], got {strength}")
    background = [
        tuple(r for r in range(routers) if mask >> r & 1)
        for mask in range(1, 1 << routers)
        if bin(mask).count("1") >= 2
    ]
    out = []
    for p in default_phases(routers, phase_ms):
        weights: dict[tuple[int, ...], float] = {}
        if strength > 0:
            for route, w in zip(p.routes, p.weights, strict=True):
                weights[tuple(route)] = weights.get(tuple(route), 0.0) + strength * w
        if strength < 1:
            for route in background:
                weights[route] = weights.get(route, 0.0) + (1 - strength) / len(background)
        out.append(OverlapPhase(phase_ms, list(weights.items()), name=f"{p.name} x{strength:g}"))
    return tuple(out)


def stale_order_excess(workload: NetworkWorkload) -> float:
    """How much a change matters: the phase-0 best orders' expected probes in the later
    phases over those phases' best, in percent (mean over phases 1..)."""
    best = workload.best_orders()
    schedule, n = workload.schedule, workload.routers
    ratios = [
        expected_probes(schedule[p], n, best[0]) / expected_probes(schedule[p], n, best[p])
        for p in range(1, len(schedule))
    ]
    return 100.0 * (float(np.mean(ratios)) - 1.0) if ratios else 0.0


def mjoin_overlap_sweep(
    out: Path,
    scale: float = 1.0,
    seed: int = 0,
    strengths: Sequence[float] = OVERLAP_STRENGTHS,
) -> list[Path]:
    """mjoin_adaptivity's run at several overlap strengths (:func:`blended_phases`): how much
    adapting saves, and what it costs, as the change between phases grows from none to
    Example 1's rotation. Steady buckets of every phase."""
    warm_up()
    bucket_ms = scaled_ms(BUCKET_MS, scale)
    window_ms = bucket_ms * (WINDOW_MS // BUCKET_MS)
    phase_ms = bucket_ms * (PHASE_MS // BUCKET_MS)
    rows: list[dict[str, Any]] = []
    labels: list[str] = []
    for strength in strengths:
        workload = NetworkWorkload(
            routers=ROUTERS,
            packets_per_s=PACKETS_PER_S,
            phases=blended_phases(ROUTERS, phase_ms, strength),
            seed=seed,
        )
        tl = timeline(workload, window_ms, bucket_ms, scale, seed)
        labels = [v.label for v in tl.variants]
        stale = stale_order_excess(workload)
        for r in summarize(tl):
            if r["phase"] == "steady":
                rows.append({"strength": strength, **r, "stale_order_excess_pct": stale})
    notes = [
        "mjoin_overlap_sweep: Babu et al. 2004 Example 1 / Section 8, adaptive vs fixed MJoin "
        "orders as the overlap change grows (streamon experiment mjoin_overlap_sweep)",
        f"scale={scale:g} seed={seed}; mjoin_adaptivity's setup ({ROUTERS} routers, "
        f"{PACKETS_PER_S:g} packets/s, RANGE {window_ms} ms windows, 4 phases of {phase_ms} ms)"
        "; strength s: a share s of the traffic follows the rotating Example 1 routes, 1 - s "
        "any route of 2+ routers uniformly (the same in every phase)",
        "steady buckets of every phase (windows full of the phase's traffic); excess_work_pct: "
        "probes over the best orders' expectation; stale_order_excess_pct: what keeping "
        "phase 0's best orders would cost in phases 1-3 (expected); tuples_per_s: deltas per "
        "second of push+release, this machine",
    ]
    xs = list(strengths)
    return [
        plotting.write_csv(out / "mjoin_overlap_sweep.csv", rows, SWEEP_COLUMNS, notes),
        _sweep_plot(
            out / "mjoin_overlap_sweep.png",
            "MJoin work vs how much the overlap changes",
            "excess probes over the best orders (%)",
            xs,
            {lb: [_pick(rows, s, lb, "excess_work_pct") for s in xs] for lb in labels},
        ),
        _sweep_plot(
            out / "mjoin_overlap_sweep_rate.png",
            "MJoin throughput vs how much the overlap changes",
            "thousand delta tuples / s of join time",
            xs,
            {lb: [_pick(rows, s, lb, "tuples_per_s") * 1e-3 for s in xs] for lb in labels},
        ),
    ]


def _pick(rows: Sequence[dict[str, Any]], strength: float, label: str, column: str) -> float:
    return float(
        next(r[column] for r in rows if r["strength"] == strength and r["variant"] == label)
    )


def _sweep_plot(
    path: Path, title: str, ylabel: str, xs: Sequence[float], series: dict[str, list[float]]
) -> Path:
    fig, ax = plotting.figure(title, "overlap strength s (share of rotating traffic)", ylabel)
    for label, ys in series.items():
        ax.plot(xs, ys, label=label, markersize=5, linewidth=1.0, **style_of(label, markers=True))
    ax.legend(fontsize=7)
    return plotting.save(fig, path)


__all__ = [
    "SUMMARY_COLUMNS",
    "SWEEP_COLUMNS",
    "TIMELINE_COLUMNS",
    "_check_same_results",
    "blended_phases",
    "default_orders",
    "expected_probes",
    "mjoin_overlap_sweep",
    "run_experiment",
]

EXPERIMENTS: dict[str, Experiment] = {
    "mjoin_adaptivity": mjoin_adaptivity,
    "mjoin_overlap_sweep": mjoin_overlap_sweep,
}

run_experiment = runner(EXPERIMENTS)
