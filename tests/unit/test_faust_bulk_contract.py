"""Contract of ``processors.runtime.faust_bulk`` with the Faust internals it relies on.

Every Faust (and mode) internal named in faust_bulk's docstring is checked here, first for
existence and signature, then for behaviour without a broker: an app and its consumer are built
(never started) and the bulk delivery and gap-based commit are driven by hand. A Faust upgrade
that removes or changes any of them fails here with a message naming the internal.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Callable
from typing import Any

import faust
import pytest
from faust_helpers import (
    BULK_TOPIC,
    TESTED_FAUST,
    TP,
    BulkApp,
    BulkConsumer,
    BulkTransport,
    ConsumerMessage,
    ConsumerStoppedError,
    RecordBlock,
    faust_aiokafka,
    faust_base,
    faust_consumer,
    get_codec,
    make_consumer,
    no_op,
    paused_buffer,
    record,
    relied_on,
    run,
)

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
    own = {
        "_deliver", "_deliver_each", "_deliver_block", "_maybe_commit", "committed_position",
        "hold_back", "let_go", "held_back", "restoring", "hold_for_restore", "restore_ended",
    }  # fmt: skip
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


# -- fetch wait and delivery rounds -------------------------------------------------------------


def test_the_worker_consumer_gets_the_apps_fetch_wait() -> None:
    """faust_bulk replaces Faust's hard-coded 1.5 s fetch wait: Consumer._new_consumer_thread
    and AIOKafkaConsumerThread._create_worker_consumer must still exist, and aiokafka must still
    read ``_fetch_max_wait_ms`` when it starts its fetcher."""
    for owner, name in [
        (faust_aiokafka.Consumer, "_new_consumer_thread"),
        (faust_aiokafka.AIOKafkaConsumerThread, "_create_worker_consumer"),
    ]:
        assert callable(getattr(owner, name, None)), relied_on(
            f"{owner.__name__}.{name}", "is gone"
        )
    import aiokafka

    start_source = inspect.getsource(aiokafka.AIOKafkaConsumer.start)
    assert "fetch_max_wait_ms=self._fetch_max_wait_ms" in start_source, relied_on(
        "AIOKafkaConsumer._fetch_max_wait_ms", "is no longer what the fetcher is started with"
    )

    async def check() -> None:
        app = BulkApp(
            "faust-bulk-contract-wait", broker="kafka://localhost:1", bulk_topics=[BULK_TOPIC],
            value_serializer="raw", key_serializer="raw", fetch_wait_ms=40,
        )  # fmt: skip
        consumer = app._new_transport().create_consumer(
            callback=no_op, on_partitions_revoked=no_op, on_partitions_assigned=no_op
        )
        thread = consumer._new_consumer_thread()
        worker_consumer = thread._create_worker_consumer(consumer.transport)
        assert worker_consumer._fetch_max_wait_ms == 40

    run(check())


def test_delivering_is_set_only_during_a_delivery_round() -> None:
    """The arbiter defers decisions while ``delivering`` is set (faust_bulk's own flag, around
    the hand-over of one fetch's records)."""

    async def check() -> None:
        _, consumer = make_consumer()
        assert consumer.delivering is False

    run(check())
    source = inspect.getsource(BulkConsumer._drain_messages)
    assert source.index("self.delivering = True") < source.index("await self._deliver(")
    assert source.index("await self._deliver(") < source.index("self.delivering = False")


def test_stream_buffer_maxsize_still_bounds_prefetch() -> None:
    """The worker bounds each agent's prefetch with ``stream_buffer_maxsize``: Faust must still
    pause a partition whose stream buffer fills (on_buffer_full) and resume it when it drains."""
    for name in ("on_buffer_full", "on_buffer_drop"):
        assert callable(getattr(faust_base.Consumer, name, None)), relied_on(
            f"Consumer.{name}", "is gone: prefetch is no longer bounded per partition"
        )
    import faust.transport.conductor as conductor

    assert "on_pressure_high" in inspect.getsource(conductor), relied_on(
        "Conductor on_pressure_high", "no longer signals full stream buffers"
    )


# -- assignment gate and backpressure ----------------------------------------------------------


def test_held_back_partitions_are_paused_and_still_delivered() -> None:
    """hold_back pauses through Faust's pause_partitions (the fetcher then leaves the partition
    out) yet delivers what was fetched before, which Faust's _deliver would skip."""
    for name in ("pause_partitions", "resume_partitions", "_get_active_partitions"):
        assert callable(getattr(faust_base.Consumer, name, None)), relied_on(
            f"Consumer.{name}", "is gone: backpressure cannot pause partitions"
        )
    source = inspect.getsource(faust_consumer.Consumer._wait_next_records)
    assert "self._get_active_partitions()" in source, relied_on(
        "Consumer._wait_next_records", "no longer fetches only the active partitions"
    )

    async def check() -> None:
        got: list[Any] = []

        async def callback(message: Any) -> None:
            got.append(message.value)

        _, c = make_consumer(callback)
        tp = TP(BULK_TOPIC, 0)
        c.highwater = lambda tp: 100  # type: ignore[method-assign]  (no consumer thread here)
        c.assignment = lambda: {tp}  # type: ignore[method-assign]
        c._set_active_tps({tp})
        active = c._get_active_partitions()
        c.hold_back([tp])
        assert tp not in c._get_active_partitions() and c.held_back == {tp}
        await c._deliver({tp: [record(0), record(1)]}, active)
        assert len(got) == 1 and len(got[0]) == 2  # one block of both records
        c.let_go([tp])
        assert c.held_back == set() and tp in c._get_active_partitions()

    run(check())


def test_recovery_resumes_through_the_consumer_so_restoring_partitions_stay_paused() -> None:
    """Faust's recovery lets the whole assignment go through ``consumer.resume_partitions`` at
    the end of every rebalance; BulkConsumer's wrapper keeps partitions being restored paused
    (processors/runtime/restore.py), which only works while that is the way it resumes."""
    from faust.tables import recovery

    source = inspect.getsource(recovery.Recovery)
    assert "consumer.resume_partitions(" in source, relied_on(
        "Recovery", "no longer resumes partitions through Consumer.resume_partitions"
    )
    params = list(inspect.signature(faust_base.Consumer.resume_partitions).parameters)
    assert params == ["self", "tps"], relied_on(
        "Consumer.resume_partitions", f"changed signature to {params}"
    )

    async def check() -> None:
        _, c = make_consumer()
        tps = {TP(BULK_TOPIC, 0), TP(BULK_TOPIC, 1)}
        c.assignment = lambda: tps  # type: ignore[method-assign]
        c._set_active_tps(set(tps))
        c.hold_for_restore([TP(BULK_TOPIC, 0)], 7)
        c.resume_partitions(tps)
        assert c._get_active_partitions() == {TP(BULK_TOPIC, 1)}
        c.restore_ended([TP(BULK_TOPIC, 0)], 6)  # another pass's end: not this one's
        assert c._get_active_partitions() == {TP(BULK_TOPIC, 1)}
        c.restore_ended([TP(BULK_TOPIC, 0)], 7)
        assert c._get_active_partitions() == tps and c.restoring == {}

    run(check())


def test_stream_iteration_still_tracks_and_acks_as_take_waiting_does() -> None:
    """take_waiting/ack_taken mirror what Faust's stream iterator does per event: skip events
    of an old generation or a stopped flow, mark acking topics' messages tracked and pending
    (Consumer.track_message), and ack through Event.ack, then on_message_out."""
    source = inspect.getsource(faust.Stream._py_aiter)
    for needle in ("chan_queue", "generation_id != self.app.consumer_generation_id",
                   "flow_control.is_active()", "message.tracked = True", "add_unacked(message)",
                   "event.ack()", "on_message_out("):  # fmt: skip
        assert needle in source, relied_on("Stream._py_aiter", f"no longer has {needle!r}")
    for name in ("track_message", "ack"):
        assert callable(getattr(faust_base.Consumer, name, None)), relied_on(
            f"Consumer.{name}", "is gone"
        )


def test_app_new_web_leaves_the_root_path_to_the_worker() -> None:
    fn = getattr(faust.App, "_new_web", None)
    assert callable(fn), relied_on("faust.App._new_web", "is missing")
    app = BulkApp("faust-bulk-contract-web", broker="kafka://localhost:1", web_enabled=True,
                  web_router_enabled=False, web_tables_enabled=False)  # fmt: skip

    @app.page("/")
    async def index(web: Any, request: Any) -> Any:
        return web.html("")

    assert type(app.web).production_blueprints == [], relied_on(
        "App.web", "is no longer built by App._new_web()"
    )
    app.web.init_server()  # Faust's blueprints now: two routes for "/" would raise here
    paths = {r.resource.canonical for r in app.web.web_app.router.routes() if r.resource}
    assert "/" in paths and not any(p.startswith(("/router", "/table")) for p in paths), paths


def test_the_buffer_resumes_paused_partitions_one_per_take_and_all_when_got_empty() -> None:
    """resume_drained relies on mode's FlowControlQueue: a partition that delivers over the
    high mark (25 of 32) is paused with a pending callback; ``get_nowait`` at or under the drop
    size (12) resumes one, ``maybe_endorse_pressure_drop`` on an empty buffer all of them."""

    async def body() -> None:
        from mode.utils.queues import ThrowableQueue

        app, _ = make_consumer()
        assert isinstance(app.FlowControlQueue(maxsize=32), ThrowableQueue), relied_on(
            "App.FlowControlQueue", "no longer gives agents mode's ThrowableQueue"
        )
        queue, resumed = paused_buffer()
        assert len(queue._pending_pressure_drop_callbacks) == 4, relied_on(
            "FlowControlQueue._pending_pressure_drop_callbacks", "no longer holds paused ones"
        )
        assert queue.pressure_drop_size == 12, relied_on(
            "FlowControlQueue.pressure_drop_size", "changed"
        )
        for _ in range(20):  # sizes 30..11 before each take: two at or under 12
            queue.get_nowait()
        assert len(resumed) == 2, relied_on("FlowControlQueue.get_nowait", "resumes otherwise")
        while not queue.empty():
            queue.get_nowait()
        queue.maybe_endorse_pressure_drop()
        assert sorted(resumed) == [0, 1, 2, 3] and not queue._pending_pressure_drop_callbacks

    run(body())


def test_mode_workers_signal_handlers_call_on_sigterm_and_on_sigint() -> None:
    import mode.worker

    installed = inspect.getsource(mode.worker.Worker._install_signal_handlers_unix)
    for name in ("_on_sigterm", "_on_sigint"):
        assert f"self.{name}" in installed, relied_on(f"mode Worker.{name}", "is not called")
