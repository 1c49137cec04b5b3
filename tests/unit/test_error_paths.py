"""Error paths of the worker's agents (issue 15): no input is acknowledged without its results
or a dead letter, a dead letter never fails for its size, an unexpected exception stops the
worker instead of being swallowed by Faust's restart, and one record cannot make decoding
spin for ever."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from confluent_kafka import KafkaError, KafkaException
from helpers import FakeApp

from processors.core.batch import Batch
from processors.core.partitioning import single_partition
from processors.core.query import Query
from processors.physical.build import chain_factory
from processors.physical.compiler import compile_plan
from processors.runtime import context
from processors.runtime.context import EXIT_AGENT_FAILED, EXIT_OUTPUT_FAILED, AgentContext
from processors.runtime.deadletter import DeadLetterError, DeadLetters
from processors.runtime.ingest import add_ingest_agent
from processors.runtime.layouts import expected_layouts
from processors.runtime.record_block import RecordBlock
from processors.runtime.stage_agent import add_stage_agent
from processors.runtime.stateful import add_stateful_agent
from processors.runtime.stats import StatsBoard
from processors.workloads.examples import reading_columns
from topics.avro import (
    SchemaStore,
    decode_single_object,
    encode_single_object,
    load_schema,
    single_object_header,
)
from topics.avro_bounds import DecodeBoundsError, DecodeLimits, check_bounds
from topics.columnar import RecordCodec
from topics.envelope import decode_batch, encode_batch

#: librdkafka's default message.max.bytes
MESSAGE_MAX_BYTES = 1_000_000


class LimitedProducer:
    """Refuses messages over ``message.max.bytes`` as librdkafka's ``produce`` does."""

    def __init__(self, refuse_topic: str | None = None) -> None:
        self.sent: list[tuple[str, bytes, bytes | None, int | None]] = []
        self.refuse_topic = refuse_topic

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        if topic == self.refuse_topic:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_TOPIC, "no such topic"))
        if len(value) + len(key or b"") > MESSAGE_MAX_BYTES:
            raise KafkaException(
                KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large")
            )
        self.sent.append((topic, value, key, partition))

    def on(self, topic: str) -> list[tuple[bytes, bytes | None, int | None]]:
        return [(v, k, p) for t, v, k, p in self.sent if t == topic]


