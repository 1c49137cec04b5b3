"""``streamon experiment acache-memory`` (Fig. 13) at a small scale: every plan gives the
MJoin's results (the experiment raises otherwise), the XJoin is infeasible below the smallest
tree's need and feasible from it on, and adaptive caching never holds more than the budget."""

from __future__ import annotations

from pathlib import Path

from processors.experiments.acache_memory import BUDGET_FRACTIONS, memory
from processors.experiments.plotting import read_csv


def test_each_budget_has_the_three_plans_and_the_xjoin_only_once_it_fits(tmp_path: Path) -> None:
    csv, png = memory(tmp_path, 0.1, 0)
    rows = read_csv(csv)
    assert png.exists() and len(rows) == len(BUDGET_FRACTIONS)
    for fraction, row in zip(BUDGET_FRACTIONS, rows, strict=True):
        assert float(row["MJoin"]) > 0 and float(row["adaptive"]) > 0
        assert float(row["adaptive_peak_kb"]) <= float(row["budget_kb"])
        if fraction < 1.0:
            assert row["XJoin"] == "" and row["xjoin_tree"] == "infeasible"
        else:
            assert float(row["XJoin"]) > 0 and row["xjoin_tree"].startswith("X/")
    assert "the smallest XJoin needs" in csv.read_text()
