"""Publishing columnar batches as Avro records (demo, benchmarks, tests, tools)."""

from __future__ import annotations

from processors.core.batch import Batch
from processors.runtime.producer import RecordProducer
from topics.columnar import RecordCodec


def publish_batch(bootstrap: str, topic: str, batch: Batch, schema: dict) -> int:
    """Encode ``batch`` with ``schema`` in bulk and produce one message per tuple; returns n.

    Tuples with keys are partitioned by key hash (murmur2, as Java clients do).
    """
    codec = RecordCodec(schema)
    buf, offsets = codec.encode_many(batch.columns, len(batch))
    producer = RecordProducer(bootstrap)
    try:
        producer.produce_many(topic, buf, offsets, keys=batch.key)
    finally:
        producer.close()
    return len(batch)


def publish_raw(bootstrap: str, topic: str, values: list[bytes], key: bytes | None = None) -> None:
    """Produce raw message values as they are (for example malformed input, in tests)."""
    producer = RecordProducer(bootstrap)
    try:
        for value in values:
            producer.produce(topic, value, key=key)
    finally:
        producer.close()
