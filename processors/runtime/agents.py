"""The Faust agents at a query's edges: ingest and sink (stage agents: stage_agent.py and
stateful.py).

- ingest: external topic (one Avro record per message, delivered in bulk as RecordBlocks) ->
  bulk Avro decode -> batch envelopes on an internal topic, same partition;
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

import numpy as np
from faust.types import TP

from processors.core.batch import Batch, VarColumn
from processors.runtime.context import (
    AgentContext,
    Cursor,
    Written,
    arrival_s,
    block_dead_letter,
    fatal,
    guard_agent,
)
from processors.runtime.faust_bulk import BulkApp, RecordBlock
from processors.runtime.stats import AgentStats
from topics.columnar import RecordCodec
from topics.envelope import decode_batch

log = logging.getLogger(__name__)


def _key_column(keys: list[bytes]) -> VarColumn:
    """Kafka keys as a binary column."""
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return VarColumn(offsets, np.frombuffer(b"".join(keys), dtype=np.uint8), utf8=False)


def with_keys(batch: Batch, keys: list[bytes | None]) -> list[Batch]:
    """``batch`` with the Kafka keys of its tuples, in order.

    A batch's key column is all or nothing, so a run of records without keys becomes a batch of
    its own: keyed records keep their keys and unkeyed ones stay unkeyed.
    """
    present = np.fromiter((k is not None for k in keys), dtype=np.bool_, count=len(keys))
    if not len(keys) or not present.any():
        return [batch]
    bounds = [0, *(np.flatnonzero(np.diff(present.view(np.int8))) + 1).tolist(), len(keys)]
    parts = []
    for start, stop in zip(bounds, bounds[1:], strict=False):
        part = batch if (start, stop) == (0, len(keys)) else batch.slice(start, stop)
        if present[start]:
            part.key = _key_column(keys[start:stop])  # type: ignore[arg-type]
        parts.append(part)
    return parts


def _block_to_batches(
    ctx: AgentContext,
    name: str,
    block: RecordBlock,
    packed: tuple[np.ndarray, np.ndarray],
    codec: RecordCodec,
    ts_field: str | None,
) -> list[Batch]:
    """Bulk-decode a block's packed values; undecodable records become dead letters."""
    result = codec.decode_many(*packed)
    for index, reason in result.errors:
        block_dead_letter(ctx, name, block, index, reason)
    good = result.good
    if ts_field is not None:
        ts = np.asarray(result.columns[ts_field], dtype=np.int64)
    else:
        ts = np.asarray(block.timestamps, dtype=np.int64)[good]
    batch = Batch(result.columns, np.ones(len(good), np.int8), ts)
    return with_keys(batch, [block.keys[i] for i in good.tolist()])


def _one_by_one(
    ctx: AgentContext, name: str, block: RecordBlock, codec: RecordCodec, ts_field: str | None
) -> list[Batch]:
    """A block whose bulk decode raised, decoded record by record: each record that still
    fails becomes a dead letter of its own, the others go on."""
    out: list[Batch] = []
    for i in range(len(block)):
        one = RecordBlock(block.topic, block.partition, block.offsets[i : i + 1],
                          block.timestamps[i : i + 1], block.keys[i : i + 1],
                          block.values[i : i + 1])  # fmt: skip
        try:
            out.extend(_block_to_batches(ctx, name, one, one.packed_values(), codec, ts_field))
        except Exception as exc:
            block_dead_letter(ctx, name, block, i, f"ingest failed: {exc!r}")
    return out


