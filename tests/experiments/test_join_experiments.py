"""The MJoin experiments (Example 1 / Section 8): files and columns, A-Greedy reaching the best
orders' work in every phase where a fixed order does not, identical answers across variants, and
the closed form behind the expected columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import processors.experiments as experiments
from processors.experiments.joins import (
    SUMMARY_COLUMNS,
    SWEEP_COLUMNS,
    TIMELINE_COLUMNS,
    _check_same_results,
    blended_phases,
    default_orders,
    expected_probes,
    mjoin_overlap_sweep,
    run_experiment,
)
from processors.experiments.plotting import read_csv
from processors.workloads.network import NetworkWorkload, default_phases

SCALE = 0.1  # 6 s phases, 1 s windows, 200 ms buckets: a few seconds per run


@pytest.fixture(scope="module")
def adaptivity(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("mjoin_adaptivity")
    return out, run_experiment("mjoin_adaptivity", out, scale=SCALE, seed=0)


def _rows(out: Path, name: str) -> list[dict[str, str]]:
    return read_csv(out / name)


def test_adaptivity_writes_csvs_and_pngs(adaptivity: tuple[Path, list[Path]]) -> None:
    out, paths = adaptivity
    expected = {
        "mjoin_adaptivity.csv": TIMELINE_COLUMNS,
        "mjoin_adaptivity_summary.csv": SUMMARY_COLUMNS,
        "mjoin_adaptivity_changes.csv": [
            "t_s", "phase", "variant", "pipeline", "from", "to", "reason"
        ],
    }  # fmt: skip
    for name, columns in expected.items():
        path = out / name
        assert path in paths
        text = path.read_text()
        assert text.startswith("# ") and f"scale={SCALE:g}" in text
        rows = read_csv(path)
        assert rows, name
        assert set(columns) <= set(rows[0]), sorted(set(columns) - set(rows[0]))
    for png in ("mjoin_adaptivity.png", "mjoin_adaptivity_rate.png"):
        data = (out / png).read_bytes()
        assert out / png in paths
        assert data.startswith(b"\x89PNG") and 1000 < len(data) < 120_000


def test_every_variant_gives_the_same_answer(adaptivity: tuple[Path, list[Path]]) -> None:
    rows = _rows(adaptivity[0], "mjoin_adaptivity.csv")
    variants = {r["variant"] for r in rows}
    assert {"Optimal", "A-Greedy", "Fixed (default order)", "Fixed (phase 0 best)"} <= variants
    by_bucket: dict[str, set[tuple[str, str, str]]] = {}
    for r in rows:
        by_bucket.setdefault(r["bucket"], set()).add((r["deltas"], r["results"], r["net_size"]))
    assert all(len(v) == 1 for v in by_bucket.values())
    assert sum(int(r["results"]) for r in rows if r["variant"] == "Optimal") > 0


def test_agreedy_reaches_the_best_orders_work_in_every_phase(
    adaptivity: tuple[Path, list[Path]],
) -> None:
    """In the last bucket of each phase A-Greedy probes within 5% of the best orders'
    expectation and less than a fixed order that is wrong for the phase (the default order in
    phase 0, where the phase-0 order is the best; the phase-0 order afterwards)."""
    rows = _rows(adaptivity[0], "mjoin_adaptivity.csv")
    phases = sorted({int(r["phase"]) for r in rows})
    assert phases == [0, 1, 2, 3]
    for p in phases:
        last_bucket = max(int(r["bucket"]) for r in rows if int(r["phase"]) == p)
        at = {r["variant"]: r for r in rows if int(r["bucket"]) == last_bucket}
        agreedy = float(at["A-Greedy"]["probes_per_delta"])
        optimal = float(at["A-Greedy"]["optimal_expected_probes_per_delta"])
        wrong = at["Fixed (default order)" if p == 0 else "Fixed (phase 0 best)"]
        assert at["A-Greedy"]["steady"] == "True"
        assert abs(agreedy / optimal - 1) < 0.05, (p, agreedy, optimal)
        assert agreedy < float(wrong["probes_per_delta"]), (p, agreedy, wrong)
        assert float(wrong["expected_probes_per_delta"]) > 1.1 * optimal
    changes = _rows(adaptivity[0], "mjoin_adaptivity_changes.csv")
    assert {int(c["phase"]) for c in changes if c["variant"] == "A-Greedy"} == set(phases)
    assert not [c for c in changes if c["variant"].startswith("Fixed")]


def test_summary_steady_work(adaptivity: tuple[Path, list[Path]]) -> None:
    rows = _rows(adaptivity[0], "mjoin_adaptivity_summary.csv")
    steady = {r["variant"]: r for r in rows if r["phase"] == "steady"}
    # measured probes agree with the closed form for orders that never change
    for label in ("Optimal", "Fixed (default order)", "Fixed (phase 0 best)"):
        measured = float(steady[label]["probes_per_delta"])
        assert measured == pytest.approx(float(steady[label]["expected_probes_per_delta"]), 0.02)
    assert abs(float(steady["Optimal"]["excess_work_pct"])) < 2
    assert float(steady["A-Greedy"]["excess_work_pct"]) < 6
    for label in ("Fixed (default order)", "Fixed (phase 0 best)"):
        assert float(steady[label]["excess_work_pct"]) > 15
    assert all(float(r["tuples_per_s"]) > 0 for r in rows)


def test_overlap_sweep(tmp_path: Path) -> None:
    paths = mjoin_overlap_sweep(tmp_path, scale=0.05, seed=0, strengths=(0.0, 0.5, 1.0))
    assert [p.name for p in paths] == [
        "mjoin_overlap_sweep.csv",
        "mjoin_overlap_sweep.png",
        "mjoin_overlap_sweep_rate.png",
    ]
    rows = read_csv(tmp_path / "mjoin_overlap_sweep.csv")
    assert set(SWEEP_COLUMNS) <= set(rows[0])
    excess = {(float(r["strength"]), r["variant"]): float(r["excess_work_pct"]) for r in rows}
    fixed = [excess[(s, "Fixed (phase 0 best)")] for s in (0.0, 0.5, 1.0)]
    assert fixed[0] < 1 < fixed[1] < fixed[2]  # the more the overlap changes, the more it costs
    assert excess[(1.0, "A-Greedy")] < excess[(1.0, "Fixed (phase 0 best)")] / 2


def test_blended_phases() -> None:
    plain = default_phases(4, 1000)
    for a, b in zip(blended_phases(4, 1000, 1.0), plain, strict=True):
        assert a.best_orders(4) == b.best_orders(4)
        assert np.allclose(a.overlap(4), b.overlap(4))
    flat = blended_phases(4, 1000, 0.0)
    costs = {round(expected_probes(p, 4, default_orders(4)), 9) for p in flat}
    best = {round(expected_probes(p, 4, p.best_orders(4)), 9) for p in flat}
    assert costs == best and len(costs) == 1  # no change, nothing to gain
    with pytest.raises(ValueError, match="strength"):
        blended_phases(4, 1000, 1.5)


def test_expected_probes_matches_example1() -> None:
    """Phase 0 is Example 1: R_1 (router 0) probes W_2, W_4, W_3 (routers 1, 3, 2) best."""
    workload = NetworkWorkload(phases=default_phases(4, 1000))
    best = workload.best_orders()
    assert best[0][0] == (1, 3, 2)
    p0 = workload.schedule[0]
    assert expected_probes(p0, 4, best[0]) < expected_probes(p0, 4, default_orders(4))
    assert expected_probes(p0, 4, best[0]) == pytest.approx(expected_probes(p0, 4, best[0]))


def test_results_cross_check_raises() -> None:
    rows = [
        {"bucket": 3, "variant": "A", "results": 5, "net_size": 100},
        {"bucket": 3, "variant": "B", "results": 4, "net_size": 100},
    ]
    with pytest.raises(RuntimeError, match="must not change the answer"):
        _check_same_results(rows)


def test_registry_and_errors(tmp_path: Path) -> None:
    names = set(experiments.EXPERIMENTS)
    assert {"mjoin_adaptivity", "mjoin_overlap_sweep", "fig9"} <= names
    with pytest.raises(ValueError, match="unknown experiment"):
        experiments.run_experiment("mjoin_nope", tmp_path)
    with pytest.raises(ValueError, match="scale"):
        run_experiment("mjoin_adaptivity", tmp_path, scale=0)
