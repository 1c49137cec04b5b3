"""The filter query's runtime pieces without a broker: topics, stage factory, bulk stage agent.

The agent is driven with RecordBlocks of envelopes through a fake app and producer, so that
batching, dead letters, order-change events and Stats records are checked exactly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from faust.types import TP

from processors.core.batch import Batch, VarColumn
from processors.core.batch import same_layout as _same_layout
from processors.core.query import Query, col
from processors.physical.build import stage_factory
from processors.physical.compiler import FILTER_STEP as FILTER_STAGE
from processors.physical.compiler import compile_plan as plan_pipeline
from processors.runtime.context import AgentContext
from processors.runtime.deadletter import DeadLetters
from processors.runtime.record_block import RecordBlock
from processors.runtime.stage_agent import _runs, add_stage_agent
from processors.runtime.stats import StatsBoard
from processors.workloads.examples import reading_columns, readings_passthrough
from topics.avro import SchemaStore, decode_single_object, load_schema
from topics.envelope import decode_batch, encode_batch


def _stage_factory(name: str, plan: Any) -> Callable[[int], Any]:
    """The worker's factory of the stage of step ``name``."""
    return stage_factory(plan, plan_pipeline(plan).step(name))


def is_bulk_stage(name: str) -> bool:
    return plan_pipeline(filter_query().build()).step(name).bulk


A, B = "r.temperature < 25.0", "r.humidity > 10.0"


def filter_query(**adapt: Any) -> Query:
    q = readings_passthrough(name="fq", topic="fq-in", result="fq-out")
    q.where(col("r.humidity") > 10.0, col("r.temperature") < 25.0)
    return q.adapt(**adapt) if adapt else q


# -- plan_pipeline and the stage factory --------------------------------------------------------


def test_a_filter_plan_runs_ingest_filter_sink() -> None:
    pipeline = plan_pipeline(filter_query().build())
    assert pipeline.ingest_topics == {"r": "streamon.fq.ingest.r"}
    assert pipeline.stage_topics == [(FILTER_STAGE, "streamon.fq.ingest.r", "streamon.fq.out")]
    assert pipeline.sink_topic == "streamon.fq.out"
    assert is_bulk_stage(FILTER_STAGE)
    # the worker runs the three in one agent (processors.runtime.fused): no envelope topics
    assert pipeline.fused
    assert {s.name for s in pipeline.specs} == {"fq-in", "fq-out"}


def test_a_plan_with_synthetic_operators_is_not_fused() -> None:
    q = filter_query().operator("slow", cost_us=1.0, selectivity=0.5, key="r.sensor_id")
    pipeline = plan_pipeline(q.build())
    assert not pipeline.fused
    assert {"streamon.fq.ingest.r", "streamon.fq.out"} <= {s.name for s in pipeline.specs}


def test_a_passthrough_plan_is_unchanged() -> None:
    pipeline = plan_pipeline(readings_passthrough().build())
    assert [name for name, _, _ in pipeline.stage_topics] == ["passthrough"]


def reading_query() -> Query:
    q = Query("q").stream("r", topic="r-in", schema=load_schema("reading"), key="sensor_id")
    return q.where(col("r.temperature") > 1.0).into("q-out")


def test_windows_joins_and_projections_run_as_stateful_agents() -> None:
    windowed = reading_query().window("r", rows=10).build()
    steps = plan_pipeline(windowed).stateful
    assert [(s.name, s.kind, s.finish) for s in steps] == [("stream.r", "stream", True)]
    joined = (
        reading_query()
        .stream("s", topic="s-in", schema=load_schema("reading"), key="sensor_id")
        .join("r.sensor_id", "s.sensor_id")
        .build()
    )
    pipeline = plan_pipeline(joined)
    # the streams' stages run in the MJoin's step (processors.physical.joined)
    assert [s.kind for s in pipeline.stateful] == ["mjoin"]
    assert pipeline.stateful[-1].in_topics == {
        "streamon.q.ingest.r": "r",
        "streamon.q.ingest.s": "s",
    }
    assert [stream for stream, _ in pipeline.stateful[-1].inputs] == ["r", "s"]
    assert any(spec.compacted for spec in pipeline.specs)  # the state topic
    projected = reading_query().select("r.sensor_id").build()
    assert [s.kind for s in plan_pipeline(projected).stateful] == ["stream"]


