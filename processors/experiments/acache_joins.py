"""``streamon experiment acache-number-of-joins``: Babu et al. (ICDE 2005) Sect. 7.2, Fig. 9.

The n-way join R1(A) ⋈_A R2(A) ⋈_A ... ⋈_A Rn(A), n from 3 to 7. As in the paper, the join
attribute's multiplicity is 1 in floor(n / 2) of the streams and 5 in the others (so those
arrive five times as fast), values drawn from one domain in the same order on every stream.
Each input is a ROWS window of ``WINDOW_VALUES`` values' tuples.

Plans over the same deltas, each the best of ``ROUNDS`` alternating runs:

- ``MJoin``: A-Greedy without caches (the paper's best MJoin);
- ``adaptive``: A-Greedy with adaptive caching (``OrderingConfig(caching=True)``, Sects. 4-5):
  it profiles, chooses its caches among the candidates and changes them every I tuples.

The CSV gives both rates, their ratio (the paper's relative graph: MJoin over cached), the
caches the adaptive plan held at the end and its hits and misses. Every plan's result rows
must equal the MJoin's. ``scale`` multiplies the number of values streamed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from processors.bench.caching_plans import (
    agreedy_plan,
    alternate,
    drive,
    star_predicates,
    time_chunks,
)
from processors.bench.mjoin import rows_window_deltas
from processors.core.batch import Batch
from processors.core.ordering.config import OrderingConfig
from processors.experiments import plotting
from processors.experiments.runner import Experiment, runner
from processors.stages.mjoin_stage import MJoinStage

JOINS = (3, 4, 5, 6, 7)
#: multiplicity of the join attribute in the streams that are not 1
HIGH = 5
VALUES = 8_000  # values streamed per point at scale 1
WINDOW_VALUES = 50  # each ROWS window holds this many values' tuples
PER_CHUNK = 8_192
ROUNDS = 2
COLUMNS = ["n", "MJoin", "adaptive", "relative", "caches", "hits", "misses", "results"]


def inputs(n: int, values: int) -> list[Batch]:
    """The delta streams: stream i has multiplicity 1 for i < n // 2, else HIGH; value v's
    tuples arrive at times 10 * v + i (in the same order on every stream)."""
    out = []
    for i in range(n):
        k = 1 if i < n // 2 else HIGH
        v = np.repeat(np.arange(values, dtype=np.int64), k)
        ts = v * 10 + i
        out.append(rows_window_deltas(v, ts, WINDOW_VALUES * k))
    return out


def _adaptive(names: list[str], seed: int) -> MJoinStage:
    config = OrderingConfig(seed=seed, caching=True)
    return MJoinStage(names, star_predicates(len(names)), config)


def measure(n: int, values: int, seed: int) -> dict[str, float]:
    """Both plans' rates on the n-way join's deltas, and the adaptive plan's caches."""
    names = [f"r{i + 1}" for i in range(n)]
    chunks = time_chunks(inputs(n, values), PER_CHUNK)
    mjoin = agreedy_plan(names, seed)
    warm = time_chunks(inputs(n, 4 * WINDOW_VALUES), PER_CHUNK)
    drive(mjoin.make(), warm)  # kernels compile outside the timed runs
    drive(_adaptive(names, seed), warm)
    m_runs, a_runs = alternate([mjoin.make, lambda: _adaptive(names, seed)], chunks, ROUNDS)
    m, a = (max(runs, key=lambda r: r.rate) for runs in (m_runs, a_runs))
    if (a.results, a.inserts) != (m.results, m.inserts):
        raise RuntimeError(f"acache-number-of-joins: n = {n}: adaptive caching gave "
                           f"{a.results:,} result rows, the MJoin {m.results:,}")  # fmt: skip
    caches = a_runs[-1].stats.get("caches", {})  # the last adaptive run's, at its end
    return {
        "MJoin": m.rate,
        "adaptive": a.rate,
        "relative": m.rate / a.rate,
        "caches": len(caches),
        "hits": float(sum(c.get("hits", 0) for c in caches.values())),
        "misses": float(sum(c.get("misses", 0) for c in caches.values())),
        "results": float(m.results),
    }


def number_of_joins(out: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Fig. 9: the n-way join for n = 3..7, MJoin against adaptive caching."""
    values = max(4 * WINDOW_VALUES, int(VALUES * scale))
    rows = [{"n": n, **measure(n, values, seed)} for n in JOINS]
    notes = [
        f"acache-number-of-joins: A-Caching Sect. 7.2 Fig. 9, R1(A) join ... Rn(A), multiplicity "
        f"1 in n // 2 streams and {HIGH} in the others; {values} values, ROWS windows of "
        f"{WINDOW_VALUES} values' tuples",
        "rates: input deltas per second of join time, in process, best of "
        f"{ROUNDS} alternating runs; relative = MJoin / adaptive; caches: held at the end",
    ]
    csv = plotting.write_csv(out / "acache-number-of-joins.csv", rows, COLUMNS, notes)
    xs = [float(n) for n in JOINS]
    absolute = plotting.line_plot(
        out / "acache-number-of-joins.png", "Fig. 9: varying the number of joins", "n (inputs)",
        "deltas / s", xs, {"MJoin": [r["MJoin"] for r in rows],
                           "adaptive": [r["adaptive"] for r in rows]},
    )  # fmt: skip
    return [csv, absolute]


EXPERIMENTS: dict[str, Experiment] = {"acache-number-of-joins": number_of_joins}

run_experiment = runner(EXPERIMENTS)
