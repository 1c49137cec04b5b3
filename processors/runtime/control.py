"""The control topic: scheduler decisions and operator commands that every worker applies.

Records are ``streamon.Control`` (schemas/control.avsc). Three kinds matter here:

- ``POLICY``: a user (``streamon control policy ...``) changes a query's scheduling policy;
- ``PRIORITIES``: the query's scheduler agent publishes the scheduling plan (operator paths and
  their measured time per tuple and selectivity) with the policy in force; every worker's
  arbiter builds the policy from it;
- ``SHED``: the share of each input stream the drop boxes keep (the query's shedding
  controller, or ``streamon control shed``; :mod:`processors.runtime.shedding`).

Agents in a Faust app share their input partitions across the query's workers, but *every*
worker must see every control record. So the control topic is read by a plain confluent-kafka
consumer assigned to its partitions (no group), from the beginning (the topic is small), and
polled without blocking from the worker's event loop.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from processors.runtime.kafka_security import KafkaSecurity, client_config
from topics.avro import SchemaStore, decode_single_object, encode_single_object, load_schema

log = logging.getLogger(__name__)

CONTROL_SCHEMA = "control"
CONTROL_TOPIC = "streamon.control"
POLICY = "POLICY"
PRIORITIES = "PRIORITIES"
SHED = "DROP_RATES"  # the schema's kind for drop-box shares (SHED records, in the docs)


def control_key(query: str, kind: str) -> bytes:
    """The Kafka key of a control record: one per query and kind, so that compaction keeps each
    query's latest policy and latest plan (and a restarted worker reads little)."""
    return f"{query}/{kind}".encode()


def control_topic_spec() -> Any:
    from topics.specs import TopicSpec

    return TopicSpec(CONTROL_TOPIC, 1, compacted=True)


@dataclass(frozen=True)
class ControlRecord:
    kind: str
    query: str
    stage: str
    payload: dict[str, Any]
    issued_at_ms: int
    issuer: str
    seq: int


def encode_control(
    kind: str, query: str, payload: dict[str, Any], issuer: str, seq: int = 0, stage: str = ""
) -> bytes:
    """A Control record as single-object Avro."""
    record = {
        "kind": kind,
        "query": query,
        "stage": stage,
        "payload": json.dumps(payload, sort_keys=True),
        "issued_at_ms": int(time.time() * 1000),
        "issuer": issuer,
        "seq": seq,
    }
    return encode_single_object(load_schema(CONTROL_SCHEMA), record)


def decode_control(value: bytes, store: SchemaStore) -> ControlRecord:
    """A Control record; ValueError names what is wrong with a bad one."""
    record = decode_single_object(value, load_schema(CONTROL_SCHEMA), store)
    try:
        payload = json.loads(record["payload"] or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"control payload is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise ValueError("control payload must be a JSON object")
    return ControlRecord(
        record["kind"], record["query"], record["stage"], payload,
        record["issued_at_ms"], record["issuer"], record["seq"],
    )  # fmt: skip


class ControlReader:
    """Reads the control topic from the beginning and hands each record for ``query`` (or for
    every query) to ``apply``, in order. Call :meth:`poll` often; it never blocks."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        query: str,
        apply: Callable[[ControlRecord], None],
        security: KafkaSecurity | None = None,
    ) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.query = query
        self._apply = apply
        self._store = SchemaStore()
        self._consumer = Consumer(
            client_config(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"streamon-control-{query}",  # required; never joins or commits
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": 100,
                    "logger": logging.getLogger("streamon.kafka"),
                },
                security,
            )
        )
        metadata = self._consumer.list_topics(topic, timeout=10.0).topics.get(topic)
        partitions = sorted(metadata.partitions) if metadata and metadata.partitions else [0]
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self.applied = 0
        self.rejected = 0

    def poll(self, max_records: int = 500) -> int:
        """Apply what has arrived; returns how many records were applied."""
        applied = 0
        for message in self._consumer.consume(num_messages=max_records, timeout=0):
            if message.error() is not None or message.value() is None:
                continue
            try:
                record = decode_control(message.value(), self._store)
            except Exception as exc:
                self.rejected += 1
                log.warning("control record at offset %d ignored: %s", message.offset(), exc)
                continue
            if record.query not in ("", self.query):
                continue
            try:
                self._apply(record)
            except Exception:
                self.rejected += 1
                log.exception("control record %s from %s not applied", record.kind, record.issuer)
                continue
            applied += 1
        self.applied += applied
        return applied

    def close(self) -> None:
        self._consumer.close()


#: the POLICY payload key that puts a query back on its query file's ``schedule()``
RESET_TO_QUERY = "reset_to_query"
#: the policy name, on the command line, for that
QUERY_POLICY = "query"


def publish_policy(
    bootstrap: str,
    query: str,
    policy: str,
    settings: dict[str, Any],
    issuer: str,
    security: KafkaSecurity | None = None,
) -> Any:
    """Publish a POLICY record for ``query`` on the control topic (checked first: a policy or
    setting that makes no sense is refused here, with its name, rather than by every worker).

    The record stays in force, across restarts, until the next one: policy ``"query"`` puts the
    workers back on the query file's ``schedule()``. Returns the new config (None for that)."""
    from confluent_kafka import Producer

    from processors.core.scheduling.config import SchedulingConfig, SchedulingConfigError
    from topics.admin import ensure_topics

    if policy == QUERY_POLICY:  # back to what the query file says (the record replaces the last)
        if settings:
            raise ValueError(f"scheduling policy for {query}: '{QUERY_POLICY}' takes no settings")
        config, payload = None, {RESET_TO_QUERY: True}
    else:
        try:
            config = SchedulingConfig.from_mapping({"policy": policy, **settings})
        except (SchedulingConfigError, TypeError) as exc:
            raise ValueError(f"scheduling policy for {query}: {exc}") from exc
        payload = {"policy": policy, **settings}
    ensure_topics(bootstrap, [control_topic_spec()], security=security)
    producer = Producer(client_config({"bootstrap.servers": bootstrap, "acks": "all"}, security))
    producer.produce(
        CONTROL_TOPIC,
        encode_control(POLICY, query, payload, issuer),
        key=control_key(query, POLICY),
    )
    if producer.flush(10.0):
        raise ValueError(f"the control record for {query} was not acknowledged by {bootstrap}")
    return config


def publish_shed(
    bootstrap: str,
    query: str,
    keep: dict[str, float],
    reason: str,
    issuer: str,
    security: KafkaSecurity | None = None,
) -> None:
    """Publish a SHED record for ``query``: the drop boxes keep ``keep`` of each named stream
    (the others all); ``{}`` lifts them. It stays in force until the next SHED record (the
    query's controller, if it has one, publishes its own when the load changes)."""
    from confluent_kafka import Producer

    from topics.admin import ensure_topics

    bad = {s: v for s, v in keep.items() if not 0.0 <= v <= 1.0}
    if bad:
        raise ValueError(f"drop boxes of {query}: shares must be in [0, 1], got {bad}")
    ensure_topics(bootstrap, [control_topic_spec()], security=security)
    producer = Producer(client_config({"bootstrap.servers": bootstrap, "acks": "all"}, security))
    payload = {"keep": keep, "reason": reason}
    producer.produce(CONTROL_TOPIC, encode_control(SHED, query, payload, issuer),
                     key=control_key(query, SHED))  # fmt: skip
    if producer.flush(10.0):
        raise ValueError(f"the control record for {query} was not acknowledged by {bootstrap}")
