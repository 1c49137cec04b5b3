"""Embedded broker lifecycle and topic admin helpers against a real tansu broker."""

from __future__ import annotations

import json
import socket
import subprocess
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from processors.runtime import broker as broker_mod
from processors.runtime.broker import (
    BrokerError,
    BrokerInfo,
    broker_status,
    start_broker,
    stop_broker,
)
from topics.admin import (
    TopicError,
    TopicRecord,
    committed_offsets,
    consumer_lag,
    ensure_topics,
    high_watermarks,
    iter_topic,
    read_topic,
    sample_partition,
)
from topics.specs import TopicSpec

pytestmark = pytest.mark.integration

N_BATCHED = 10_000


def _produce(bootstrap: str, topic: str, records: list[dict], linger_ms: int = 5) -> list[Message]:
    """Produce ``records`` (kwargs of Producer.produce) and return their delivery reports."""
    delivered: list[Message] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        delivered.append(msg)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms})
    for rec in records:
        producer.produce(topic, on_delivery=on_delivery, **rec)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert len(delivered) == len(records)
    return delivered


@pytest.fixture(scope="module")
def batched_topic(bootstrap: str) -> tuple[str, dict[int, int]]:
    """10k keyed records over 3 partitions, produced with batching; (topic, count per partition)."""
    topic = f"it-batched-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, [TopicSpec(topic, partitions=3)])
    reports = _produce(
        bootstrap, topic, [{"key": b"k%d" % i, "value": b"v%d" % i} for i in range(N_BATCHED)]
    )
    counts = Counter(msg.partition() for msg in reports)
    ends = {p: max(m.offset() for m in reports if m.partition() == p) + 1 for p in counts}
    assert ends == dict(counts), "delivered offsets are not contiguous from 0"
    return topic, dict(counts)


# --- broker lifecycle ------------------------------------------------------------------------


def test_start_status_reuse_stop(tmp_path: Path) -> None:
    info = start_broker(tmp_path)
    try:
        assert isinstance(info, BrokerInfo) and info.bootstrap == f"127.0.0.1:{info.port}"
        record = json.loads((tmp_path / "broker.json").read_text())
        assert record == {"pid": info.pid, "port": info.port, "bootstrap": info.bootstrap}
        assert info.log_path.read_text().startswith("tansu broker 0.6.0")
        assert broker_status(tmp_path) == info
        assert start_broker(tmp_path) == info  # reused, not a second process
        with pytest.raises(BrokerError, match=f"already runs on port {info.port}"):
            start_broker(tmp_path, port=info.port + 1)
    finally:
        assert stop_broker(tmp_path) is True
    assert broker_status(tmp_path) is None
    assert not (tmp_path / "broker.json").exists()
    assert stop_broker(tmp_path) is False


