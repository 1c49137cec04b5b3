"""Contract of ``processors.runtime.faust_bulk`` with the Faust internals it relies on.

Every Faust (and mode) internal named in faust_bulk's docstring is checked here, first for
existence and signature, then for behaviour without a broker: an app and its consumer are built
(never started) and the bulk delivery and gap-based commit are driven by hand. A Faust upgrade
that removes or changes any of them fails here with a message naming the internal.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import faust
import numpy as np
import pytest

T = TypeVar("T")
TESTED_FAUST = "0.15."
BULK_TOPIC = "readings"
OTHER_TOPIC = "envelopes"


def relied_on(name: str, problem: str) -> str:
    """The failure message: which internal changed, and that faust_bulk relies on it."""
    return (
        f"Faust internal {name} {problem}; faust_bulk relies on it "
        "(processors/runtime/faust_bulk.py): adapt faust_bulk to this Faust and re-run the "
        "integration tests (tests/integration) before upgrading"
    )


try:  # a missing module or name must fail loudly, not as a bare collection ImportError
    from aiokafka.errors import ConsumerStoppedError
    from aiokafka.structs import ConsumerRecord
    from faust.serializers.codecs import get_codec
    from faust.transport import base as faust_base
    from faust.transport import consumer as faust_consumer
    from faust.transport.drivers import aiokafka as faust_aiokafka
    from faust.types import TP
    from faust.types.tuples import ConsumerMessage

    from processors.runtime.faust_bulk import BulkApp, BulkConsumer, BulkTransport, RecordBlock
except ImportError as exc:
    pytest.fail(relied_on(f"import ({exc})", "failed"), pytrace=False)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a fresh event loop (no pytest-asyncio here)."""
    return asyncio.run(coro)


def record(offset: int, value: bytes | None = b"v", topic: str = BULK_TOPIC) -> ConsumerRecord:
    """An aiokafka record as the driver's fetcher returns it."""
    size = 0 if value is None else len(value)
    return ConsumerRecord(topic, 0, offset, 1000 * offset, 0, b"k", value, None, 1, size, [])


async def no_op(*_: Any) -> None:
    """A rebalance callback that does nothing."""


def make_consumer(
    callback: Callable[[Any], Awaitable[None]] | None = None,
) -> tuple[BulkApp, BulkConsumer]:
    """A BulkApp on an unreachable broker and its (never started) consumer; call inside a loop."""
    app = BulkApp(
        "faust-bulk-contract",
        broker="kafka://localhost:1",
        bulk_topics=[BULK_TOPIC],
        value_serializer="raw",
        key_serializer="raw",
    )
    consumer = app._new_transport().create_consumer(
        callback=callback or no_op, on_partitions_revoked=no_op, on_partitions_assigned=no_op
    )
    assert isinstance(consumer, BulkConsumer)
    return app, consumer


# -- version and classes ----------------------------------------------------------------------


def test_faust_version_is_one_faust_bulk_was_tested_with() -> None:
    version = importlib.metadata.version("faust-streaming")
    assert version.startswith(TESTED_FAUST) and faust.__version__ == version, (
        f"faust-streaming {version} (faust.__version__ {faust.__version__}) is not a version "
        f"faust_bulk was tested with ({TESTED_FAUST}x): faust_bulk relies on Faust internals, so "
        "re-run the integration tests (tests/integration) before bumping, then update "
        "TESTED_FAUST in this file"
    )


def test_aiokafka_driver_consumer_and_transport_classes() -> None:
    for name in ("Consumer", "Transport"):
        cls = getattr(faust_aiokafka, name, None)
        assert inspect.isclass(cls), relied_on(
            f"faust.transport.drivers.aiokafka.{name}", "is missing"
        )
    assert issubclass(BulkConsumer, faust_aiokafka.Consumer)
    assert issubclass(BulkTransport, faust_aiokafka.Transport)
    assert faust_aiokafka.Transport.Consumer is faust_aiokafka.Consumer, relied_on(
        "aiokafka Transport.Consumer", "no longer names the driver's consumer class"
    )
    source = inspect.getsource(faust_base.Transport.create_consumer)
    assert "self.Consumer(" in source, relied_on(
        "Transport.create_consumer", "no longer instantiates the class attribute Consumer"
    )


def test_fetcher_still_calls_the_consumers_drain_messages() -> None:
    source = inspect.getsource(faust_consumer.Fetcher)
    assert "consumer._drain_messages(self)" in source, relied_on(
        "Fetcher -> Consumer._drain_messages(fetcher)",
        "changed: the fetcher no longer calls it, so BulkConsumer's replacement would be bypassed",
    )