def test_the_factory_makes_one_filter_stage_per_partition_with_the_query_settings() -> None:
    plan = filter_query(profile_probability=0.5, window_tuples=200, seed=3).build()
    make = _stage_factory(FILTER_STAGE, plan)
    first, second = make(0), make(1)
    assert first is not second
    s0, s1 = first.stats(), second.stats()
    assert s0["kind"] == "filter" and s0["algorithm"] == "agreedy"
    assert s0["order"] == [B, A]  # where() order until the stage learns better
    assert s0["ordering"]["profile_probability"] == 0.5
    assert s0["ordering"]["window_tuples"] == 200
    assert (s0["ordering"]["seed"], s1["ordering"]["seed"]) == (3, 4)
    assert (first.name, second.name) == ("filter[0]", "filter[1]")


def test_the_factory_uses_the_defaults_without_adapt() -> None:
    stats = _stage_factory(FILTER_STAGE, filter_query().build())(2).stats()
    assert stats["ordering"]["profile_probability"] == 0.01
    assert stats["ordering"]["window_tuples"] == 8000  # A-Greedy+, the default


# -- concatenation ------------------------------------------------------------------------------


def test_runs_group_consecutive_small_batches_of_one_layout_up_to_the_cap() -> None:
    keyed = [reading_columns(100, seed=i) for i in range(5)]
    unkeyed = reading_columns(100, seed=9)
    unkeyed.key = None
    items = list(enumerate([keyed[0], keyed[1], unkeyed, keyed[2], keyed[3], keyed[4]]))
    groups = _runs(items, max_tuples=250)  # 100 >= 250 // 4: every batch alone
    assert [[i for i, _ in g] for g in groups] == [[i] for i in range(6)]
    groups = _runs(items, max_tuples=450)
    assert [[i for i, _ in g] for g in groups] == [[0, 1], [2], [3, 4, 5]]
    groups = _runs(items, max_tuples=1_000)
    assert [[i for i, _ in g] for g in groups] == [[0, 1], [2], [3, 4, 5]]


def test_a_big_batch_is_not_copied_into_a_run() -> None:
    small, big = reading_columns(100, seed=1), reading_columns(2_000, seed=2)
    items = list(enumerate([small, small, big, small, small]))
    groups = _runs(items, max_tuples=4_096)  # batches of 1,024 or more stay alone
    assert [[i for i, _ in g] for g in groups] == [[0, 1], [2], [3, 4]]


def test_same_layout_tells_columns_types_keys_and_meta_apart() -> None:
    a, b = reading_columns(3, seed=1), reading_columns(4, seed=2)
    assert _same_layout(a, b)
    c = reading_columns(3, seed=1)
    c.columns["humidity"] = c.columns["humidity"].astype(np.float64)
    assert not _same_layout(a, c)
    d = reading_columns(3, seed=1)
    d.columns["site"] = VarColumn(d.columns["site"].offsets, d.columns["site"].data, utf8=False)
    assert not _same_layout(a, d)
    e = reading_columns(3, seed=1)
    e.meta["stream"] = "s"
    assert not _same_layout(a, e)
    f = reading_columns(3, seed=1)
    f.columns = dict(reversed(list(f.columns.items())))
    assert not _same_layout(a, f)


# -- the bulk stage agent -------------------------------------------------------------------------


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None, int | None]] = []

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        self.sent.append((topic, value, key, partition))

    def on(self, topic: str) -> list[tuple[bytes, bytes | None, int | None]]:
        return [(v, k, p) for t, v, k, p in self.sent if t == topic]


class FakeSignal:
    """Records the handlers connected to a Faust app signal, so a test can fire them."""

    def __init__(self) -> None:
        self.handlers: list[Callable] = []

    def connect(self, handler: Callable) -> None:
        self.handlers.append(handler)

    def send(self, *args: Any) -> None:
        for handler in self.handlers:
            asyncio.run(handler(None, *args))


class FakeApp:
    def __init__(self) -> None:
        self.agents: dict[str, Callable] = {}
        self.on_partitions_assigned = FakeSignal()

    def topic(self, name: str, **kwargs: Any) -> str:
        return name

    def agent(self, source: str, name: str) -> Callable:
        def register(fn: Callable) -> Callable:
            self.agents[name] = fn
            return fn

        return register


async def _feed(items: list[Any]) -> Any:
    for item in items:
        yield item


def block(payloads: list[bytes], partition: int = 0, first: int = 0) -> RecordBlock:
    n = len(payloads)
    offsets = list(range(first, first + n))
    return RecordBlock("in", partition, offsets, [0] * n, [None] * n, list(payloads))


