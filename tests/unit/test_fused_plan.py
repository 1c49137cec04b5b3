"""A fused stateless plan (processors.runtime.fused): the ingest agent decodes, filters and writes
the result records itself. Driven with RecordBlocks through a fake app and producer; the
results are checked row for row against a numpy evaluation of the predicates, and every input
record is accounted for (a result, filtered out, or a dead letter with its reason)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
from helpers import FakeApp

from processors.core.batch import Batch
from processors.core.query import Query, col
from processors.physical.build import stage_factory
from processors.physical.compiler import compile_plan
from processors.runtime.context import AgentContext
from processors.runtime.deadletter import DeadLetters
from processors.runtime.fused import FusedTail
from processors.runtime.ingest import add_ingest_agent
from processors.runtime.record_block import RecordBlock
from processors.runtime.results import ResultWriter
from processors.runtime.stats import StatsBoard
from processors.workloads.examples import reading_columns, readings_passthrough
from topics.avro import SchemaStore, decode_single_object, load_schema
from topics.columnar import RecordCodec


class Producer:
    """Keeps what is produced: envelopes and dead letters (``produce``), results
    (``produce_many``), as (topic, value, key, partition)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None, int | None]] = []

    def produce(self, topic: str, value: bytes, key: bytes | None = None,
                partition: int | None = None, timestamp_ms: int | None = None) -> None:  # fmt: skip
        self.sent.append((topic, value, key, partition))

    def produce_many(self, topic: str, buf: np.ndarray, offsets: np.ndarray, keys: Any = None,
                     partition: int | None = None, signs: Any = None) -> None:  # fmt: skip
        raw, bounds = buf.tobytes(), offsets.tolist()
        for i in range(len(bounds) - 1):
            key = None if keys is None else keys.value(i)
            self.sent.append((topic, raw[bounds[i] : bounds[i + 1]], key, partition))

    def on(self, topic: str) -> list[tuple[bytes, bytes | None, int | None]]:
        return [(v, k, p) for t, v, k, p in self.sent if t == topic]


def filter_query() -> Query:
    q = readings_passthrough(name="fq", topic="fq-in", result="fq-out")
    return q.where(col("r.humidity") > 10.0, col("r.temperature") < 25.0)


class Fused:
    """The worker's fused agent for ``query`` over a fake app and producer."""

    def __init__(self, query: Query, make_stage: Callable[[int], Any] | None = None) -> None:
        self.plan = query.build()
        physical = compile_plan(self.plan)
        assert physical.fused
        (step,) = physical.steps
        self.app, self.producer = FakeApp(), Producer()
        self.board = StatsBoard("w1", "fq")
        letters = DeadLetters(self.producer, "dead", "w1")  # type: ignore[arg-type]
        ctx = AgentContext(self.app, self.board, letters, self.producer)  # type: ignore[arg-type]
        self.codec = RecordCodec(self.plan.streams[0].schema)
        self.out_codec = RecordCodec(self.plan.output_schema)
        tail = FusedTail(
            ctx, source_topic="fq-in", stage_name=step.name,
            make_stage=make_stage or stage_factory(self.plan, step),
            results=ResultWriter(ctx, self.out_codec, "fq-out", 2, "sink"),
        )  # fmt: skip
        add_ingest_agent(ctx, name="ingest.r", source_topic="fq-in", codec=self.codec,
                         timestamp_field="ts", out_topic="unused", tail=tail)  # fmt: skip

    def records(self, batch: Batch) -> list[bytes]:
        buf, offsets = self.codec.encode_many(batch.columns, len(batch))
        raw, bounds = buf.tobytes(), offsets.tolist()
        return [raw[bounds[i] : bounds[i + 1]] for i in range(len(batch))]

    def run(self, blocks: list[RecordBlock]) -> None:
        async def feed() -> Any:
            for block in blocks:
                yield block

        asyncio.run(self.app.agents["ingest.r"](feed()))

    def results(self) -> list[tuple[int, int, bytes | None, int | None]]:
        """(sensor_id, ts, key, partition) of each result record, in order."""
        out = []
        for value, key, partition in self.producer.on("fq-out"):
            decoded = self.out_codec.decode_many(value, np.array([0, len(value)], np.int64))
            assert not decoded.errors, decoded.errors
            row = (int(decoded.columns["sensor_id"][0]), int(decoded.columns["ts"][0]))
            out.append((*row, key, partition))
        return out

    def dead(self) -> list[dict]:
        schema, store = load_schema("dead_letter"), SchemaStore()
        return [decode_single_object(v, schema, store) for v, _, _ in self.producer.on("dead")]

    def agent(self, name: str) -> dict:
        return {a["agent"]: a for a in self.board.snapshot(lambda s: (0, 0))["agents"]}[name]


