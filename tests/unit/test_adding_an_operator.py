"""The worked example of docs/architecture.md, "Adding an operator": a new kind of stage is a
stage class and a registry entry; the plan node is ``Query.apply``, and nothing in the compiler,
the runner or the runtime changes. Here the class and the entry live in the test."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from processors.core.batch import Batch
from processors.core.plan import LogicalPlan, OperatorNode, QueryError
from processors.core.query import Query, col
from processors.physical.compiler import compile_plan
from processors.physical.kinds import STAGE_KINDS, StageKind
from processors.physical.runner import QueryRunner
from processors.physical.steps import StageNode
from processors.stages.base import StageBase
from processors.workloads.examples import reading_columns
from topics.avro import load_schema


class ScaleStage(StageBase):
    """column * factor + offset: the whole stage (stateless)."""

    kind = "scale"

    def __init__(self, name: str, column: str, factor: float, offset: float) -> None:
        self.name, self.column, self.factor, self.offset = name, column, factor, offset
        self.tuples = 0

    def process(self, batch: Batch) -> list[Batch]:
        self.tuples += len(batch)
        cols = dict(batch.columns)
        cols[self.column] = cols[self.column] * self.factor + self.offset
        return [Batch(cols, batch.sign, batch.ts, batch.key, dict(batch.meta))]

    def stats(self) -> dict[str, Any]:
        return {"kind": self.kind, "tuples": self.tuples}


class CountStage(ScaleStage):
    """The same with state (tuples seen), to show a stateful kind gets snapshots."""

    kind = "count_scale"

    def state(self) -> dict[str, Any]:
        return {"tuples": self.tuples}

    def load_state(self, state: dict[str, Any]) -> None:
        self.tuples = int(state["tuples"])


def _op(plan: LogicalPlan, node: StageNode) -> OperatorNode:
    return next(o for o in plan.operators if o.name == node.operator)  # type: ignore[return-value]


def build_scale(plan: LogicalPlan, node: StageNode, partition: int) -> ScaleStage:
    op = _op(plan, node)
    cls = CountStage if op.kind == "count_scale" else ScaleStage
    return cls(f"{op.name}[{partition}]", op.param("column"), op.param("factor", 1.0),
               op.param("offset", 0.0))  # fmt: skip


def check_scale(plan: LogicalPlan, op: OperatorNode) -> None:
    (stream,) = plan.streams
    info = stream.field(str(op.param("column")))
    if info is None or info.type not in ("float", "double"):
        raise QueryError(f"operator {op.name}: column must be a float or double field")


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(STAGE_KINDS, "scale", StageKind(build_scale, check=check_scale))
    monkeypatch.setitem(
        STAGE_KINDS, "count_scale", StageKind(build_scale, stateful=True, check=check_scale)
    )


def query(kind: str = "scale", **params: Any) -> Query:
    q = Query("f").stream("r", topic="r-in", schema=load_schema("reading"), key="sensor_id")
    q.where(col("r.ok") == True)  # noqa: E712
    return q.apply(kind, "fahrenheit", **params).into("f-out")


def test_the_new_kind_runs_where_the_plan_puts_it(registered: None) -> None:
    plan = query(column="temperature", factor=1.8, offset=32.0).build()
    physical = compile_plan(plan)
    assert [(s.name, s.kind, s.stateful) for s in physical.steps] == [
        ("filter", "filter", False),
        ("op.fahrenheit", "scale", False),
    ]
    assert physical.paths() == {"r": ["ingest.r", "filter", "op.fahrenheit", "sink"]}
    batch = reading_columns(2_000, seed=3)
    runner = QueryRunner(plan)
    out = Batch.concat(runner.push("r", batch))
    ok = batch.columns["ok"]
    assert np.array_equal(out.columns["temperature"], batch.columns["temperature"][ok] * 1.8 + 32)
    assert np.array_equal(out.columns["sensor_id"], batch.columns["sensor_id"][ok])
    assert runner.stats()["fahrenheit[0]"] == {"kind": "scale", "tuples": int(ok.sum())}


def test_a_stateful_kind_gets_a_snapshotted_step(registered: None) -> None:
    plan = query("count_scale", column="temperature").build()
    physical = compile_plan(plan)
    step = physical.step("op.fahrenheit")
    assert step.stateful and physical.state_topic == "streamon.f.state"
    runner = QueryRunner(plan)
    runner.push("r", reading_columns(100, seed=1))
    restored = QueryRunner(plan)
    restored.chains[step.name].load_snapshot(runner.chains[step.name].snapshot())
    assert restored.stats()["fahrenheit[0]"] == runner.stats()["fahrenheit[0]"]


def test_the_kind_checks_its_parameters_when_the_plan_compiles(registered: None) -> None:
    with pytest.raises(QueryError, match="column must be a float or double"):
        compile_plan(query(column="site").build())
    with pytest.raises(QueryError, match="no stage kind 'scael'"):
        compile_plan(query("scael", column="temperature").build())
    with pytest.raises(QueryError, match="not placed by apply"):
        compile_plan(query("window").build())
    with pytest.raises(QueryError, match="must be a string, number"):
        query(column=["temperature"])
    with pytest.raises(QueryError, match="declared twice"):
        query(column="temperature").apply("scale", "fahrenheit")