def add_ingest_agent(
    ctx: AgentContext,
    *,
    name: str,
    source_topic: str,
    codec: RecordCodec,
    timestamp_field: str | None,
    out_topic: str,
    out_partition: int | None = None,
) -> AgentStats:
    """External records -> envelopes, partition by partition (or all to ``out_partition``)."""
    source = ctx.app.topic(source_topic, value_serializer="raw", key_serializer="raw")
    stats = ctx.board.agent(name, "ingest")
    stats.topic = source_topic
    stats.out_topic = out_topic

    def ingest_unit(block: RecordBlock, arrival_ms: int | None) -> None:
        started = time.perf_counter_ns()
        dead_before = ctx.dead_letters.count
        packed = block.packed_values()
        try:
            batches = _block_to_batches(ctx, name, block, packed, codec, timestamp_field)
        except Exception as exc:  # a bug or input nobody foresaw: record by record now
            log.exception("ingest %s failed on a block of %d records (%r); record by record now",
                          name, len(block), exc)  # fmt: skip
            batches = _one_by_one(ctx, name, block, codec, timestamp_field)
        target = block.partition if out_partition is None else out_partition
        written = 0
        for batch in batches:
            if len(batch):
                written += ctx.send_envelopes(name, out_topic, batch, target, arrival_ms)
        stats.dead_letters += ctx.dead_letters.count - dead_before
        n_out = sum(len(batch) for batch in batches)
        nbytes = int(packed[1][-1])
        elapsed = time.perf_counter_ns() - started
        stats.record(len(block), n_out, elapsed, len(block), nbytes, written)
        stats.positions[block.partition] = block.offsets[-1] + 1

    async def ingest(blocks: Any, cursor: Cursor) -> None:
        async for block in blocks:
            if not isinstance(block, RecordBlock):  # the bulk path is not installed: fail loudly
                fatal(name, TypeError(f"got {type(block).__name__}, not a RecordBlock"))
            for unit in block.split(ctx.turn_tuples(stats)):
                if not len(unit):
                    continue
                cursor.at(unit.topic, unit.partition, unit.offsets[0], unit.offsets[-1])
                arrival = unit.arrival_ms()
                async with ctx.arbiter.turn(name, arrival_s(arrival), len(unit)):
                    ingest_unit(unit, arrival)

    ctx.app.agent(source, name=name)(guard_agent(name, ingest))
    return stats


def add_sink_agent(
    ctx: AgentContext,
    *,
    name: str,
    in_topic: str,
    codec: RecordCodec,
    result_topic: str,
    result_partitions: int,
) -> AgentStats:
    """Envelopes -> one Avro record per message on the result topic; deletes get a sign header.

    Result records carry the time they are produced; the sink also records each batch's output
    latency (now minus the arrival of its oldest input tuple) in its statistics."""
    Encoded = tuple[Batch, np.ndarray, np.ndarray]

    def encode(batch: Batch, partition: int) -> list[Encoded]:
        return [(batch, *codec.encode_many(batch.columns, len(batch)))]

    stats: AgentStats

    def emit(encoded: list[Encoded], partition: int, arrival_ms: int | None) -> Written:
        written = 0
        for batch, buf, offsets in encoded:
            try:
                ctx.producer.produce_many(
                    result_topic,
                    buf,
                    offsets,
                    keys=batch.key,
                    partition=partition % result_partitions,
                    signs=batch.sign if bool((batch.sign < 0).any()) else None,
                )
            except Exception as exc:
                fatal(name, exc)
            written += int(offsets[-1])
        if encoded:
            stats.record_latency(max(time.time() - arrival_s(arrival_ms), 0.0))
        return sum(len(batch) for batch, _, _ in encoded), written

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
            arrival = None if message.timestamp is None else int(message.timestamp * 1000)
            estimate = max(stats.tuples_in // max(stats.messages_in, 1), 1)
            async with ctx.arbiter.turn(name, arrival_s(arrival), estimate):
                started = time.perf_counter_ns()
                batch, outputs = _guarded(ctx, stats, name, message, work)
                n_out, written = emit(outputs, message.partition, arrival)
                n_in = 0 if batch is None else len(batch)
                elapsed = time.perf_counter_ns() - started
                stats.record(n_in, n_out, elapsed, 1, len(message.value), written)
                stats.positions[message.partition] = message.offset + 1

    ctx.app.agent(source, name=name)(guard_agent(name, run))
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
