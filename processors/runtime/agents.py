"""The sink agent and the stock envelope agent (ingest: ingest.py; stage agents:
stage_agent.py and stateful.py).

- ingest (ingest.py): external topic (one Avro record per message, delivered in bulk as
  RecordBlocks) -> bulk Avro decode -> batch envelopes on an internal topic, routed;
- stage: envelope topic -> ``Stage.process`` (one stage instance per partition) -> envelopes;
  either one event per envelope, or (``bulk=True``) one event per fetched run of envelopes,
  decoded and concatenated into batches of up to ``max_batch_tuples`` before ``process``, so
  that a stage's per-call cost is paid once per several envelopes;
- sink: envelope topic -> bulk Avro encode -> one record per message on the result topic.

Failures split in two. Input that cannot be decoded or processed is data: it becomes a dead
letter with the reason and the agent carries on. Output that cannot be written is not: Faust
acks an event even when the agent raises, so carrying on could commit past lost output; the
worker exits at once instead, without committing, and the input is delivered again on restart.
Every output (envelopes and records) goes through :class:`RecordProducer` (librdkafka: about
twice the envelope throughput of Faust's Python producer here), which the consumer flushes
before offsets are committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from faust.types import TP

from processors.core.batch import Batch
from processors.runtime.context import (
    AgentContext,
    Cursor,
    Written,
    arrival_s,
    guard_agent,
)
from processors.runtime.faust_bulk import BulkApp
from processors.runtime.results import Encoded, produce_results
from processors.runtime.stats import AgentStats
from topics.columnar import RecordCodec
from topics.envelope import decode_batch

log = logging.getLogger(__name__)


def add_sink_agent(
    ctx: AgentContext,
    *,
    name: str,
    in_topic: str,
    codec: RecordCodec,
    result_topic: str,
    result_partitions: int,
    stamp: Callable[[Batch], Batch] | None = None,
) -> AgentStats:
    """Envelopes -> one Avro record per message on the result topic; deletes get a sign header
    (``stamp``: the shares a query that sheds load writes beside its results).

    Result records carry the time they are produced; the sink also records each batch's output
    latency (now minus the arrival of its oldest input tuple) in its statistics."""

    def encode(batch: Batch, partition: int) -> list[Encoded]:
        if stamp is not None:
            batch = stamp(batch)
        return [(batch, *codec.encode_many(batch.columns, len(batch)))]

    stats: AgentStats

    def emit(encoded: list[Encoded], partition: int, arrival_ms: int | None) -> Written:
        written = produce_results(ctx, name, result_topic, result_partitions, encoded, partition)
        if encoded:
            stats.record_latency(max(time.time() - arrival_s(arrival_ms), 0.0))
        return written

    stats = _envelope_agent(ctx, name, in_topic, encode, emit, dict)
    stats.out_topic = result_topic
    return stats


def _envelope_agent(
    ctx: AgentContext,
    name: str,
    in_topic: str,
    work: Callable[[Batch, int], list[Any]],
    emit: Callable[[list[Any], int, int | None], Written],
    plan: Callable[[], dict[str, Any]],
) -> AgentStats:
    """A stock agent over an envelope topic: decode, ``work``, ``emit``; one turn per envelope."""
    source = ctx.app.topic(in_topic, value_serializer="raw", key_serializer="raw")
    stats = ctx.board.agent(name, name, plan=plan)
    stats.topic = in_topic

    async def run(events: Any, cursor: Cursor) -> None:
        async for event in events.events():
            message = event.message
            cursor.at(message.topic, message.partition, message.offset)
            if message.offset < ctx.floor(name, message.topic, message.partition):
                continue  # committed before a restart (exactly-once)
            arrival = None if message.timestamp is None else int(message.timestamp * 1000)
            estimate = max(stats.tuples_in // max(stats.messages_in, 1), 1)
            async with ctx.arbiter.turn(name, arrival_s(arrival), estimate):
                started = time.perf_counter_ns()
                with ctx.unit(name, message.partition):
                    batch, outputs = _guarded(ctx, stats, name, message, work)
                    n_out, written = emit(outputs, message.partition, arrival)
                n_in = 0 if batch is None else len(batch)
                elapsed = time.perf_counter_ns() - started
                stats.record(n_in, n_out, elapsed, 1, len(message.value), written)
                stats.positions[message.partition] = message.offset + 1
                ctx.done(name, message.partition, message.topic, message.offset + 1)

    ctx.app.agent(source, name=name)(guard_agent(name, run))
    ctx.register(name, [in_topic])
    return stats


def _guarded(
    ctx: AgentContext,
    stats: AgentStats,
    stage: str,
    message: Any,
    work: Callable[[Batch, int], list[Any]],
) -> tuple[Batch | None, list[Any]]:
    """Decode an envelope and run ``work`` on it; any failure makes the envelope a dead letter."""
    batch = None
    try:
        batch = decode_batch(message.value)
        return batch, work(batch, message.partition)
    except Exception as exc:
        what = "bad batch envelope" if batch is None else f"stage {stage} failed"
        if batch is not None:
            log.exception("%s on %s[%d]@%d", what, message.topic, message.partition, message.offset)
        ctx.dead_letter(
            stage,
            source_topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            key=message.key,
            value=message.value,
            reason=f"{what}: {exc}",
        )
        stats.dead_letters += 1
        return batch, []


def backlog_of(app: BulkApp, stats: AgentStats) -> tuple[int, int]:
    """Pending tuples/bytes of an agent's input, from fetch high watermarks minus positions.

    High watermarks come with fetch responses (not ListOffsets, which tansu answers wrongly).
    """
    held = app.consumer.assignment()
    pending = 0
    if stats.topic_positions:  # several input topics: each partition of each topic
        positions = {TP(t, p): at for (t, p), at in stats.topic_positions.items()}
    else:
        positions = {TP(stats.topic, p): at for p, at in stats.positions.items()}
    for tp, position in positions.items():
        if tp not in held:  # moved to another worker at a rebalance: its backlog is theirs now
            stats.positions.pop(tp.partition, None)
            stats.topic_positions.pop((tp.topic, tp.partition), None)
            continue
        try:
            high = app.consumer.highwater(tp)
        except AssertionError:  # revoked between the two calls (the consumer has its own thread)
            continue
        if high is not None and high > position:
            pending += high - position
    return stats.backlog(pending)


def commit_lags(app: BulkApp) -> list[dict[str, Any]]:
    """Per partition the worker holds: its fetch high watermark, the group's committed offset
    and their difference (records read or not whose offsets are not yet committed: what a
    restart would read again or for the first time). Faust's own partitions (``__...``) and
    partitions not fetched yet (no high watermark) are left out."""
    consumer = app.consumer
    out = []
    try:
        held = sorted(consumer.assignment())
    except Exception:  # consumer not started yet
        return []
    for tp in held:
        if tp.topic.startswith("__"):
            continue
        try:
            high = consumer.highwater(tp)
        except AssertionError:  # revoked meanwhile (the consumer has its own thread)
            continue
        if high is None:
            continue
        committed = consumer.committed_position(tp) or 0  # None: nothing committed yet
        lag = max(int(high) - int(committed), 0)
        out.append({"topic": tp.topic, "partition": tp.partition, "high_watermark": int(high),
                    "committed": int(committed), "lag": lag})  # fmt: skip
    return out
