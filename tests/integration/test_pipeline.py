"""The foundation's pipeline on the real broker with real Faust workers.

Input: Avro readings published by confluent-kafka. Oracle: the published messages themselves;
a pass-through query must put out exactly the same multiset of (key, value) pairs.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_helpers import stats_records

from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.publish import publish_batch, publish_raw
from processors.runtime.worker import DEAD_LETTER_TOPIC
from processors.workloads.examples import reading_columns
from topics.admin import ensure_topics, high_watermarks, read_topic
from topics.avro import SchemaStore, decode_single_object, load_schema
from topics.columnar import RecordCodec
from topics.specs import TopicSpec

PARTITIONS = 4
QUERY = """\
from processors.core.query import Query, col
from topics.avro import load_schema
query = Query({name!r})
query.stream("r", topic={topic!r}, schema=load_schema({schema!r}), key="sensor_id",
             timestamp="ts", partitions={partitions})
{where}
query.into({result!r}, partitions={partitions})
"""


class Pipeline:
    """One query's topics, query file and workers, for one test."""

    def __init__(
        self,
        bootstrap: str,
        tmp_path: Path,
        name: str,
        schema: str = "reading",
        only_ok: bool = False,
    ) -> None:
        self.bootstrap = bootstrap
        self.only_ok = only_ok  # the query keeps the readings with ok == True (a filter stage)
        self.state_dir = tmp_path / "state"
        self.name = name
        self.topic, self.result = f"{name}.in", f"{name}.out"
        ensure_topics(bootstrap, [TopicSpec(self.topic, PARTITIONS)])
        self.query_file = tmp_path / "query.py"
        self.query_file.write_text(
            QUERY.format(
                name=name,
                topic=self.topic,
                result=self.result,
                schema=schema,
                partitions=PARTITIONS,
                where='query.where(col("r.ok") == True)' if only_ok else "",
            )  # fmt: skip
        )
        self.workers: list[WorkerProcess] = []
        self.published = 0

    def publish(self, n: int, seed: int) -> None:
        batch = reading_columns(n, seed=seed, start_ms=1_700_000_000_000 + self.published * 10)
        publish_batch(self.bootstrap, self.topic, batch, load_schema("reading"))
        self.published += n

    def start(self, worker_id: str) -> WorkerProcess:
        worker = WorkerProcess(
            self.query_file, bootstrap=self.bootstrap, state_dir=self.state_dir, worker_id=worker_id
        )
        self.workers.append(worker)
        return worker

    def wait(self, count: int, timeout: float = 120.0) -> None:
        running = [w for w in self.workers if w.running]
        seen = wait_for_count(self.bootstrap, self.result, count, timeout, running)
        assert seen >= count, f"only {seen} of {count} results after {timeout}s"
        time.sleep(2.0)  # let any duplicates land before the exact count

    def inputs(self) -> Counter:
        """The input records, those the query keeps."""
        records = read_topic(self.bootstrap, self.topic)
        if self.only_ok:
            schema, store = load_schema("reading"), SchemaStore()
            records = [r for r in records if decode_single_object(r.value, schema, store)["ok"]]
        return Counter((r.key, r.value) for r in records)

    def outputs(self) -> Counter:
        return Counter((r.key, r.value) for r in read_topic(self.bootstrap, self.result))

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()


@pytest.fixture
def pipeline(bootstrap: str, tmp_path: Path, topic_name: str):
    p = Pipeline(bootstrap, tmp_path, topic_name)
    yield p
    p.close()


@pytest.fixture
def filter_pipeline(bootstrap: str, tmp_path: Path, topic_name: str):
    p = Pipeline(bootstrap, tmp_path, topic_name, only_ok=True)
    yield p
    p.close()


