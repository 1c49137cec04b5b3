"""Where Spark's official Kafka connector is installed: read with it, decode the same way.

``spark.read.format("kafka")`` yields key, value, topic, partition, offset, timestamp and (with
``includeHeaders``) headers; :func:`decode_kafka_batches` turns its Arrow batches into the same
columns the ``streamon`` source gives, with the same decoder and bad-record policy. End offsets
are still passed explicitly, from fetch high watermarks, because "latest" comes from ListOffsets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_bridge.arrow_decode import BadRecordError, ChunkDecoder
from spark_bridge.bad_records import MAX_SAMPLES
from spark_bridge.kafka_range import SIGN_HEADER, parse_sign
from spark_bridge.options import OptionError, ReadOptions
from spark_bridge.schema import arrow_schema
from spark_bridge.source import OffsetRange

KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def kafka_connector_available(spark: Any) -> bool:
    """Whether the JVM can load Spark's Kafka source (the spark-sql-kafka jar is present)."""
    try:
        jvm = spark.sparkContext._jvm
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(KAFKA_PROVIDER, False, loader)
        return True
    except Exception:  # Py4JJavaError (ClassNotFoundException), no JVM (Spark Connect), ...
        return False


def connector_options(opts: ReadOptions, ranges: tuple[OffsetRange, ...]) -> dict[str, str]:
    """Options of ``format("kafka")`` for exactly the planned offset ranges."""
    topic = opts.topic
    start = {str(r.partition): -2 if r.start is None else r.start for r in ranges}
    end = {str(r.partition): r.end for r in ranges}
    options = {
        "kafka.bootstrap.servers": opts.bootstrap,
        "assign": json.dumps({topic: [r.partition for r in ranges]}),
        "startingOffsets": json.dumps({topic: start}),
        "endingOffsets": json.dumps({topic: end}),
        "includeHeaders": "true",
        "failOnDataLoss": "true",
    }
    options.update({f"kafka.{k}": v for k, v in jvm_client_settings(opts.consumer).items()})
    return options


_JAAS = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def jvm_client_settings(consumer: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings (the ``kafka.*`` options) in the Java client's spelling, for Spark's
    Kafka source: SASL credentials become a JAAS line, the CA file a PEM trust store."""
    out = {k: v for k, v in consumer.items() if not k.startswith(("sasl.", "ssl."))}
    mechanism = consumer.get("sasl.mechanism")
    if mechanism is not None:
        if mechanism not in _JAAS:
            raise OptionError(
                f"option kafka.sasl.mechanism {mechanism}: not supported with connector 'kafka'; "
                "use connector 'python'"
            )
        out["sasl.mechanism"] = mechanism
        user = json.dumps(consumer.get("sasl.username", ""))
        secret = json.dumps(consumer.get("sasl.password", ""))
        out["sasl.jaas.config"] = f"{_JAAS[mechanism]} required username={user} password={secret};"
    if "ssl.certificate.location" in consumer or "ssl.key.location" in consumer:
        raise OptionError(
            "options kafka.ssl.certificate.location/kafka.ssl.key.location: client certificates "
            "are not supported with connector 'kafka'; use connector 'python'"
        )
    if "ssl.ca.location" in consumer:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = consumer["ssl.ca.location"]
    algorithm = consumer.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = "" if algorithm == "none" else algorithm
    return out


def header_signs(headers: pa.ListArray) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """Per row, the sign its ``streamon.sign`` header gives (+1 without), and bad headers."""
    n = len(headers)
    signs = np.ones(n, np.int8)
    errors: list[tuple[int, str]] = []
    if n == 0 or headers.null_count == n:
        return signs, errors
    flat = pc.list_flatten(headers)
    if len(flat) == 0:
        return signs, errors
    parents = np.asarray(pc.list_parent_indices(headers))
    names = flat.field("key")
    hits = np.flatnonzero(np.asarray(pc.fill_null(pc.equal(names, SIGN_HEADER), False)))
    values = flat.field("value")
    for j in hits.tolist():
        sign = parse_sign([(SIGN_HEADER, values[j].as_py())])
        row = int(parents[j])
        if isinstance(sign, str):
            errors.append((row, sign))
        else:
            signs[row] = sign
    return signs, errors


def decode_kafka_batches(
    reader_schema: dict, registry: str | None, target: Any, on_bad_record: str, skipped_log: Any
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: Kafka source batches -> decoded record batches."""
    target_arrow = arrow_schema(target)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        decoder = ChunkDecoder(reader_schema, registry, target_arrow)
        for raw in batches:
            for topic, partition, part in _by_partition(raw):
                stamps = part.column("timestamp").cast(pa.int64())
                ms = np.asarray(pc.fill_null(stamps, -1000)) // 1000
                signs, header_errors = header_signs(part.column("headers"))
                offsets = np.asarray(part.column("offset"), np.int64)
                batch, bad = decoder.decode(
                    topic, partition, part.column("value"), part.column("key"), offsets,
                    ms, signs, header_errors,
                )  # fmt: skip
                if bad:
                    if on_bad_record == "fail":
                        raise BadRecordError(bad)
                    if skipped_log is not None:
                        key = (topic, partition, int(offsets[0]), int(offsets[-1]) + 1)
                        samples = tuple((b.offset, b.reason) for b in bad[:MAX_SAMPLES])
                        skipped_log.add({key: (len(bad), samples)})
                if batch.num_rows:
                    yield batch

    return run


def _by_partition(batch: pa.RecordBatch) -> Iterator[tuple[str, int, pa.RecordBatch]]:
    """Runs of one topic-partition (a Kafka source task reads one, but do not rely on it)."""
    if batch.num_rows == 0:
        return
    topics = batch.column("topic")
    parts = np.asarray(batch.column("partition"), np.int64)
    change = np.flatnonzero(
        (parts[1:] != parts[:-1]) | ~np.asarray(pc.equal(topics[1:], topics[:-1]))
    )
    bounds = [0, *(change + 1).tolist(), batch.num_rows]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        yield topics[lo].as_py(), int(parts[lo]), batch.slice(lo, hi - lo)


def read_with_connector(spark: Any, opts: ReadOptions, reader_schema: dict,
                        ranges: tuple[OffsetRange, ...]) -> Any:  # fmt: skip
    """The planned ranges through ``format("kafka")``, decoded to the streamon columns."""
    from spark_bridge.schema import spark_schema

    target = spark_schema(reader_schema)
    raw = spark.read.format("kafka").options(**connector_options(opts, ranges)).load()
    log = getattr(spark.sparkContext, "_streamon_skipped", None)
    fn = decode_kafka_batches(reader_schema, opts.registry, target, opts.on_bad_record, log)
    return raw.mapInArrow(fn, target)
