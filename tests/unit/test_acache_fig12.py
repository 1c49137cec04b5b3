"""``streamon experiment acache-fig12`` at a tiny scale: the static plans agree on the results
(the experiment raises otherwise) and the CSV has one row per bucket and the plans' columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from processors.experiments.acache_fig12 import STEP, acache_fig12, fig12_inputs
from processors.experiments.plotting import read_csv


def test_r_bursts_twenty_times_at_the_midpoint() -> None:
    r, s, t = fig12_inputs(2_000, seed=1)
    ins = [b.ts[b.sign > 0] for b in (r, s, t)]
    half = STEP * 1_000  # the midpoint: 1,000 S tuples of 2,000
    before = [int(np.count_nonzero(x < half)) for x in ins]
    after = [int(np.count_nonzero(x >= half)) for x in ins]
    assert before[2] == 5 * before[1] and after[0] == 20 * after[1]
    assert before[0] == before[1]


def test_the_csv_has_the_static_plans_and_the_adaptive_one(tmp_path: Path) -> None:
    csv, png = acache_fig12(tmp_path, 0.01, 0)
    rows = read_csv(csv)
    assert len(rows) == 20 and png.exists()
    assert {"s_tuples", "T(RS)", "R(TS)", "mjoin", "adaptive"} <= set(rows[0])
    assert all(float(r["T(RS)"]) > 0 and float(r["adaptive"]) > 0 for r in rows)
    notes = csv.read_text()
    assert "the whole run's rate" in notes and "adaptive cache changes" in notes
