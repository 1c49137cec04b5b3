"""``streamon bench spark``: rows/s Spark reads from a topic, next to a raw consumer's rate.

All in one run on one broker and one topic (``records`` Avro readings over 4 partitions):

- ``raw_consumer_rate``: one confluent-kafka consumer reading every partition, values touched,
  nothing decoded (the ceiling of a single Python client here);
- ``raw_2_consumers_rate``: two such consumers in two processes, two partitions each (the
  parallelism local[2] has);
- ``rows_per_s``: ``spark.read.format("streamon")`` in local[2], an aggregate over every
  column family (count, a sum over a double, the signs), best of ``repeats`` after a warm-up;
- ``decode_rows_per_s``: the executor's decoding alone (bulk Avro to Arrow), in process.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import platform
import time
import uuid
from typing import Any

from processors.commands.publish import publish_batch
from processors.runtime.config import load_settings, resolve_bootstrap
from processors.workloads.examples import reading_columns
from topics.admin import ensure_topics, high_watermarks
from topics.avro import load_schema
from topics.specs import TopicSpec

PARTITIONS = 4


def _say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def raw_consume(bootstrap: str, topic: str, parts: list[int], ends: dict[int, int]) -> tuple:
    """Read ``parts`` to their ends with one consumer: (records, first fetch time, end time)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from processors.runtime.kafka_security import client_config
    from spark_bridge.kafka_range import consumer_config

    consumer = Consumer(client_config(consumer_config(bootstrap, True, {})))
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    seen, nbytes, started = 0, 0, 0.0
    pending = {p for p in parts if ends[p] > 0}
    try:
        while pending:
            msgs = consumer.consume(num_messages=65_536, timeout=1.0)
            if msgs and not started:
                started = time.perf_counter()
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"raw consumer: {err.str()}")
                    continue
                seen += 1
                nbytes += len(m.value())
                if m.offset() >= ends[m.partition()] - 1:
                    pending.discard(m.partition())
        return seen, started, time.perf_counter()
    finally:
        consumer.close()


def _raw_worker(args: tuple) -> tuple:
    return raw_consume(*args)


def raw_rates(bootstrap: str, topic: str, ends: dict[int, int]) -> tuple[float, float]:
    """(one consumer, two consumers in two processes) records/s over the whole topic."""
    total = sum(ends.values())
    seen, t0, t1 = raw_consume(bootstrap, topic, sorted(ends), ends)
    assert seen == total, f"raw consumer read {seen} of {total} records"
    one = seen / (t1 - t0)
    halves = [sorted(ends)[0::2], sorted(ends)[1::2]]
    with mp.get_context("spawn").Pool(2) as pool:
        results = pool.map(_raw_worker, [(bootstrap, topic, h, ends) for h in halves])
    seen2 = sum(r[0] for r in results)
    assert seen2 == total, f"two raw consumers read {seen2} of {total} records"
    two = seen2 / (max(r[2] for r in results) - min(r[1] for r in results))
    return one, two


def decode_rate(bootstrap: str, topic: str, end: int) -> float:
    """Rows/s of the executor's decoding alone, over partition 0 read into memory first."""
    from spark_bridge.arrow_decode import ChunkDecoder
    from spark_bridge.kafka_range import read_range
    from spark_bridge.schema import arrow_schema, spark_schema

    schema = load_schema("reading")
    decoder = ChunkDecoder(schema, None, arrow_schema(spark_schema(schema)))
    chunks = list(read_range(bootstrap, topic, 0, None, end))
    rows, started = 0, time.perf_counter()
    for c in chunks:
        batch, bad = decoder.decode(c.topic, c.partition, c.values, c.keys, c.offsets,
                                    c.timestamps_ms, c.signs, c.errors)  # fmt: skip
        assert not bad
        rows += batch.num_rows
    return rows / (time.perf_counter() - started)


def run_spark_bench(records: int = 1_000_000, repeats: int = 3) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from spark_bridge import read_topic, spark_session

    logging.getLogger("py4j").setLevel(logging.WARNING)
    bootstrap = resolve_bootstrap(load_settings())
    topic = f"bench-spark-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS)])
    step = 250_000
    for i in range(0, records, step):
        batch = reading_columns(min(step, records - i), seed=i, start_ms=1_700_000_000_000 + i)
        publish_batch(bootstrap, topic, batch, load_schema("reading"))
    ends = high_watermarks(bootstrap, topic)
    assert sum(ends.values()) == records, f"topic holds {sum(ends.values())} of {records}"
    _say(f"{records} readings on {topic} ({PARTITIONS} partitions)")
    decode = decode_rate(bootstrap, topic, ends[0])
    _say(f"decode alone (bulk Avro -> Arrow, one core): {decode:,.0f} rows/s")
    started = time.perf_counter()
    spark = spark_session("local[2]", app_name="streamon-bench-spark")
    session_s = time.perf_counter() - started
    _say(f"Spark session local[2] up in {session_s:.1f}s")
    try:
        warm = read_topic(spark, topic, bootstrap, schema="reading", connector="python",
                          ending={p: min(e, 5000) for p, e in ends.items()})  # fmt: skip
        warm.count()
        df = read_topic(spark, topic, bootstrap, schema="reading", connector="python")
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            row = df.agg(F.count(F.lit(1)), F.sum("temperature"), F.sum("_sign")).collect()[0]
            times.append(time.perf_counter() - t0)
            assert row[0] == records and row[2] == records, f"Spark read {row[0]} of {records}"
            rate = records / times[-1]
            _say(f"Spark read {records} rows in {times[-1]:.2f}s: {rate:,.0f} rows/s")
    finally:
        spark.stop()
    raw_one, raw_two = raw_rates(bootstrap, topic, ends)
    _say(f"raw confluent-kafka consumer: {raw_one:,.0f} records/s; "
         f"two consumers in two processes: {raw_two:,.0f} records/s")  # fmt: skip
    rows_per_s = records / min(times)
    result = {
        "records": records,
        "partitions": PARTITIONS,
        "master": "local[2]",
        "rows_per_s": rows_per_s,
        "rows_per_s_runs": [records / t for t in times],
        "raw_consumer_rate": raw_one,
        "raw_2_consumers_rate": raw_two,
        "spark_vs_raw": rows_per_s / raw_one,
        "spark_vs_raw_2_consumers": rows_per_s / raw_two,
        "decode_rows_per_s": decode,
        "session_start_s": session_s,
        "machine": f"{platform.machine()}, {mp.cpu_count()} cores, {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
    }
    _say(f"spark_vs_raw = {result['spark_vs_raw']:.2f} "
         f"(vs two raw consumers: {result['spark_vs_raw_2_consumers']:.2f})")  # fmt: skip
    return result
