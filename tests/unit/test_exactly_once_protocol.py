"""The exactly-once commit protocol in process: what a commit writes, in which order, what a
restart sends again, and what a revoked unit drops. The broker side (tails, real crashes) is
tests/faults; here the producer and the state store are small recorders of our own classes'
interfaces, so the protocol's steps can be checked exactly, and the state store is the real
one over a recorded topic where two workers' records meet."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from test_state_snapshots import Log, read_back

from processors.core.batch import VarColumn
from processors.runtime import exactly_once as eo_module
from processors.runtime.exactly_once import REVOKED_FLOOR, ExactlyOnce
from processors.runtime.outbox import Outbox
from processors.runtime.state import StateSnapshots, StoredSnapshot


class Recorder:
    """Stands in for RecordProducer: records what is produced and each flush."""

    def __init__(self) -> None:
        self.log: list[tuple] = []

    def produce(self, topic, value, key=None, partition=None, timestamp_ms=None, headers=None):
        self.log.append(("produce", topic, value, key, partition))

    def produce_tagged(self, topic, value, key, partition, timestamp_ms, headers):
        self.log.append(("send", topic, value, key, partition, dict(headers)))

    def produce_many(self, *args: Any, **kwargs: Any) -> None:
        self.log.append(("produce_many", args[0]))

    async def flush(self) -> None:
        self.log.append(("flush",))

    def flush_blocking(self) -> None:
        self.log.append(("flush",))


class Store:
    """Stands in for StateSnapshots: keeps the records saved, serves them back."""

    def __init__(self, producer: Recorder) -> None:
        self.producer = producer
        self.records: dict[tuple[str, int], StoredSnapshot] = {}
        self.sent: set[tuple[str, int, int]] = set()
        self.loads: list[tuple[str, int]] = []

    def save(self, agent, partition, positions, data, outbox=b"", epoch=None) -> int:
        self.producer.log.append(("record", agent, partition, dict(positions)))
        where = ("state", 0, 0, f"{agent}/{partition}")
        self.records[(agent, partition)] = StoredSnapshot(
            dict(positions), data, where, epoch or 0, outbox
        )
        return len(data)

    def note_sent(self, agent, partition, epoch) -> None:
        self.sent.add((agent, partition, epoch))

    def load(self, agent, partition):
        self.loads.append((agent, partition))
        stored = self.records.get((agent, partition))
        if stored is None:
            return None
        sent = (agent, partition, stored.epoch) in self.sent
        return StoredSnapshot(
            stored.positions, stored.data, stored.where, stored.epoch, stored.outbox, sent
        )

    def prefetch(self, keys) -> None:
        pass


def protocol() -> tuple[ExactlyOnce, Recorder, Store]:
    producer = Recorder()
    store = Store(producer)
    eo = ExactlyOnce(producer, store, "unused:9092")  # type: ignore[arg-type]
    eo.register("ingest.r", ["in"])
    eo._counts["out"] = 4  # the result topic's partitions, as metadata would say
    return eo, producer, store


def test_a_commit_stores_the_record_before_anything_is_sent() -> None:
    eo, producer, _ = protocol()
    with eo.unit("ingest.r", 1):
        eo.produce("env", b"a", partition=1)
        eo.produce("env", b"b", partition=0)
    eo.done("ingest.r", 1, "in", 17)
    assert producer.log == []  # nothing leaves before the commit
    asyncio.run(eo.commit())
    kinds = [entry[0] for entry in producer.log]
    assert kinds == ["record", "flush", "send", "send", "flush"]
    assert producer.log[0] == ("record", "ingest.r", 1, {"in": 17})
    tags = {entry[5][eo_module.TAG_HEADER] for entry in producer.log if entry[0] == "send"}
    assert len(tags) == 1 and next(iter(tags)).startswith(b"ingest.r/1/")
    assert eo.committed == {("in", 1): 17}
    assert eo.cap(type("TP", (), {"topic": "in", "partition": 1})()) == 17
    assert eo.cap(type("TP", (), {"topic": "streamon.stats", "partition": 0})()) is None


def test_outside_a_unit_output_goes_straight_out() -> None:
    eo, producer, _ = protocol()
    eo.produce("streamon.stats", b"s")
    assert producer.log == [("produce", "streamon.stats", b"s", None, None)]


def test_keyed_results_get_kafkas_partition_in_the_outbox() -> None:
    eo, producer, store = protocol()
    keys = VarColumn.from_values([b"21", b"foobar", b"abc"], utf8=False)
    buf = np.frombuffer(b"xyz", np.uint8)
    with eo.unit("ingest.r", 0):
        eo.produce_many("out", buf, np.array([0, 1, 2, 3], np.int64), keys, 0, None)
    eo.done("ingest.r", 0, "in", 3)
    asyncio.run(eo.commit())
    sent = [(entry[2], entry[4]) for entry in producer.log if entry[0] == "send"]
    # Kafka's murmur2 of the keys (its test vectors), modulo 4 partitions
    want = [((h & 0x7FFFFFFF) % 4) for h in (-973932308, -790332482, 479470107)]
    assert sent == list(zip([b"x", b"y", b"z"], want, strict=True))


def test_a_restart_sends_again_only_what_each_partition_lacks(monkeypatch) -> None:
    eo, producer, store = protocol()
    box = Outbox()
    for i in range(5):
        box.add("env", b"p0-%d" % i, None, 0, None)
        box.add("env", b"p1-%d" % i, None, 1, None)
    where = ("state", 0, 0, "ingest.r/1")
    store.records[("ingest.r", 1)] = StoredSnapshot({"in": 40}, b"", where, 99, box.encode())
    # the crashed sender got 3 messages into partition 0 and all 5 into partition 1
    already = {("env", 0): 3, ("env", 1): 5}
    monkeypatch.setattr(
        eo_module, "count_written", lambda _b, topic, q, unit, epoch, _s: already[(topic, q)]
    )
    assert eo.floor("ingest.r", "in", 1) == 40
    sent = [entry[2] for entry in producer.log if entry[0] == "send"]
    assert sent == [b"p0-3", b"p0-4"]
    assert eo.stats() == {"epochs": 0, "resent": 2, "found_sent": 8}
    # loaded once per holding: a second look sends nothing more
    assert eo.load("ingest.r", 1) is not None and len(producer.log) == 3


def test_a_unit_known_to_have_sent_its_epoch_sends_nothing_again(monkeypatch) -> None:
    eo, producer, store = protocol()
    with eo.unit("ingest.r", 2):
        eo.produce("env", b"a", partition=2)
    eo.done("ingest.r", 2, "in", 5)
    asyncio.run(eo.commit())
    asyncio.run(eo.commit())  # the "sent" note goes out with a later flush
    again, producer2, _ = protocol()
    again.snapshots = store
    store.producer = producer2

    def no_scan(*_: Any) -> int:
        raise AssertionError("no tail scan for an epoch noted as sent")

    monkeypatch.setattr(eo_module, "count_written", no_scan)
    assert again.floor("ingest.r", "in", 2) == 5
    assert producer2.log == []


def test_revoked_units_drop_what_they_did_after_their_last_commit() -> None:
    eo, producer, store = protocol()
    with eo.unit("ingest.r", 3):
        eo.produce("env", b"late", partition=3)
    eo.done("ingest.r", 3, "in", 9)
    eo.forget([type("TP", (), {"topic": "in", "partition": 3})()])
    asyncio.run(eo.commit())
    assert producer.log == [] and ("ingest.r", 3) not in store.records


def tp(partition: int) -> Any:
    return type("TP", (), {"topic": "in", "partition": partition})()


def test_a_revoked_partition_is_not_worked_on_until_it_is_assigned_again() -> None:
    """An agent may still hold a block of a partition it took before the rebalance: its input
    is all skipped, its record is not read, what it does anyway is dropped."""
    eo, producer, store = protocol()
    eo.forget([tp(3)])
    assert eo.floor("ingest.r", "in", 3) == REVOKED_FLOOR
    with eo.unit("ingest.r", 3):
        eo.produce("env", b"zombie", partition=3)
    eo.done("ingest.r", 3, "in", 9)
    asyncio.run(eo.commit())
    assert producer.log == [] and store.records == {} and store.loads == []
    eo.assigned([tp(3)])
    assert eo.floor("ingest.r", "in", 3) == 0  # reads its (absent) record: a unit again
    eo.done("ingest.r", 3, "in", 12)
    asyncio.run(eo.commit())
    assert store.records[("ingest.r", 3)].positions == {"in": 12}


def test_a_revoked_workers_late_block_leaves_the_new_owners_state_whole(monkeypatch) -> None:
    """The CI failure of stop 40: the old owner of a partition worked on a block it had taken
    before the rebalance, read the new owner's record, saved over it (older positions, an
    outbox the new owner redoes) and deleted the new owner's chunk; the new owner's next
    header named that chunk (it believed it stored), and the next restore stopped the worker
    on a missing chunk. The real state store here, over one recorded topic: the old worker
    writes nothing, and the record read back is the new owner's."""
    topic = Log()
    read_back(monkeypatch, topic.records)
    workers = []
    for _ in range(2):
        store = StateSnapshots("unused:9092", "state", topic)  # type: ignore[arg-type]
        eo = ExactlyOnce(Recorder(), store, "unused:9092")  # type: ignore[arg-type]
        eo.register("ingest.r", ["in"])
        workers.append(eo)
    old, new = workers
    old.done("ingest.r", 1, "in", 10)
    asyncio.run(old.commit())
    old.forget([tp(1)])  # the rebalance: the partition moves to the new worker
    assert new.floor("ingest.r", "in", 1) == 10
    new.done("ingest.r", 1, "in", 20)
    asyncio.run(new.commit())
    # the old worker's agent works on the block it took before the rebalance
    with old.unit("ingest.r", 1):
        old.produce("env", b"late", partition=1)
    old.done("ingest.r", 1, "in", 15)
    written = len(topic.records)
    asyncio.run(old.commit())
    assert len(topic.records) == written  # nothing of the old worker's reaches the topic
    new.done("ingest.r", 1, "in", 30)
    asyncio.run(new.commit())
    stored = StateSnapshots("unused:9092", "state", Log()).load("ingest.r", 1)  # type: ignore[arg-type]
    assert stored is not None and stored.positions == {"in": 30}