def block(values: list[bytes], partition: int, keys: list[bytes | None]) -> RecordBlock:
    n = len(values)
    return RecordBlock("fq-in", partition, list(range(n)), [1] * n, keys, values)


def expected(batch: Batch, keys: list[bytes | None], partition: int, result_partitions: int = 2):
    c = batch.columns
    keep = (c["humidity"] > 10.0) & (c["temperature"] < 25.0)
    return [
        (int(c["sensor_id"][i]), int(c["ts"][i]), keys[i], partition % result_partitions)
        for i in np.flatnonzero(keep).tolist()
    ]


def test_the_fused_agent_writes_exactly_the_rows_the_predicates_keep_with_their_keys() -> None:
    fused = Fused(filter_query())
    want = []
    blocks = []
    for partition, seed in ((0, 1), (3, 2), (1, 3)):
        batch = reading_columns(3_000, seed=seed)
        keys: list[bytes | None] = [b"k%d" % i if i % 3 else None for i in range(len(batch))]
        blocks.append(block(fused.records(batch), partition, keys))
        want += expected(batch, keys, partition)
    fused.run(blocks)
    assert fused.results() == want
    assert fused.dead() == []
    ingest, stage, sink = (fused.agent(a) for a in ("ingest.r", "filter", "sink"))
    assert ingest["tuples_in"] == stage["tuples_in"] == 9_000
    assert ingest["tuples_out"] == stage["tuples_out"] == sink["tuples_out"] == len(want)
    assert set(stage["plan"]) == {"0", "1", "3"}  # one adaptive filter stage per partition
    assert stage["plan"]["0"]["kind"] == "filter"
    assert ingest["plan"] == {"decodes": [f.name for f in fused.codec.fields]}


def test_a_malformed_record_is_an_ingest_dead_letter_and_the_rest_go_on() -> None:
    fused = Fused(filter_query())
    batch = reading_columns(200, seed=4)
    values = fused.records(batch)
    values[17] = b"\x00\x01not avro"
    keys: list[bytes | None] = [None] * len(values)
    fused.run([block(values, 2, keys)])
    good = Batch.concat([batch.slice(0, 17), batch.slice(18, 200)])
    assert fused.results() == expected(good, keys, 2)
    (letter,) = fused.dead()
    assert (letter["stage"], letter["partition"], letter["offset"]) == ("ingest.r", 2, 17)
    assert fused.agent("ingest.r")["dead_letters"] == 1
    assert fused.agent("filter")["dead_letters"] == 0


class Picky:
    """A stage that fails on any batch holding a sensor id of 13 (a bug that meets one record)."""

    name = "filter"

    def process(self, batch: Batch) -> list[Batch]:
        if (batch.columns["sensor_id"] == 13).any():
            raise ValueError("sensor 13")
        return [batch]

    def stats(self) -> dict[str, Any]:
        return {"kind": "filter"}


def test_a_stage_failure_retries_record_by_record_and_dead_letters_only_the_failing_ones() -> None:
    fused = Fused(filter_query(), make_stage=lambda partition: Picky())
    batch = reading_columns(300, seed=5)
    batch.columns["sensor_id"][[4, 250]] = 13
    keys: list[bytes | None] = [None] * len(batch)
    fused.run([block(fused.records(batch), 1, keys)])
    ids, ts = batch.columns["sensor_id"], batch.columns["ts"]
    assert fused.results() == [
        (int(ids[i]), int(ts[i]), None, 1) for i in range(len(batch)) if i not in (4, 250)
    ]
    letters = fused.dead()
    assert [(d["stage"], d["offset"]) for d in letters] == [("filter", 4), ("filter", 250)]
    assert all("sensor 13" in d["reason"] for d in letters)
    assert fused.agent("filter")["dead_letters"] == 2
