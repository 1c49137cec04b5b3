"""A-Caching's single-cache experiments, in process: Babu et al. (ICDE 2005), Sect. 7.2, Figs. 6-8.

The query is the paper's R(A) ⋈_A S(A, B) ⋈_B T(B). The pipelines are pinned so that the one
candidate cache of Sect. 7.2 satisfies the prefix invariant (Def. 3.2): ΔR probes S then T, ΔS
probes R then T, ΔT probes S then R; the cache holds R ⋈ S in ΔT's pipeline, keyed by B (the
value T.B probes it with). Each experiment varies one parameter and reports the maximum rate
of the plan with that cache forced on (``Cached``) against the best MJoin without caches
(``MJoin``: the better of the same pinned orders and A-Greedy's adaptive ones), and their ratio
(the paper's relative graph: MJoin over cached):

- ``acache-hit-probability`` (Fig. 6): T.B's multiplicity r (T's rate r times R's and S's),
  so that a cache probe hits with probability about (r - 1) / r;
- ``acache-join-selectivity`` (Fig. 7): how many R ⋈ S tuples join each ΔT tuple (R.A's
  multiplicity m);
- ``acache-update-probe`` (Fig. 8): the ratio of the cache's update rate (R and S tuples)
  to its probe rate (T tuples);
- ``acache-join-cost`` (Fig. 10): S.B without an index, so that ΔT's join with S scans S's
  window (a nested-loop join, :mod:`processors.kernels.scan_index`), whose size varies.

How it is measured: one workload per point (values in order, as Sect. 7.2 draws them; ΔT lags
the others by a few values so its probes find their partners in the ROWS windows) is cut into
window delta batches once; every variant processes the same batches, the variants taking turns
at going first, and only ``push`` + ``release`` is timed. Rate is input delta tuples (window
inserts and deletes) per second of join time. Every variant's result count must equal the
uncached MJoin's (the caches promise exactness, and the experiment checks it on every point).
``scale`` multiplies the number of values streamed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from processors.core.batch import Batch
from processors.core.ordering.config import OrderingConfig
from processors.core.plan import Window
from processors.experiments import plotting
from processors.experiments.runner import Experiment, runner
from processors.stages.mjoin_stage import MJoinStage
from processors.stages.window_stage import WindowStage

NAMES = ("r", "s", "t")
PREDICATES = [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))]
#: ΔR: S, T; ΔS: R, T; ΔT: S, R (input indices), so that {R, S} satisfies the prefix invariant
PINNED = ((1, 2), (0, 2), (1, 0))
CACHE = ("t", 0, 1)  # R ⋈ S in ΔT's pipeline, keyed by B
WINDOW_VALUES = 200  # each ROWS window holds this many values' tuples
LAG = 50  # ΔT's values trail R's and S's by this many
VALUES = 6_000  # values streamed per point at scale 1
BATCH_VALUES = 20  # values per window batch fed to the joins
COLUMNS = ["x", "MJoin", "Cached", "relative", "hits", "misses", "results"]


@dataclass(frozen=True)
class Point:
    """One workload: per value v, ``m_r`` R tuples (A = v), ``updates`` S tuples (A = B = v:
    the first joins, the others carry values nothing else has) and ``r_t`` T tuples
    (B = v - LAG); S's window holds ``s_values`` values' tuples, and with ``scan_s`` its B
    has no index (Fig. 10). ``adaptive`` adds A-Greedy with adaptive caching, which chooses
    its own caches (Sects. 4-5), to the variants measured."""

    r_t: int = 5
    m_r: int = 1
    updates: int = 1
    s_values: int = WINDOW_VALUES
    scan_s: bool = False
    adaptive: bool = False


def workload(point: Point, values: int) -> list[list[Batch]]:
    """Per input, the window delta batches (BATCH_VALUES values each), ROWS windows of
    WINDOW_VALUES values' tuples (S's: ``point.s_values``)."""
    per_value = {"r": point.m_r, "s": point.updates, "t": point.r_t}
    values_held = {"r": WINDOW_VALUES, "s": point.s_values, "t": WINDOW_VALUES}
    sizes = {n: values_held[n] * k for n, k in per_value.items()}
    out: list[list[Batch]] = []
    for name in NAMES:
        k = per_value[name]
        v = np.repeat(np.arange(values, dtype=np.int64), k)
        if name == "s":  # one S tuple per value joins; the rest are updates with fresh values
            extra = np.tile(np.arange(k, dtype=np.int64), values) > 0
            v = np.where(extra, -1 - np.arange(len(v), dtype=np.int64), v)
        if name == "t":
            v = v - LAG
        order = {"r": 1, "s": 0, "t": 2}[name]  # S, then R, then T within a value
        ts = np.repeat(np.arange(values, dtype=np.int64) * 3 + order, k)
        cols = {"a": v, "b": v} if name == "s" else {"a" if name == "r" else "b": v}
        stage = WindowStage(Window(name, "rows", sizes[name]))
        batches: list[Batch] = []
        for lo in range(0, values, BATCH_VALUES):
            sl = slice(lo * k, min(values, lo + BATCH_VALUES) * k)
            batch = Batch.inserts({c: col[sl] for c, col in cols.items()}, ts[sl])
            batches.append(Batch.concat(stage.process(batch)))
        out.append(batches)
    return out


#: the variants measured: adaptive join orders or the pinned ones, a forced cache, or A-Greedy
#: choosing its own caches (``Point.adaptive``)
VARIANTS = ("pinned", "agreedy", "cached", "adaptive")


def _stage(kind: str, scan_s: bool) -> MJoinStage:
    """The join of one of VARIANTS, with S.B unindexed if ``scan_s`` (Fig. 10)."""
    adaptive = kind in ("agreedy", "adaptive")
    config = (
        OrderingConfig("agreedy_exact", caching=True if kind == "adaptive" else None)
        if adaptive
        else OrderingConfig("fixed", profile_probability=0.0)
    )
    join = MJoinStage(list(NAMES), PREDICATES, config)
    if scan_s:  # Fig. 10: S.B without its hash index
        join.stores[NAMES.index("s")].scan("b")
    if not adaptive:
        for i, pipe in enumerate(join.pipelines):
            entity = {inp: e for e, inp in enumerate(pipe.inputs)}
            join.reopts[i].order = np.array([entity[x] for x in PINNED[i]], np.int64)
    if kind == "cached":
        join.use_caches([CACHE])
    return join


def measure(point: Point, values: int) -> dict[str, float]:
    """Rates (deltas per second of join time) of the variants on one point's workload."""
    batches = workload(point, values)
    kinds = VARIANTS if point.adaptive else VARIANTS[:-1]
    variants = {kind: _stage(kind, point.scan_s) for kind in kinds}
    spent = dict.fromkeys(variants, 0.0)
    results = dict.fromkeys(variants, 0)
    deltas = 0
    names = list(variants)
    for step in range(len(batches[0])):
        names = names[1:] + names[:1]  # take turns at going first
        for name in names:
            join = variants[name]
            started = time.perf_counter()
            out: list[Batch] = []
            for i in range(len(NAMES)):
                join.push(i, batches[i][step])
            out += join.release()
            spent[name] += time.perf_counter() - started
            results[name] += sum(len(b) for b in out)
        deltas += sum(len(batches[i][step]) for i in range(len(NAMES)))
    for name, join in variants.items():
        results[name] += sum(len(b) for b in join.flush())
    if len(set(results.values())) != 1:
        raise RuntimeError(f"the variants disagree on {point}: {results}")
    caches = variants["cached"].stats()["caches"]
    (stats,) = caches.values()
    rate = {n: deltas / max(s, 1e-9) for n, s in spent.items()}
    best = max(rate["pinned"], rate["agreedy"])
    row = {
        "MJoin": best,
        "Cached": rate["cached"],
        "relative": best / rate["cached"],
        "hits": float(stats["hits"]),
        "misses": float(stats["misses"]),
        "results": float(results["cached"]),
    }
    if point.adaptive:
        row["Adaptive"] = rate["adaptive"]
        row["adaptive_caches"] = float(len(variants["adaptive"].stats()["caches"]))
    return row


