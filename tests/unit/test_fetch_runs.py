"""Fetched record batches read as column runs (processors.runtime.fetch_runs) give exactly the
records aiokafka's own reader gives: the client is the oracle. Also the contract with the
aiokafka internals the module relies on."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from aiokafka.consumer import fetcher as aiokafka_fetcher
from aiokafka.record._crc32c import crc as crc32c
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy as Builder
from aiokafka.structs import TopicPartition

from processors.runtime import fetch_runs
from processors.runtime.fetch_runs import KeptRecords, RecordRun, RunPartitionRecords
from processors.runtime.record_block import RecordBlock

TOPIC = "runs-in"
READ_COMMITTED = aiokafka_fetcher.READ_COMMITTED
CODEC_GZIP = 1
_Original = fetch_runs._ORIGINAL_PARTITION_RECORDS


def batch(records, base=0, compression=0, producer_id=-1, transactional=0, control=False,
          log_append_ts=None):  # type: ignore[no-untyped-def]  # fmt: skip
    """A v2 record batch's bytes: ``records`` is a list of (timestamp, key, value, headers)."""
    b = Builder(2, compression, transactional, producer_id, 0 if producer_id >= 0 else -1,
                -1 if producer_id < 0 else 0, 1 << 20)  # fmt: skip
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, timestamp=ts, key=key, value=value, headers=headers)
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, base)
    attributes = struct.unpack_from(">h", raw, 21)[0]
    if control:
        attributes |= 0x20
    if log_append_ts is not None:
        attributes |= 0x08
        struct.pack_into(">q", raw, 35, log_append_ts)
    struct.pack_into(">h", raw, 21, attributes)
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


def read(cls, raw, fetch_offset=0, aborted=None, isolation=0):  # type: ignore[no-untyped-def]
    """(offset, timestamp, key, value) of every record ``cls`` yields, and its last position."""
    records = KeptRecords(raw)
    it = cls(TopicPartition(TOPIC, 0), records, aborted, fetch_offset, None, None, True, isolation)
    out = []
    for item in it:
        if isinstance(item, RecordRun):
            block = RecordBlock.packed(TOPIC, 0, item.offsets, item.timestamps, item.packed)
            out += list(zip(block.offsets, block.timestamps, block.keys, block.values, strict=True))
        else:
            out.append((item.offset, item.timestamp, item.key, item.value))
    return out, it.next_fetch_offset


@pytest.fixture(autouse=True)
def registered():  # type: ignore[no-untyped-def]
    fetch_runs.install([TOPIC])
    yield


def rows(n, start_ts=1_000, key=True):  # type: ignore[no-untyped-def]
    return [(start_ts + 3 * i, (b"k%d" % i) if key and i % 3 else None,
             None if i % 5 == 4 else b"v" * (i % 7) + b"%d" % i,
             [("h", b"x")] if i % 4 == 1 else []) for i in range(n)]  # fmt: skip


@pytest.mark.parametrize(
    "raw,fetch_offset",
    [
        (batch(rows(1)), 0),
        (batch(rows(200)), 0),
        (batch(rows(50)) + batch(rows(30), base=50) + batch(rows(7), base=80), 0),
        (batch(rows(50)) + batch(rows(30), base=50), 20),  # a fetch from inside a batch
        (batch(rows(50)) + batch(rows(30), base=50, compression=CODEC_GZIP), 0),
        (batch(rows(10), log_append_ts=777_000) + batch(rows(3), base=10), 0),
        (batch(rows(40, key=False)) + batch(rows(40), base=40)[:-5], 0),  # cut short at the end
        (
            batch(rows(10))
            + batch([(5, None, b"\0\0\0\0", [])], base=10, control=True)
            + batch(rows(4), base=11),
            0,
        ),  # fmt: skip
    ],
)
def test_runs_give_the_clients_records(raw: bytes, fetch_offset: int) -> None:
    want = read(_Original, raw, fetch_offset)
    got = read(RunPartitionRecords, raw, fetch_offset)
    assert got == want
    assert len(got[0]) > 0


