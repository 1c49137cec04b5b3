"""The dead-letter topic: bad input is set aside with its reason, never dropped silently.

A dead letter must never fail for its size: librdkafka refuses messages over
``message.max.bytes`` (1,000,000 by default), and a dead letter carries its input's value (and
key, twice: in the record and as the message key) plus headers. Values, keys and reasons over
their limits are therefore cut, and the reason says so with the original size; the source
topic, partition and offset always point at the whole record.
"""

from __future__ import annotations

import logging
import time

from processors.runtime.producer import RecordProducer
from topics.avro import encode_single_object, load_schema

log = logging.getLogger(__name__)

DEAD_LETTER_SCHEMA = "dead_letter"

#: Most bytes of an input value a dead letter keeps (leaves room under librdkafka's 1,000,000
#: bytes for the key, twice, the reason and the other fields).
MAX_VALUE_BYTES = 512 * 1024
#: Most bytes of an input key a dead letter keeps (it is written twice).
MAX_KEY_BYTES = 64 * 1024
#: Most characters of a reason.
MAX_REASON_CHARS = 16 * 1024
#: What a dead letter keeps of its value when the producer refused it anyway.
FALLBACK_VALUE_BYTES = 1024


class DeadLetterError(RuntimeError):
    """A dead letter could not be queued at all: its input must not be committed."""


def _cut(data: bytes | None, limit: int) -> tuple[bytes | None, int | None]:
    """``data`` cut to ``limit`` bytes, and its original size when it was cut."""
    if data is None or len(data) <= limit:
        return data, None
    return data[:limit], len(data)


class DeadLetters:
    """Writes ``streamon.DeadLetter`` records (source position, raw bytes, reason)."""

    def __init__(
        self,
        producer: RecordProducer,
        topic: str,
        worker_id: str,
        max_value_bytes: int = MAX_VALUE_BYTES,
        max_key_bytes: int = MAX_KEY_BYTES,
    ) -> None:
        self._producer = producer
        self.topic = topic
        self._worker_id = worker_id
        self._schema = load_schema(DEAD_LETTER_SCHEMA)
        self.max_value_bytes = max_value_bytes
        self.max_key_bytes = max_key_bytes
        self.count = 0

    def _encode(
        self,
        source_topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
        stage: str,
        value_limit: int,
    ) -> tuple[bytes, bytes | None]:
        """The encoded record and its message key, both within their limits."""
        cut_value, value_size = _cut(value or b"", value_limit)
        cut_key, key_size = _cut(key, self.max_key_bytes)
        notes = []
        if value_size is not None:
            notes.append(
                f"value truncated to its first {len(cut_value or b'')} of {value_size} bytes"
            )
        if key_size is not None:
            notes.append(f"key truncated to its first {len(cut_key or b'')} of {key_size} bytes")
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[:MAX_REASON_CHARS] + f"... ({len(reason)} characters)"
        if notes:
            reason = f"{reason} [{'; '.join(notes)}]"
        record = {
            "source_topic": source_topic,
            "partition": partition,
            "offset": offset,
            "key": cut_key,
            "value": cut_value,
            "reason": reason,
            "stage": stage,
            "worker": self._worker_id,
            "failed_at_ms": int(time.time() * 1000),
        }
        return encode_single_object(self._schema, record), cut_key

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
        """Queue one dead letter; :class:`DeadLetterError` if even a cut-down one is refused."""
        where = (source_topic, partition, offset)
        try:
            payload, msg_key = self._encode(*where, key, value, reason, stage, self.max_value_bytes)
            self._producer.produce(self.topic, payload, key=msg_key)
        except Exception as exc:  # refused (size, a bad topic, ...): try once more, smaller
            log.warning("dead letter from %s[%d]@%d refused (%r); sending it cut down",
                        *where, exc)  # fmt: skip
            try:
                payload, msg_key = self._encode(
                    *where, key, value, f"{reason} (first dead letter refused: {exc!r})",
                    stage, FALLBACK_VALUE_BYTES,
                )  # fmt: skip
                self._producer.produce(self.topic, payload, key=msg_key)
            except Exception as again:
                raise DeadLetterError(
                    f"dead letter from {source_topic}[{partition}]@{offset} could not be "
                    f"written: {again!r}"
                ) from again
        self.count += 1
        if self.count <= 10 or self.count % 1000 == 0:
            log.warning(
                "dead letter #%d from %s[%d]@%d (stage %s): %s",
                self.count, source_topic, partition, offset, stage, reason[:1000],
            )  # fmt: skip
