"""Synthetic operators (processors/stages/synthetic_stage.py) and how agents cut turns
(processors/runtime/agents.py): exact outputs, whatever the batch boundaries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from processors.core.batch import Batch
from processors.core.query import Query, QueryError
from processors.kernels.splitmix import mix64
from processors.runtime.arbiter import Arbiter
from processors.runtime.context import AgentContext
from processors.runtime.stage_agent import _pieces, _runs
from processors.runtime.stats import AgentStats
from processors.stages.synthetic_stage import SyntheticStage, copies, operator_seed
from processors.workloads.examples import reading_columns
from topics.avro import load_schema


def _oracle_copies(key: int, name: str, selectivity: float) -> int:
    """Written from the definition: floor(s) copies, one more when the key's hash under the
    operator's seed falls in the first frac(s) of the 64-bit range."""
    seed = np.uint64(0)
    for byte in name.encode():
        seed = mix64(np.uint64(seed) ^ np.uint64(byte))
    h = int(mix64(np.uint64(key) ^ np.uint64(seed)))
    frac = selectivity - math.floor(selectivity)
    return math.floor(selectivity) + int(h < int(frac * 2.0**64))


@pytest.mark.parametrize("selectivity", [0.0, 0.1, 0.5, 0.9, 1.0, 2.0, 2.25])
def test_outputs_are_exactly_the_hash_rule_in_order(selectivity: float) -> None:
    batch = reading_columns(2_000, seed=3)
    stage = SyntheticStage("opx", cost_ns=0.0, selectivity=selectivity, key="sensor_id")
    out = Batch.concat(stage.process(batch)) if stage.process(batch) else None
    keys = batch.columns["sensor_id"].tolist()
    expected = [k for k in keys for _ in range(_oracle_copies(k, "opx", selectivity))]
    got = [] if out is None else out.columns["sensor_id"].tolist()
    assert got == expected
    assert [copies(k, "opx", selectivity) for k in keys[:50]] == [
        _oracle_copies(k, "opx", selectivity) for k in keys[:50]
    ]
    if selectivity > 0:
        assert abs(len(got) / len(keys) - selectivity) < 0.05


def test_operators_select_independently_of_each_other() -> None:
    assert operator_seed("op1") != operator_seed("op2")
    keys = np.arange(20_000)
    a = np.array([copies(k, "op1", 0.5) for k in keys])
    b = np.array([copies(k, "op2", 0.5) for k in keys])
    assert abs((a & b).mean() - 0.25) < 0.02


def test_a_batch_split_anywhere_gives_the_same_output() -> None:
    batch = reading_columns(1_000, seed=5)
    whole = SyntheticStage("op1", 0.0, 0.3, "sensor_id").process(batch)[0]
    stage = SyntheticStage("op1", 0.0, 0.3, "sensor_id")
    parts = []
    for start, stop in [(0, 1), (1, 333), (333, 334), (334, 1000)]:
        parts += stage.process(batch.slice(start, stop))
    assert Batch.concat(parts).equals(whole)
    assert stage.stats()["tuples_in"] == 1_000


def test_bad_settings_and_bad_keys_are_named() -> None:
    with pytest.raises(ValueError, match="cost"):
        SyntheticStage("op1", -1.0, 0.5, "sensor_id")
    with pytest.raises(ValueError, match="selectivity"):
        SyntheticStage("op1", 1.0, float("nan"), "sensor_id")
    with pytest.raises(ValueError, match="not an integer column"):
        SyntheticStage("op1", 0.0, 0.5, "site").process(reading_columns(3, seed=1))


def test_query_operator_is_checked() -> None:
    def query() -> Query:
        q = Query("q")
        q.stream("r", topic="in", schema=load_schema("reading"))
        return q.into("out")

    plan = query().operator("a", cost_us=5, selectivity=0.5, key="r.sensor_id").build()
    assert [str(o) for o in plan.operators] == ["a(cost 5 us, selectivity 0.5, by sensor_id)"]
    with pytest.raises(QueryError, match="must be an int or long"):
        query().operator("a", cost_us=5, selectivity=0.5, key="r.site").build()
    with pytest.raises(QueryError, match="declared twice"):
        query().operator("a", cost_us=1, selectivity=1, key="r.sensor_id").operator(
            "a", cost_us=1, selectivity=1, key="r.sensor_id"
        )
    with pytest.raises(QueryError, match="selectivity must be a number"):
        query().operator("a", cost_us=1, selectivity=-1, key="r.sensor_id")


# -- turns -----------------------------------------------------------------------------------


def test_envelopes_are_cut_into_turn_sized_pieces_that_add_up() -> None:
    big, small = reading_columns(1_000, seed=1), reading_columns(30, seed=2)
    pieces = _pieces([(0, small), (1, big), (2, small)], limit=400)
    assert [(i, len(b), last, first) for i, b, last, first in pieces] == [
        (0, 30, True, 0), (1, 400, False, 0), (1, 400, False, 400), (1, 200, True, 800),
        (2, 30, True, 0),
    ]  # fmt: skip
    rebuilt = Batch.concat(b for i, b, _, _ in pieces if i == 1)
    assert rebuilt.equals(big)
    groups = _runs(pieces, 400)
    assert all(sum(len(p[1]) for p in g) <= 400 for g in groups)
    assert [p for g in groups for p in g] == pieces


def test_turns_last_about_a_quantum_of_measured_work() -> None:
    ctx = AgentContext(None, None, None, None, Arbiter(), 4096, 0.01)  # type: ignore[arg-type]
    stats = AgentStats("op", "op")
    assert ctx.turn_tuples(stats) == 4096  # nothing measured yet
    stats.record(100, 100, busy_ns=100 * 1_000_000, messages=1, nbytes=10)  # 1 ms per tuple
    assert ctx.turn_tuples(stats) == 10
    assert ctx.turn_tuples(stats, cap=4) == 4
    stats.ns_per_tuple = 1.0  # 1 ns per tuple: the grant bounds it
    assert ctx.turn_tuples(stats) == 4096
    stats.ns_per_tuple = 1e9  # one tuple takes a second: still one tuple per turn
    assert ctx.turn_tuples(stats) == 1
    off = AgentContext(None, None, None, None, Arbiter(enabled=False), 4096, 0.01)  # type: ignore[arg-type]
    assert off.turn_tuples(stats, cap=16_384) == 16_384