def test_bulk_consumer_helpers_do_not_shadow_faust_members() -> None:
    own = {"_deliver", "_deliver_each", "_deliver_block", "_maybe_commit"}
    clash = sorted(own & set(dir(faust_aiokafka.Consumer)))
    assert clash == [], relied_on(
        f"Consumer.{', '.join(clash)}",
        "now exists in Faust and is silently overridden by BulkConsumer's helper",
    )


# -- private consumer members: methods and signatures -----------------------------------------

# name -> (leading parameters after self, in the order faust_bulk passes them; is a coroutine)
CONSUMER_METHODS: dict[str, tuple[tuple[str, ...], bool]] = {
    "_drain_messages": (("fetcher",), True),
    "_wait_next_records": (("timeout",), True),
    "_to_message": (("tp", "record"), False),
    "_add_gap": (("tp", "offset_from", "offset_to"), True),
    "_commit": (("offsets",), True),
    "_new_offset": (("tp",), False),
    "perform_seek": ((), True),
    "highwater": (("tp",), False),
    "commit": ((), True),
    "ack": (("message",), False),
    # mode.Service members faust_bulk's loop uses
    "sleep": (("n",), True),
    "wait_first": (("coros",), True),
}


@pytest.mark.parametrize("name", sorted(CONSUMER_METHODS))
def test_consumer_method_signature(name: str) -> None:
    expected, is_coroutine = CONSUMER_METHODS[name]
    fn = getattr(faust_aiokafka.Consumer, name, None)
    assert callable(fn), relied_on(f"Consumer.{name}", "is missing")
    params = list(inspect.signature(fn).parameters.values())
    names = tuple(p.name for p in params[1 : 1 + len(expected)])
    assert params[0].name == "self" and names == expected, relied_on(
        f"Consumer.{name}", f"changed signature to {inspect.signature(fn)} (expected {expected})"
    )
    extra = [
        p
        for p in params[1 + len(expected) :]
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    assert extra == [], relied_on(
        f"Consumer.{name}", f"gained required parameters {[p.name for p in extra]}"
    )
    assert inspect.iscoroutinefunction(fn) == is_coroutine, relied_on(
        f"Consumer.{name}", f"is {'no longer' if is_coroutine else 'now'} a coroutine function"
    )


def test_consumer_state_members_on_a_real_consumer() -> None:
    async def body() -> None:
        app, c = make_consumer()
        tp = TP(BULK_TOPIC, 0)
        checks: dict[str, bool] = {
            "_read_offset (None for an unseen partition)": c._read_offset[tp] is None,
            "_committed_offset (None for an unseen partition)": c._committed_offset[tp] is None,
            "_acked (a list per partition)": c._acked[tp] == [],
            "_gap (an interval tree per partition)": len(c._gap[tp]) == 0,
            "_n_acked (an int counter)": c._n_acked == 0,
            "_commit_every (broker_commit_every)": c._commit_every == 10_000,
            "scheduler (with iterate())": callable(getattr(c.scheduler, "iterate", None)),
            "flow_active (True while flowing)": c.flow_active is True,
            "callback (the conductor's callback)": c.callback is no_op,
            "suspend_flow (an event, clear while flowing)": not c.suspend_flow.is_set(),
            "_buffered_partitions (a set)": c._buffered_partitions == set(),
            "_stopped (a mode event)": c._stopped.is_set() is False,
            "should_stop": c.should_stop is False,
            "transport.app": c.transport.app is app,
            "app.consumer_generation_id": isinstance(app.consumer_generation_id, int),
            "app.monitor.track_tp_end_offset": callable(app.monitor.track_tp_end_offset),
        }
        broken = [name for name, ok in checks.items() if not ok]
        assert broken == [], relied_on(f"consumer members {broken}", "are missing or changed")

        stopped = c.consumer_stopped_errors
        assert isinstance(stopped, tuple) and ConsumerStoppedError in stopped, relied_on(
            "Consumer.consumer_stopped_errors", f"is {stopped!r}, without ConsumerStoppedError"
        )
        c.stop_flow()
        assert (c.flow_active, c.suspend_flow.is_set()) == (False, True), relied_on(
            "Consumer.flow_active / suspend_flow", "no longer follow stop_flow()"
        )

    run(body())


def test_consumer_fetching_flag_and_diag() -> None:
    assert faust_consumer.CONSUMER_FETCHING == "FETCHING", relied_on(
        "faust.transport.consumer.CONSUMER_FETCHING", "is missing or changed"
    )

    async def body() -> None:
        _, c = make_consumer()
        c.diag.set_flag(faust_consumer.CONSUMER_FETCHING)
        assert faust_consumer.CONSUMER_FETCHING in c.diag.flags, relied_on(
            "Consumer.diag.set_flag", "no longer records the flag"
        )
        c.diag.unset_flag(faust_consumer.CONSUMER_FETCHING)
        assert faust_consumer.CONSUMER_FETCHING not in c.diag.flags, relied_on(
            "Consumer.diag.unset_flag", "no longer clears the flag"
        )

    run(body())


# -- ConsumerMessage, the raw codec, App._new_transport ---------------------------------------

MESSAGE_POSITIONAL = (
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestamp_type",
    "headers",
    "key",
    "value",
    "checksum",
    "serialized_key_size",
    "serialized_value_size",
    "tp",
)


def test_consumer_message_constructor_order() -> None:
    params = inspect.signature(ConsumerMessage.__init__).parameters
    names = tuple(params)[1 : 1 + len(MESSAGE_POSITIONAL)]
    assert names == MESSAGE_POSITIONAL, relied_on(
        "faust.types.tuples.ConsumerMessage.__init__",
        f"changed its positional parameters to {names}",
    )
    assert "generation_id" in params, relied_on(
        "ConsumerMessage.__init__(generation_id=...)", "is missing"
    )
    tp = TP(BULK_TOPIC, 2)
    block = RecordBlock(BULK_TOPIC, 2, [7], [7000], [None], [b"x"])
    msg = ConsumerMessage(
        BULK_TOPIC, 2, 7, 7.0, 0, (), None, block, None, 0, 1, tp, generation_id=5
    )
    got = (msg.topic, msg.partition, msg.offset, msg.timestamp, msg.key, msg.tp)
    assert got == (BULK_TOPIC, 2, 7, 7.0, None, tp)
    assert msg.value is block and msg.serialized_value_size == 1 and msg.generation_id == 5


def check_passes_through(name: str, decode: Callable[[], Any], block: RecordBlock) -> None:
    """``decode()`` must return ``block`` itself."""
    try:
        got = decode()
    except Exception as exc:  # any failure is the contract breaking
        pytest.fail(relied_on(name, f"raised {exc!r} on a RecordBlock"), pytrace=False)
    assert got is block, relied_on(name, f"turned a RecordBlock into {got!r}")


def test_raw_codec_passes_non_bytes_values_through() -> None:
    block = RecordBlock(BULK_TOPIC, 0, [1], [1000], [None], [b"a"])
    check_passes_through("the 'raw' codec", lambda: get_codec("raw").loads(block), block)

    async def body() -> None:
        app, _ = make_consumer()
        check_passes_through(
            "app.serializers.loads_value(serializer='raw')",
            lambda: app.serializers.loads_value(None, block, serializer="raw"),
            block,
        )
        # the path an agent's events take: the topic's compiled decode
        topic = app.topic(BULK_TOPIC, value_serializer="raw", key_serializer="raw")
        tp = TP(BULK_TOPIC, 0)
        msg = ConsumerMessage(BULK_TOPIC, 0, 1, 1.0, 0, (), None, block, None, 0, 1, tp)
        try:
            event = await topic.decode(msg)
        except Exception as exc:
            pytest.fail(relied_on("Topic.decode (raw)", f"raised {exc!r}"), pytrace=False)
        assert event.value is block and event.key is None, relied_on(
            "Topic.decode with value_serializer='raw'", "no longer passes a RecordBlock through"
        )

    run(body())


def test_app_new_transport_is_what_app_transport_uses() -> None:
    fn = getattr(faust.App, "_new_transport", None)
    assert callable(fn), relied_on("faust.App._new_transport", "is missing")
    assert list(inspect.signature(fn).parameters) == ["self"], relied_on(
        "faust.App._new_transport", f"changed signature to {inspect.signature(fn)}"
    )

    async def body() -> None:
        hook = no_op
        app = BulkApp("faust-bulk-contract", broker="kafka://localhost:1", bulk_topics=["a", "b"])
        app.flush_hooks.append(hook)
        transport = app.transport
        assert isinstance(transport, BulkTransport), relied_on(
            "App.transport", "no longer builds its transport with App._new_transport()"
        )
        consumer_cls = transport.Consumer
        assert issubclass(consumer_cls, BulkConsumer)
        assert consumer_cls.bulk_topics == frozenset({"a", "b"})
        assert consumer_cls.flush_hooks is app.flush_hooks and consumer_cls.flush_hooks == [hook]
        assert BulkConsumer.bulk_topics == frozenset(), "an app's topics leaked into BulkConsumer"
        assert isinstance(app.consumer, consumer_cls), relied_on(
            "App.consumer", "is no longer created by the transport's Consumer class"
        )

    run(body())


# -- behaviour: one ack commits a whole block -------------------------------------------------


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
        assert c.ack(got[0]) is True
        assert c._new_offset(tp) == 5
        assert c.ack(got[1]) is True
        assert c._new_offset(tp) == 9

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
