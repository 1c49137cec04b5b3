"""Read one topic-partition offset range with confluent-kafka, in chunks of raw messages.

Runs on Spark executors (no Spark here): assign-only, never commits, stops exactly at the end
offset the driver planned (taken from fetch high watermarks, see :mod:`topics.admin`). Values
and keys come back as Arrow binary arrays, so the bulk Avro decoder reads their buffers without
another copy; only the sign header is looked at per message, and only when a message has headers.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from topics.admin import TopicError

SIGN_HEADER = "streamon.sign"  # the result sink's header on deletes (processors.runtime.producer)
_KAFKA_LOG = logging.getLogger("streamon.spark.kafka")


@dataclass
class RawChunk:
    """Consecutive messages of one partition, column by column."""

    topic: str
    partition: int
    values: pa.BinaryArray  # null for a null (tombstone) value
    keys: pa.BinaryArray  # null for messages without a key
    offsets: np.ndarray  # int64 Kafka offsets
    timestamps_ms: np.ndarray  # int64 Kafka timestamps
    signs: np.ndarray  # int8: -1 with a ``streamon.sign: -1`` header, else +1
    errors: list[tuple[int, str]] = field(default_factory=list)  # (index, reason): bad headers

    def __len__(self) -> int:
        return len(self.offsets)


def parse_sign(headers: list[tuple[str, bytes | None]]) -> int | str:
    """The sign a message's headers give it (+1 without the header), or a reason it has none."""
    for name, value in headers:
        if name == SIGN_HEADER:
            if value == b"-1":
                return -1
            if value in (b"1", b"+1"):
                return 1
            return f"header {SIGN_HEADER} is {value!r}, expected b'-1' or b'+1'"
    return 1


def consumer_config(bootstrap: str, explicit_start: bool, extra: Mapping[str, str]) -> dict:
    """An assign-only consumer tuned for bulk reads of stored data."""
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"streamon-spark-{uuid.uuid4().hex}",  # required by the client, never used
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        # an explicit start offset that is gone (retention) must fail, not silently move on
        "auto.offset.reset": "error" if explicit_start else "earliest",
        "fetch.wait.max.ms": 50,
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
        "queued.min.messages": 200_000,
        "queued.max.messages.kbytes": 256 * 1024,
        "logger": _KAFKA_LOG,
    }
    config.update(extra)
    return config


def _chunk(topic: str, partition: int, msgs: list[Message]) -> RawChunk:
    values = pa.array([m.value() for m in msgs], pa.binary())
    keys = pa.array([m.key() for m in msgs], pa.binary())
    offsets = np.array([m.offset() for m in msgs], np.int64)
    stamps = np.array([m.timestamp()[1] for m in msgs], np.int64)
    signs = np.ones(len(msgs), np.int8)
    errors: list[tuple[int, str]] = []
    headers = [m.headers() for m in msgs]
    for i, h in enumerate(headers):
        if h:
            sign = parse_sign(h)
            if isinstance(sign, str):
                errors.append((i, sign))
            else:
                signs[i] = sign
    return RawChunk(topic, partition, values, keys, offsets, stamps, signs, errors)


def read_range(
    bootstrap: str,
    topic: str,
    partition: int,
    start: int | None,
    end: int,
    *,
    max_rows: int = 65_536,
    timeout_s: float = 60.0,
    extra: Mapping[str, str] | None = None,
) -> Iterator[RawChunk]:
    """Messages ``start`` (None: the log start) to ``end`` (exclusive) of ``topic[partition]``.

    Raises TopicError when the range cannot be read whole: a start offset no longer stored, a
    fetch error, or no progress for ``timeout_s`` (the message says how far it got).
    """
    if start is not None and start >= end:
        return
    consumer = Consumer(consumer_config(bootstrap, start is not None, extra or {}))
    where = f"{topic}[{partition}]"
    try:
        first = OFFSET_BEGINNING if start is None else start
        consumer.assign([TopicPartition(topic, partition, first)])
        position = start
        last_progress = time.monotonic()
        while True:
            msgs = consumer.consume(num_messages=max_rows, timeout=0.5)
            if not msgs:
                if time.monotonic() - last_progress > timeout_s:
                    raise TopicError(
                        f"reading {where} offsets {start}..{end}: no progress for {timeout_s:.0f}s "
                        f"(next offset {position}); is the broker up?"
                    )
                continue
            last_progress = time.monotonic()
            done = False
            if any(m.error() is not None for m in msgs):
                good = []
                for m in msgs:
                    err = m.error()
                    if err is None:
                        good.append(m)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        done = done or m.offset() >= end  # gaps (compaction) end it too
                    else:
                        raise TopicError(f"reading {where} at offset {position}: {err.str()}")
                msgs = good
            if msgs and msgs[-1].offset() >= end - 1:
                done = True
                last = len(msgs)
                while last and msgs[last - 1].offset() >= end:
                    last -= 1
                msgs = msgs[:last]
            if msgs:
                position = msgs[-1].offset() + 1
                yield _chunk(topic, partition, msgs)
            if done:
                return
    finally:
        consumer.close()
