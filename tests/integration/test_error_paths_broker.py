"""Error paths on the real broker with real workers (issue 15): a ~1 MB malformed record and a
poisoned internal envelope become dead letters, and every good record still comes out."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import confluent_kafka
import pytest
from integration.test_pipeline import Pipeline
from integration.test_state_restore import plan_of, publish, start, wait_settled

from processors.core.batch import Batch
from processors.physical.compiler import compile_plan
from processors.runtime.deadletter import MAX_VALUE_BYTES
from processors.runtime.worker import DEAD_LETTER_TOPIC, topic_specs
from processors.workloads.examples import reading_columns
from topics.admin import ensure_topics, read_topic
from topics.avro import SchemaStore, decode_single_object, load_schema, single_object_header
from topics.envelope import encode_batch

WINDOWED = """\
from processors.core.query import Query
from topics.avro import load_schema
query = Query({name!r})
query.stream("r", topic={topic!r}, schema=load_schema("reading"), key="sensor_id",
             timestamp="ts", partitions=2)
query.window("r", range_ms=10**9)
query.group_by("r.site").aggregate(n="count", total=("sum", "r.sensor_id"))
query.into({result!r}, partitions=1)
query.processing_guarantee({guarantee!r})
"""


def _dead_letters(bootstrap: str, source_topic: str) -> list[dict]:
    store, schema = SchemaStore(), load_schema("dead_letter")
    letters = [
        decode_single_object(r.value, schema, store)
        for r in read_topic(bootstrap, DEAD_LETTER_TOPIC)
    ]
    return [d for d in letters if d["source_topic"] == source_topic]


def _publish_big(bootstrap: str, topic: str, value: bytes, key: bytes) -> None:
    """One message near librdkafka's default 1,000,000-byte limit (raised for this producer)."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "message.max.bytes": 2_000_000}
    )
    producer.produce(topic, value, key=key)
    assert producer.flush(30) == 0


def test_a_megabyte_malformed_record_is_a_truncated_dead_letter_and_nothing_is_lost(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    pipeline = Pipeline(bootstrap, tmp_path, topic_name)
    try:
        big = single_object_header(load_schema("reading")) + b"\xff" * 999_950
        pipeline.publish(1_000, seed=50)
        _publish_big(bootstrap, pipeline.topic, big, key=b"big")
        pipeline.publish(1_000, seed=51)
        worker = pipeline.start("w1")
        pipeline.wait(2_000)
        inputs = read_topic(bootstrap, pipeline.topic)
        (big_record,) = [r for r in inputs if r.key == b"big"]
        expected = Counter((r.key, r.value) for r in inputs if r.key != b"big")
        assert pipeline.outputs() == expected
        assert sum(expected.values()) == 2_000
        (letter,) = _dead_letters(bootstrap, pipeline.topic)
        assert (letter["partition"], letter["offset"]) == (big_record.partition, big_record.offset)
        assert 0 < len(letter["value"]) <= MAX_VALUE_BYTES
        assert letter["value"] == big[: len(letter["value"])]
        assert "truncated" in letter["reason"] and f"of {len(big)} bytes" in letter["reason"]
        assert letter["stage"] == "ingest.r"
        assert worker.running, worker.log_tail()
    finally:
        pipeline.close()


def _counts(batches: list[Batch]) -> Counter:
    """The GROUP BY of the windowed query over input that never leaves its window."""
    n: Counter = Counter()
    total: Counter = Counter()
    for batch in batches:
        for site, sensor in zip(batch.columns["site"].to_list(),
                                batch.columns["sensor_id"].tolist(), strict=True):  # fmt: skip
            n[site] += 1
            total[site] += sensor
    return Counter({(site, n[site], total[site]): 1 for site in n})


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_an_envelope_with_a_renamed_column_is_a_dead_letter_not_a_poisoned_window(
    bootstrap: str, tmp_path: Path, topic_name: str, guarantee: str
) -> None:
    topic, result = f"{topic_name}.in", f"{topic_name}.out"
    path = tmp_path / "query.py"
    path.write_text(
        WINDOWED.format(name=topic_name, topic=topic, result=result, guarantee=guarantee)
    )
    plan = plan_of(path)
    physical = compile_plan(plan)
    ensure_topics(bootstrap, topic_specs(physical))
    ingest_topic = physical.ingest_topics["r"]
    poisoned = reading_columns(5, seed=60)
    columns = dict(poisoned.columns)
    columns["place"] = columns.pop("site")
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for partition in (0, 1):  # first on both fresh partitions of the window's input
        producer.produce(ingest_topic, encode_batch(Batch.inserts(columns, ts=poisoned.ts)),
                         partition=partition)  # fmt: skip
    assert producer.flush(30) == 0
    good = reading_columns(3_000, seed=61)
    publish(bootstrap, topic, good)
    worker = start(tmp_path, bootstrap, path, 1)
    try:
        seen = wait_settled(bootstrap, result, _counts([good]), plan.output_schema, [worker])
        assert seen == _counts([good]), worker.log_tail(60)
        assert worker.running, worker.log_tail(60)
    finally:
        worker.stop()
    letters = _dead_letters(bootstrap, ingest_topic)
    assert sorted((d["partition"], d["offset"]) for d in letters) == [(0, 0), (1, 0)]
    for letter in letters:
        assert "place" in letter["reason"] and "site" in letter["reason"], letter["reason"]
        assert letter["stage"] == physical.steps[0].name
