"""What tansu 0.6.0 does with Kafka transactions, checked so that a change is noticed.

streamon's exactly-once mode does not use broker transactions because tansu accepts them but
shows aborted records to ``read_committed`` readers (docs/reliability.md). If this test starts
failing, tansu has changed: the finding in docs/reliability.md needs revisiting.
"""

from __future__ import annotations

import time

import confluent_kafka as ck

from topics.admin import ensure_topics
from topics.specs import TopicSpec


def read_all(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"tx-{isolation}-{time.time_ns()}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(msg.error())
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_tansu_accepts_transactions_but_shows_aborted_records_to_read_committed(
    bootstrap: str, topic_name: str
) -> None:
    ensure_topics(bootstrap, [TopicSpec(topic_name, 1)])
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": topic_name})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic_name, b"committed")
    producer.commit_transaction(20)
    producer.begin_transaction()
    producer.produce(topic_name, b"aborted")
    producer.flush(20)
    producer.abort_transaction(20)
    producer.begin_transaction()
    producer.produce(topic_name, b"committed later")
    producer.commit_transaction(20)

    # Apache Kafka would give [b"committed", b"committed later"]
    assert read_all(bootstrap, topic_name, "read_committed") == [
        b"committed",
        b"aborted",
        b"committed later",
    ]