class Stopped(BaseException):
    """What the patched ``stop_worker`` raises (a BaseException, as ``os._exit`` escapes all)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message, code)
        self.message, self.code = message, code


@pytest.fixture(autouse=True)
def no_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    def stop(message: str, code: int) -> None:
        raise Stopped(message, code)

    monkeypatch.setattr(context, "stop_worker", stop)


class World:
    """A fake app, a size-limited producer and an agent context over them."""

    def __init__(self, refuse_topic: str | None = None) -> None:
        self.app, self.producer = FakeApp(), LimitedProducer(refuse_topic)
        self.letters = DeadLetters(self.producer, "dead", "w1")  # type: ignore[arg-type]
        self.ctx = AgentContext(
            self.app,  # type: ignore[arg-type]
            StatsBoard("w1", "q"),
            self.letters,
            self.producer,  # type: ignore[arg-type]
        )

    def run(self, agent: str, items: list[Any]) -> None:
        async def feed() -> Any:
            for item in items:
                yield item

        asyncio.run(self.app.agents[agent](feed()))

    def dead(self) -> list[dict]:
        schema, store = load_schema("dead_letter"), SchemaStore()
        return [decode_single_object(v, schema, store) for v, _, _ in self.producer.on("dead")]

    def outputs(self, topic: str = "out") -> Batch:
        return Batch.concat([decode_batch(v) for v, _, _ in self.producer.on(topic)])


def records_block(values: list[bytes], first: int = 100) -> RecordBlock:
    n = len(values)
    keys = [b"k%d" % i for i in range(n)]
    return RecordBlock("in", 2, list(range(first, first + n)), [1] * n, keys, values)


# --- finding 1: a ~1 MB malformed record -------------------------------------------------------


def test_a_megabyte_malformed_record_is_a_truncated_dead_letter_and_nothing_else_is_lost() -> None:
    world = World()
    codec = RecordCodec(load_schema("reading"))
    add_ingest_agent(world.ctx, name="ingest.r", source_topic="in", codec=codec,
                     timestamp_field="ts", out_topic="out")  # fmt: skip
    before, after = reading_columns(300, seed=1), reading_columns(200, seed=2)
    good = [codec.encode_one(r) for r in before.rows() + after.rows()]
    big = single_object_header(load_schema("reading")) + b"\xff" * 999_950
    values = good[:300] + [big] + good[300:]
    world.run("ingest.r", [records_block(values)])
    out = world.outputs()
    expected = Batch.concat([before, after])
    assert len(out) == 500
    for name in ("sensor_id", "ts", "temperature"):
        assert out.columns[name].tolist() == expected.columns[name].tolist()
    (letter,) = world.dead()
    assert (letter["source_topic"], letter["partition"], letter["offset"]) == ("in", 2, 400)
    assert letter["value"] == big[: len(letter["value"])]
    assert len(letter["value"]) <= 512 * 1024
    assert f"of {len(big)} bytes" in letter["reason"] and "truncated" in letter["reason"]
    assert all(len(v) <= MESSAGE_MAX_BYTES for v, _, _ in world.producer.on("dead"))


def test_a_dead_letter_cuts_its_value_and_key_and_never_fails_for_size() -> None:
    world = World()
    value, key = bytes(range(256)) * 8_000, b"K" * 300_000
    world.letters.send(source_topic="t", partition=1, offset=7, key=key, value=value,
                       reason="bad", stage="s")  # fmt: skip
    (letter,) = world.dead()
    assert letter["value"] == value[: len(letter["value"])] and len(letter["value"]) < len(value)
    assert letter["key"] == key[: len(letter["key"])] and len(letter["key"]) < len(key)
    assert str(len(value)) in letter["reason"] and str(len(key)) in letter["reason"]
    assert (letter["source_topic"], letter["partition"], letter["offset"]) == ("t", 1, 7)


def test_a_dead_letter_that_cannot_be_written_stops_the_worker_without_commit() -> None:
    world = World(refuse_topic="dead")
    with pytest.raises(DeadLetterError):
        world.letters.send(source_topic="t", partition=0, offset=1, key=None, value=b"x",
                           reason="bad", stage="s")  # fmt: skip
    codec = RecordCodec(load_schema("reading"))
    add_ingest_agent(world.ctx, name="ingest.r", source_topic="in", codec=codec,
                     timestamp_field="ts", out_topic="out")  # fmt: skip
    with pytest.raises(Stopped) as stopped:
        world.run("ingest.r", [records_block([b"garbage"])])
    assert stopped.value.code == EXIT_OUTPUT_FAILED
    assert "ingest.r" in stopped.value.message


def test_a_write_that_fails_because_the_broker_lost_the_topics_stops_with_that_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restarted in-memory broker fails the idempotent producer (unknown producer id) before
    the periodic check runs: the stop still names the lost topics, and exits 69, not 75."""
    from processors.runtime import topics_watch

    monkeypatch.setattr(context, "_BEFORE_OUTPUT_STOP", [])
    monkeypatch.setattr(topics_watch, "stop_worker", context.stop_worker)  # the patched one
    watch = topics_watch.TopicsWatch("127.0.0.1:1", ["in", "out"])
    monkeypatch.setattr(watch, "gone", lambda: ["out"])
    watch.before_output_stops()
    with pytest.raises(Stopped) as stopped:
        context.fatal("ingest.r", KafkaException(KafkaError(KafkaError.UNKNOWN_PRODUCER_ID)))
    assert stopped.value.code == topics_watch.EXIT_TOPICS_GONE
    assert "['out'] are gone from the broker at 127.0.0.1:1" in stopped.value.message

    def away() -> list[str]:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    monkeypatch.setattr(watch, "gone", away)  # a broker that is away: the write's own reason
    with pytest.raises(Stopped) as stopped:
        context.fatal("ingest.r", KafkaException(KafkaError(KafkaError.UNKNOWN_PRODUCER_ID)))
    assert stopped.value.code == EXIT_OUTPUT_FAILED


# --- finding 2: an exception escaping an agent ---------------------------------------------------


