"""The pure parts of ``streamon experiment chain-live`` (processors/experiments/chain_live.py):
charts turned into synthetic operators, the burst schedule, and the queue accounting."""

from __future__ import annotations

import numpy as np
import pytest
from oracle.synthetic import surviving

from processors.experiments.chain_live import (
    CHARTS,
    FOUR_OPERATORS,
    LiveSetup,
    burst_schedule,
    chart_operators,
    expected_results,
    first_chain_share,
    queued,
)


def test_the_four_operator_chart_becomes_operators_with_its_costs_and_selectivities() -> None:
    ops = chart_operators(FOUR_OPERATORS, time_scale=0.1)
    # per tuple received: 400, 1600 / 0.9, 200 / 0.88, 1800 / 0.1 chart units, at 0.1 µs each
    assert [c for c, _ in ops] == pytest.approx([40.0, 177.78, 22.727, 1800.0], rel=1e-4)
    assert [s for _, s in ops] == pytest.approx([0.9, 0.88 / 0.9, 0.1 / 0.88, 1.0])
    # the first chain ends after the third operator: 2200 of 4000 units (Sect. 6.1.1)
    assert first_chain_share(FOUR_OPERATORS) == pytest.approx(2200 / 4000)
    stored = chart_operators(list(CHARTS["chain-live-stored-join"].points), 0.1)
    assert stored[1][1] == pytest.approx(2.0 / 0.9)  # the join keeps some tuples twice


def test_expected_results_follow_the_operators_rule() -> None:
    ops = chart_operators(list(CHARTS["chain-live-stored-join"].points), 0.1)
    counts = expected_results(3_000, ops)
    rules = [(f"op{i + 1}", sel) for i, (_, sel) in enumerate(ops)]
    oracle = surviving(list(range(3_000)), rules)
    assert {k: int(v) for k, v in enumerate(counts) if v} == oracle
    assert counts.max() == 3  # floor(2.22) copies, plus one for 22% of the keys


def test_the_burst_schedule_is_seeded_and_has_the_asked_rates() -> None:
    setup = LiveSetup(lead_s=2.0, burst_s=4.0, tail_s=2.0, seed=3)
    a = burst_schedule(500.0, 3_000.0, setup)
    b = burst_schedule(500.0, 3_000.0, setup)
    assert np.array_equal(a.offsets, b.offsets)
    in_burst = ((a.offsets >= 2.0) & (a.offsets < 6.0)).sum()
    assert abs(in_burst - 12_000) < 5 * np.sqrt(12_000)
    assert abs(len(a.offsets) - in_burst - 2_000) < 5 * np.sqrt(2_000)
    assert a.duration == 8.0


def test_queued_data_is_what_each_agent_received_minus_what_it_processed() -> None:
    status = {"stats": {"agents": [
        {"agent": "ingest.r", "topic": "in", "out_topic": "i", "bytes_in": 900, "tuples_in": 9,
         "bytes_out": 800, "tuples_out": 9},
        {"agent": "op.op1", "topic": "i", "out_topic": "o", "bytes_in": 500, "tuples_in": 5,
         "bytes_out": 100, "tuples_out": 1},
        {"agent": "sink", "topic": "o", "out_topic": "res", "bytes_in": 100, "tuples_in": 1,
         "bytes_out": 60, "tuples_out": 1},
        {"agent": "scheduler", "topic": "streamon.stats", "out_topic": "", "bytes_in": 0,
         "tuples_in": 0, "bytes_out": 0, "tuples_out": 0},
    ]}}  # fmt: skip
    q = queued(status, generated_bytes=1_200, generated=12)
    assert q["per_agent_bytes"] == {"ingest.r": 300, "op.op1": 300, "sink": 0}
    assert q["per_agent_tuples"] == {"ingest.r": 3, "op.op1": 4, "sink": 0}
    assert (q["queued_bytes"], q["queued_tuples"]) == (600, 7)