def test_one_worker_passes_every_record_exactly_once(pipeline: Pipeline) -> None:
    pipeline.publish(20_000, seed=1)
    worker = pipeline.start("w1")
    pipeline.wait(20_000)
    assert pipeline.outputs() == pipeline.inputs()
    assert sum(pipeline.outputs().values()) == 20_000
    status = worker.status()
    by_agent = {a["agent"]: a for a in status["stats"]["agents"]}
    assert by_agent["ingest.r"]["tuples_in"] == 20_000
    assert by_agent["sink"]["tuples_out"] == 20_000
    assert status["plan"]["output"]["topic"] == pipeline.result
    # the per-interval Stats records on the stats topic add up to the same counts
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        totals = _stats_totals(pipeline)
        if totals.get(("ingest.r", "tuples_in")) == 20_000:
            break
        time.sleep(1)
    assert totals[("ingest.r", "tuples_in")] == 20_000
    assert totals[("sink", "tuples_out")] == 20_000
    assert totals[("passthrough", "tuples_out")] == 20_000


def _stats_totals(pipeline: Pipeline) -> Counter:
    """Sum of the Stats records of this pipeline's query, per (agent, counter)."""
    totals: Counter = Counter()
    for stats in stats_records(pipeline.bootstrap, pipeline.name):
        for counter in ("tuples_in", "tuples_out"):
            totals[(stats["agent"], counter)] += stats[counter]
    return totals


def test_two_workers_share_the_partitions(pipeline: Pipeline) -> None:
    first, second = pipeline.start("w1"), pipeline.start("w2")
    time.sleep(12)  # both join the group before data arrives
    pipeline.publish(30_000, seed=2)
    pipeline.wait(30_000)
    assert pipeline.outputs() == pipeline.inputs()
    ingested = [
        {a["agent"]: a for a in w.status()["stats"]["agents"]}["ingest.r"]["tuples_in"]
        for w in (first, second)
    ]
    assert sum(ingested) == 30_000
    assert all(n > 0 for n in ingested), f"one worker got no partition: {ingested}"


def _stop_mid_stream(pipeline: Pipeline, stop: str) -> int:
    """Publish 40 chunks over ~8 s while the worker runs; stop it half-way; restart it.
    Returns how many results the query must give (the input records it keeps)."""
    worker = pipeline.start("w1")
    pipeline.publish(1_000, seed=100)
    pipeline.wait(sum(pipeline.inputs().values()))  # the worker is up and consuming

    def publish_the_rest() -> None:
        for i in range(39):
            pipeline.publish(1_000, seed=101 + i)
            time.sleep(0.2)

    publisher = threading.Thread(target=publish_the_rest)
    publisher.start()
    time.sleep(4.0)
    in_flight = sum(high_watermarks(pipeline.bootstrap, pipeline.topic).values())
    if stop == "term":
        assert worker.stop() == 0, worker.log_tail()
    else:
        worker.kill()
    assert 1_000 < in_flight < 40_000, "the stop did not land mid-stream"
    pipeline.start("w1-again")
    publisher.join()
    kept = sum(pipeline.inputs().values())
    pipeline.wait(kept)
    return kept


def test_sigterm_mid_stream_then_restart_loses_and_duplicates_nothing(pipeline: Pipeline) -> None:
    _stop_mid_stream(pipeline, "term")
    assert pipeline.outputs() == pipeline.inputs()
    assert sum(pipeline.inputs().values()) == 40_000


def test_a_filter_query_stopped_with_sigterm_is_exact_after_a_restart(
    filter_pipeline: Pipeline,
) -> None:
    kept = _stop_mid_stream(filter_pipeline, "term")
    assert filter_pipeline.outputs() == filter_pipeline.inputs()
    assert sum(filter_pipeline.inputs().values()) == kept


def test_a_filter_query_killed_with_sigkill_loses_nothing(filter_pipeline: Pipeline) -> None:
    _stop_mid_stream(filter_pipeline, "kill")
    inputs, outputs = filter_pipeline.inputs(), filter_pipeline.outputs()
    assert not inputs - outputs, "input records the filter keeps never came out"
    assert set(outputs) == set(inputs)


