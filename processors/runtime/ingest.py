"""The ingest agent: an input topic's Avro records -> batch envelopes on the stream's internal
topic, routed (:class:`processors.physical.steps.IngestRoute`).

Records come in bulk (RecordBlocks of one partition), are decoded by the columnar codec in one
call, and leave as envelopes. A record that does not decode is a dead letter with the reason;
a block whose bulk decode raises is decoded record by record so that only the bad records are
lost to the dead letters. Routing by key uses streamon's own hash
(:mod:`processors.kernels.routing`), so joins and GROUP BYs hold whatever partitioner the
producers used; event-time progress (watermarks, idle marks) goes along
(:mod:`processors.runtime.event_progress`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from faust.types import TP

from processors.core.batch import Batch, VarColumn
from processors.core.plan import LogicalPlan, StreamSpec
from processors.core.plan_columns import read_fields
from processors.physical.steps import IngestRoute
from processors.runtime.context import (
    WAITING_BLOCKS,
    AgentContext,
    Cursor,
    arrival_s,
    block_dead_letter,
    earliest,
    fatal,
    guard_agent,
    tuple_runs,
)
from processors.runtime.event_progress import NO_TS, EventProgress
from processors.runtime.faust_bulk import ack_taken, take_waiting
from processors.runtime.fused import FusedTail
from processors.runtime.record_block import RecordBlock
from processors.runtime.shedding import DropBox
from processors.runtime.stats import AgentStats
from processors.stages.merge_stage import SOURCE
from topics.avro import RegistryCodec, SchemaError
from topics.columnar import RecordCodec

log = logging.getLogger(__name__)

#: how often the ingest timer sends owed watermarks and looks for idle input partitions
PROGRESS_INTERVAL_S = 0.25


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


def input_codec(
    plan: LogicalPlan, stream: StreamSpec, registry: RegistryCodec | None = None
) -> RecordCodec:
    """The codec ``stream``'s ingest decodes with: only the fields the plan reads
    (:func:`processors.core.plan_columns.read_fields`), or all of them when the plan may read
    any or the kept fields cannot stand alone (a named type defined in a dropped field). The
    worker, its warm-up and its layout probe all decode with it, so they agree on columns."""
    codec = RecordCodec(stream.schema, registry=registry)
    keep = read_fields(plan, stream.name)
    if keep is None:
        return codec
    try:
        return codec.projected(keep)
    except SchemaError:
        return codec


def decode_block(
    block: RecordBlock,
    packed: tuple[np.ndarray, np.ndarray],
    codec: RecordCodec,
    ts_field: str | None,
) -> tuple[list[Batch], list[tuple[int, str]]]:
    """Bulk-decode a block's packed values: the batches, and (index, reason) of each record
    that does not decode."""
    result = codec.decode_many(*packed)
    good = result.good
    if ts_field is not None:
        ts = np.asarray(result.columns[ts_field], dtype=np.int64)
    else:
        ts = np.asarray(block.timestamps, dtype=np.int64)[good]
    batch = Batch(result.columns, np.ones(len(good), np.int8), ts)
    if not block.has_keys():  # most inputs: no key column to make
        return [batch], result.errors
    return with_keys(batch, [block.keys[i] for i in good.tolist()]), result.errors


def _block_to_batches(
    ctx: AgentContext,
    name: str,
    block: RecordBlock,
    packed: tuple[np.ndarray, np.ndarray],
    codec: RecordCodec,
    ts_field: str | None,
) -> list[Batch]:
    """Bulk-decode a block's packed values; undecodable records become dead letters."""
    batches, errors = decode_block(block, packed, codec, ts_field)
    for index, reason in errors:
        block_dead_letter(ctx, name, block, index, reason)
    return batches