def _sweep(
    out: Path, name: str, xlabel: str, xs: Sequence[float], point_of: Callable[[float], Point],
    scale: float, note: str,
) -> list[Path]:  # fmt: skip
    values = max(4 * WINDOW_VALUES, int(VALUES * scale))
    _warm_up()
    rows = [{"x": x, **measure(point_of(x), values)} for x in xs]
    notes = [
        f"{name}: A-Caching Sect. 7.2, {note}; {values} values a point",
        "rates: input deltas per second of join time, in process; relative = MJoin / Cached",
    ]
    adaptive = "Adaptive" in rows[0]
    if adaptive:
        notes.append("Adaptive: A-Greedy with adaptive caching (its own caches; how many at the "
                     "end: adaptive_caches)")  # fmt: skip
    columns = [*COLUMNS, "Adaptive", "adaptive_caches"] if adaptive else COLUMNS
    csv = plotting.write_csv(out / f"{name}.csv", rows, columns, notes)
    series = ["MJoin", "Cached", "Adaptive"] if adaptive else ["MJoin", "Cached"]
    absolute = plotting.line_plot(
        out / f"{name}.png", f"{name} ({note})", xlabel, "deltas / s",
        xs, {k: [r[k] for r in rows] for k in series},
    )  # fmt: skip
    ratios = {"MJoin / Cached": [r["relative"] for r in rows]}
    if adaptive:
        ratios["MJoin / Adaptive"] = [r["MJoin"] / r["Adaptive"] for r in rows]
    relative = plotting.line_plot(
        out / f"{name}-relative.png", f"{name}: MJoin rate / cached rate", xlabel, "ratio",
        xs, ratios,
    )  # fmt: skip
    return [csv, absolute, relative]