class BadOutput:
    """A stage with a bug: it returns something that is not a batch."""

    name = "bad"

    def process(self, batch: Batch) -> list[Any]:
        return [object()]

    def stats(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize("bulk", [True, False])
def test_an_exception_escaping_a_stage_agent_stops_the_worker_naming_its_input(bulk: bool) -> None:
    world = World()
    add_stage_agent(world.ctx, name="filter", in_topic="in", out_topic="out",
                    make_stage=lambda p: BadOutput(), bulk=bulk)  # fmt: skip
    payload = encode_batch(reading_columns(10, seed=3))
    if bulk:
        items: list[Any] = [RecordBlock("in", 3, [40, 41], [1, 1], [None, None], [payload] * 2)]
    else:
        message = SimpleNamespace(topic="in", partition=3, offset=40, timestamp=1.0, key=None,
                                  value=payload)  # fmt: skip

        class Events:
            async def events(self) -> Any:
                yield SimpleNamespace(message=message)

        items = Events()  # type: ignore[assignment]
    with pytest.raises(Stopped) as stopped:
        if bulk:
            world.run("filter", items)
        else:
            asyncio.run(world.app.agents["filter"](items))
    assert stopped.value.code == EXIT_AGENT_FAILED
    message_text = stopped.value.message
    assert "filter" in message_text and "in[3]@40" in message_text
    assert "TypeError" in message_text and "without commit" in message_text


class NoSnapshots:
    """A state topic with nothing on it."""

    def load(self, agent: str, partition: int) -> None:
        return None


def test_an_exception_escaping_a_stateful_agent_stops_the_worker() -> None:
    world = World()

    def make_chain(partition: int) -> Any:
        raise RuntimeError("a bug in the chain's construction")

    add_stateful_agent(world.ctx, name="stream.r", in_topics={"in": "r"}, out_topic="out",
                       out_partitions=4, make_chain=make_chain,
                       snapshots=NoSnapshots())  # type: ignore[arg-type]  # fmt: skip
    payload = encode_batch(reading_columns(5, seed=4))
    with pytest.raises(Stopped) as stopped:
        world.run("stream.r", [RecordBlock("in", 1, [7], [1], [None], [payload])])
    assert stopped.value.code == EXIT_AGENT_FAILED
    assert "stream.r" in stopped.value.message and "in[1]@7" in stopped.value.message
    assert "a bug in the chain" in stopped.value.message


# --- finding 3: a poisoned internal envelope ----------------------------------------------------


def windowed_plan() -> Any:
    q = Query("w")
    q.stream("r", topic="in", schema=load_schema("reading"), key="sensor_id", timestamp="ts",
             partitions=2)  # fmt: skip
    q.window("r", range_ms=10**9)
    q.group_by("r.site").aggregate(n="count")
    return q.into("res", partitions=1).build()


def test_expected_layouts_cover_every_internal_topic_of_a_windowed_query() -> None:
    plan = windowed_plan()
    physical = compile_plan(plan)
    layouts = expected_layouts(plan)
    for step in physical.steps:
        assert set(step.in_topics) <= set(layouts), step.name
    ingest = layouts[physical.ingest_topics["r"]]
    names = [name for name, _ in ingest if not name.endswith("?")]  # less null companions
    assert names == ["ts", "site"]  # what the query reads (projection pushdown), schema order


def test_an_envelope_with_a_renamed_column_is_refused_before_it_reaches_the_window() -> None:
    plan = single_partition(windowed_plan())  # one source: the merge forwards untagged input
    physical = compile_plan(plan)
    step = physical.steps[0]
    good = []
    for i in range(3):  # the columns ingest writes: those the query reads
        full = reading_columns(20, seed=i, start_ms=1_000 * i)
        read = {n: full.columns[n] for n in ("ts", "site")}
        good.append(Batch(read, full.sign, full.ts, full.key, dict(full.meta)))
    columns = dict(good[0].columns)
    columns["place"] = columns.pop("site")
    poisoned = encode_batch(Batch.inserts(columns, ts=good[0].ts))
    runs = {}
    for layouts in (expected_layouts(plan), None):
        world = World()
        add_stateful_agent(world.ctx, name=step.name, in_topics=step.in_topics,
                           out_topic="out", out_partitions=2,
                           make_chain=chain_factory(plan, step), snapshots=NoSnapshots(),
                           layouts=layouts)  # type: ignore[arg-type]  # fmt: skip
        values = [poisoned] + [encode_batch(b) for b in good]
        world.run(step.name, [RecordBlock(step.in_topic, 0, [0, 1, 2, 3], [1] * 4, [None] * 4,
                                          values)])  # fmt: skip
        runs[layouts is None] = world
    checked = runs[False]
    assert len(checked.outputs()) == 60
    (letter,) = checked.dead()
    assert letter["offset"] == 0 and "place" in letter["reason"] and "site" in letter["reason"]
    # without the check, the window pins the poisoned layout and refuses every good envelope
    assert len(runs[True].dead()) == 3


def test_an_envelope_with_more_fields_than_the_step_reads_is_taken_as_the_fields_it_reads() -> None:
    """Written by an ingest that carried every field (before projection pushdown, during an
    upgrade): the window takes the fields the query reads, and the results are the same."""
    plan = single_partition(windowed_plan())
    physical = compile_plan(plan)
    step = physical.steps[0]
    full = [reading_columns(20, seed=i, start_ms=1_000 * i) for i in range(3)]
    outputs = {}
    for every_field in (False, True):
        world = World()
        add_stateful_agent(world.ctx, name=step.name, in_topics=step.in_topics,
                           out_topic="out", out_partitions=2,
                           make_chain=chain_factory(plan, step), snapshots=NoSnapshots(),
                           layouts=expected_layouts(plan))  # type: ignore[arg-type]  # fmt: skip
        batches = [b if every_field else Batch({n: b.columns[n] for n in ("ts", "site")},
                                               b.sign, b.ts) for b in full]  # fmt: skip
        values = [encode_batch(b) for b in batches]
        world.run(step.name, [RecordBlock(step.in_topic, 0, [0, 1, 2], [1] * 3, [None] * 3,
                                          values)])  # fmt: skip
        assert world.dead() == []
        outputs[every_field] = world.outputs()
    assert len(outputs[True]) == 60 and outputs[True].equals(outputs[False])


# --- finding 4: unbounded work from one record ---------------------------------------------------

WRITER_WITH_ARRAY = {
    **load_schema("reading"),
    "fields": [
        *load_schema("reading")["fields"],
        {"name": "tags", "type": {"type": "array", "items": "null"}, "default": []},
    ],
}


def _zigzag(v: int) -> bytes:
    z, out = (v << 1) ^ (v >> 63), bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _huge_count_record() -> bytes:
    """A reading written with WRITER_WITH_ARRAY whose array claims 2**62 null items."""
    row = reading_columns(1, seed=5).rows()[0]
    whole = encode_single_object(WRITER_WITH_ARRAY, {**row, "tags": []})
    return whole[:-1] + _zigzag(2**62) + _zigzag(0)


def test_a_block_count_of_two_to_the_62_is_refused_not_looped_over() -> None:
    store = SchemaStore()
    store.add(WRITER_WITH_ARRAY)
    codec = RecordCodec(load_schema("reading"), store=store)
    message = _huge_count_record()
    good = codec.encode_one(reading_columns(1, seed=6).rows()[0])
    buf = message + good
    result = codec.decode_many(buf, np.array([0, len(message), len(buf)], np.int64))
    assert result.good.tolist() == [1]
    ((index, reason),) = result.errors
    assert index == 0 and "block count" in reason and "bytes left" in reason


def test_check_bounds_refuses_counts_items_nesting_and_size() -> None:
    body = _huge_count_record()[10:]
    with pytest.raises(DecodeBoundsError, match="block count"):
        check_bounds(body, WRITER_WITH_ARRAY, DecodeLimits())
    with pytest.raises(DecodeBoundsError, match="max_record_bytes"):
        check_bounds(body, WRITER_WITH_ARRAY, DecodeLimits(max_record_bytes=10))
    ints = {"type": "array", "items": "int"}
    many = _zigzag(50) + b"\x02" * 50 + _zigzag(0)
    check_bounds(many, ints, DecodeLimits())
    with pytest.raises(DecodeBoundsError, match="collection items"):
        check_bounds(many, ints, DecodeLimits(max_collection_items=49))
    nested: Any = "int"
    for _ in range(40):
        nested = {"type": "array", "items": nested}
    deep = _zigzag(1) * 40 + b"\x02" + _zigzag(0) * 40
    with pytest.raises(DecodeBoundsError, match="nesting"):
        check_bounds(deep, nested, DecodeLimits())


def test_a_record_over_max_record_bytes_is_an_error_before_it_is_read() -> None:
    codec = RecordCodec(load_schema("reading"), limits=DecodeLimits(max_record_bytes=20))
    good = codec.encode_one(reading_columns(1, seed=7).rows()[0])
    result = codec.decode_many(good, np.array([0, len(good)], np.int64))
    assert "max_record_bytes" in result.errors[0][1]


def test_decode_limits_come_from_the_environment() -> None:
    limits = DecodeLimits.from_env({"STREAMON_DECODE_MAX_NESTING": "5"})
    assert limits.max_nesting == 5 and limits.max_record_bytes == DecodeLimits().max_record_bytes
    with pytest.raises(ValueError, match="STREAMON_DECODE_MAX_RECORD_BYTES"):
        DecodeLimits.from_env({"STREAMON_DECODE_MAX_RECORD_BYTES": "lots"})