def _one_by_one(
    ctx: AgentContext, name: str, block: RecordBlock, codec: RecordCodec, ts_field: str | None
) -> list[Batch]:
    """A block whose bulk decode raised, decoded record by record: each record that still
    fails becomes a dead letter of its own, the others go on."""
    out: list[Batch] = []
    for i in range(len(block)):
        one = block.record(i)
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
    route: IngestRoute | None = None,
    idle_timeout_ms: int = 3_000,
    tail: FusedTail | None = None,
    drop_box: DropBox | None = None,
) -> AgentStats:
    """External records -> envelopes, routed by ``route`` (default: each record's own
    partition). With ``route.progress`` the envelopes carry event-time progress, and a timer
    sends watermarks and idle marks (:mod:`processors.runtime.event_progress`). With ``tail``
    (a fused stateless plan) the decoded batches go to it instead: its stage runs here and
    the results go to the result topic (``out_topic`` is then unused). ``drop_box`` (load
    shedding) drops records before they are decoded; the agent's tuples in are all it read."""
    source = ctx.app.topic(source_topic, value_serializer="raw", key_serializer="raw")
    decodes = [f.name for f in codec.fields]  # the fields the query reads (input_codec)
    stats = ctx.board.agent(name, "ingest", plan=lambda: {"decodes": decodes})
    stats.topic = source_topic
    stats.out_topic = out_topic
    progress = None
    if route is not None and route.progress:
        progress = EventProgress(route.partitions, idle_timeout_ms)

    def send(batch: Batch, target: int, arrival_ms: int | None) -> int:
        return ctx.send_envelopes(name, out_topic, batch, target, arrival_ms)

    def redecode(block: RecordBlock, index: int) -> list[Batch]:
        """Record ``index`` decoded again (a fused tail's retry; its decode errors are known)."""
        one = block.record(index)
        try:
            decoded = decode_block(one, one.packed_values(), codec, timestamp_field)[0]
            return [b for b in decoded if len(b)]
        except Exception:  # reported as a dead letter on the first pass
            return []

    def ingest_unit(read: RecordBlock, arrival_ms: int | None) -> None:
        started = time.perf_counter_ns()
        dead_before = ctx.dead_letters.count
        block = read if drop_box is None else drop_box.apply(read)
        packed = block.packed_values()
        try:
            batches = _block_to_batches(ctx, name, block, packed, codec, timestamp_field)
        except Exception as exc:  # a bug or input nobody foresaw: record by record now
            log.exception("ingest %s failed on a block of %d records (%r); record by record now",
                          name, len(block), exc)  # fmt: skip
            batches = _one_by_one(ctx, name, block, codec, timestamp_field)
        batches = [b for b in batches if len(b)]
        now = time.monotonic()
        if progress is not None:
            top = max((int(b.ts.max()) for b in batches), default=NO_TS)
            progress.saw(block.partition, top, now)
        if tail is not None:  # its stage's dead letters are the stage's
            stats.dead_letters += ctx.dead_letters.count - dead_before
            n_out, written = tail(batches, block, arrival_ms, lambda i: redecode(block, i))
            elapsed = time.perf_counter_ns() - started
            stats.record(len(read), n_out, elapsed, len(read), int(packed[1][-1]), written)
            stats.positions[read.partition] = read.offsets[-1] + 1
            return
        written = 0
        targets: set[int] = set()
        parts = (
            [(block.partition, b) for b in batches]
            if route is None
            else (route.split(batches, block.partition))
        )
        if progress is not None:
            parts = progress.label(parts, block.partition)
        for target, part in parts:
            written += send(part, target, arrival_ms)
            targets.add(target)
        if progress is not None:
            progress.wrote(block.partition, targets, now)
            for target, mark in progress.owed(block.partition, now):
                written += send(mark, target, arrival_ms)
        stats.dead_letters += ctx.dead_letters.count - dead_before
        n_out = sum(len(batch) for batch in batches)
        nbytes = int(packed[1][-1])
        elapsed = time.perf_counter_ns() - started
        stats.record(len(read), n_out, elapsed, len(read), nbytes, written)
        stats.positions[read.partition] = read.offsets[-1] + 1

    def units_of(block: Any, limit: int) -> list[RecordBlock]:
        """A delivered block's records not done before, in units of at most ``limit``."""
        if not isinstance(block, RecordBlock):  # the bulk path is not installed: fail loudly
            fatal(name, TypeError(f"got {type(block).__name__}, not a RecordBlock"))
        end = block.offsets[-1] + 1 if len(block) else None
        block = block.from_offset(ctx.floor(name, block.topic, block.partition))
        if not len(block) and end is not None:  # all done before (exactly-once restart):
            moved = max(stats.positions.get(block.partition, 0), end)  # read to here
            stats.positions[block.partition] = moved
        return [unit for unit in block.split(limit) if len(unit)]

    def revive(now: float) -> None:
        def pending(partition: int) -> bool:
            return not _caught_up(ctx, name, source_topic, stats, partition)

        for target, mark in progress.revive(pending, now):  # type: ignore[union-attr]
            with ctx.unit(name, int(mark.meta[SOURCE])):
                send(mark, target, None)

    async def ingest(blocks: Any, cursor: Cursor) -> None:
        async for first in blocks:
            # the blocks already waiting come along: one turn for several, not a loop cycle each
            waiting = take_waiting(blocks, WAITING_BLOCKS)
            limit = ctx.turn_tuples(stats)
            todo = [u for b in (first, *(e.value for e in waiting)) for u in units_of(b, limit)]
            if progress is not None:  # partitions marked idle that have records again
                revive(time.monotonic())
            for turn in tuple_runs(todo, limit):
                arrival = earliest(*(u.arrival_ms() for u in turn))
                async with ctx.arbiter.turn(name, arrival_s(arrival), sum(map(len, turn))):
                    for unit in turn:
                        cursor.at(unit.topic, unit.partition, unit.offsets[0], unit.offsets[-1])
                        with ctx.unit(name, unit.partition):
                            ingest_unit(unit, unit.arrival_ms())
                        ctx.done(name, unit.partition, unit.topic, unit.offsets[-1] + 1)
            ack_taken(waiting)

    ctx.app.agent(source, name=name)(guard_agent(name, ingest))
    ctx.register(name, [source_topic])
    if progress is not None:
        _progress_timer(ctx, name, source_topic, stats, progress, send)
    return stats


