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

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from processors.core.batch import Batch
from processors.core.ordering.config import OrderingConfig
from processors.core.plan import Window
from processors.experiments import plotting
from processors.stages.mjoin_stage import MJoinStage
from processors.stages.window_stage import WindowStage
from processors.workloads.network import (
    NetworkWorkload,
    NetworkWorkloadRun,
    OverlapPhase,
    default_phases,
)

Orders = tuple[tuple[int, ...], ...]  # per router, the other routers in probe order

ROUTERS = 4
PACKETS_PER_S = 1000.0  # with 10 s windows: 3,200-8,000 tuples per router window (Example 1)
WINDOW_MS = 10_000
PHASE_MS = 60_000
BUCKET_MS = 2_000
# A-Greedy's profile: Table 1's p = 0.01 and 1000 profile tuples would take 60-150 s of this
# traffic to fill (about 700-1,600 deltas/s per pipeline, ~99% dropped); p = 0.05 with 500
# tuples keeps it to 6-15 s, less than a phase.
PROFILE_P = 0.05
PROFILE_WINDOW = 500
MIN_PROFILE = 100  # Table 1 / OrderingConfig default, scaled with the profile window

STYLE: dict[str, dict[str, Any]] = {
    "Optimal": {"color": "black", "linestyle": "--", "marker": "s"},
    "A-Greedy": {"color": "tab:blue", "marker": "o"},
    "A-Greedy (Table 1 p, window)": {"color": "tab:cyan", "linestyle": "-.", "marker": "^"},
    # dashed and on top: over a whole cycle it can coincide with the phase-0 line
    "Fixed (default order)": {"color": "tab:red", "linestyle": (0, (4, 3)), "marker": "x"},
    "Fixed (phase 0 best)": {"color": "tab:orange", "marker": "d"},
}
ZORDER = {"Fixed (default order)": 3}


def _style(label: str, markers: bool) -> dict[str, Any]:
    style = dict(STYLE.get(label, {}))
    if not markers:
        style.pop("marker", None)
    return {"zorder": ZORDER.get(label, 2), **style}


TIMELINE_COLUMNS = [
    "bucket", "t_s", "phase", "steady", "variant", "deltas", "results", "net_size",
    "probes", "probes_per_delta", "drop_probes_per_delta",
    *(f"probes_per_delta_r{i}" for i in range(ROUTERS)),
    "expected_probes_per_delta", "optimal_expected_probes_per_delta",
    "tuples_per_s", "changes", "at_best_orders", "orders",
]  # fmt: skip
SUMMARY_COLUMNS = [
    "phase", "variant", "deltas", "probes_per_delta", "expected_probes_per_delta",
    "optimal_expected_probes_per_delta", "excess_work_pct", "tuples_per_s", "changes",
    "best_orders_after_s", "final_orders",
]  # fmt: skip
CHANGE_COLUMNS = ["t_s", "phase", "variant", "pipeline", "at_delta", "from", "to", "reason"]


# ---------------------------------------------------------------------------------------------
# The workload's expected probes
# ---------------------------------------------------------------------------------------------


def expected_probes(phase: OverlapPhase, routers: int, orders: Sequence[Sequence[int]]) -> float:
    """Expected probes per delta tuple over all routers' deltas (each router weighted by its
    share of the traffic: inserts and deletes alike) for these probe orders: drop-probing (eq.
    1, unit costs) plus output generation, (n - 1) probes per surviving delta (Property 8.1)."""
    shares = phase.shares(routers)
    total = 0.0
    for i in range(routers):
        if shares[i] <= 0:
            continue
        others = [j for j in range(routers) if j != i]
        survive = phase.pass_rate(i, others)
        total += shares[i] * (phase.expected_probes(i, orders[i]) + (routers - 1) * survive)
    return total / float(shares.sum())


def default_orders(routers: int) -> Orders:
    """The stage's starting order for a natural join: the other routers by index."""
    return tuple(tuple(j for j in range(routers) if j != i) for i in range(routers))


