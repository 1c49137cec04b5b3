"""Per-record output to external topics with confluent-kafka (librdkafka).

Faust's own producer costs several µs of Python per message, which caps a sink at tens of
thousands of records/s; librdkafka batches in C. Results and dead letters therefore go through
this producer, and the worker's consumer flushes it before every offset commit
(:mod:`processors.runtime.faust_bulk`), so an input offset is committed only after the outputs
it caused are acknowledged by the broker.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import confluent_kafka
import numpy as np

from processors.core.batch import VarColumn
from processors.runtime.kafka_security import KafkaSecurity, client_config

log = logging.getLogger(__name__)

SIGN_HEADER = "streamon.sign"
#: how long a flush waits for a broker that is away before the worker gives up (exit 75)
OUTAGE_PATIENCE_S = 120.0
#: how often a waiting flush says so
WAIT_STEP_S = 5.0
_DELETE_HEADERS = [(SIGN_HEADER, b"-1")]


class DeliveryError(RuntimeError):
    """The broker did not acknowledge some output records; offsets must not be committed."""


class RecordProducer:
    """Produces many single-record messages per call; delivery is checked at :meth:`flush`."""

    def __init__(
        self,
        bootstrap: str,
        extra: dict[str, object] | None = None,
        security: KafkaSecurity | None = None,
    ) -> None:
        """``security``: TLS/SASL settings (default: the process's, see kafka_security)."""
        config: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "partitioner": "murmur2_random",  # same key -> partition mapping as Java clients
            "acks": "all",
            # retries must neither reorder a partition (later stages rely on its order) nor
            # duplicate a record
            "enable.idempotence": True,
            "delivery.report.only.error": True,
            "on_delivery": self._on_delivery,
            # librdkafka's log lines go through Python logging (quiet_logs holds repeats back)
            "logger": logging.getLogger("streamon.kafka"),
            # longer than the outage patience: records are retried while the broker is away
            "message.timeout.ms": int(OUTAGE_PATIENCE_S * 1000) + 60_000,
        }
        config.update(extra or {})
        self._producer = confluent_kafka.Producer(client_config(config, security))
        self._failures: list[str] = []
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="record-producer", daemon=True)
        self._poller.start()

    def _on_delivery(self, err: object, msg: object) -> None:
        if err is not None:
            self._failures.append(f"{msg.topic()}[{msg.partition()}]: {err}")  # type: ignore[attr-defined]

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.1)

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """One message; ``timestamp_ms`` (default: now) is its Kafka timestamp. Envelopes carry
        the arrival time of the oldest tuple they hold, so that the next agent knows how long
        its input has waited (scheduling by latency, output latency at the sink)."""
        kwargs: dict[str, object] = {"key": key}
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        if headers:
            kwargs["headers"] = headers
        self._produce(topic, value, kwargs)

    def _produce(self, topic: str, value: bytes, kwargs: dict[str, object]) -> None:
        while True:
            try:
                self._producer.produce(topic, value, **kwargs)
                return
            except BufferError:  # local queue full: let librdkafka drain, then retry
                self._producer.poll(0.05)

    def produce_tagged(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        partition: int,
        timestamp_ms: int | None,
        headers: list[tuple[str, bytes]],
    ) -> None:
        """One message with ``headers`` (the exactly-once send path: no per-call dict)."""
        try:
            if timestamp_ms is None:
                self._producer.produce(topic, value, key, partition, headers=headers)
            else:
                self._producer.produce(
                    topic, value, key, partition, timestamp=timestamp_ms, headers=headers
                )
        except BufferError:
            kwargs: dict[str, object] = {"key": key, "partition": partition, "headers": headers}
            if timestamp_ms is not None:
                kwargs["timestamp"] = timestamp_ms
            self._produce(topic, value, kwargs)

    def produce_many(
        self,
        topic: str,
        buf: np.ndarray,
        offsets: np.ndarray,
        keys: VarColumn | None = None,
        partition: int | None = None,
        signs: np.ndarray | None = None,
    ) -> None:
        """One message per slice ``buf[offsets[i]:offsets[i+1]]``; deletes get a sign header.

        With keys, librdkafka picks partitions by key hash; without, ``partition`` is used.
        Records carry the produce time as their timestamp (output latency is measured by it).
        """
        values = buf.tobytes()
        bounds = offsets.tolist()
        n = len(bounds) - 1
        if n <= 0:
            return
        produce = self._producer.produce
        key_bytes = keys.data.tobytes() if keys is not None else b""
        key_bounds = keys.offsets.tolist() if keys is not None else None
        deletes = set(np.flatnonzero(signs < 0).tolist()) if signs is not None else set()
        part = -1 if (keys is not None or partition is None) else partition
        for i in range(n):
            key = key_bytes[key_bounds[i] : key_bounds[i + 1]] if key_bounds is not None else None
            value = values[bounds[i] : bounds[i + 1]]
            try:
                if deletes and i in deletes:
                    produce(topic, value, key, part, headers=_DELETE_HEADERS)
                else:
                    produce(topic, value, key, part)
            except BufferError:
                kwargs: dict[str, object] = {"key": key, "partition": part}
                if i in deletes:
                    kwargs["headers"] = _DELETE_HEADERS
                self._produce(topic, value, kwargs)

    def flush_blocking(self, timeout: float = OUTAGE_PATIENCE_S) -> None:
        """Wait until every produced record is acknowledged; raise DeliveryError otherwise.

        A broker that is away (restarting, cut off) is waited for, up to ``timeout`` seconds,
        with one warning every few seconds: librdkafka keeps retrying the records meanwhile
        (``message.timeout.ms``, longer than the patience), so nothing is lost or reordered."""
        started = time.monotonic()
        deadline = started + timeout
        remaining = self._producer.flush(min(WAIT_STEP_S, timeout))
        while remaining:
            waited = time.monotonic() - started
            if time.monotonic() >= deadline:
                raise DeliveryError(f"{remaining} records not acknowledged within {timeout:.0f}s")
            log.warning("the broker has not acknowledged %d records for %.0f s; waiting up to "
                        "%.0f s for it to come back", remaining, waited, timeout)  # fmt: skip
            remaining = self._producer.flush(min(WAIT_STEP_S, max(deadline - time.monotonic(), 0)))
        if time.monotonic() - started > WAIT_STEP_S:
            log.warning("the broker is back: every record acknowledged after %.0f s",
                        time.monotonic() - started)  # fmt: skip
        if self._failures:
            failures, self._failures = self._failures, []
            raise DeliveryError(f"{len(failures)} records failed: {failures[:3]}")

    async def flush(self, timeout: float = OUTAGE_PATIENCE_S) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.flush_blocking, timeout)

    def close(self, timeout: float = 30.0) -> None:
        try:
            self.flush_blocking(timeout)
        finally:
            self._stop.set()
            self._poller.join(timeout=1.0)
