"""``streamon bench ingest``: how fast records move through streamon, next to its baselines.

All in one run on one broker:

- ``raw_consumer_rate``: an aiokafka consumer reading the input topic (the ceiling for any
  Python consumer here);
- ``faust_plain_rate``: a stock Faust agent forwarding one record per event;
- ``pipeline_rate``: streamon's worker, ingest -> pass-through -> sink, measured from the
  produce timestamps of the first and last result records;
- ``envelope_tuples_per_s``: a stock Faust agent hopping batch envelopes (decode, stage, encode);
- ``fetch_runs_vs_objects``: in process, a fetch response made into a block of values as
  column runs (:mod:`processors.runtime.fetch_runs`) against aiokafka's record objects.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.publish import publish_batch
from processors.core.batch import Batch
from processors.runtime.config import load_settings, resolve_bootstrap
from processors.runtime.producer import RecordProducer
from processors.workloads.examples import reading_columns
from topics.admin import ensure_topics, read_topic
from topics.avro import load_schema
from topics.envelope import encode_batch
from topics.specs import TopicSpec

PARTITIONS = 4
QUERY = """\
from processors.workloads.examples import readings_passthrough
query = readings_passthrough(topic={topic!r}, result={result!r}, name={name!r}, partitions={p})
query.processing_guarantee({guarantee!r})
"""


def _say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


async def _raw_rate(bootstrap: str, topic: str, count: int) -> float:
    from aiokafka import AIOKafkaConsumer

    from processors.runtime.kafka_security import aiokafka_auth

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        **aiokafka_auth(),
        group_id=None,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=8 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
    )
    await consumer.start()
    try:
        seen, started = 0, 0.0
        while seen < count:
            fetched = await consumer.getmany(timeout_ms=1000, max_records=20_000)
            if fetched and not started:
                started = time.perf_counter()
            seen += sum(len(records) for records in fetched.values())
        return seen / (time.perf_counter() - started)
    finally:
        await consumer.stop()


def _run_faust_app(kind: str, bootstrap: str, topic: str, out: str, count: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "processors.bench.faust_apps",
        kind,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--out",
        out,
        "--count",
        str(count),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    for line in proc.stdout.splitlines() + proc.stderr.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise RuntimeError(
        f"bench app {kind} gave no result:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    )


def _pipeline_rate(
    bootstrap: str,
    state_dir: Path,
    topic: str,
    count: int,
    run: str,
    guarantee: str = "at_least_once",
) -> float:
    result = f"{topic}-{guarantee}-out"
    query_file = state_dir / "bench" / f"{run}.py"
    query_file.parent.mkdir(parents=True, exist_ok=True)
    query_file.write_text(
        QUERY.format(topic=topic, result=result, name=run, p=PARTITIONS, guarantee=guarantee)
    )
    worker = WorkerProcess(
        query_file, bootstrap=bootstrap, state_dir=state_dir, worker_id=run, loglevel="warn"
    )
    try:
        seen = wait_for_count(bootstrap, result, count, timeout=600, workers=[worker])
        if seen < count:
            raise RuntimeError(f"pipeline delivered {seen} of {count}; see {worker.log_path}")
    finally:
        worker.stop()
    # produce timestamps of the results: first to last, start-up and group join excluded
    stamps = sorted(r.timestamp_ms for r in read_topic(bootstrap, result))
    return (len(stamps) - 1) / max((stamps[-1] - stamps[0]) / 1000.0, 1e-3)


def _envelope_rate(bootstrap: str, topic: str, envelopes: int, tuples_per_envelope: int) -> float:
    ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS), TopicSpec(f"{topic}-out", PARTITIONS)])
    payload = encode_batch(reading_columns(tuples_per_envelope, seed=3))
    producer = RecordProducer(bootstrap)
    for i in range(envelopes):
        producer.produce(topic, payload, partition=i % PARTITIONS)
    producer.close()
    result = _run_faust_app("envelope", bootstrap, topic, f"{topic}-out", envelopes)
    return float(result["tuples_per_s"])


def _ingest_unit_rates(records: int = 200_000, unit: int = 5_000) -> tuple[float, float]:
    """In process, the ingest agent's work per unit of records: bulk decode and envelope
    encoding, then the same with routing by sensor_id into 4 partitions and event-time tags
    (what a keyed query's ingest does). Tuples/s of each, best of 3 passes."""
    from processors.physical.steps import IngestRoute
    from processors.stages.merge_stage import tag
    from topics.columnar import RecordCodec
    from topics.envelope import encode_envelopes

    codec = RecordCodec(load_schema("reading"))
    batch = reading_columns(unit, seed=5)
    buf, offsets = codec.encode_many(batch.columns, unit)
    route = IngestRoute(PARTITIONS, ("sensor_id",), progress=True)

    def plain() -> None:
        decoded = Batch.inserts(codec.decode_many(buf, offsets).columns, batch.ts)
        encode_envelopes(decoded)

    def routed() -> None:
        decoded = Batch.inserts(codec.decode_many(buf, offsets).columns, batch.ts)
        for _, part in route.split([decoded], 0):
            encode_envelopes(tag(part, 0, int(part.ts.max()), 0))

    rates = []
    for work in (plain, routed):
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            for _ in range(records // unit):
                work()
            best = min(best, time.perf_counter() - started)
        rates.append(records / best)
    return rates[0], rates[1]


def _fetch_read_rates(records: int = 200_000, per_batch: int = 500) -> tuple[float, float]:
    """In process, a partition's fetch response made into a block of packed values: through
    aiokafka's record objects (what Faust's consumer did), then as column runs
    (:mod:`processors.runtime.fetch_runs`). Records/s of each, best of 3 passes."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder
    from aiokafka.structs import TopicPartition

    from processors.runtime import fetch_runs
    from processors.runtime.record_block import RecordBlock
    from topics.columnar import RecordCodec

    batch = reading_columns(per_batch, seed=7)
    buf, offsets = RecordCodec(load_schema("reading")).encode_many(batch.columns, per_batch)
    values = [bytes(buf[offsets[i] : offsets[i + 1]]) for i in range(per_batch)]
    parts = []
    for base in range(0, records, per_batch):
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 22)
        for i, value in enumerate(values):
            builder.append(i, timestamp=1_000 + i, key=None, value=value, headers=[])
        raw = bytearray(builder.build())
        raw[0:8] = base.to_bytes(8, "big")  # the batch's base offset (not in its checksum)
        parts.append(bytes(raw))
    response = b"".join(parts)
    tp = TopicPartition("bench-fetch", 0)
    fetch_runs.install([tp.topic])

    def objects() -> None:
        it = fetch_runs._ORIGINAL_PARTITION_RECORDS(
            tp, fetch_runs.KeptRecords(response), None, 0, None, None, True, 0
        )
        got = list(it)
        RecordBlock(tp.topic, 0, [r.offset for r in got], [r.timestamp for r in got],
                    [r.key for r in got], [r.value for r in got]).packed_values()  # fmt: skip

    def runs() -> None:
        it = fetch_runs.RunPartitionRecords(
            tp, fetch_runs.KeptRecords(response), None, 0, None, None, True, 0
        )
        fetch_runs.block_of(tp.topic, 0, list(it)).packed_values()

    rates = []
    for work in (objects, runs):
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            work()
            best = min(best, time.perf_counter() - started)
        rates.append(records / best)
    return rates[0], rates[1]


def run_ingest_bench(records: int = 500_000, plain_records: int = 30_000) -> dict[str, Any]:
    settings = load_settings()
    bootstrap = resolve_bootstrap(settings)
    run = f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    topic = f"{run}.readings"
    ensure_topics(
        bootstrap, [TopicSpec(topic, PARTITIONS), TopicSpec(f"{topic}-plain", PARTITIONS)]
    )
    _say(f"broker {bootstrap}; publishing {records} readings to {topic}")
    publish_batch(bootstrap, topic, reading_columns(records, seed=11), load_schema("reading"))

    raw = asyncio.run(_raw_rate(bootstrap, topic, records))
    _say(f"raw aiokafka consumer: {raw:,.0f} records/s")
    plain = float(
        _run_faust_app("plain", bootstrap, topic, f"{topic}-plain", plain_records)["rate"]
    )
    _say(f"plain Faust agent (first {plain_records} records): {plain:,.0f} records/s")
    pipeline = _pipeline_rate(bootstrap, settings.state_dir, topic, records, run)
    _say(f"streamon ingest -> pass-through -> sink: {pipeline:,.0f} records/s")
    exactly = _pipeline_rate(
        bootstrap, settings.state_dir, topic, records, f"{run}-eo", "exactly_once"
    )
    _say(f"the same, exactly-once: {exactly:,.0f} records/s")
    envelope = _envelope_rate(bootstrap, f"{run}.envelopes", 4000, 1000)
    _say(f"envelope hop (1,000 tuples per envelope): {envelope:,.0f} tuples/s")
    envelope_5k = _envelope_rate(bootstrap, f"{run}.envelopes5k", 1000, 5000)
    _say(f"envelope hop (5,000 tuples per envelope): {envelope_5k:,.0f} tuples/s")
    fetch_objects, fetch_runs_rate = _fetch_read_rates()
    _say(f"a fetch response to a block, in process: {fetch_objects:,.0f} records/s through "
         f"record objects, {fetch_runs_rate:,.0f} as column runs")  # fmt: skip
    unit_plain, unit_routed = _ingest_unit_rates()
    _say(f"ingest unit in process: {unit_plain:,.0f} tuples/s; routed by key into "
         f"{PARTITIONS} partitions: {unit_routed:,.0f} tuples/s")  # fmt: skip

    results = {
        "records": records,
        "raw_consumer_rate": raw,
        "faust_plain_rate": plain,
        "pipeline_rate": pipeline,
        "pipeline_rate_exactly_once": exactly,
        "exactly_once_vs_at_least_once": exactly / pipeline,
        "envelope_tuples_per_s": envelope,
        "envelope_tuples_per_s_5000": envelope_5k,
        "pipeline_vs_raw": pipeline / raw,
        "pipeline_vs_faust_plain": pipeline / plain,
        "ingest_unit_tuples_per_s": unit_plain,
        "ingest_unit_routed_tuples_per_s": unit_routed,
        "routed_vs_plain_ingest_unit": unit_routed / unit_plain,
        "fetch_objects_records_per_s": fetch_objects,
        "fetch_runs_records_per_s": fetch_runs_rate,
        "fetch_runs_vs_objects": fetch_runs_rate / fetch_objects,
    }
    _print_table(results)
    return results


def _print_table(results: dict[str, Any]) -> None:
    print()
    print(f"{'measure':<26}{'value':>16}")
    for key, value in results.items():
        shown = f"{value:,.2f}" if isinstance(value, float) and value < 100 else f"{value:,.0f}"
        print(f"{key:<26}{shown:>16}")