def test_sigkill_then_restart_keeps_every_record(
    pipeline: Pipeline, record_property: Callable[[str, object], None]
) -> None:
    _stop_mid_stream(pipeline, "kill")
    inputs, outputs = pipeline.inputs(), pipeline.outputs()
    assert sum(inputs.values()) == 40_000
    missing = inputs - outputs
    duplicates = sum((outputs - inputs).values())
    assert not missing, f"{sum(missing.values())} input records never came out"
    assert set(outputs) == set(inputs)
    assert sum(outputs.values()) == sum(inputs.values()) + duplicates
    record_property("sigkill_duplicates", duplicates)
    warnings.warn(
        f"SIGKILL restart: {sum(inputs.values())} in, {sum(outputs.values())} out, "
        f"{duplicates} duplicates (at-least-once re-delivery)",
        stacklevel=1,
    )


def test_malformed_records_go_to_dead_letters_and_the_pipeline_continues(
    pipeline: Pipeline,
) -> None:
    good_header = RecordCodec(load_schema("reading")).encode_one(
        reading_columns(1, seed=5).rows()[0]
    )[:10]
    bad = [b"", b"plain text", b"\xc3\x01" + b"\x00" * 8 + b"\x02", good_header + b"\x80"]
    codec = RecordCodec(load_schema("reading"))
    unkeyed = [codec.encode_one(row) for row in reading_columns(3, seed=32, start_ms=5).rows()]
    pipeline.publish(1_000, seed=30)
    publish_raw(pipeline.bootstrap, pipeline.topic, bad, key=b"bad")
    publish_raw(pipeline.bootstrap, pipeline.topic, unkeyed, key=None)
    pipeline.publish(1_000, seed=31)
    pipeline.start("w1")
    pipeline.wait(2_003)
    outputs = pipeline.outputs()
    assert sum(outputs.values()) == 2_003
    assert outputs == Counter({k: v for k, v in pipeline.inputs().items() if k[0] != b"bad"})
    assert sorted(v for (k, v) in outputs if k is None) == sorted(unkeyed)
    store, schema = SchemaStore(), load_schema("dead_letter")
    letters = [
        decode_single_object(r.value, schema, store)
        for r in read_topic(pipeline.bootstrap, DEAD_LETTER_TOPIC)
    ]
    ours = [d for d in letters if d["source_topic"] == pipeline.topic]
    assert sorted(d["value"] for d in ours) == sorted(bad)
    assert all(d["reason"] and d["stage"] == "ingest.r" for d in ours)
    reasons = {d["value"]: d["reason"] for d in ours}
    assert "single-object" in reasons[b"plain text"] or "marker" in reasons[b"plain text"]
    assert "fingerprint" in reasons[b"\xc3\x01" + b"\x00" * 8 + b"\x02"]


def test_record_written_with_v1_is_read_through_v2(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    pipeline = Pipeline(bootstrap, tmp_path, topic_name, schema="reading_v2")
    try:
        pipeline.publish(500, seed=40)
        pipeline.start("w1")
        pipeline.wait(500)
        v2, store = load_schema("reading_v2"), SchemaStore()
        written = sorted(
            (decode_single_object(r.value, load_schema("reading"), store) for r in
             read_topic(bootstrap, pipeline.topic)),
            key=lambda r: (r["ts"], r["sensor_id"]),
        )  # fmt: skip
        read = sorted(
            (
                decode_single_object(r.value, v2, store)
                for r in read_topic(bootstrap, pipeline.result)
            ),  # fmt: skip
            key=lambda r: (r["ts"], r["sensor_id"]),
        )
        assert len(read) == len(written) == 500
        for old, new in zip(written, read, strict=True):
            assert new["pressure"] == 1013.25 and new["firmware"] == ""
            assert {k: new[k] for k in old} == pytest.approx(old)
    finally:
        pipeline.close()
