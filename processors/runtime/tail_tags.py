"""How many messages of an exactly-once epoch a partition already holds, read from its tail.

Every message sent from an outbox carries the tag ``<agent>/<partition>/<epoch>`` in the
``streamon.eo`` header (:mod:`processors.runtime.exactly_once`); one header object serves a whole
epoch, so tagging costs nothing per message. One producer sends an epoch's messages in order, and
the idempotent producer neither reorders nor repeats them within a partition, so after a crash
each partition holds a prefix of the epoch's messages for it: their count is where a new sending
resumes.

The scan reads the partition backwards in growing windows and stops once nothing of the epoch can
be further back: at a tag of the same unit from an earlier epoch (its messages all precede the
epoch's), at a tag of any unit committed more than :data:`SEND_WINDOW_NS` before the epoch (sent
before it, since a worker that cannot send within its flush timeout stops), or at the log start.
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, TopicPartition

from processors.runtime.kafka_security import KafkaSecurity
from topics.admin import TopicError, assign_consumer

TAG_HEADER = "streamon.eo"
#: an epoch's outputs are sent within the producer's flush timeout of its commit (60 s)
SEND_WINDOW_NS = 90 * 1_000_000_000
FIRST_WINDOW = 2_048


def tag(unit: str, epoch: int) -> bytes:
    return f"{unit}/{epoch}".encode()


def parse_tag(value: bytes) -> tuple[str, int] | None:
    """(unit, epoch) of a tag, or None if ``value`` is not one."""
    try:
        unit, epoch = value.decode().rsplit("/", 1)
        return unit, int(epoch)
    except (UnicodeDecodeError, ValueError):
        return None


def _tags(headers: list[tuple[str, bytes]] | None) -> tuple[str, int] | None:
    for key, value in headers or ():
        if key == TAG_HEADER and value is not None:
            return parse_tag(value)
    return None


def count_written(
    bootstrap: str,
    topic: str,
    partition: int,
    unit: str,
    epoch: int,
    security: KafkaSecurity | None = None,
    timeout: float = 60.0,
) -> int:
    """How many messages of ``unit``'s ``epoch`` ``topic[partition]`` holds."""
    deadline = time.monotonic() + timeout
    found = 0
    with assign_consumer(bootstrap, security) as reader:
        tp = TopicPartition(topic, partition)
        low, high = reader.get_watermark_offsets(tp, timeout=timeout)
        end = _read(reader, topic, partition, max(low, high - 1), None, deadline, None)[0]
        stop_at, window = end, FIRST_WINDOW
        while stop_at > low:
            start = max(low, stop_at - window)
            _, done, count = _read(
                reader, topic, partition, start, stop_at, deadline, (unit, epoch)
            )
            found += count
            if done:
                break
            stop_at, window = start, window * 8
    return found


def _read(
    reader: object,
    topic: str,
    partition: int,
    start: int,
    stop: int | None,
    deadline: float,
    looking: tuple[str, int] | None,
) -> tuple[int, bool, int]:
    """Read ``[start, stop)`` (``stop`` None: to the end). Returns (end offset reached, whether
    nothing of the epoch can be before ``start``, messages of the epoch seen)."""
    reader.assign([TopicPartition(topic, partition, start)])  # type: ignore[attr-defined]
    position, done, count = start, False, 0
    while stop is None or position < stop:
        if time.monotonic() > deadline:
            raise TopicError(f"reading the tail of {topic}[{partition}] timed out at {position}")
        for msg in reader.consume(num_messages=10_000, timeout=0.2):  # type: ignore[attr-defined]
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise TopicError(f"fetch failed for {topic}[{partition}]: {err.str()}")
                return msg.offset(), done, count
            position = msg.offset() + 1
            if stop is not None and msg.offset() >= stop:
                break
            if looking is None:
                continue
            found = _tags(msg.headers())
            if found is None:
                continue
            unit, epoch = found
            if unit == looking[0]:
                if epoch == looking[1]:
                    count += 1
                elif epoch < looking[1]:
                    done = True
            elif epoch < looking[1] - SEND_WINDOW_NS:
                done = True
    return position, done, count
