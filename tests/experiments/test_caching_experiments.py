"""A-Caching's single-cache experiments (processors/experiments/caching.py, Sect. 7.2 Figs. 6-8
and 10):
each writes its CSV and PNGs, every variant gives the same results on every point (the module
raises otherwise), and the forced cache is really used (hits on every point)."""

from __future__ import annotations

from pathlib import Path

import pytest

from processors.experiments import acache_fig12 as fig12_experiments
from processors.experiments import all_experiments
from processors.experiments.caching import EXPERIMENTS, Point, measure, run_experiment
from processors.experiments.plotting import read_csv


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_experiment_writes_csv_and_pngs(name: str, tmp_path: Path) -> None:
    paths = run_experiment(name, tmp_path, scale=0.05)
    assert [p.suffix for p in paths] == [".csv", ".png", ".png"]
    rows = read_csv(paths[0])
    assert rows and all(float(r["hits"]) > 0 and float(r["Cached"]) > 0 for r in rows)
    assert name in all_experiments()


def test_results_grow_with_the_selectivity_as_the_workload_says() -> None:
    """Every ΔT tuple (insert and delete) meets m R ⋈ S tuples once its partners are in."""
    one, four = measure(Point(m_r=1), 800), measure(Point(m_r=4), 800)
    assert four["results"] == 4 * one["results"] > 0


def test_a_join_without_its_index_gives_the_indexed_joins_results() -> None:
    """Fig. 10 scans S's window instead of probing S.B's index: the same results."""
    for window in (100, 400):
        scanned = measure(Point(s_values=window, scan_s=True), 800)
        assert scanned["results"] == measure(Point(s_values=window), 800)["results"] > 0


@pytest.mark.parametrize("name", sorted(fig12_experiments.EXPERIMENTS))
def test_fig12_writes_its_timeline_and_every_plan_agrees(name: str, tmp_path: Path) -> None:
    """Fig. 12 (processors/experiments/acache_fig12.py), departed and on the paper's settings:
    the two static plans, the MJoin and the adaptive one give the same result inserts (the
    module raises otherwise), one rate per bucket each, and the notes say what the adaptive
    plan did."""
    paths = fig12_experiments.run_experiment(name, tmp_path, scale=0.02)
    assert [p.suffix for p in paths] == [".csv", ".png"]
    rows = read_csv(paths[0])
    assert len(rows) == 20
    assert all(float(r[k]) > 0 for r in rows for k in ("T(RS)", "R(TS)", "mjoin", "adaptive"))
    notes = paths[0].read_text()
    assert "result inserts from every plan" in notes and "adaptive cache changes" in notes


def test_fig11_writes_every_plan_relative_to_the_mjoin(tmp_path: Path) -> None:
    """Fig. 11's CSV from a tiny bench run (both join costs): one row per point, each plan's
    rate over M's as the rates say, G never below M (the empty subset is searched)."""
    from processors.bench.caching import run_caching_bench
    from processors.experiments.acache_fig11 import EXPERIMENTS as FIG11
    from processors.experiments.acache_fig11 import write_fig11

    assert {"acache-fig11", "acache-fig11-paper"} <= set(all_experiments()) and len(FIG11) == 2
    for cost in ("scan", "hash"):
        res = run_caching_bench(["d1", "d7"], tuples=2_000, window=10, per_chunk=256,
                                finalists=1, rounds=1, join_cost=cost)  # fmt: skip
        paths = write_fig11(tmp_path / cost, "fig11", res, seed=1)
        assert [p.suffix for p in paths] == [".csv", ".png"] and paths[1].stat().st_size > 0
        rows = read_csv(paths[0])
        assert [r["point"] for r in rows] == ["D1", "D7"]
        for r in rows:
            assert float(r["G_over_M"]) == pytest.approx(float(r["G"]) / float(r["M"]), rel=1e-5)
            assert float(r["G_over_M"]) >= 1.0
