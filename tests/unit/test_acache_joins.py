"""``streamon experiment acache-number-of-joins`` (Fig. 9) at a small scale: the workload has
the paper's multiplicities, and the adaptive plan gives the MJoin's results at every n (the
experiment raises otherwise)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from processors.experiments.acache_joins import HIGH, JOINS, inputs, number_of_joins
from processors.experiments.plotting import read_csv


def test_half_the_streams_have_multiplicity_one_the_others_five() -> None:
    deltas = inputs(5, 300)
    arrivals = [int(np.count_nonzero(b.sign > 0)) for b in deltas]
    assert arrivals == [300, 300, 300 * HIGH, 300 * HIGH, 300 * HIGH]


def test_one_row_per_n_with_both_plans(tmp_path: Path) -> None:
    csv, png = number_of_joins(tmp_path, 0.14, 0)
    rows = read_csv(csv)
    assert png.exists() and [int(r["n"]) for r in rows] == list(JOINS)
    assert all(float(r["MJoin"]) > 0 and float(r["adaptive"]) > 0 for r in rows)
    # each value joins once per combination: the product of the others' multiplicities
    assert all(float(r["results"]) > 0 for r in rows)