def _caught_up(
    ctx: AgentContext, name: str, source_topic: str, stats: AgentStats, partition: int
) -> bool:
    """Whether the agent has read input ``partition`` to its end (by fetch high watermarks)."""
    try:
        high = ctx.app.consumer.highwater(TP(source_topic, partition))
    except Exception:  # revoked meanwhile
        return False
    at = stats.positions.get(partition)
    if at is None:  # nothing read since the assignment: where reading starts
        committed = ctx.app.consumer.committed_position(TP(source_topic, partition))
        at = max(committed or 0, ctx.floor(name, source_topic, partition))
    if high is None:  # no fetch answer yet: the partition may hold a backlog (a busy
        return False  # worker's first fetch can take seconds); every answer sets it
    return high <= at or high == 0


def _progress_timer(
    ctx: AgentContext,
    name: str,
    source_topic: str,
    stats: AgentStats,
    progress: EventProgress,
    send: Callable[[Batch, int, int | None], int],
) -> None:
    """Every quarter second: owed watermarks, and idle marks for quiet input partitions."""

    def held() -> list[int]:
        try:
            held = ctx.app.consumer.assignment()
            return [tp.partition for tp in held if tp.topic == source_topic]
        except Exception:  # the consumer is not started yet
            return []

    def caught_up(partition: int) -> bool:
        return _caught_up(ctx, name, source_topic, stats, partition)

    @ctx.app.timer(PROGRESS_INTERVAL_S)
    async def send_progress() -> None:
        try:
            idle_before = progress.idle_marks
            for target, mark in progress.tick(held(), caught_up, time.monotonic()):
                # a mark must not overtake the tuples it speaks of: in exactly-once mode those
                # wait in their unit's outbox, so the mark joins them there
                with ctx.unit(name, int(mark.meta[SOURCE])):
                    send(mark, target, None)
            if progress.idle_marks > idle_before:
                idle = sorted(p for p, src in progress.sources.items() if src.idle_sent_s)
                log.info("%s: input partitions %s of %s idle (read to the end, nothing new for "
                         "%.1f s): windows and joins stop waiting for them", name, idle,
                         source_topic, progress.idle_timeout_s)  # fmt: skip
        except SystemExit:
            raise
        except Exception:  # a timer that raises stops the worker: progress must not
            log.exception("%s: event-time progress not sent this time", name)