def test_stale_or_foreign_pid_is_cleaned_and_never_signalled(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    record = {"pid": dead.pid, "port": 1, "bootstrap": "127.0.0.1:1"}
    (tmp_path / "broker.json").write_text(json.dumps(record))
    assert broker_status(tmp_path) is None
    assert not (tmp_path / "broker.json").exists()

    foreign = subprocess.Popen(["sleep", "30"])  # alive, but not tansu (a reused pid)
    try:
        (tmp_path / "broker.json").write_text(json.dumps({**record, "pid": foreign.pid}))
        assert stop_broker(tmp_path) is False
        assert foreign.poll() is None
    finally:
        foreign.kill()
        foreign.wait()


def test_port_taken_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(BrokerError, match=f"port {port} is already in use"):
            start_broker(tmp_path, port=port)
    assert not (tmp_path / "broker.json").exists()


def test_broker_that_exits_early_names_its_log(
    tmp_path: Path, broker_info: BrokerInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Skip our own port check: tansu itself then fails to bind, and exits with status 0.
    monkeypatch.setattr(broker_mod, "_port_in_use", lambda _port: False)
    with pytest.raises(BrokerError, match=r"exited with status 0 .*broker\.log.*AddrInUse"):
        start_broker(tmp_path, port=broker_info.port, timeout=10)
    assert not (tmp_path / "broker.json").exists()


# --- topics ----------------------------------------------------------------------------------


def test_ensure_topics_is_idempotent_and_checks_partitions(bootstrap: str, topic_name: str) -> None:
    spec = TopicSpec(topic_name, partitions=3, compacted=True, retention_ms=60_000)
    assert spec.kafka_config() == {"cleanup.policy": "compact", "retention.ms": "60000"}
    assert ensure_topics(bootstrap, [spec]) == [topic_name]
    assert ensure_topics(bootstrap, [spec, spec]) == []

    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert len(admin.list_topics(topic_name, timeout=5).topics[topic_name].partitions) == 3
    resource = ConfigResource("topic", topic_name)
    configs = admin.describe_configs([resource])[resource].result()
    assert configs["cleanup.policy"].value == "compact"

    with pytest.raises(TopicError, match=f"{topic_name} exists with 3 partitions.*needs 5"):
        ensure_topics(bootstrap, [TopicSpec(topic_name, partitions=5)])
    assert ensure_topics(bootstrap, [TopicSpec(topic_name, partitions=2)]) == []  # more is fine


def test_high_watermarks_are_exact_after_batched_produce(
    bootstrap: str, batched_topic: tuple[str, dict[int, int]]
) -> None:
    topic, counts = batched_topic
    assert high_watermarks(bootstrap, topic) == counts
    assert sum(counts.values()) == N_BATCHED


def test_list_offsets_alone_undercounts_on_tansu(
    bootstrap: str, batched_topic: tuple[str, dict[int, int]]
) -> None:
    """Evidence that high_watermarks handles a real quirk (DESIGN.md, tansu quirk 1)."""
    topic, counts = batched_topic
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lo-{uuid.uuid4().hex}"})
    try:
        listed = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
            for p in counts
        }
    finally:
        consumer.close()
    assert all(0 < listed[p] <= counts[p] for p in counts)
    assert sum(listed.values()) < N_BATCHED, (
        "tansu's ListOffsets now reports true end offsets; update DESIGN.md's quirk list"
    )


def test_read_topic_returns_exactly_what_was_produced(bootstrap: str, topic_name: str) -> None:
    ensure_topics(bootstrap, [TopicSpec(topic_name, partitions=3)])
    assert read_topic(bootstrap, topic_name) == []
    records = [
        {
            "key": None if i % 7 == 0 else b"k%d" % i,
            "value": None if i % 11 == 0 else b"v%d" % i,
            "headers": [("n", b"%d" % i)] if i % 3 == 0 else None,
            "timestamp": 1_700_000_000_000 + i,
            "partition": i % 3,
        }
        for i in range(2_000)
    ]
    reports = _produce(bootstrap, topic_name, records)
    # Delivery reports carry no headers: take them from what was sent (values are unique ids).
    sent = {rec["timestamp"]: rec for rec in records}
    expected = sorted(
        (
            TopicRecord(
                m.partition(),
                m.offset(),
                m.key(),
                m.value(),
                m.timestamp()[1],
                tuple(sent[m.timestamp()[1]]["headers"] or ()),
            )
            for m in reports
        ),
        key=lambda r: (r.partition, r.offset),
    )
    assert read_topic(bootstrap, topic_name) == expected


def test_read_topic_after_batched_produce_is_complete(
    bootstrap: str, batched_topic: tuple[str, dict[int, int]]
) -> None:
    topic, counts = batched_topic
    got = read_topic(bootstrap, topic)
    assert len(got) == N_BATCHED
    for part, count in counts.items():
        assert [r.offset for r in got if r.partition == part] == list(range(count))
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(N_BATCHED))


def test_a_partition_is_sampled_in_runs_of_offsets_and_one_partition_read_alone(
    bootstrap: str, batched_topic: tuple[str, dict[int, int]]
) -> None:
    topic, counts = batched_topic
    part = max(counts, key=lambda p: counts[p])
    n = counts[part]
    every = [r.offset for r in read_topic(bootstrap, topic) if r.partition == part]
    got = [r.offset for r in sample_partition(bootstrap, topic, part, chunk=7, stride=50)]
    assert got == [o for o in every if o % 50 < 7] and got[-1] < n
    alone = [r.offset for r in iter_topic(bootstrap, topic, partitions=[part])]
    assert alone == list(range(n))
    with pytest.raises(ValueError, match="chunk"):
        next(sample_partition(bootstrap, topic, part, chunk=60, stride=50))


def test_consumer_lag_after_group_commits_part(bootstrap: str, topic_name: str) -> None:
    ensure_topics(bootstrap, [TopicSpec(topic_name, partitions=3)])
    _produce(bootstrap, topic_name, [{"value": b"x", "partition": i % 3} for i in range(300)])
    group = f"g-{topic_name}"
    assert committed_offsets(bootstrap, group, topic_name) == {}
    assert consumer_lag(bootstrap, group, topic_name) == {0: 100, 1: 100, 2: 100}

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    try:
        consumer.subscribe([topic_name])
        seen = 0
        while seen == 0:  # joins the group (classic protocol) and fetches
            seen += sum(1 for m in consumer.consume(100, timeout=1.0) if m.error() is None)
        part = [TopicPartition(topic_name, 0, 40), TopicPartition(topic_name, 1, 100)]
        consumer.commit(offsets=part, asynchronous=False)
    finally:
        consumer.close()
    assert committed_offsets(bootstrap, group, topic_name) == {0: 40, 1: 100}
    assert consumer_lag(bootstrap, group, topic_name) == {0: 60, 1: 0, 2: 100}


def test_missing_topic_is_a_topic_error(bootstrap: str, topic_name: str) -> None:
    with pytest.raises(TopicError, match="does not exist"):
        high_watermarks(bootstrap, topic_name)
