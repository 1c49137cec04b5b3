"""The dead-letter topic: bad input is set aside with its reason, never dropped silently."""

from __future__ import annotations

import logging
import time

from processors.runtime.producer import RecordProducer
from topics.avro import encode_single_object, load_schema

log = logging.getLogger(__name__)

DEAD_LETTER_SCHEMA = "dead_letter"


class DeadLetters:
    """Writes ``streamon.DeadLetter`` records (source position, raw bytes, reason)."""

    def __init__(self, producer: RecordProducer, topic: str, worker_id: str) -> None:
        self._producer = producer
        self.topic = topic
        self._worker_id = worker_id
        self._schema = load_schema(DEAD_LETTER_SCHEMA)
        self.count = 0

    def send(
        self,
        *,
        source_topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
        stage: str,
    ) -> None:
        record = {
            "source_topic": source_topic,
            "partition": partition,
            "offset": offset,
            "key": key,
            "value": value or b"",
            "reason": reason,
            "stage": stage,
            "worker": self._worker_id,
            "failed_at_ms": int(time.time() * 1000),
        }
        self._producer.produce(self.topic, encode_single_object(self._schema, record), key=key)
        self.count += 1
        if self.count <= 10 or self.count % 1000 == 0:
            log.warning(
                "dead letter #%d from %s[%d]@%d (stage %s): %s",
                self.count,
                source_topic,
                partition,
                offset,
                stage,
                reason,
            )
