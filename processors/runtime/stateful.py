"""Stateful stage agents: windows, MJoins and aggregates over bulk envelope topics.

One agent reads one or more internal envelope topics (an MJoin reads one per input stream, all
co-partitioned) and keeps one *chain* of stages per partition (:class:`StageChain`). Its state
is snapshotted before every offset commit and restored when a partition comes back
(:mod:`processors.runtime.state`), so results stay the same across restarts and rebalances.

Unlike stateless stages, a failing ``push`` cannot be retried record by record: half of it may
have changed the state. So a batch the chain refuses as data (``ValueError``: a bad column, time
going backwards) becomes a dead letter before it touches the state, and anything else is a bug
that stops the worker without committing, to be redone after a restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from processors.core.batch import Batch
from processors.runtime.agents import AgentContext, _block_dead_letter, arrival_s, fatal
from processors.runtime.faust_bulk import RecordBlock
from processors.runtime.state import StateSnapshots
from processors.runtime.stats import AgentStats
from topics.envelope import decode_batch, encode_envelopes

log = logging.getLogger(__name__)


class StageChain(Protocol):
    """The stages one partition of a stateful agent runs."""

    def push(self, stream: str, batch: Batch) -> list[Batch]: ...

    def take_dead_letters(self) -> list[tuple[Batch, str]]: ...

    def stats(self) -> dict[str, Any]: ...


class _Partition:
    """A chain with the input positions its state reflects."""

    def __init__(self, chain: StageChain, positions: dict[str, int]) -> None:
        self.chain = chain
        self.positions = dict(positions)
        self.restored_from = dict(positions)  # skip input the snapshot already covers
        self.dirty = False


def add_stateful_agent(
    ctx: AgentContext,
    *,
    name: str,
    in_topics: dict[str, str],
    out_topic: str,
    out_partitions: int,
    make_chain: Callable[[int], StageChain],
    snapshots: StateSnapshots,
) -> AgentStats:
    """``in_topics`` maps each input topic to the stream its batches belong to."""
    parts: dict[int, _Partition] = {}

    def plan() -> dict[str, Any]:
        return {str(p): part.chain.stats() for p, part in sorted(parts.items())}

    stats = ctx.board.agent(name, name, plan=plan)
    stats.topic = next(iter(in_topics))
    stats.out_topic = out_topic
    changes_seen: dict[int, int] = {}

    def partition_of(p: int) -> _Partition:
        part = parts.get(p)
        if part is None:
            loaded = snapshots.load(name, p)
            if loaded is None:
                part = _Partition(make_chain(p), {})
            else:
                positions, chain = loaded
                part = _Partition(chain, positions)
                log.info("%s[%d]: state restored at positions %s", name, p, positions)
            parts[p] = part
        return part

    def emit(outputs: list[Batch], partition: int, arrival_ms: int | None) -> tuple[int, int]:
        target = partition if out_partitions > 1 else 0
        written = 0
        for output in outputs:
            if len(output):
                written += ctx.send_envelopes(name, out_topic, output, target, arrival_ms)
        return sum(len(o) for o in outputs), written

    def stage_dead_letters(part: _Partition, block: RecordBlock) -> None:
        for batch, reason in part.chain.take_dead_letters():
            for payload in encode_envelopes(batch):
                ctx.dead_letters.send(
                    source_topic=block.topic, partition=block.partition,
                    offset=block.offsets[-1], key=None, value=payload, reason=reason, stage=name,
                )  # fmt: skip
                stats.dead_letters += 1

    def push_some(
        part: _Partition, block: RecordBlock, start: int, start_at: int, limit: int
    ) -> int:
        """Push envelopes from ``start`` on until a turn's worth (``limit``) of tuples; returns
        where it stopped. Counts what it did in the agent's statistics. Envelopes are not cut:
        a window or join state changes a whole envelope at a time."""
        started = time.perf_counter_ns()
        stream = in_topics[block.topic]
        n_in = n_out = nbytes = written = 0
        index = start
        while index < len(block) and n_in < limit:
            value = block.values[index]
            offset = block.offsets[index]
            index += 1
            if offset < start_at:
                continue  # already in the restored state
            nbytes += len(value or b"")
            try:
                batch = decode_batch(value or b"")
            except Exception as exc:
                _block_dead_letter(ctx, name, block, index - 1, f"bad batch envelope: {exc}")
                stats.dead_letters += 1
                continue
            try:
                outputs = part.chain.push(stream, batch)
            except ValueError as exc:  # refused as data, state untouched
                log.warning("%s: %s[%d]@%d refused: %s", name, block.topic,
                            block.partition, offset, exc)  # fmt: skip
                _block_dead_letter(ctx, name, block, index - 1, f"stage {name}: {exc}")
                stats.dead_letters += 1
                continue
            except Exception as exc:  # a bug: the state may be half changed
                fatal(name, exc)
            n_in += len(batch)
            out_tuples, out_bytes = emit(outputs, block.partition, block.arrival_ms(start, index))
            n_out += out_tuples
            written += out_bytes
        part.positions[block.topic] = block.offsets[index - 1] + 1
        part.dirty = True
        elapsed = time.perf_counter_ns() - started
        stats.record(n_in, n_out, elapsed, index - start, nbytes, written)
        stats.positions[block.partition] = block.offsets[index - 1] + 1
        return index

    async def run(blocks: Any) -> None:
        async for block in blocks:
            if not isinstance(block, RecordBlock):
                fatal(name, TypeError(f"got {type(block).__name__}, not a RecordBlock"))
            part = partition_of(block.partition)
            start_at = part.restored_from.get(block.topic, 0)
            estimate = max(stats.tuples_in // max(stats.messages_in, 1), 1)
            index = 0
            while index < len(block):
                arrival = block.arrival_ms(index, index + 1)
                limit = ctx.turn_tuples(stats)
                queued = min(estimate * (len(block) - index), limit)
                async with ctx.arbiter.turn(name, arrival_s(arrival), queued):
                    if parts.get(block.partition) is not part:
                        break  # revoked while waiting: its new owner redoes the rest
                    index = push_some(part, block, index, start_at, limit)
            stage_dead_letters(part, block)

    async def snapshot() -> None:
        """Before offsets commit: every changed partition's state, durable."""
        wrote = False
        for p, part in sorted(parts.items()):
            if part.dirty:
                snapshots.save(name, p, part.positions, part.chain)
                part.dirty = False
                wrote = True
        if wrote:
            await ctx.flush()

    async def on_revoked(sender: Any, revoked: Any, **_: Any) -> None:
        """A partition may move to another worker: save it, then forget it."""
        mine = {tp.partition for tp in revoked if tp.topic in in_topics}
        await snapshot()
        for p in mine:
            parts.pop(p, None)

    def events() -> list[dict[str, Any]]:
        new_events: list[dict[str, Any]] = []
        for p, part in sorted(parts.items()):
            for stage_stats in part.chain.stats().values():
                total, recent = stage_stats.get("changes_total"), stage_stats.get("recent_changes")
                if not isinstance(total, int) or not isinstance(recent, list):
                    continue
                key = hash((p, stage_stats.get("kind"), str(stage_stats.get("inputs"))))
                fresh = total - changes_seen.get(key, 0)
                changes_seen[key] = total
                if fresh > 0:
                    new_events.extend({"partition": p, **c} for c in recent[-fresh:])
        return new_events

    ctx.app.flush_hooks.append(snapshot)
    ctx.app.on_partitions_revoked.connect(on_revoked)
    source = ctx.app.topic(*in_topics, value_serializer="raw", key_serializer="raw")
    ctx.app.agent(source, name=name)(run)
    stats.new_events = events
    return stats
