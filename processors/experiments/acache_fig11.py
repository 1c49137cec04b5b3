"""``streamon experiment acache-fig11`` and ``acache-fig11-paper``: Babu et al. (ICDE 2005)
Sect. 7.3, Fig. 11 at Table 2's sample points D1-D8.

The comparison of ``streamon bench caching`` (:mod:`processors.bench.caching`: the best MJoin
M, the best XJoin X, the best prefix-invariant caching plan P and the best plan with
globally-consistent caches too G, caching plans within the memory budget), written as CSV and
PNG: each plan's rate over M's, the subresult memory and the plans chosen. ``acache-fig11``
probes every window by scanning it (Fig. 10's join cost at Table 2's points, the departure
docs/caching.md measures: with hash indexes no cache pays on this engine);
``acache-fig11-paper`` probes through hash indexes as the paper's runs did. ``scale``
multiplies the arrivals per point (30,000 and 400,000).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from processors.bench.caching import DEFAULT_TUPLES, run_caching_bench
from processors.bench.caching_data import TABLE2
from processors.experiments import plotting
from processors.experiments.runner import Experiment, runner

KINDS = ("M", "X", "P", "G")
COLUMNS = [
    "point", *KINDS, "X_over_M", "P_over_M", "G_over_M", "G_over_X", "cached_over_M",
    "X_bytes", "G_bytes", "X_fits_budget", "G_holds_caches", "G_plan", "cached_plan",
]  # fmt: skip


def rows_of(res: dict[str, Any]) -> list[dict[str, Any]]:
    """One CSV row per point of a ``run_caching_bench`` result."""
    rows = []
    for point, fig in res["points"].items():
        rate = {k: fig[k]["tuples_per_s"] for k in KINDS}
        rows.append({
            "point": point.upper(), **rate,
            "X_over_M": rate["X"] / rate["M"], "P_over_M": rate["P"] / rate["M"],
            "G_over_M": rate["G"] / rate["M"], "G_over_X": rate["G"] / rate["X"],
            "X_bytes": fig["X"]["subresult_bytes"], "G_bytes": fig["G"]["subresult_bytes"],
            "X_fits_budget": fig["X"]["fits_budget"], "G_holds_caches": fig["G"]["holds_caches"],
            "G_plan": fig["G"]["plan"],
            # the best plan holding a cache (G is M where none pays); none: no candidate
            "cached_over_M": fig["cached"]["tuples_per_s"] / rate["M"] if fig["cached"] else None,
            "cached_plan": fig["cached"]["plan"] if fig["cached"] else None,
        })  # fmt: skip
    return rows


def write_fig11(out: Path, name: str, res: dict[str, Any], seed: int) -> list[Path]:
    """The CSV and the relative bar graph (each plan's rate over M's, per point)."""
    rows = rows_of(res)
    notes = [
        f"{name}: A-Caching Sect. 7.3 Fig. 11, Table 2's points; joins by {res['join_cost']}, "
        f"{res['tuples']:,} arrivals a point (seed {seed}), caching plans within "
        f"{res['budget_bytes']:,} B",
        "rates: input deltas per second of join time, in process (streamon bench caching); "
        "X_over_M etc.: the paper's comparison; every plan gave the MJoin's results",
    ]
    csv = plotting.write_csv(out / f"{name}.csv", rows, COLUMNS, notes)
    png = plotting.grouped_bars(
        out / f"{name}.png", f"Fig. 11: plans at Table 2's points (joins by {res['join_cost']})",
        "rate / best MJoin", [r["point"] for r in rows],
        {**{k: [r[f"{k}_over_M"] for r in rows] for k in ("X", "P", "G")},
         "best holding a cache": [r["cached_over_M"] for r in rows]}, reference=1.0,
    )  # fmt: skip
    return [csv, png]


def _fig11(join_cost: str, name: str) -> Experiment:
    def run(out: Path, scale: float = 1.0, seed: int = 1) -> list[Path]:
        tuples = max(int(DEFAULT_TUPLES[join_cost] * scale), 2_000)
        res = run_caching_bench(list(TABLE2), tuples=tuples, join_cost=join_cost, seed=seed)
        summary = plotting.write_json(out / f"{name}.json", res)  # every plan's figures
        return [*write_fig11(out, name, res, seed), summary]

    run.__doc__ = f"Fig. 11 with joins by {join_cost} (the module docstring)."
    return run


EXPERIMENTS: dict[str, Experiment] = {
    "acache-fig11": _fig11("scan", "acache-fig11"),
    "acache-fig11-paper": _fig11("hash", "acache-fig11-paper"),
}

run_experiment = runner(EXPERIMENTS)