def _warm_up() -> None:
    """Compile the kernels once, outside every timed span (the scanning ones too)."""
    measure(Point(), 4 * WINDOW_VALUES)
    measure(Point(scan_s=True, adaptive=True), 4 * WINDOW_VALUES)


def hit_probability(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Fig. 6: T.B's multiplicity r from 1 to 10 (hit probability about (r - 1) / r)."""
    return _sweep(out, "acache-hit-probability", "multiplicity of T.B (r)", list(range(1, 11)),
                  lambda r: Point(r_t=int(r)), scale, "vary the hit probability")  # fmt: skip


def join_selectivity(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Fig. 7: R ⋈ S tuples joining each ΔT tuple, 1 to 16 (R.A's multiplicity)."""
    return _sweep(out, "acache-join-selectivity", "R ⋈ S tuples per ΔT tuple", [1, 2, 4, 8, 16],
                  lambda m: Point(m_r=int(m)), scale, "vary the join selectivity")  # fmt: skip


#: Fig. 8's points: (S tuples, T tuples) per value, i.e. cache updates per cache probe
UPDATE_PROBE = {0.2: (1, 5), 0.5: (1, 2), 1.0: (1, 1), 2.0: (2, 1), 5.0: (5, 1)}


def update_probe(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Fig. 8: cache updates (S tuples) per cache probe (T tuples), 0.2 to 5."""

    def point(q: float) -> Point:
        updates, probes = UPDATE_PROBE[q]
        return Point(r_t=probes, updates=updates)

    return _sweep(out, "acache-update-probe", "update / probe ratio", list(UPDATE_PROBE), point,
                  scale, "vary the update to probe ratio")  # fmt: skip


#: Fig. 10's S windows, in values (S tuples): ΔT's join with S scans this many
JOIN_COST_WINDOWS = [100, 200, 400, 800, 1600, 3200]


def join_cost(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Fig. 10: S.B without an index (ΔT's join with S a nested-loop join), S's window from
    100 to 3,200 tuples: the join's cost grows with it."""
    return _sweep(out, "acache-join-cost", "S window (tuples scanned per ΔT probe)",
                  JOIN_COST_WINDOWS, lambda w: Point(s_values=int(w), scan_s=True, adaptive=True),
                  scale, "vary the join cost: S.B not indexed")  # fmt: skip


EXPERIMENTS: dict[str, Experiment] = {
    "acache-hit-probability": hit_probability,
    "acache-join-selectivity": join_selectivity,
    "acache-update-probe": update_probe,
    "acache-join-cost": join_cost,
}

run_experiment = runner(EXPERIMENTS)
