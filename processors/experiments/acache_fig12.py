"""``streamon experiment acache-fig12``: Babu et al. (ICDE 2005) Sect. 7.4, Fig. 12.

The query R(a) ⋈ S(a, b) ⋈ T(b), T arriving ``r`` (5) times as fast as R and S (Sect. 7.2's
default), and R bursting to 20 times its rate once half of the ΔS tuples have arrived, to the
end of the run. Windows are RANGE windows of one span, so R's window grows with the burst.
Plans, all over the same deltas, the tuple-processing rate per bucket of ΔS arrivals:

- ``T ⋈ (R ⋈ S)``: a cache of R ⋈ S in ΔT's pipeline (keyed by b; R and S probe each other
  first, so the prefix invariant holds);
- ``R ⋈ (T ⋈ S)``: a cache of T ⋈ S in ΔR's pipeline (keyed by a; S probes T first);
- ``MJoin``: A-Greedy without caches (not in the paper's figure, for reference);
- ``adaptive``: A-Greedy with adaptive caching (``OrderingConfig(caching=True)``,
  :mod:`processors.stages.mjoin_adaptive_caching`): it chooses, adds and drops caches itself
  (every I = 10,000 tuples), each change logged; the CSV notes the caches it used.

Departure: A, B values are drawn uniformly from one domain instead of in one order, and the
window span is chosen so R ⋈ S matches about once per probe before the burst.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from processors.bench.caching_plans import FIXED, fix_orders
from processors.core.batch import INSERT, ROW_ID, Batch
from processors.core.ordering.config import OrderingConfig
from processors.experiments import plotting
from processors.experiments.runner import Experiment, runner
from processors.stages.mjoin_stage import MJoinStage

NAMES = ["R", "S", "T"]
PREDICATES = [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))]
DOMAIN = 1_000
STEP = 20  # time units between S tuples (T: STEP / 5, R in the burst: STEP / 20)
SPAN = 20_000  # R's and S's windows hold ~1,000 tuples before the burst


def range_deltas(cols: dict[str, np.ndarray], ts: np.ndarray, span: int) -> Batch:
    """The delta stream of a RANGE ``span`` window: each tuple enters at ts and leaves at
    ts + span (deletes first at equal times)."""
    n = len(ts)
    rid = np.arange(n, dtype=np.int64)
    at = np.concatenate([ts + span, ts])
    sign = np.concatenate([-np.ones(n, np.int8), np.ones(n, np.int8)])
    which = np.concatenate([rid, rid])
    keep = at <= ts[-1]
    at, sign, which = at[keep], sign[keep], which[keep]
    s = np.lexsort((-sign, at))
    return Batch({ROW_ID: which[s], **{c: v[which[s]] for c, v in cols.items()}}, sign[s], at[s])


def fig12_inputs(s_tuples: int, r: int = 5, burst: int = 20, seed: int = 0) -> list[Batch]:
    """ΔR, ΔS, ΔT: S one tuple per ``STEP`` time units, T ``r`` times as often, R like S until
    ``s_tuples / 2`` S tuples have arrived, then ``burst`` times as often."""
    rng = np.random.default_rng(seed)
    end = STEP * s_tuples
    half = end // 2
    ts_r = np.concatenate([np.arange(0, half, STEP), np.arange(half, end, STEP // burst)])
    ts_s = np.arange(0, end, STEP) + 1
    ts_t = np.arange(0, end, STEP // r) + 2

    def ints(n: int) -> np.ndarray:
        return rng.integers(0, DOMAIN, n).astype(np.int64)

    return [
        range_deltas({"a": ints(len(ts_r))}, ts_r.astype(np.int64), SPAN),
        range_deltas({"a": ints(len(ts_s)), "b": ints(len(ts_s))}, ts_s.astype(np.int64), SPAN),
        range_deltas({"b": ints(len(ts_t))}, ts_t.astype(np.int64), SPAN),
    ]


def static_plan(kind: str) -> MJoinStage:
    """``T(RS)``: R ⋈ S cached in ΔT's pipeline; ``R(TS)``: T ⋈ S cached in ΔR's; ``mjoin``."""
    if kind == "mjoin":
        return MJoinStage(NAMES, PREDICATES, OrderingConfig(seed=0))
    if kind == "adaptive":
        return MJoinStage(NAMES, PREDICATES, OrderingConfig(seed=0, caching=True))
    stage = MJoinStage(NAMES, PREDICATES, FIXED)
    if kind == "T(RS)":
        fix_orders(stage, [(1, 2), (0, 2), (1, 0)])
        stage.use_caches([(2, 0, 1)])
    else:
        fix_orders(stage, [(1, 2), (2, 0), (1, 0)])
        stage.use_caches([(0, 0, 1)])
    return stage


def timeline(stage: MJoinStage, inputs: list[Batch], buckets: int, per_chunk: int) -> list[float]:
    """Input deltas per second of stage time in each of ``buckets`` equal spans of time
    (equal numbers of ΔS arrivals), then the whole run's rate, and the result count last."""
    end = max(int(b.ts[-1]) for b in inputs) + 1
    edges = np.linspace(0, end, buckets + 1).astype(np.int64)
    rates, results, total_done, total_ns = [], 0, 0, 0
    for k in range(buckets):
        starts = [np.searchsorted(b.ts, edges[k : k + 2]) for b in inputs]
        total = sum(int(hi - lo) for lo, hi in starts)
        pieces = max(total // per_chunk, 1)
        spent, done = 0, 0
        for p in range(pieces):
            for i, (lo, hi) in enumerate(starts):
                a = lo + (hi - lo) * p // pieces
                z = lo + (hi - lo) * (p + 1) // pieces
                if z > a:
                    t0 = time.perf_counter_ns()
                    stage.push(i, inputs[i].slice(int(a), int(z)))
                    out = stage.release()
                    spent += time.perf_counter_ns() - t0
                    done += int(z - a)
                    results += sum(int(np.count_nonzero(o.sign == INSERT)) for o in out)
        rates.append(done / max(spent / 1e9, 1e-9))
        total_done, total_ns = total_done + done, total_ns + spent
    results += sum(int(np.count_nonzero(o.sign == INSERT)) for o in stage.flush())
    return [*rates, total_done / max(total_ns / 1e9, 1e-9), float(results)]


def acache_fig12(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Fig. 12's static plans, the MJoin and the adaptive one over a run with R's burst midway."""
    s_tuples = max(int(200_000 * scale), 2_000)
    buckets = 20
    inputs = fig12_inputs(s_tuples, seed=seed)
    warm = fig12_inputs(2_000, seed=seed + 1)
    series: dict[str, list[float | None]] = {}
    counts = {}
    used: list[str] = []
    whole: dict[str, float] = {}  # the whole run's rate
    for kind in ("T(RS)", "R(TS)", "mjoin", "adaptive"):
        timeline(static_plan(kind), warm, 2, 4_096)  # compiles
        stage = static_plan(kind)
        *rates, whole[kind], counts[kind] = timeline(stage, inputs, buckets, 16_384)
        series[kind] = list(rates)
        if kind == "adaptive":
            used = [f"{c['added']} {c['dropped']}" for c in
                    stage.stats()["adaptive_caching"]["recent_changes"]]  # fmt: skip
    if len(set(counts.values())) != 1:
        raise RuntimeError(f"acache-fig12: plans disagree on result inserts: {counts}")
    x = [s_tuples * (k + 1) / buckets for k in range(buckets)]
    rows = [{"s_tuples": xi, **{n: v[k] for n, v in series.items() if v[k] is not None}}
            for k, xi in enumerate(x)]  # fmt: skip
    notes = [
        "Babu et al. ICDE 2005 Fig. 12: tuple-processing rate (input deltas per second of stage "
        "time, in process) per bucket of dS arrivals; R bursts 20x at the midpoint",
        f"{s_tuples} dS tuples, T rate 5x, RANGE windows of {SPAN} time units, values uniform "
        f"over {DOMAIN}; {int(counts['mjoin'])} result inserts from every plan",
        "the whole run's rate (deltas over stage time): "
        + ", ".join(f"{k} {v:,.0f}" for k, v in whole.items()),
        "adaptive cache changes (added, dropped): " + "; ".join(used),
    ]
    csv = plotting.write_csv(out_dir / "acache_fig12.csv", rows, ["s_tuples", *series], notes)
    png = plotting.line_plot(
        out_dir / "acache_fig12.png", "Fig. 12: adaptivity to a 20x burst of R",
        "dS tuples arrived", "tuples/s", x, series,
    )  # fmt: skip
    return [csv, png]


EXPERIMENTS: dict[str, Experiment] = {"acache-fig12": acache_fig12}
run_experiment = runner(EXPERIMENTS)
