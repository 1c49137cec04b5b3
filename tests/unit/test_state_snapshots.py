"""Incremental snapshots on the state topic (processors/runtime/state.py), in process: the
producer is a recorder and the topic a list, read back as the worker reads it (backwards from
the end) and, for the compaction cases, compacted as Kafka would (the newest record per key,
deletions dropped).

- A join's state saved after every batch: the bytes written stay near the final state's size
  (whole snapshots would write the sum of every state along the way), and the latest state
  reads back byte for byte, from the log as written and from the compacted log.
- A new owner reads it back, writes it once under its own name and deletes the old owner's
  chunks; a chunk that is missing or a header that is not ours is a clear error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest

from processors.core.batch import Batch, VarColumn
from processors.core.query import Query
from processors.kernels.chunking import chunk_bounds
from processors.physical.runner import QueryRunner
from processors.runtime import state_scan
from processors.runtime.state import StateRestoreError, StateSnapshots
from topics.admin import TopicRecord
from topics.avro import load_schema


class Log:
    """A single-partition topic: what a producer queued, in order."""

    def __init__(self) -> None:
        self.records: list[TopicRecord] = []

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None, **_: object):
        self.records.append(TopicRecord(0, len(self.records), key, value, 0))

    def compacted(self) -> list[TopicRecord]:
        newest: dict[bytes | None, TopicRecord] = {}
        for record in self.records:
            newest[record.key] = record
        return sorted((r for r in newest.values() if r.value is not None), key=lambda r: r.offset)

    def bytes(self) -> int:
        return sum(len(r.value or b"") for r in self.records)


def read_back(monkeypatch: pytest.MonkeyPatch, records: list[TopicRecord]) -> None:
    """The scan reads ``records`` (backwards, in growing windows, as tail_windows gives them)."""

    def windows(*_: object, **__: object) -> Iterator[list[TopicRecord]]:
        stop, size = len(records), 16
        while stop > 0:
            start = max(0, stop - size)
            yield records[start:stop]
            stop, size = start, size * 8

    monkeypatch.setattr(state_scan, "tail_windows", windows)


def readings(n: int, seed: int, start: int) -> Batch:
    rng = np.random.default_rng(seed)
    sites = [f"site-{i}".encode() for i in rng.integers(0, 50, n)]
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in sites])
    columns = {
        "sensor_id": rng.integers(0, 1_000, n).astype(np.int64),
        "ts": start + np.arange(n, dtype=np.int64),
        "temperature": np.round(rng.normal(20, 5, n), 2),
        "humidity": rng.uniform(0, 100, n).astype(np.float32),
        "site": VarColumn(offsets, np.frombuffer(b"".join(sites), np.uint8).copy()),
        "ok": rng.random(n) > 0.3,
    }
    return Batch.inserts(columns, ts=columns["ts"])


def join_runner() -> QueryRunner:
    q = Query("snap")
    for s in ("r", "s"):
        q.stream(s, topic=f"{s}-in", schema=load_schema("reading"), key="sensor_id",
                 timestamp="ts", partitions=1)  # fmt: skip
        q.window(s, range_ms=1_000_000)  # everything stays: the state only grows
    q.join("r.sensor_id", "s.sensor_id")
    q.select(r_ts="r.ts", s_ts="s.ts")
    return QueryRunner(q.into("snap-out").build())


def the_join_state(runner: QueryRunner) -> bytes:
    return runner.chains["mjoin"].snapshot()


@pytest.mark.parametrize("in_pieces", [False, True])
def test_a_growing_join_state_writes_about_its_own_size(monkeypatch, in_pieces: bool) -> None:
    """Saved whole, or piece by piece as the agents save it (``snapshot_parts``: each chain's
    snapshot made when the one before is written)."""
    runner, log = join_runner(), Log()
    store = StateSnapshots("unused:9092", "state", log)  # type: ignore[arg-type]
    sizes = []
    for i in range(40):
        for s in ("r", "s"):
            runner.push(s, readings(2_000, seed=2 * i + (s == "s"), start=i * 2_000))
        data = the_join_state(runner)
        sizes.append(len(data))
        store.save("mjoin", 0, {"t": i}, data)
    final = sizes[-1]
    whole = sum(sizes)
    assert final > 2_000_000  # a state worth chunking: 160,000 tuples
    written = log.bytes()
    assert written == store.saved_bytes
    # 40 saves of a state that grows by 1/40 each time: about the final size, plus the chunks
    # around each array's end rewritten at every save and the headers
    assert written < 1.5 * final, (written, final, whole)
    assert whole > 15 * final  # what whole snapshots would have written

    for records in (log.records, log.compacted()):
        read_back(monkeypatch, records)
        stored = StateSnapshots("unused:9092", "state", Log()).load("mjoin", 0)  # type: ignore[arg-type]
        assert stored is not None
        assert stored.data == data and stored.positions == {"t": 39}
    assert sum(len(r.value or b"") for r in log.compacted()) < 1.1 * final


def test_a_new_owner_writes_the_state_once_and_deletes_the_old_owners_chunks(
    monkeypatch,
) -> None:
    runner, log = join_runner(), Log()
    first = StateSnapshots("unused:9092", "state", log)  # type: ignore[arg-type]
    for i in range(5):
        runner.push("r", readings(3_000, seed=i, start=i * 3_000))
        first.save("mjoin", 0, {"t": i}, the_join_state(runner))
    read_back(monkeypatch, log.records)
    second = StateSnapshots("unused:9092", "state", log)  # type: ignore[arg-type]
    stored = second.load("mjoin", 0)
    assert stored is not None and stored.data == the_join_state(runner)
    old_keys = {r.key for r in log.compacted() if b"/c/" in (r.key or b"")}
    runner.push("s", readings(100, seed=99, start=20_000))
    second.save("mjoin", 0, {"t": 5}, the_join_state(runner))
    compacted = log.compacted()
    live = {r.key for r in compacted if b"/c/" in (r.key or b"")}
    assert live and not live & old_keys  # its own chunks only; the old owner's are deleted
    assert all(second.writer.encode() in key for key in live)
    read_back(monkeypatch, compacted)
    again = StateSnapshots("unused:9092", "state", Log()).load("mjoin", 0)  # type: ignore[arg-type]
    assert again is not None and again.data == the_join_state(runner)


def test_chunk_cuts_follow_content_not_position() -> None:
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 400_000, dtype=np.uint8).tobytes()
    edited = data[:1_000] + b"inserted" + data[1_000:300_000] + data[300_100:]
    before = {data[a:b] for a, b in chunk_bounds(data)}
    after = [edited[a:b] for a, b in chunk_bounds(edited)]
    assert b"".join(after) == edited
    assert sum(piece not in before for piece in after) <= 4  # the two edits' neighbourhoods
    sizes = [b - a for a, b in chunk_bounds(data)]
    assert min(sizes[:-1]) >= 2_048 and max(sizes) <= 65_536
    assert chunk_bounds(b"") == [(0, 0)]
    big = [b - a for a, b in chunk_bounds(bytes(4 << 20), bits=18)]  # no content cut in zeros
    assert max(big) == 512 * 1024 and sum(big) == 4 << 20  # one message each, at most


def test_a_missing_chunk_names_the_snapshot_and_the_chunk(monkeypatch) -> None:
    log = Log()
    store = StateSnapshots("unused:9092", "state", log)  # type: ignore[arg-type]
    store.save("agg", 3, {}, bytes(range(256)) * 400)
    chunk = next(r for r in log.records if b"/c/" in (r.key or b""))
    records = [r for r in log.records if r is not chunk]
    read_back(monkeypatch, records)
    with pytest.raises(StateRestoreError) as info:  # after a second read found it missing too
        StateSnapshots("unused:9092", "state", Log()).load("agg", 3)  # type: ignore[arg-type]
    assert "'agg/3'" in str(info.value) and chunk.key.decode() in str(info.value)
    assert "(0 deleted after it, 1 not in the topic)" in str(info.value)


def test_a_chunk_a_read_skipped_is_found_by_reading_again(monkeypatch, caplog) -> None:
    """A fetch that skips a record that is there (the development broker did, once in a clean
    CI run: a worker taking a partition over stopped on "chunks missing") costs a second read,
    not the worker."""
    log = Log()
    data = bytes(range(256)) * 400
    StateSnapshots("unused:9092", "state", log).save("agg", 3, {"t": 9}, data)  # type: ignore[arg-type]
    chunk = next(r for r in log.records if b"/c/" in (r.key or b""))
    reads = []

    def windows(*_: object, **__: object) -> Iterator[list[TopicRecord]]:
        reads.append(1)
        yield [r for r in log.records if len(reads) > 1 or r is not chunk]

    monkeypatch.setattr(state_scan, "tail_windows", windows)
    stored = StateSnapshots("unused:9092", "state", Log()).load("agg", 3)  # type: ignore[arg-type]
    assert stored is not None and stored.data == data and stored.positions == {"t": 9}
    assert len(reads) == 2 and "the first read skipped some" in caplog.text


def test_a_stateless_units_record_is_its_header_alone(monkeypatch) -> None:
    """No bytes, no chunk: the record of a unit without state (positions and, in exactly-once
    mode, an outbox) depends on no other record of the topic."""
    log = Log()
    store = StateSnapshots("unused:9092", "state", log)  # type: ignore[arg-type]
    for at in (3, 7):
        store.save("ingest.r", 1, {"in": at}, b"")
    assert [r.key for r in log.records] == [b"ingest.r/1", b"ingest.r/1"]
    assert json.loads(log.records[-1].value or b"")["chunks"] == []
    read_back(monkeypatch, log.records)
    stored = StateSnapshots("unused:9092", "state", Log()).load("ingest.r", 1)  # type: ignore[arg-type]
    assert stored is not None and stored.data == b"" and stored.positions == {"in": 7}


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (b"\x80pickle", "not JSON"),
        (json.dumps({"v": 2, "positions": {}, "epoch": 1, "chunks": ["../x"]}), "chunk names"),
        (json.dumps({"v": 2, "positions": {"t": -1}, "epoch": 1, "chunks": []}), "positions"),
        (json.dumps({"positions": {}, "epoch": 1, "chunks": 0}), "chunks (1..1024)"),
    ],
)
def test_a_header_that_is_not_ours_is_refused_with_the_reason(monkeypatch, header, reason):
    value = header if isinstance(header, bytes) else header.encode()
    read_back(monkeypatch, [TopicRecord(0, 0, b"agg/0", value, 0)])
    with pytest.raises(StateRestoreError, match="cannot be restored") as info:
        StateSnapshots("unused:9092", "state", Log()).load("agg", 0)  # type: ignore[arg-type]
    assert reason in str(info.value)


def test_a_first_format_snapshot_is_still_read(monkeypatch) -> None:
    header = json.dumps({"positions": {"t": 4}, "chunks": 2, "epoch": 7}).encode()
    records = [
        TopicRecord(0, 0, b"agg/0/7/0", b"abc", 0),
        TopicRecord(0, 1, b"agg/0/7/1", b"def", 0),
        TopicRecord(0, 2, b"agg/0", header, 0),
    ]
    read_back(monkeypatch, records)
    log = Log()
    store = StateSnapshots("unused:9092", "state", log)  # type: ignore[arg-type]
    stored = store.load("agg", 0)
    assert stored is not None and stored.data == b"abcdef" and stored.positions == {"t": 4}
    store.save("agg", 0, {"t": 5}, b"ghi")
    deleted = {r.key for r in log.records if r.value is None}
    assert deleted == {b"agg/0/7/0", b"agg/0/7/1"}  # the old format's chunks go


def test_a_prefetch_that_finds_no_snapshot_is_not_read_again(monkeypatch) -> None:
    """A rebalance prefetches every unit in one pass; units without a snapshot must not then
    read the topic again one by one (a new query's 24 units took 5 s of the event loop)."""
    passes = []

    def windows(*_: object, **__: object) -> Iterator[list[TopicRecord]]:
        passes.append(1)
        yield []

    monkeypatch.setattr(state_scan, "tail_windows", windows)
    store = StateSnapshots("unused:9092", "state", Log())  # type: ignore[arg-type]
    store.prefetch([("mjoin", p) for p in range(4)])
    assert [store.load("mjoin", p) for p in range(4)] == [None] * 4
    assert len(passes) == 1
    assert store.stats()["restore"] == {
        "done": True, "units": 4, "found": 0, "records": 0, "bytes": 0, "seconds": 0.0,
    }  # fmt: skip
