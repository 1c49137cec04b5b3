"""A streamon worker: one Faust app running one query's agents.

The query's logical plan is compiled into steps (:mod:`processors.physical.compiler`); each
step becomes an agent, connected to the next by internal envelope topics::

    input --ingest--> streamon.<q>.ingest.<stream> --step...--> streamon.<q>.out --sink--> result

Several workers started for the same query form one consumer group and share the partitions.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from processors.core.batch import Batch
from processors.core.cost.live import LiveExplain
from processors.core.partitioning import with_input_partitions
from processors.core.plan import LogicalPlan
from processors.physical.build import chain_factory, stage_factory
from processors.physical.compiler import compile_plan
from processors.physical.steps import SINK_AGENT, PhysicalPlan
from processors.runtime import quiet_logs
from processors.runtime.agents import add_sink_agent, backlog_of, commit_lags
from processors.runtime.arbiter import Arbiter
from processors.runtime.backpressure import (
    CHECK_EVERY_S,
    TRIM_EVERY_S,
    MemoryLimit,
    freeze_heap,
    resident_bytes,
    trim_heap,
)
from processors.runtime.broker import free_port
from processors.runtime.context import AgentContext
from processors.runtime.control import CONTROL_TOPIC, PRIORITIES, control_key, control_topic_spec
from processors.runtime.cpu_priority import current_scheduling, request_realtime
from processors.runtime.deadletter import DeadLetters
from processors.runtime.exactly_once import ExactlyOnce
from processors.runtime.faust_bulk import BulkApp, StoppableWorker
from processors.runtime.fused import FusedTail
from processors.runtime.ingest import add_ingest_agent, input_codec
from processors.runtime.kafka_security import KafkaSecurity, current_security, faust_credentials
from processors.runtime.layouts import expected_layouts
from processors.runtime.producer import RecordProducer
from processors.runtime.restore import Restorer
from processors.runtime.results import ResultWriter, SharesStamp
from processors.runtime.scheduler import Scheduling, add_scheduling_agents
from processors.runtime.shedding import Shedding, stats_interval_s
from processors.runtime.stage_agent import add_stage_agent
from processors.runtime.state import StateSnapshots
from processors.runtime.stateful import add_stateful_agent
from processors.runtime.stats import StatsBoard
from processors.runtime.topics_watch import TOPICS_CHECK_S, TopicsWatch
from processors.runtime.warm_up import warm_kernels
from processors.runtime.web_auth import check_exposure
from processors.runtime.web_pages import add_pages, pipeline_graph
from topics.columnar import RecordCodec
from topics.envelope import decode_batch, encode_batch
from topics.specs import TopicSpec

log = logging.getLogger(__name__)


#: when, after the app starts, start-up objects are frozen (:func:`freeze_heap`)
FREEZE_AFTER_S = 5.0
#: linger of the output producer (envelopes between steps, results): every internal hop waits
#: up to this long for its batch to fill (librdkafka batches while a request is in flight
#: anyway, so a longer linger buys little throughput here)
OUTPUT_LINGER_MS = 1

STATS_TOPIC = "streamon.stats"
DEAD_LETTER_TOPIC = "streamon.deadletters"
#: Faust's per-agent buffer of fetched events (its default, 4096 fetched runs, is unbounded in
#: practice: a run can hold thousands of records)
STREAM_BUFFER_EVENTS = 32


@dataclass
class WorkerOptions:
    """How to run a worker (everything but the query)."""

    bootstrap: str
    state_dir: Path
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    web_port: int | None = None  # None: no web endpoint; 0: pick a free port
    #: where the web endpoints listen: loopback unless told (``--web-host``); with
    #: ``web_token`` every request needs it as a bearer token (processors.runtime.web_auth)
    web_host: str = "127.0.0.1"
    web_token: str | None = None
    session_timeout_s: float = 6.0
    stats_interval_s: float = 1.0
    registry_url: str | None = None
    #: longest a fetch waits for data. Apache Kafka answers a fetch as soon as data arrive, so
    #: there it only bounds the idle polling; tansu (development and tests) holds every fetch
    #: for about half of it even when data arrive, which makes it a cost of every internal
    #: hop: 100 ms gave 0-50 ms a hop (p50 27), 20 ms gives 0-12 ms (p50 6), for about 8% of a
    #: core of polling by an idle worker instead of 3% (5 ms: 0-5 ms, 17%). Faust's own 1.5 s
    #: makes a six-agent pipeline seconds late at low rates.
    fetch_wait_ms: int = 20
    #: a partition whose stored state cannot be restored starts empty (logged) instead of
    #: stopping the worker (``streamon worker --reset-state``)
    reset_state: bool = False
    #: run the worker's threads under SCHED_RR when permitted (runtime/cpu_priority.py)
    realtime: bool = False
    #: TLS/SASL settings of every client of the worker; None: the process's (kafka_security)
    kafka: KafkaSecurity | None = None


def topic_specs(physical: PhysicalPlan) -> list[TopicSpec]:
    """Every topic a worker of the plan needs: the plan's and the workers' shared ones."""
    shared = [TopicSpec(STATS_TOPIC, 1), control_topic_spec(), TopicSpec(DEAD_LETTER_TOPIC, 1)]
    return [*physical.specs, *shared]


def faust_settings(
    bootstrap: str,
    datadir: Path,
    session_timeout_s: float,
    security: KafkaSecurity | None = None,
) -> dict[str, Any]:
    """The Faust settings every streamon app uses (see docs/faust-fast-path.md); its aiokafka
    consumer, producer and admin client authenticate with ``security`` (default: the
    process's settings) through ``broker_credentials``."""
    return {
        "broker": ";".join(f"kafka://{host}" for host in bootstrap.split(",")),
        "broker_credentials": faust_credentials(security or current_security()),
        "value_serializer": "raw",
        "key_serializer": "raw",
        "datadir": str(datadir),
        "broker_session_timeout": session_timeout_s,
        "broker_heartbeat_interval": max(0.5, session_timeout_s / 4),
        "broker_commit_interval": 1.0,
        "broker_max_poll_records": 20_000,
        "consumer_max_fetch_size": 8 * 1024 * 1024,
        "consumer_auto_offset_reset": "earliest",
        "producer_linger": 0.005,
        "producer_max_batch_size": 524_288,
        # events (fetched runs of records) an agent may have waiting: past that, Faust pauses
        # the partition until the agent catches up, so prefetch stays bounded while the
        # arbiter grants turns to others
        "stream_buffer_maxsize": STREAM_BUFFER_EVENTS,
        "topic_disable_leader": True,
        "topic_replication_factor": 1,
    }


def build_app(plan: LogicalPlan, options: WorkerOptions) -> tuple[BulkApp, RecordProducer]:
    """A Faust app with the plan's agents, stats timer and status page, and its output producer."""
    pipeline = compile_plan(plan)
    datadir = options.state_dir / "faust" / options.worker_id
    datadir.mkdir(parents=True, exist_ok=True)
    bulk_stage_topics = [
        t for step in pipeline.steps if step.bulk and not pipeline.fused for t in step.in_topics
    ]
    app = BulkApp(
        f"streamon-{plan.name}",
        bulk_topics=[s.topic for s in plan.streams] + bulk_stage_topics + [STATS_TOPIC],
        web_enabled=options.web_port is not None,
        web_port=options.web_port or 6066,
        web_bind=options.web_host,
        web_host=options.web_host,
        # Faust's own pages would bypass the token guard; the worker uses no Faust tables
        web_router_enabled=False,
        web_tables_enabled=False,
        fetch_wait_ms=options.fetch_wait_ms,
        **faust_settings(options.bootstrap, datadir, options.session_timeout_s, options.kafka),
    )
    producer = RecordProducer(
        options.bootstrap, extra={"linger.ms": OUTPUT_LINGER_MS}, security=options.kafka
    )
    board = StatsBoard(options.worker_id, plan.name)
    config = plan.scheduling_config
    arbiter = Arbiter(busy=lambda: bool(getattr(app.consumer, "delivering", False)))
    snapshots = None
    if pipeline.state_topic is not None:
        snapshots = StateSnapshots(
            options.bootstrap, pipeline.state_topic, producer, security=options.kafka
        )
    restorer = None
    if snapshots is not None:  # before any agent's receivers: a pass restores every unit
        restorer = Restorer(snapshots, lambda: app.consumer)
        restorer.connect(app)
    eo = None
    if plan.processing_guarantee == "exactly_once":
        assert snapshots is not None and restorer is not None  # every such plan has state
        eo = ExactlyOnce(producer, snapshots, options.bootstrap, options.kafka, options.reset_state)
        eo.connect(app, restorer)
    output = producer if eo is None else eo
    memory = None
    if pipeline.state_topic is not None:
        memory = MemoryLimit(
            plan.memory_limit_mb << 20, lambda: app.consumer, resident=resident_bytes
        )
    ctx = AgentContext(
        app,
        board,
        DeadLetters(output, DEAD_LETTER_TOPIC, options.worker_id),
        output,
        arbiter,
        config.grant_tuples,
        config.quantum_ms / 1000.0,
        eo,
        memory,
        restorer,
    )
    app.flush_hooks.append(ctx.flush)  # before offsets commit: every output acknowledged
    ctx.shedding = Shedding.of(
        plan,
        lambda value, key: producer.produce(CONTROL_TOPIC, value, key=key),
        options.worker_id,
        consumer=lambda: app.consumer,
    )
    board.observers.append(ctx.shedding.on_own_stats)  # at once; the topic's copy is a repeat
    scheduling = Scheduling(
        plan.name,
        pipeline.paths(),
        config,
        arbiter,
        lambda record: producer.produce(
            CONTROL_TOPIC, record, key=control_key(plan.name, PRIORITIES)
        ),
        options.worker_id,
    )
    add_scheduling_agents(
        app, board, scheduling, options.bootstrap, STATS_TOPIC, CONTROL_TOPIC,
        security=options.kafka, others=(ctx.shedding,),
    )  # fmt: skip

    out_codec = _warm_up(RecordCodec(plan.output_schema, registry=_registry(options)))
    results = None
    if not pipeline.sink_agent:
        stamp = SharesStamp.of(plan, ctx.shedding.kept_fraction)
        results = ResultWriter(ctx, out_codec, plan.result_topic, plan.result_partitions or 1,
                               SINK_AGENT, stamp)  # fmt: skip
    tail = _fused_tail(ctx, plan, pipeline, results) if pipeline.fused else None
    for stream in plan.streams:
        codec = _warm_up(input_codec(plan, stream, _registry(options)))
        add_ingest_agent(
            ctx,
            name=f"ingest.{stream.name}",
            source_topic=stream.topic,
            codec=codec,
            timestamp_field=stream.timestamp,
            out_topic=pipeline.ingest_topics[stream.name],
            route=pipeline.ingest_routes[stream.name],
            idle_timeout_ms=plan.idle_timeout_ms,
            tail=tail,
            drop_box=ctx.shedding.box(stream.name),
        )
    if tail is None:
        _add_step_agents(ctx, plan, pipeline, options, snapshots, eo, out_codec, results)

    watch = TopicsWatch(options.bootstrap, (s.name for s in topic_specs(pipeline)), options.kafka)
    watch.before_output_stops()

    @app.timer(TOPICS_CHECK_S)
    async def topics_still_there() -> None:
        await asyncio.get_running_loop().run_in_executor(None, watch.stop_if_gone)

    if memory is not None:

        @app.timer(TRIM_EVERY_S)
        async def return_freed_memory() -> None:
            trim_heap()

        @app.timer(CHECK_EVERY_S * 4)
        async def keep_memory_limit() -> None:
            memory.check()  # with every input paused, no block comes to check after

    @app.task
    async def quiet_repeated_logs() -> None:
        """Once Faust has set logging up: a broker that is away is one warning per 5 s."""
        quiet_logs.install()

    @app.task
    async def freeze_start_up_objects() -> None:
        """Once the worker has started: what start-up built (numba's kernels, Faust, the
        clients) moves out of the collector's sight. Otherwise each full collection walks it
        all: 75-100 ms with every thread stopped, about every 1.2 s at 90k records/s (the
        largest share of the filter query's latency tail in ``streamon bench latency``)."""
        await asyncio.sleep(FREEZE_AFTER_S)
        freeze_heap(collect=False)

    def backlog(stats: Any) -> tuple[int, int]:
        return backlog_of(app, stats)

    @app.timer(stats_interval_s(plan, options.stats_interval_s))
    async def publish_stats() -> None:
        # an exception in a Faust timer stops the worker: statistics must never do that
        try:
            for record in board.report(backlog):
                producer.produce(STATS_TOPIC, record, key=options.worker_id.encode())
        except Exception:
            log.exception("worker %s: statistics not published this time", options.worker_id)

    check_exposure(options.web_host, options.web_token)
    status = {
        "worker_id": options.worker_id,
        "query": plan.name,
        "plan": plan.to_json(),
        "partitioning": pipeline.partitioning,
        "graph": pipeline_graph(plan, pipeline),
    }

    cost_model = LiveExplain(plan)  # the cost model on this worker's own statistics

    def status_body() -> dict[str, Any]:
        return {
            **status,
            "time_ms": int(time.time() * 1000),
            "stats": board.snapshot(backlog),
            "scheduling": scheduling.snapshot(),
            "shedding": ctx.shedding.snapshot(),
            "assignment": _assignment(app),
            "commit_lag": commit_lags(app),
            "exactly_once": None if eo is None else eo.stats(),
            "state": None if snapshots is None else {**snapshots.stats(), **restorer.stats()},
        }

    add_pages(app, options.web_token, status_body, status["plan"],
              lambda: cost_model.of(board.recent))  # fmt: skip
    return app, producer


def _fused_tail(
    ctx: AgentContext, plan: LogicalPlan, pipeline: PhysicalPlan, results: ResultWriter | None
) -> FusedTail:
    """The stage and result encode a fused plan's ingest agent runs (processors.runtime.fused)."""
    (step,) = pipeline.steps
    assert results is not None  # a fused plan has no sink agent
    return FusedTail(
        ctx,
        source_topic=plan.streams[0].topic,
        stage_name=step.name,
        make_stage=_warmed(stage_factory(plan, step)),
        results=results,
    )


def _add_step_agents(
    ctx: AgentContext,
    plan: LogicalPlan,
    pipeline: PhysicalPlan,
    options: WorkerOptions,
    snapshots: StateSnapshots | None,
    eo: ExactlyOnce | None,
    out_codec: RecordCodec,
    results: ResultWriter | None,
) -> None:
    """An agent per step, and the sink unless the last step writes the results (``results``):
    the plan's pipeline between ingest and the result topic."""
    layouts = expected_layouts(plan) if any(step.stateful for step in pipeline.steps) else {}
    for step in pipeline.steps:
        if step.stateful:
            assert snapshots is not None
            add_stateful_agent(
                ctx,
                name=step.name,
                in_topics=step.in_topics,
                out_topic=step.out_topic,
                out_partitions=step.out_partitions,
                make_chain=_warmed(chain_factory(plan, step)),
                snapshots=snapshots if eo is None else eo,
                reset_state=options.reset_state,
                layouts=layouts,
                results=results if step is pipeline.steps[-1] else None,
            )
        else:
            add_stage_agent(
                ctx,
                name=step.name,
                in_topic=step.in_topic,
                out_topic=step.out_topic,
                make_stage=_warmed(stage_factory(plan, step)),
                bulk=step.bulk,
            )
    if results is not None:
        assert pipeline.steps[-1].stateful, "a stateless last step writes through the sink"
        return
    add_sink_agent(
        ctx,
        name=SINK_AGENT,
        in_topic=pipeline.sink_topic,
        codec=out_codec,
        result_topic=plan.result_topic,
        result_partitions=plan.result_partitions or 1,
        stamp=SharesStamp.of(plan, ctx.shedding.kept_fraction),
    )


def _warmed(make: Callable[[int], Any]) -> Callable[[int], Any]:
    """``make`` after one call: the stages' numba kernels load now (~0.4 s), not in the first
    batch's time."""
    make(0)
    return make


def _warm_up(codec: RecordCodec) -> RecordCodec:
    """``codec`` after one record through it and through the envelope format: numba's start-up
    (~0.1 s) and kernel loading are paid here, not in the first batch an agent times."""
    decode_batch(encode_batch(Batch.inserts(codec.warm_up())))
    return codec


def _registry(options: WorkerOptions) -> Any:
    if not options.registry_url:
        return None
    from topics.avro import RegistryCodec

    return RegistryCodec(options.registry_url)


def _assignment(app: BulkApp) -> list[str]:
    try:
        return sorted(f"{tp.topic}[{tp.partition}]" for tp in app.consumer.assignment())
    except Exception:  # consumer not started yet
        return []


def _resolved(plan: LogicalPlan, options: WorkerOptions) -> LogicalPlan:
    """``plan`` with its input topics made (as declared) and their real partition counts."""
    from topics.admin import ensure_topics, partition_counts

    inputs = [TopicSpec(s.topic, s.partitions or 1) for s in plan.streams]
    ensure_topics(options.bootstrap, inputs, security=options.kafka)
    counts = partition_counts(options.bootstrap, [s.topic for s in plan.streams],
                              security=options.kafka)  # fmt: skip
    resolved = with_input_partitions(plan, counts)
    for old, new in zip(plan.streams, resolved.streams, strict=True):
        if old.partitions != new.partitions:
            log.info("stream %s: topic %s has %d partitions", new.name, new.topic, new.partitions)
    return resolved


def run_worker(plan: LogicalPlan, options: WorkerOptions, loglevel: str = "info") -> None:
    """Create the plan's topics, then run its agents until SIGTERM/SIGINT (graceful stop)."""
    import mode.loop

    from topics.admin import ensure_topics

    mode.loop.use("uvloop")
    scheduling = request_realtime() if options.realtime else current_scheduling()
    if options.web_port == 0:
        options.web_port = free_port()
    plan = _resolved(plan, options)
    ensure_topics(options.bootstrap, topic_specs(compile_plan(plan)), security=options.kafka)
    app, producer = build_app(plan, options)
    warmed_s = warm_kernels(plan)  # numba compiles now, not amid the first records
    freeze_heap()
    trim_heap()  # what the warm-up's records took goes back to the system
    info = options.state_dir / "workers" / f"{options.worker_id}.json"
    info.parent.mkdir(parents=True, exist_ok=True)
    host = "127.0.0.1" if options.web_host in ("0.0.0.0", "::") else options.web_host
    root = f"http://{host}:{options.web_port}" if options.web_port else None
    web = f"{root}/streamon/status" if root else None
    info.write_text(json.dumps({"worker_id": options.worker_id, "pid": os.getpid(),
                                "status_url": web, "page_url": root and f"{root}/",
                                "scheduling": scheduling,
                                "kernel_warm_up_s": round(warmed_s, 3)}))  # fmt: skip
    log.info("worker %s runs query %s; status: %s; plan page: %s/", options.worker_id,
             plan.name, web, root)  # fmt: skip

    def tidy(flush_s: float = 30.0) -> None:
        producer.close(timeout=flush_s)
        info.unlink(missing_ok=True)

    # stopped before its first assignment, the worker has read nothing: a short flush will do
    worker = StoppableWorker(
        app, on_early_exit=lambda: tidy(5.0), loglevel=loglevel, quiet=True,
        redirect_stdouts=False,
    )  # fmt: skip
    try:
        worker.execute_from_commandline()
    finally:
        tidy()