def test_aborted_transactions_are_skipped_as_the_client_skips_them() -> None:
    raw = (batch(rows(10), producer_id=7, transactional=1)
           + batch(rows(5), base=10, producer_id=8, transactional=1)
           + batch(rows(4), base=15))  # fmt: skip
    aborted = [(7, 0)]
    want = read(_Original, raw, 0, aborted, READ_COMMITTED)
    got = read(RunPartitionRecords, raw, 0, aborted, READ_COMMITTED)
    assert got == want
    assert [r[0] for r in got[0]] == list(range(10, 19))


def test_a_corrupt_batch_is_refused() -> None:
    raw = bytearray(batch(rows(10)))
    raw[-3] ^= 0xFF
    with pytest.raises(Exception, match="CRC"):
        read(RunPartitionRecords, bytes(raw))


def test_unregistered_topics_get_record_objects() -> None:
    records = KeptRecords(batch(rows(3)))
    it = RunPartitionRecords(TopicPartition("other", 0), records, None, 0, None, None, True, 0)
    assert not any(isinstance(r, RecordRun) for r in it)


def test_a_block_of_several_runs_keeps_every_record() -> None:
    first, second = (read_runs(batch(rows(n), base=b)) for n, b in ((20, 0), (9, 20)))
    block = fetch_runs.block_of(TOPIC, 0, first + second)
    assert block.offsets == list(range(29))
    values, offsets = block.packed_values()
    assert [bytes(values[offsets[i] : offsets[i + 1]]) for i in range(29)] == [
        v or b"" for _, _, v, _ in rows(20) + rows(9)
    ]
    kept = block.select(np.arange(29) % 2 == 0)
    assert kept.offsets == list(range(0, 29, 2))
    assert kept.values == [block.values[i] for i in range(0, 29, 2)]
    assert block.from_offset(25).offsets == [25, 26, 27, 28]
    assert [len(b) for b in block.split(10)] == [10, 10, 9]


def read_runs(raw: bytes) -> list[RecordRun]:
    records = KeptRecords(raw)
    return list(RunPartitionRecords(TopicPartition(TOPIC, 0), records, None, 0, None, None,
                                    True, 0))  # fmt: skip


def test_the_fetcher_makes_its_records_by_the_names_replaced() -> None:
    """The contract: the fetcher looks up both names in its module when it reads a response,
    and the iterator members the override uses exist."""
    import inspect

    source = inspect.getsource(aiokafka_fetcher.Fetcher)
    assert "MemoryRecords(part_data[-1])" in source
    assert "PartitionRecords(" in source
    assert aiokafka_fetcher.MemoryRecords is KeptRecords
    assert aiokafka_fetcher.PartitionRecords is RunPartitionRecords
    for member in ("_consume_aborted_up_to", "_contains_abort_marker", "_unpack_records"):
        assert hasattr(_Original, member)
    assert aiokafka_fetcher.FetchResult is fetch_runs.RunFetchResult
    assert "FetchResult(" in source and "type(res_or_error) is FetchResult" in inspect.getsource(
        aiokafka_fetcher.Fetcher.fetched_records
    )
    for member in ("check_assignment", "has_more", "_update_position"):
        assert hasattr(fetch_runs._ORIGINAL_FETCH_RESULT, member)


def test_a_polls_budget_counts_the_records_of_runs() -> None:
    """getall(max_records) stops once the runs it returns hold max_records records (a run of
    at most RUN_RECORDS), then gives the rest; every record once, the position after each."""
    raw = b"".join(batch(rows(100), base=100 * k) for k in range(100))  # 10,000 records
    records = RunPartitionRecords(TopicPartition(TOPIC, 0), KeptRecords(raw), None, 0, None,
                                  None, True, 0)  # fmt: skip

    class State:
        position = 0

        def consumed_to(self, offset: int) -> None:
            self.position = offset

    class Assignment:
        active = True
        state = State()
        state.paused = False

        def state_value(self, tp: object) -> State:
            return self.state

    assignment = Assignment()
    result = fetch_runs.RunFetchResult(TopicPartition(TOPIC, 0), assignment=assignment,
                                       partition_records=records, backoff=0)  # fmt: skip
    seen: list[int] = []
    while result.has_more():
        got = result.getall(3_000)
        assert sum(len(r) for r in got) <= 3_000 + fetch_runs.RUN_RECORDS
        seen += [int(o) for r in got for o in r.offsets]
        assert assignment.state.position == seen[-1] + 1
    assert seen == list(range(10_000))