class Harness:
    """One stage agent on a fake app; ``run`` feeds it blocks like the bulk consumer does."""

    def __init__(self, make_stage: Callable[[int], Any], max_batch_tuples: int = 16_384):
        self.app, self.producer = FakeApp(), FakeProducer()
        self.board = StatsBoard("w1", "fq")
        letters = DeadLetters(self.producer, "dead", "w1")  # type: ignore[arg-type]
        ctx = AgentContext(self.app, self.board, letters, self.producer)  # type: ignore[arg-type]
        self.stats = add_stage_agent(
            ctx,
            name="filter",
            in_topic="in",
            out_topic="out",
            make_stage=make_stage,
            bulk=True,
            max_batch_tuples=max_batch_tuples,
        )

    def run(self, blocks: list[Any]) -> None:
        asyncio.run(self.app.agents["filter"](_feed(blocks)))

    def outputs(self, partition: int | None = None) -> list[Batch]:
        return [
            decode_batch(v)
            for v, _, p in self.producer.on("out")
            if partition is None or p == partition
        ]

    def dead(self) -> list[dict]:
        schema = load_schema("dead_letter")
        return [
            decode_single_object(v, schema, SchemaStore()) for v, _, _ in self.producer.on("dead")
        ]


class Recording:
    """A stage that keeps rows with even sensor ids and remembers the batch sizes it saw."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.name, self.sizes, self.fail_on = "rec", [], fail_on

    def process(self, batch: Batch) -> list[Batch]:
        if self.fail_on is not None and (batch.columns["sensor_id"] == self.fail_on).any():
            raise RuntimeError(f"sensor {self.fail_on}")
        self.sizes.append(len(batch))
        mask = batch.columns["sensor_id"] % 2 == 0
        return [batch.filter(mask)] if mask.any() else []

    def stats(self) -> dict[str, Any]:
        return {"kind": "rec", "sizes": list(self.sizes)}


def test_bulk_agent_concatenates_envelopes_and_keeps_every_passing_tuple_in_order() -> None:
    stages: dict[int, Recording] = {}
    h = Harness(lambda p: stages.setdefault(p, Recording()), max_batch_tuples=4_500)
    inputs = [reading_columns(1_000, seed=i, start_ms=10_000 * i) for i in range(5)]
    h.run([block([encode_batch(b) for b in inputs], partition=3, first=40)])
    assert stages[3].sizes == [4_000, 1_000]
    whole = Batch.concat(inputs)
    expected = whole.filter(whole.columns["sensor_id"] % 2 == 0)
    assert Batch.concat(h.outputs(partition=3)).equals(expected)
    assert (h.stats.tuples_in, h.stats.tuples_out) == (5_000, len(expected))
    # one batch per process call (one arbiter turn each): the 4,000 and the 1,000 tuples
    assert (h.stats.messages_in, h.stats.batches, h.stats.positions) == (5, 2, {3: 45})
    assert h.stats.snapshot()["plan"] == {"3": {"kind": "rec", "sizes": [4_000, 1_000]}}


def test_after_a_rebalance_only_the_stages_of_held_partitions_stay() -> None:
    made: list[int] = []
    h = Harness(lambda p: made.append(p) or Recording())
    data = encode_batch(reading_columns(100, seed=1))
    h.run([block([data], partition=p) for p in (0, 1, 2)])
    assert set(h.stats.snapshot()["plan"]) == {"0", "1", "2"}
    h.app.on_partitions_assigned.send({TP("in", 1), TP("in", 3), TP("other", 0)})
    assert set(h.stats.snapshot()["plan"]) == {"1"}  # kept what it learned; 0 and 2 moved
    h.run([block([data], partition=p, first=1) for p in (1, 3)])
    assert made == [0, 1, 2, 3]  # partition 1's stage was kept, 3's is new
    assert h.stats.snapshot()["plan"]["1"]["sizes"] == [100, 100]


def test_bad_envelopes_and_failing_tuples_become_dead_letters_the_rest_goes_on() -> None:
    stages: dict[int, Recording] = {}
    h = Harness(lambda p: stages.setdefault(p, Recording(fail_on=-7)))
    good = [reading_columns(50, seed=i, start_ms=1_000 * i) for i in range(3)]
    poisoned = reading_columns(50, seed=7)
    poisoned.columns["sensor_id"][10] = -7
    payloads = [encode_batch(good[0]), b"not an envelope", encode_batch(poisoned)]
    payloads += [encode_batch(good[1]), encode_batch(good[2])]
    h.run([block(payloads, first=100)])
    dead = h.dead()
    assert [(d["offset"], d["stage"]) for d in dead] == [(101, "filter"), (102, "filter")]
    assert dead[0]["reason"].startswith("bad batch envelope")
    assert dead[1]["reason"] == "stage filter failed: sensor -7"
    assert dead[1]["value"] == payloads[2]
    whole = Batch.concat(good)
    expected = whole.filter(whole.columns["sensor_id"] % 2 == 0)
    assert Batch.concat(h.outputs()).equals(expected)
    assert h.stats.dead_letters == 2 and h.stats.positions == {0: 105}


def test_keyed_and_unkeyed_envelopes_are_not_merged() -> None:
    stages: dict[int, Recording] = {}
    h = Harness(lambda p: stages.setdefault(p, Recording()))
    keyed, unkeyed = reading_columns(10, seed=1), reading_columns(10, seed=2)
    unkeyed.key = None
    h.run([block([encode_batch(keyed), encode_batch(unkeyed), encode_batch(keyed)])])
    assert stages[0].sizes == [10, 10, 10]
    assert [o.key is None for o in h.outputs()] == [False, True, False]


def test_the_filter_agent_reports_order_changes_as_stats_events() -> None:
    plan = filter_query(profile_probability=0.5, window_tuples=200, min_profile_tuples=20).build()
    h = Harness(_stage_factory(FILTER_STAGE, plan), max_batch_tuples=1_000)

    def phase(seed: int, a_passes: float, b_passes: float) -> bytes:
        batch = reading_columns(1_000, seed=seed)
        rng = np.random.default_rng(seed)
        batch.columns["temperature"] = np.where(rng.random(1_000) < a_passes, 20.0, 30.0)
        humid = np.where(rng.random(1_000) < b_passes, 50.0, 5.0)
        batch.columns["humidity"] = humid.astype(np.float32)
        return encode_batch(batch)

    h.run([block([phase(i, 0.1, 0.95) for i in range(5)], partition=1)])
    [record] = [json.loads(r) for r in _stats_plans_and_events(h)]
    assert record["plan"]["1"]["order"] == [A, B]
    events1 = record["events"]
    assert events1 and events1[-1]["to"] == [A, B] and events1[0]["from"] == [B, A]
    assert {e["partition"] for e in events1} == {1}
    assert h.stats.snapshot()["plan"]["1"]["changes_total"] == len(events1)

    h.run([block([phase(10 + i, 0.98, 0.1) for i in range(5)], partition=1, first=5)])
    [record] = [json.loads(r) for r in _stats_plans_and_events(h)]
    assert record["plan"]["1"]["order"][0] == B
    assert record["events"] and record["events"][-1]["to"][0] == B
    changes = h.stats.snapshot()["plan"]["1"]["changes_total"]
    assert changes == len(events1) + len(record["events"])
    [record] = [json.loads(r) for r in _stats_plans_and_events(h)]
    assert record["events"] == []  # each change is reported once


def _stats_plans_and_events(h: Harness) -> list[str]:
    schema = load_schema("stats")
    out = []
    for raw in h.board.report(lambda stats: (0, 0)):
        record = decode_single_object(raw, schema, SchemaStore())
        out.append(
            json.dumps({"plan": json.loads(record["plan"]), "events": json.loads(record["events"])})
        )
    return out


# -- the end-to-end benchmark's queries ---------------------------------------------------------


@pytest.mark.parametrize("pass_all", [False, True])
def test_bench_queries_and_their_oracles_agree(tmp_path, pass_all: bool) -> None:
    from processors.bench.filters_e2e import chosen_filters, expected_count, query_text
    from processors.commands.queries import load_plan

    filters = chosen_filters(8, pass_all)
    path = tmp_path / "q.py"
    path.write_text(query_text("b-in", "b-out", "b", filters, {"profile_probability": 0.1}))
    plan = load_plan(str(path))
    assert len(plan.filters) == 8 and plan.ordering is not None
    batch = reading_columns(20_000, seed=5)
    stage = _stage_factory(FILTER_STAGE, plan)(0)
    passed = sum(len(out) for out in stage.process(batch))
    assert passed == expected_count(batch, filters)
    assert (passed == len(batch)) == pass_all
    assert plan_pipeline(plan).stage_topics[0][0] == FILTER_STAGE
    with pytest.raises(ValueError, match="filters must be 1..8"):
        chosen_filters(9)
