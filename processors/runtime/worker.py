"""A streamon worker: one Faust app running one query's agents.

The query's logical plan becomes a chain of agents connected by internal envelope topics::

    input --ingest--> streamon.<q>.ingest.<stream> --stage...--> streamon.<q>.out --sink--> result

Several workers started for the same query form one consumer group and share the partitions.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from processors.core.batch import Batch
from processors.core.query import LogicalPlan
from processors.runtime.agents import (
    AgentContext,
    add_ingest_agent,
    add_sink_agent,
    add_stage_agent,
    backlog_of,
)
from processors.runtime.arbiter import Arbiter
from processors.runtime.control import CONTROL_TOPIC, PRIORITIES, control_key, control_topic_spec
from processors.runtime.deadletter import DeadLetters
from processors.runtime.faust_bulk import BulkApp
from processors.runtime.producer import RecordProducer
from processors.runtime.scheduler import Scheduling, add_scheduling_agents
from processors.runtime.state import StateSnapshots
from processors.runtime.stateful import add_stateful_agent
from processors.runtime.stats import StatsBoard
from processors.stages.base import PassThroughStage, Stage
from topics.columnar import RecordCodec
from topics.envelope import decode_batch, encode_batch
from topics.specs import TopicSpec

log = logging.getLogger(__name__)

STATS_TOPIC = "streamon.stats"
DEAD_LETTER_TOPIC = "streamon.deadletters"
FILTER_STAGE = "filter"
SINK_AGENT = "sink"
#: Faust's per-agent buffer of fetched events (its default, 4096 fetched runs, is unbounded in
#: practice: a run can hold thousands of records)
STREAM_BUFFER_EVENTS = 32
#: synthetic operator stages are named OPERATOR_PREFIX + the operator's name
OPERATOR_PREFIX = "op."


def is_bulk_stage(name: str) -> bool:
    """Stage agents that read their input in bulk and batch several envelopes per call."""
    return name == FILTER_STAGE or name.startswith(OPERATOR_PREFIX)


def internal_topic(query: str, name: str) -> str:
    return f"streamon.{query}.{name}"


@dataclass
class WorkerOptions:
    """How to run a worker (everything but the query)."""

    bootstrap: str
    state_dir: Path
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    web_port: int | None = None  # None: no web endpoint; 0: pick a free port
    session_timeout_s: float = 6.0
    stats_interval_s: float = 1.0
    registry_url: str | None = None
    #: longest a fetch waits for data: the latency floor of every internal hop when input is
    #: sparse (Faust's own 1.5 s makes a six-agent pipeline seconds late at low rates)
    fetch_wait_ms: int = 100


@dataclass(frozen=True)
class StatefulStep:
    """A stateful agent: ``kind`` is stream (window and filters of ``stream``), mjoin or
    aggregate; it reads ``in_topics`` (topic -> stream) and writes ``out_topic``."""

    name: str
    kind: str
    in_topics: dict[str, str]
    out_topic: str
    out_partitions: int
    stream: str | None = None
    finish: bool = False  # projects to the result fields


@dataclass
class Pipeline:
    """The topics and stages a plan runs as."""

    ingest_topics: dict[str, str]  # stream name -> envelope topic written by its ingest agent
    stage_topics: list[tuple[str, str, str]]  # (stage name, in topic, out topic): stateless
    sink_topic: str
    specs: list[TopicSpec]
    stateful: list[StatefulStep] = field(default_factory=list)
    # stream -> partition its ingest writes every batch to (None: the record's own partition)
    ingest_partition: dict[str, int | None] = field(default_factory=dict)
    partitioning: dict[str, Any] | None = None


def is_simple(plan: LogicalPlan) -> bool:
    """One stream without window, projection or aggregate: ingest, filters, sink."""
    return (
        len(plan.streams) == 1 and not plan.windows and not plan.projected and not plan.aggregates
    )


def plan_pipeline(plan: LogicalPlan) -> Pipeline:
    """Topics and agents for a plan.

    Simple plans (one stream, filters at most) run ingest -> filter (or pass-through) -> sink.
    Others run ingest -> one stateful agent per stream (filters and window) -> the MJoin (with
    several streams) -> the GROUP BY (with aggregates) -> sink, on the partitions
    :func:`processors.core.partitioning.partitioning` allows.
    """
    if not is_simple(plan):
        return _general_pipeline(plan)
    (stream,) = plan.streams
    partitions = stream.partitions
    ingest = internal_topic(plan.name, f"ingest.{stream.name}")
    out = internal_topic(plan.name, "out")
    names = [FILTER_STAGE] if plan.filters else []
    names += [OPERATOR_PREFIX + op.name for op in plan.operators]
    names = names or ["passthrough"]
    # each stage reads what the one before wrote: ingest -> stage 1 -> ... -> out
    inputs = [ingest] + [internal_topic(plan.name, f"after.{n}") for n in names[:-1]]
    outputs = inputs[1:] + [out]
    specs = [
        TopicSpec(stream.topic, partitions),
        *(TopicSpec(t, partitions) for t in inputs),
        TopicSpec(out, partitions),
        TopicSpec(plan.result_topic, plan.result_partitions or 1),
        TopicSpec(STATS_TOPIC, 1),
        control_topic_spec(),
        TopicSpec(DEAD_LETTER_TOPIC, 1),
    ]
    stages = list(zip(names, inputs, outputs, strict=True))
    return Pipeline({stream.name: ingest}, stages, out, specs)


def _general_pipeline(plan: LogicalPlan) -> Pipeline:
    from processors.core.partitioning import partitioning

    part = partitioning(plan)
    specs = [TopicSpec(s.topic, s.partitions or 1) for s in plan.streams]
    ingest: dict[str, str] = {}
    ingest_partition: dict[str, int | None] = {}
    steps: list[StatefulStep] = []
    multi = len(plan.streams) > 1
    out = internal_topic(plan.name, "out")
    agg_in = internal_topic(plan.name, "joined") if plan.aggregates else out
    after_streams = internal_topic(plan.name, "delta") if multi else agg_in
    after_partitions = part.join if multi else part.aggregate if plan.aggregates else part.join
    for s in plan.streams:
        topic = internal_topic(plan.name, f"ingest.{s.name}")
        ingest[s.name] = topic
        p = part.streams[s.name]
        ingest_partition[s.name] = None if p == (s.partitions or 1) else 0
        specs.append(TopicSpec(topic, p))
        target = f"{after_streams}.{s.name}" if multi else after_streams
        steps.append(
            StatefulStep(
                f"stream.{s.name}", "stream", {topic: s.name}, target,
                part.join if multi else after_partitions, s.name,
                finish=not multi and not plan.aggregates,
            )
        )  # fmt: skip
        if multi:
            specs.append(TopicSpec(target, part.join))
    if multi:
        inputs = {f"{after_streams}.{s.name}": s.name for s in plan.streams}
        join_out = agg_in
        steps.append(
            StatefulStep(
                "mjoin", "mjoin", inputs, join_out,
                part.aggregate if plan.aggregates else part.join,
                finish=not plan.aggregates,
            )
        )  # fmt: skip
    if plan.aggregates:
        specs.append(TopicSpec(agg_in, part.aggregate))
        steps.append(
            StatefulStep("aggregate", "aggregate", {agg_in: "joined"}, out, part.aggregate)
        )
    out_partitions = part.aggregate if plan.aggregates else part.join
    specs += [
        TopicSpec(out, out_partitions),
        TopicSpec(plan.result_topic, plan.result_partitions or 1),
        TopicSpec(state_topic(plan.name), 1, compacted=True),
        TopicSpec(STATS_TOPIC, 1),
        control_topic_spec(),
        TopicSpec(DEAD_LETTER_TOPIC, 1),
    ]
    return Pipeline(ingest, [], out, specs, steps, ingest_partition, part.to_json())


def pipeline_paths(pipeline: Pipeline) -> dict[str, list[str]]:
    """The operator paths of the scheduling model (Babcock et al., Sect. 4.3): per input
    stream, the agents its tuples pass, from its ingest agent to the sink. Paths share their
    tail from the MJoin (or the first stage after ingest, for one stream) on."""
    stateless = [name for name, _, _ in pipeline.stage_topics]
    shared = [step.name for step in pipeline.stateful if step.kind != "stream"]
    paths = {}
    for stream in pipeline.ingest_topics:
        own = [s.name for s in pipeline.stateful if s.kind == "stream" and s.stream == stream]
        paths[stream] = [f"ingest.{stream}", *own, *stateless, *shared, SINK_AGENT]
    return paths


def state_topic(query: str) -> str:
    return internal_topic(query, "state")


def faust_settings(bootstrap: str, datadir: Path, session_timeout_s: float) -> dict[str, Any]:
    """The Faust settings every streamon app uses (see docs/faust-fast-path.md)."""
    return {
        "broker": ";".join(f"kafka://{host}" for host in bootstrap.split(",")),
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
    pipeline = plan_pipeline(plan)
    datadir = options.state_dir / "faust" / options.worker_id
    datadir.mkdir(parents=True, exist_ok=True)
    bulk_stage_topics = [t for name, t, _ in pipeline.stage_topics if is_bulk_stage(name)]
    bulk_stage_topics += [t for step in pipeline.stateful for t in step.in_topics]
    app = BulkApp(
        f"streamon-{plan.name}",
        bulk_topics=[s.topic for s in plan.streams] + bulk_stage_topics + [STATS_TOPIC],
        web_enabled=options.web_port is not None,
        web_port=options.web_port or 6066,
        web_bind="127.0.0.1",
        web_host="127.0.0.1",
        fetch_wait_ms=options.fetch_wait_ms,
        **faust_settings(options.bootstrap, datadir, options.session_timeout_s),
    )
    producer = RecordProducer(options.bootstrap)
    board = StatsBoard(options.worker_id, plan.name)
    config = plan.scheduling_config
    arbiter = Arbiter(busy=lambda: bool(getattr(app.consumer, "delivering", False)))
    ctx = AgentContext(
        app,
        board,
        DeadLetters(producer, DEAD_LETTER_TOPIC, options.worker_id),
        producer,
        arbiter,
        config.grant_tuples,
        config.quantum_ms / 1000.0,
    )
    app.flush_hooks.append(ctx.flush)  # before offsets commit: every output acknowledged
    scheduling = Scheduling(
        plan.name,
        pipeline_paths(pipeline),
        config,
        arbiter,
        lambda record: producer.produce(
            CONTROL_TOPIC, record, key=control_key(plan.name, PRIORITIES)
        ),
        options.worker_id,
    )
    add_scheduling_agents(app, board, scheduling, options.bootstrap, STATS_TOPIC, CONTROL_TOPIC)

    for stream in plan.streams:
        codec = _warm_up(RecordCodec(stream.schema, registry=_registry(options)))
        add_ingest_agent(
            ctx,
            name=f"ingest.{stream.name}",
            source_topic=stream.topic,
            codec=codec,
            timestamp_field=stream.timestamp,
            out_topic=pipeline.ingest_topics[stream.name],
            out_partition=pipeline.ingest_partition.get(stream.name),
        )
    if pipeline.stateful:
        snapshots = StateSnapshots(options.bootstrap, state_topic(plan.name), producer)
        for step in pipeline.stateful:
            add_stateful_agent(
                ctx,
                name=step.name,
                in_topics=step.in_topics,
                out_topic=step.out_topic,
                out_partitions=step.out_partitions,
                make_chain=_chain_factory(step, plan),
                snapshots=snapshots,
            )
    for name, in_topic, out_topic in pipeline.stage_topics:
        add_stage_agent(
            ctx,
            name=name,
            in_topic=in_topic,
            out_topic=out_topic,
            make_stage=_stage_factory(name, plan),
            bulk=is_bulk_stage(name),
        )
    add_sink_agent(
        ctx,
        name=SINK_AGENT,
        in_topic=pipeline.sink_topic,
        codec=_warm_up(RecordCodec(plan.output_schema, registry=_registry(options))),
        result_topic=plan.result_topic,
        result_partitions=plan.result_partitions or 1,
    )

    def backlog(stats: Any) -> tuple[int, int]:
        return backlog_of(app, stats)

    @app.timer(options.stats_interval_s)
    async def publish_stats() -> None:
        # an exception in a Faust timer stops the worker: statistics must never do that
        try:
            for record in board.report(backlog):
                producer.produce(STATS_TOPIC, record, key=options.worker_id.encode())
        except Exception:
            log.exception("worker %s: statistics not published this time", options.worker_id)

    status = {
        "worker_id": options.worker_id,
        "query": plan.name,
        "plan": plan.to_json(),
        "partitioning": pipeline.partitioning,
    }

    @app.page("/streamon/status")
    async def status_page(web: Any, request: Any) -> Any:
        body = {
            **status,
            "stats": board.snapshot(backlog),
            "scheduling": scheduling.snapshot(),
            "assignment": _assignment(app),
        }
        return web.json(body)

    @app.page("/streamon/plan")
    async def plan_page(web: Any, request: Any) -> Any:
        return web.json(status["plan"])

    return app, producer


def _chain_factory(step: StatefulStep, plan: LogicalPlan) -> Callable[[int], Any]:
    """Makes the stage chain of a stateful step for one partition."""
    from processors.stages.query_stages import AggregateChain, JoinChain, StreamChain

    def make(partition: int) -> Any:
        if step.kind == "stream":
            assert step.stream is not None
            return StreamChain(plan, step.stream, partition, step.finish)
        if step.kind == "mjoin":
            return JoinChain(plan, partition, step.finish)
        return AggregateChain(plan, partition)

    make(0)  # compiles the kernels now, not in the first batch's time
    return make


def _stage_factory(name: str, plan: LogicalPlan) -> Callable[[int], Stage]:
    """Makes the stage ``name`` of ``plan`` for one partition."""
    if name.startswith(OPERATOR_PREFIX):
        from processors.stages.synthetic_stage import SyntheticStage

        op = next(o for o in plan.operators if OPERATOR_PREFIX + o.name == name)
        return lambda partition: SyntheticStage(op.name, op.cost_us * 1000, op.selectivity, op.key)
    if name != FILTER_STAGE:
        return lambda partition: PassThroughStage(name)
    from processors.stages.filter_stage import FilterStage

    (stream,) = plan.streams
    config = plan.ordering_config

    def make(partition: int) -> Stage:
        # each partition profiles with its own random stream, reproducibly; its log lines and
        # stats name the partition
        return FilterStage.from_plan(
            plan,
            stream.name,
            config.with_(seed=config.seed + partition),
            name=f"{name}[{partition}]",
        )

    make(0)  # loads the stage's numba kernels now (~0.4 s), not in the first batch's time
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_worker(plan: LogicalPlan, options: WorkerOptions, loglevel: str = "info") -> None:
    """Create the plan's topics, then run its agents until SIGTERM/SIGINT (graceful stop)."""
    import faust
    import mode.loop

    from topics.admin import ensure_topics

    mode.loop.use("uvloop")
    if options.web_port == 0:
        options.web_port = free_port()
    ensure_topics(options.bootstrap, plan_pipeline(plan).specs)
    app, producer = build_app(plan, options)
    info = options.state_dir / "workers" / f"{options.worker_id}.json"
    info.parent.mkdir(parents=True, exist_ok=True)
    web = f"http://127.0.0.1:{options.web_port}/streamon/status" if options.web_port else None
    info.write_text(
        json.dumps({"worker_id": options.worker_id, "pid": os.getpid(), "status_url": web})
    )
    log.info("worker %s runs query %s; status: %s", options.worker_id, plan.name, web)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    try:
        worker.execute_from_commandline()
    finally:
        producer.close()
        info.unlink(missing_ok=True)