# ---------------------------------------------------------------------------------------------
# Variants and their stages
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One MJoin configuration. ``pinned[p]`` (if given): the orders set at the start of phase
    p of the schedule (on a fixed-order stage: the oracle and the phase-0 baseline)."""

    key: str
    label: str
    config: OrderingConfig
    pinned: tuple[Orders, ...] | None = None


def variants(workload: NetworkWorkload, scale: float, seed: int) -> list[Variant]:
    """Optimal, A-Greedy (profile suited to this traffic and with Table 1's defaults), the
    stage's default order and the phase-0 best order held for the whole run."""
    best = tuple(workload.best_orders())
    window = max(20, round(PROFILE_WINDOW * scale))
    tuned = OrderingConfig(
        "agreedy",
        profile_probability=PROFILE_P,
        window_tuples=window,
        min_profile_tuples=max(10, round(MIN_PROFILE * scale)),
        seed=seed,
    )
    table1 = OrderingConfig(
        "agreedy",
        window_tuples=max(20, round(1000 * scale)),
        min_profile_tuples=max(10, round(MIN_PROFILE * scale)),
        seed=seed,
    )
    fixed = OrderingConfig("fixed", seed=seed)
    return [
        Variant("optimal", "Optimal", fixed, best),
        Variant("agreedy", "A-Greedy", tuned),
        Variant("agreedy_table1", "A-Greedy (Table 1 p, window)", table1),
        Variant("fixed_default", "Fixed (default order)", fixed),
        Variant("fixed_phase0", "Fixed (phase 0 best)", fixed, (best[0],) * len(best)),
    ]


def network_predicates(routers: int) -> list[tuple[tuple[int, str], tuple[int, str]]]:
    """The Example 1 join: every router's pid equals router 0's (a natural join, a star)."""
    return [((0, "pid"), (i, "pid")) for i in range(1, routers)]


@dataclass
class Meter:
    """A variant's stage, the time spent in it and its counters at the last bucket's end."""

    variant: Variant
    stage: MJoinStage
    spent_ns: int = 0
    results: int = 0
    net_size: int = 0
    marks: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(cls, variant: Variant, routers: int, clock: Callable[[], int]) -> Meter:
        names = [f"r{i}" for i in range(routers)]
        stage = MJoinStage(names, network_predicates(routers), variant.config, variant.key, clock)
        meter = cls(variant, stage)
        meter.mark()
        return meter

    def pin(self, orders: Orders) -> None:
        """Set every pipeline's order (router indices) on a fixed-order stage."""
        for i, pipe in enumerate(self.stage.pipelines):
            entity = {inp: e for e, inp in enumerate(pipe.inputs)}
            self.stage.reopts[i].order = np.array([entity[r] for r in orders[i]], np.int64)

    def orders(self) -> Orders:
        """Every pipeline's current order as router indices."""
        s = self.stage
        return tuple(
            tuple(int(p.inputs[e]) for e in s.reopts[i].order.tolist())
            for i, p in enumerate(s.pipelines)
        )

    def step(self, deltas: Sequence[Sequence[Batch]], final: bool = False) -> None:
        """Push one bucket's deltas of every input and join what can be released (timed)."""
        t0 = time.perf_counter_ns()
        for i, parts in enumerate(deltas):
            for b in parts:
                self.stage.push(i, b)
        out = self.stage.flush() if final else self.stage.release()
        self.spent_ns += time.perf_counter_ns() - t0
        for b in out:
            self.results += len(b)
            # Example 1's answer, sum(size) over the join, maintained from inserts and deletes
            self.net_size += int(np.dot(b.sign.astype(np.int64), b.columns["r0.size"]))

    def mark(self) -> None:
        s = self.stage
        self.marks = {
            "spent_ns": self.spent_ns,
            "results": self.results,
            "net_size": self.net_size,
            "probes": [p.sum() for p in s.probes],
            "deltas": list(s.deltas_in),
            "changes": s.changes_total,
        }

    def since_mark(self) -> dict[str, Any]:
        """Counters since the last ``mark`` (probes and deltas per pipeline)."""
        s, m = self.stage, self.marks
        return {
            "spent_ns": self.spent_ns - m["spent_ns"],
            "results": self.results - m["results"],
            "net_size": self.net_size,
            "probes": [int(p.sum() - q) for p, q in zip(s.probes, m["probes"], strict=True)],
            "deltas": [d - e for d, e in zip(s.deltas_in, m["deltas"], strict=True)],
            "changes": s.changes_total - m["changes"],
        }


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
        ax.plot(xs, ys, label=v.label, linewidth=0.9, **_style(v.label, markers=False))
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


def _scaled_ms(ms: int, scale: float) -> int:
    return max(1, round(ms * scale))


def mjoin_adaptivity(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Example 1's four routers through a 4-way MJoin; the overlap between routers changes
    every phase (default_phases: router i takes the role of router i-1), and A-Greedy, the
    default and the phase-0 best orders and the per-phase optimum process the same deltas."""
    warm_up()
    bucket_ms = _scaled_ms(BUCKET_MS, scale)  # phases and windows: whole buckets
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
    bucket_ms = _scaled_ms(BUCKET_MS, scale)
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
        ax.plot(xs, ys, label=label, markersize=5, linewidth=1.0, **_style(label, markers=True))
    ax.legend(fontsize=7)
    return plotting.save(fig, path)


Experiment = Callable[[Path, float, int], list[Path]]

EXPERIMENTS: dict[str, Experiment] = {
    "mjoin_adaptivity": mjoin_adaptivity,
    "mjoin_overlap_sweep": mjoin_overlap_sweep,
}


def run_experiment(name: str, out_dir: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Run one join experiment by name; returns the files written (CSVs first, then PNGs)."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}")
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    # the stage logs every order change at INFO
    stage_log = logging.getLogger("processors.stages.mjoin_stage")
    level = stage_log.level
    stage_log.setLevel(logging.WARNING)
    try:
        return EXPERIMENTS[name](Path(out_dir), scale, seed)
    finally:
        stage_log.setLevel(level)
