"""Behaviour of ``processors.runtime.faust_bulk`` without a broker.

An app and its consumer are built (never started) and the bulk delivery, the gap-based commit
and the flush hooks are driven by hand: one ack of a block's event must commit the whole block.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from faust_helpers import (
    BULK_TOPIC,
    OTHER_TOPIC,
    TP,
    ConsumerMessage,
    RecordBlock,
    ack_taken,
    faust_aiokafka,
    faust_consumer,
    make_consumer,
    paused_buffer,
    record,
    relied_on,
    resume_drained,
    run,
    take_waiting,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# -- behaviour: one ack commits a whole block -------------------------------------------------


def test_committed_position_is_where_the_group_left_a_partition() -> None:
    _, c = make_consumer()
    tp = TP(BULK_TOPIC, 0)
    assert c.committed_position(tp) is None
    c._committed_offset[tp] = 10  # what perform_seek sets after an assignment
    assert c.committed_position(tp) == 10, relied_on(
        "Consumer._committed_offset", "no longer holds the committed offsets"
    )


def test_gap_plus_one_ack_commits_the_whole_block() -> None:
    async def body() -> None:
        _, c = make_consumer()
        tp = TP(BULK_TOPIC, 0)
        c._committed_offset[tp] = 10
        await c._add_gap(tp, 10, 18)
        c._acked[tp].append(19)  # what ack() does for the block's event (its last offset)
        assert c._new_offset(tp) == 20, relied_on(
            "Consumer._add_gap/_acked/_new_offset", "no longer commit a gap with one ack"
        )
        assert c._acked[tp] == [] and len(c._gap[tp]) == 0

    run(body())


def test_real_ack_of_a_block_event_commits_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        app, c = make_consumer()
        monkeypatch.setattr(app.topics, "acks_enabled_for", lambda topic: topic == BULK_TOPIC)
        tp = TP(BULK_TOPIC, 0)
        c._committed_offset[tp] = 10
        await c._add_gap(tp, 10, 18)
        msg = ConsumerMessage(BULK_TOPIC, 0, 19, 19.0, 0, (), None, None, None, 0, 0, tp)
        assert c.ack(msg) is True and c._n_acked == 1
        assert c._new_offset(tp) == 20

    run(body())


def test_deliver_block_after_a_seek_registers_gap_and_commits_on_one_ack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        got: list[ConsumerMessage] = []

        async def callback(message: ConsumerMessage) -> None:
            got.append(message)

        app, c = make_consumer(callback)
        monkeypatch.setattr(app.topics, "acks_enabled_for", lambda topic: topic == BULK_TOPIC)
        tp = TP(BULK_TOPIC, 0)
        # as after perform_seek() to committed offset 10: records 8 and 9 are re-fetched
        c._read_offset[tp] = 10
        c._committed_offset[tp] = 10
        values = [b"v%d" % o for o in range(8, 20)]
        await c._deliver_block(
            tp, [record(o, v) for o, v in zip(range(8, 20), values, strict=True)], 3
        )

        assert len(got) == 1
        msg = got[0]
        block = msg.value
        assert isinstance(block, RecordBlock)
        assert (msg.topic, msg.partition, msg.offset, msg.tp) == (BULK_TOPIC, 0, 19, tp)
        assert (msg.timestamp, msg.generation_id, msg.key) == (19.0, 3, None)
        assert msg.serialized_value_size == sum(len(v) for v in values[2:])
        assert block.offsets == list(range(10, 20))
        assert block.timestamps == [1000 * o for o in range(10, 20)]
        assert block.values == values[2:] and block.keys == [b"k"] * 10
        assert [(i.begin, i.end) for i in sorted(c._gap[tp])] == [(11, 19)]
        assert c._read_offset[tp] == 19

        assert c.ack(msg) is True
        assert c._new_offset(tp) == 20

    run(body())


def test_deliver_block_from_the_start_commits_first_to_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        got: list[ConsumerMessage] = []

        async def callback(message: ConsumerMessage) -> None:
            got.append(message)

        app, c = make_consumer(callback)
        monkeypatch.setattr(app.topics, "acks_enabled_for", lambda topic: True)
        tp = TP(BULK_TOPIC, 0)
        await c._deliver_block(tp, [record(o) for o in range(0, 5)], 1)
        await c._deliver_block(tp, [record(o) for o in range(5, 9)], 1)
        assert [m.offset for m in got] == [4, 8]
        assert [m.value.offsets for m in got] == [[0, 1, 2, 3, 4], [5, 6, 7, 8]]
        # one interval a block, not merged as they come: a commit chops what it passed
        assert [(i.begin, i.end) for i in sorted(c._gap[tp])] == [(0, 4), (5, 8)]
        assert c.ack(got[0]) is True
        assert c._new_offset(tp) == 5
        assert [(i.begin, i.end) for i in sorted(c._gap[tp])] == [(5, 8)]
        assert c.ack(got[1]) is True
        assert c._new_offset(tp) == 9
        assert len(c._gap[tp]) == 0

    run(body())


def test_drain_messages_delivers_bulk_topics_as_blocks_and_others_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        got: list[ConsumerMessage] = []
        fetcher_stopped = asyncio.Event()

        async def callback(message: ConsumerMessage) -> None:
            got.append(message)

        app, c = make_consumer(callback)
        bulk, other = TP(BULK_TOPIC, 0), TP(OTHER_TOPIC, 1)
        batches = [
            {
                bulk: [record(o) for o in range(3)],
                other: [record(o, topic=OTHER_TOPIC) for o in range(2)],
            }
        ]

        async def wait_next_records(timeout: float) -> tuple[dict, set[TP]]:
            assert timeout == 1.0
            if not batches:
                fetcher_stopped.set()
                return {}, {bulk, other}
            return batches.pop(), {bulk, other}

        monkeypatch.setattr(c, "_wait_next_records", wait_next_records)
        monkeypatch.setattr(c, "highwater", lambda tp: 100)
        app.consumer_generation_id = 2
        fetcher = type("Fetcher", (), {"_stopped": fetcher_stopped})()
        await asyncio.wait_for(c._drain_messages(fetcher), 5)

        assert [(m.topic, m.offset, type(m.value).__name__) for m in got] == [
            (BULK_TOPIC, 2, "RecordBlock"),
            (OTHER_TOPIC, 0, "bytes"),
            (OTHER_TOPIC, 1, "bytes"),
        ]
        assert got[0].value.offsets == [0, 1, 2]
        assert [m.generation_id for m in got] == [2, 2, 2]
        assert (c._read_offset[bulk], c._read_offset[other]) == (2, 1)
        assert faust_consumer.CONSUMER_FETCHING not in c.diag.flags

    run(body())


def test_commit_runs_flush_hooks_before_faust_commits(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []

    async def faust_commit(self: Any, offsets: Any) -> bool:
        calls.append(("commit", dict(offsets)))
        return True

    async def flush() -> None:
        calls.append("flush")

    monkeypatch.setattr(faust_aiokafka.Consumer, "_commit", faust_commit)

    async def body() -> None:
        app, c = make_consumer()
        app.flush_hooks.append(flush)
        assert await c._commit({TP(BULK_TOPIC, 0): 20}) is True

    run(body())
    assert calls == ["flush", ("commit", {TP(BULK_TOPIC, 0): 20})]


# -- known deviations from stock Faust (see the report; remove xfail once fixed) --------------


def test_deliver_each_registers_no_gaps_for_topics_without_acks() -> None:
    async def body() -> None:
        app, c = make_consumer()
        tp = TP("app-table-changelog", 0)
        assert not app.topics.acks_enabled_for(tp.topic)
        await c._deliver_each(tp, [record(o, topic=tp.topic) for o in (1, 3, 5)])
        assert c._read_offset[tp] == 5
        assert len(c._gap[tp]) == 0

    run(body())


def test_deliver_each_stops_when_the_flow_stops() -> None:
    async def body() -> None:
        got: list[int] = []

        async def callback(message: ConsumerMessage) -> None:
            got.append(message.offset)
            c.stop_flow()  # a rebalance begins while the first record is handled

        _, c = make_consumer(callback)
        tp = TP(OTHER_TOPIC, 0)
        await c._deliver_each(tp, [record(o, topic=OTHER_TOPIC) for o in range(5)])
        assert got == [0]

    run(body())


# -- RecordBlock ------------------------------------------------------------------------------


def test_record_block_packed_values_exact() -> None:
    values: list[bytes | None] = [b"abc", None, b"", b"\x00\xff", "é".encode()]
    block = RecordBlock(BULK_TOPIC, 3, [5, 6, 7, 8, 9], [1, 2, 3, 4, 5], [None] * 5, values)
    data, offsets = block.packed_values()
    assert len(block) == 5
    assert data.dtype == np.uint8 and offsets.dtype == np.int64
    assert data.tobytes() == b"abc\x00\xff\xc3\xa9"
    assert offsets.tolist() == [0, 3, 3, 3, 5, 7]
    unpacked = [data[offsets[i] : offsets[i + 1]].tobytes() for i in range(5)]
    assert unpacked == [b"abc", b"", b"", b"\x00\xff", b"\xc3\xa9"]


def test_record_block_packed_values_empty() -> None:
    data, offsets = RecordBlock(BULK_TOPIC, 0, [], [], [], []).packed_values()
    assert data.tobytes() == b"" and offsets.tolist() == [0]


# -- commit bookkeeping: our interval-based _new_offset answers as Faust's does ------------------

blocks_strategy = st.lists(
    st.tuples(st.integers(1, 30), st.booleans(), st.integers(0, 3)), min_size=1, max_size=12
)


@settings(max_examples=300, deadline=None)
@given(committed=st.one_of(st.none(), st.integers(0, 50)), blocks=blocks_strategy)
def test_new_offset_equals_faust_stock_on_blocks_and_gaps(
    committed: int | None, blocks: list[tuple[int, bool, int]]
) -> None:
    """Blocks (size, acked?, hole before it) laid out after the committed offset; then two rounds
    of commits, the second after acking everything: both implementations agree each time."""

    async def body() -> None:
        _, ours = make_consumer()
        _, stock = make_consumer()
        tp = TP(BULK_TOPIC, 0)
        layout, offset = [], committed or 0
        for size, acked, hole in blocks:
            offset += hole
            layout.append((offset, offset + size - 1, acked))
            offset += size
        for consumer in (ours, stock):
            consumer._committed_offset[tp] = committed
            for first, last, acked in layout:
                if first <= last - 1:
                    await consumer._add_gap(tp, first, last - 1)
                if acked:
                    consumer._acked[tp].append(last)
                    consumer._acked_index[tp].add(last)
        for round_ in range(2):
            expected = faust_consumer.Consumer._new_offset(stock, tp)
            assert ours._new_offset(tp) == expected, f"round {round_}: layout {layout}"
            if expected is not None:
                for consumer in (ours, stock):
                    consumer._committed_offset[tp] = expected
            for _first, last, acked in layout:
                if not acked:
                    for consumer in (ours, stock):
                        consumer._acked[tp].append(last)
                        consumer._acked_index[tp].add(last)
            layout = [(f, la, True) for f, la, _ in layout]

    run(body())


def test_waiting_events_are_taken_tracked_and_acked_as_the_stream_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """take_waiting takes what waits in an agent stream's buffer (stale generations acked and
    dropped), tracks each as pending; ack_taken acks them so the block commits; the agent's
    next event is still the one after them."""
    from faust.events import Event

    async def body() -> None:
        app, _ = make_consumer()
        c = app.consumer  # what the stream and the events ack through
        monkeypatch.setattr(app.topics, "acks_enabled_for", lambda topic: topic == BULK_TOPIC)
        topic = app.topic(BULK_TOPIC, value_serializer="raw", key_serializer="raw")

        @app.agent(topic, name="waiting")
        async def agent(stream: Any) -> None:  # never started
            async for _ in stream:
                pass

        stream = agent.stream()
        app.flow_control.resume()  # as in a running worker between rebalances
        app.consumer_generation_id = 3
        tp = TP(BULK_TOPIC, 0)
        c._committed_offset[tp] = 0

        def event(offset: int, generation: int = 3) -> Event:
            block = RecordBlock(BULK_TOPIC, 0, [offset], [1], [None], [b"v"])
            msg = ConsumerMessage(BULK_TOPIC, 0, offset, 1.0, 0, (), None, block, None, 0, 1,
                                  tp, generation_id=generation)  # fmt: skip
            return Event(app, None, block, {}, msg)

        events = [event(0), event(1, generation=2), event(2), event(3)]
        for e in events:
            stream.channel.queue.put_nowait(e)
        taken = take_waiting(stream, 2)
        assert [e.message.offset for e in taken] == [0, 2]  # offset 1 was of generation 2
        assert events[1].message.acked and not events[0].message.acked
        assert all(e.message.tracked and e.message in c._unacked_messages for e in taken)
        assert stream.channel.queue.qsize() == 1  # offset 3 stays for the stream itself
        ack_taken(taken)
        assert all(e.message.acked and e.message not in c._unacked_messages for e in taken)
        assert sorted(c._acked[tp]) == [0, 1, 2]
        assert c._new_offset(tp) == 3
        assert take_waiting(object(), 5) == []  # not a Faust stream: nothing waits

    run(body())


def test_a_buffer_drained_in_bulk_resumes_every_partition_it_paused() -> None:
    """Taken in bulk, a drained buffer resumes all its paused partitions once it holds no more
    than its drop size (mode itself resumes one per take there); above it, none."""

    async def body() -> None:
        queue, resumed = paused_buffer()
        for _ in range(10):  # 20 left: over the drop size
            queue.get_nowait()
        resume_drained(queue)
        assert resumed == [] and len(queue._pending_pressure_drop_callbacks) == 4
        for _ in range(10):  # 10 left: two resumed by the takes at 12 and 11
            queue.get_nowait()
        resume_drained(queue)
        assert sorted(resumed) == [0, 1, 2, 3] and not queue._pending_pressure_drop_callbacks

    run(body())


# -- a stop before the first assignment -------------------------------------------------------


@pytest.mark.parametrize("assigned", [False, True])
def test_a_stop_before_the_first_assignment_exits_at_once(monkeypatch, assigned: bool) -> None:
    """Before its first assignment the worker exits (status 0) after ``on_early_exit``, without
    Faust's stop (which crashed during the first group join); once assigned, Faust stops it."""
    from faust_helpers import BulkApp

    from processors.runtime import faust_bulk

    calls: list[str] = []
    monkeypatch.setattr(faust_bulk.os, "_exit", lambda code: calls.append(f"exit {code}"))
    monkeypatch.setattr(faust_bulk.logging, "shutdown", lambda: None)  # pytest's handlers stay
    monkeypatch.setattr(faust_bulk.faust.Worker, "_on_sigterm", lambda self: calls.append("faust"))
    app = BulkApp("faust-bulk-early-stop", broker="kafka://localhost:1")
    worker = faust_bulk.StoppableWorker(
        app, on_early_exit=lambda: calls.append("tidy"), loop=asyncio.new_event_loop()
    )
    if assigned:
        run(app.on_partitions_assigned.send(assigned={TP(BULK_TOPIC, 0)}))
    worker._on_sigterm()
    assert calls == (["faust"] if assigned else ["tidy", "exit 0", "faust"])
