"""Stateful stage agents: windows, MJoins and aggregates over bulk envelope topics.

One agent reads one or more internal envelope topics (an MJoin reads one per input stream, all
co-partitioned) and keeps one chain of stages per partition
(:class:`processors.physical.chain.StageChain`). Its state is snapshotted before every offset
commit and restored when a partition comes back (:mod:`processors.runtime.partitions`,
:mod:`processors.runtime.state`), so results stay the same across restarts and rebalances.

Unlike stateless stages, a failing ``push`` cannot be retried record by record: half of it may
have changed the state. So a batch the chain refuses as data (``ValueError``: a bad column, time
going backwards) becomes a dead letter before it touches the state, and anything else is a bug
that stops the worker without committing, to be redone after a restart. An envelope whose
columns are not those its input topic carries (:mod:`processors.runtime.layouts`) is refused
before the chain sees it: a window or join would pin its state to the wrong columns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from processors.core.batch import Batch, coalesce
from processors.physical.chain import StageChain
from processors.physical.joined import JoinedChain
from processors.runtime.context import (
    WAITING_BLOCKS,
    AgentContext,
    Cursor,
    Written,
    arrival_s,
    block_dead_letter,
    earliest,
    fatal,
    guard_agent,
)
from processors.runtime.exactly_once import ExactlyOnce
from processors.runtime.faust_bulk import ack_taken, take_waiting
from processors.runtime.layouts import Layout, layout_of, mismatch, narrowed
from processors.runtime.partitions import Held, PartitionUnits
from processors.runtime.record_block import RecordBlock
from processors.runtime.results import ResultWriter
from processors.runtime.state import StateSnapshots
from processors.runtime.stats import AgentStats
from topics.envelope import decode_batch, encode_envelopes

log = logging.getLogger(__name__)


def add_stateful_agent(
    ctx: AgentContext,
    *,
    name: str,
    in_topics: dict[str, str],
    out_topic: str,
    out_partitions: int,
    make_chain: Callable[[int], StageChain | JoinedChain],
    snapshots: StateSnapshots | ExactlyOnce,
    reset_state: bool = False,
    layouts: Mapping[str, Layout] | None = None,
    results: ResultWriter | None = None,
) -> AgentStats:
    """``in_topics`` maps each input topic to the stream its batches belong to. With
    ``reset_state``, a partition whose snapshot cannot be restored starts empty (logged)
    instead of stopping the worker. ``layouts`` (from
    :func:`processors.runtime.layouts.expected_layouts`) gives the columns each input topic's
    envelopes must have: any other envelope is a dead letter naming the columns, before it
    reaches (and poisons) the state (a join's streams pass their event-time progress to its
    MJoin inside the step: :mod:`processors.physical.joined`). With ``results`` (the
    plan's last step) the outputs are written as result records, not envelopes for a sink."""
    expected = dict(layouts or {})
    units = PartitionUnits(name, in_topics, make_chain, snapshots, reset_state)
    stats = ctx.board.agent(name, name, plan=units.plan)
    stats.topic = next(iter(in_topics))
    stats.out_topic = out_topic

    def emit(outputs: list[Batch], block: RecordBlock, arrival_ms: int | None) -> Written:
        target = block.partition if out_partitions > 1 else 0
        if results is None:
            return ctx.emit(name, out_topic, outputs, target, arrival_ms)
        try:
            encoded = results.encode(outputs)
        except Exception as exc:  # the state has moved on: the outputs become dead letters
            log.exception("%s: results of %s[%d] not encoded", name, block.topic, block.partition)
            batches_dead(block, [(b, f"stage {name}: results not encoded: {exc}") for b in outputs])
            return 0, 0
        return results.produce(encoded, target, arrival_ms)

    def batches_dead(block: RecordBlock, dead: list[tuple[Batch, str]]) -> None:
        """Tuples the state has moved past, as dead letters (envelopes) with their reasons."""
        for batch, reason in dead:
            for payload in encode_envelopes(batch):
                ctx.dead_letter(
                    name, source_topic=block.topic, partition=block.partition,
                    offset=block.offsets[-1], key=None, value=payload, reason=reason,
                )  # fmt: skip
                stats.dead_letters += 1

    def stage_dead_letters(part: Held, block: RecordBlock) -> None:
        batches_dead(block, part.unit.take_dead_letters())

    def feed_some(
        part: Held, block: RecordBlock, start: int, start_at: int, limit: int, cursor: Cursor
    ) -> tuple[int, int, int]:
        """Feed envelopes from ``start`` on to the partition's chain until ``limit`` tuples;
        returns where it stopped, the tuples and the bytes fed. Envelopes are not cut: a window
        or join state changes a whole envelope at a time."""
        stream = in_topics[block.topic]
        n_in = nbytes = 0
        index = start
        while index < len(block) and n_in < limit:
            value = block.values[index]
            offset = block.offsets[index]
            index += 1
            if offset < start_at:
                continue  # already in the restored state
            cursor.at(block.topic, block.partition, offset)
            nbytes += len(value or b"")
            try:
                batch = decode_batch(value or b"")
            except Exception as exc:
                block_dead_letter(ctx, name, block, index - 1, f"bad batch envelope: {exc}")
                stats.dead_letters += 1
                continue
            layout = expected.get(block.topic)
            # an envelope without tuples (event-time progress) cannot pin or poison a state
            wrong = None if layout is None or not len(batch) else mismatch(layout, layout_of(batch))
            # more fields than the step reads (written before an upgrade): the ones it reads
            fewer = None if wrong is None or layout is None else narrowed(layout, batch)
            if fewer is not None:
                batch, wrong = fewer, None
            if wrong is not None:  # refused before the chain sees it: the state stays clean
                reason = f"stage {name}: envelope of {block.topic} has {wrong}"
                log.warning("%s: %s[%d]@%d refused: %s", name, block.topic, block.partition,
                            offset, reason)  # fmt: skip
                block_dead_letter(ctx, name, block, index - 1, reason)
                stats.dead_letters += 1
                continue
            try:
                part.unit.feed(stream, batch)
            except ValueError as exc:  # refused as data, state untouched
                log.warning("%s: %s[%d]@%d refused: %s", name, block.topic,
                            block.partition, offset, exc)  # fmt: skip
                block_dead_letter(ctx, name, block, index - 1, f"stage {name}: {exc}")
                stats.dead_letters += 1
                continue
            except Exception as exc:  # a bug: the state may be half changed
                fatal(name, exc)
            n_in += len(batch)
        part.positions[block.topic] = block.offsets[index - 1] + 1
        part.dirty = True
        stats.positions[block.partition] = block.offsets[index - 1] + 1
        stats.topic_positions[(block.topic, block.partition)] = block.offsets[index - 1] + 1
        return index, n_in, nbytes

    def drain(part: Held, block: RecordBlock, arrival_ms: int | None) -> Written:
        """What the partition's fed envelopes make its chain output, written: one envelope per
        run of outputs and one progress mark per turn, not per input envelope, so the next
        step's per-envelope cost (a join's per-call cost) is paid once (docs/benchmarks.md)."""
        outputs = coalesce([o for o in part.unit.drain() if len(o)])
        written = emit(outputs, block, arrival_ms)
        stage_dead_letters(part, block)
        return written

    async def push_blocks(todo: list[RecordBlock], cursor: Cursor) -> None:
        """The blocks in turns of up to a turn's worth of tuples; in each turn every block's
        envelopes are fed first and each partition's chain drained once after them."""
        # each block's unit is taken before waiting for a turn: a partition revoked meanwhile
        # is left to its new owner, who restores its state and redoes the rest
        work = []
        for block in todo:
            if not units.holds(block.partition):
                continue  # taken before its partition was revoked: the new owner's now
            if block.offsets:  # a unit that cannot be made or restored names its input
                cursor.at(block.topic, block.partition, block.offsets[0], block.offsets[-1])
            part = units.get(block.partition)
            work.append([block, part, part.restored_from.get(block.topic, 0), 0])
        estimate = max(stats.tuples_in // max(stats.messages_in, 1), 1)
        at = 0
        while at < len(work):
            limit = ctx.turn_tuples(stats)
            block, _, _, index = work[at]
            left = sum(len(w[0]) - w[3] for w in work[at:])
            arrival = block.arrival_ms(index, index + 1)
            async with ctx.arbiter.turn(name, arrival_s(arrival), min(estimate * left, limit)):
                started = time.perf_counter_ns()
                fed: dict[int, tuple[Held, RecordBlock, int | None]] = {}
                n_in = nbytes = messages = 0
                while at < len(work) and n_in < limit:
                    block, part, start_at, index = work[at]
                    if units.held.get(block.partition) is not part:
                        at += 1  # revoked while waiting
                        continue
                    with ctx.unit(name, block.partition):
                        stop, tuples, size = feed_some(
                            part, block, index, start_at, limit - n_in, cursor
                        )
                    n_in, nbytes, messages = n_in + tuples, nbytes + size, messages + stop - index
                    oldest = block.arrival_ms(index, stop)
                    if block.partition in fed:
                        oldest = earliest(fed[block.partition][2], oldest)
                    fed[block.partition] = (part, block, oldest)
                    work[at][3] = stop
                    if stop >= len(block):
                        at += 1
                n_out = written = 0
                for partition, (part, last, arrival_ms) in fed.items():
                    with ctx.unit(name, partition):
                        outs, nbytes_out = drain(part, last, arrival_ms)
                    n_out, written = n_out + outs, written + nbytes_out
                elapsed = time.perf_counter_ns() - started
                stats.record(n_in, n_out, elapsed, messages, nbytes, written)

    async def run(blocks: Any, cursor: Cursor) -> None:
        async for first in blocks:
            # the blocks already waiting come along: one turn for several, not a loop cycle
            # each, and the join drains once for all of them
            waiting = take_waiting(blocks, WAITING_BLOCKS)
            todo = [first, *(e.value for e in waiting)]
            for block in todo:
                if not isinstance(block, RecordBlock):
                    fatal(name, TypeError(f"got {type(block).__name__}, not a RecordBlock"))
            await push_blocks(todo, cursor)
            ack_taken(waiting)
            if ctx.memory is not None:
                ctx.memory.check()

    units.connect(ctx.app, ctx.flush, ctx.restorer)
    ctx.register(name, in_topics, units)
    memory = ctx.memory
    if memory is not None:
        streams = {stream: topic for topic, stream in in_topics.items()}
        memory.watch(name, units, streams, out_topic)
        stats.memory = memory.stats
    source = ctx.app.topic(*in_topics, value_serializer="raw", key_serializer="raw")
    ctx.app.agent(source, name=name)(guard_agent(name, run))
    if memory is None:
        stats.new_events = units.events
    else:
        stats.new_events = lambda: units.events() + memory.take_events(name)
    return stats
