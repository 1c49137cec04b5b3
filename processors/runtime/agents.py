"""The three kinds of Faust agent a query runs as: ingest, stage and sink.

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
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
from faust.types import TP

from processors.core.batch import Batch, VarColumn
from processors.core.scheduling.config import DEFAULT_GRANT_TUPLES, DEFAULT_QUANTUM_MS
from processors.runtime.arbiter import Arbiter
from processors.runtime.deadletter import DeadLetters
from processors.runtime.faust_bulk import BulkApp, RecordBlock
from processors.runtime.producer import RecordProducer
from processors.runtime.stats import AgentStats, StatsBoard
from processors.stages.base import Stage
from topics.columnar import RecordCodec
from topics.envelope import decode_batch, encode_envelopes

log = logging.getLogger(__name__)

#: Exit status of a worker that could not write its output (a supervisor should restart it).
EXIT_OUTPUT_FAILED = 75


def fatal(agent: str, exc: BaseException) -> NoReturn:
    """Stop the process now, committing nothing, so that unwritten output is redone."""
    log.critical("agent %s could not write its output, exiting without commit: %r", agent, exc)
    logging.shutdown()
    os._exit(EXIT_OUTPUT_FAILED)


@dataclass
class AgentContext:
    """What every agent of one worker shares."""

    app: BulkApp
    board: StatsBoard
    dead_letters: DeadLetters
    producer: RecordProducer
    #: who processes next (disabled: Faust's own order)
    arbiter: Arbiter = field(default_factory=lambda: Arbiter(enabled=False))
    #: most tuples (or records) an agent processes per turn
    grant_tuples: int = DEFAULT_GRANT_TUPLES
    #: how long a turn should last: an agent's turn holds about this much of its measured work
    quantum_s: float = DEFAULT_QUANTUM_MS / 1000.0

    def turn_tuples(self, stats: AgentStats, cap: int | None = None) -> int:
        """Tuples for the agent's next turn: a quantum of its measured per-tuple time, at least
        one, at most ``grant_tuples`` (and ``cap``). Without an arbiter, no limit but ``cap``."""
        most = self.grant_tuples if cap is None else min(cap, self.grant_tuples)
        if not self.arbiter.enabled:
            return cap if cap is not None else 1 << 62
        per_tuple_s = stats.ns_per_tuple / 1e9
        if per_tuple_s <= 0:
            return most
        return max(1, min(most, int(self.quantum_s / per_tuple_s)))

    def send_envelopes(
        self, agent: str, topic: str, batch: Batch, partition: int, arrival_ms: int | None = None
    ) -> int:
        """Queue ``batch`` as envelopes on ``topic`` (timestamped with the arrival of its oldest
        input tuple); delivery is checked before commits. Returns the bytes queued."""
        written = 0
        try:
            for payload in encode_envelopes(batch):
                self.producer.produce(topic, payload, partition=partition, timestamp_ms=arrival_ms)
                written += len(payload)
        except Exception as exc:
            fatal(agent, exc)
        return written

    async def flush(self) -> None:
        """The commit hook: every output acknowledged, or the process ends without commit."""
        try:
            await self.producer.flush()
        except Exception as exc:
            fatal("output producer", exc)


def arrival_s(arrival_ms: int | float | None) -> float:
    """An arrival time in seconds for the arbiter: never in the future, now when unknown."""
    now = time.time()
    if arrival_ms is None or arrival_ms <= 0:
        return now
    return min(arrival_ms / 1000.0, now)


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


def _block_dead_letter(
    ctx: AgentContext, name: str, block: RecordBlock, index: int, reason: str
) -> None:
    """Record ``index`` of a fetched block goes to the dead-letter topic with its reason."""
    ctx.dead_letters.send(
        source_topic=block.topic,
        partition=block.partition,
        offset=block.offsets[index],
        key=block.keys[index],
        value=block.values[index],
        reason=reason,
        stage=name,
    )


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
        _block_dead_letter(ctx, name, block, index, reason)
    good = result.good
    if ts_field is not None:
        ts = np.asarray(result.columns[ts_field], dtype=np.int64)
    else:
        ts = np.asarray(block.timestamps, dtype=np.int64)[good]
    batch = Batch(result.columns, np.ones(len(good), np.int8), ts)
    return with_keys(batch, [block.keys[i] for i in good.tolist()])


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
        except Exception as exc:  # a bug or input nobody foresaw: keep every record
            log.exception("ingest %s failed on a block of %d records", name, len(block))
            for i in range(len(block)):
                ctx.dead_letters.send(
                    source_topic=block.topic, partition=block.partition,
                    offset=block.offsets[i], key=block.keys[i], value=block.values[i],
                    reason=f"ingest failed: {exc!r}", stage=name,
                )  # fmt: skip
            batches = []
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

    async def ingest(blocks: Any) -> None:
        async for block in blocks:
            if not isinstance(block, RecordBlock):  # the bulk path is not installed: fail loudly
                fatal(name, TypeError(f"got {type(block).__name__}, not a RecordBlock"))
            for unit in block.split(ctx.turn_tuples(stats)):
                arrival = unit.arrival_ms()
                async with ctx.arbiter.turn(name, arrival_s(arrival), len(unit)):
                    ingest_unit(unit, arrival)

    ctx.app.agent(source, name=name)(ingest)
    return stats


#: Tuples a bulk stage agent concatenates into one batch before ``Stage.process``.
MAX_BATCH_TUPLES = 16_384

#: what ``emit`` returns: tuples and bytes written
Written = tuple[int, int]


def add_stage_agent(
    ctx: AgentContext,
    *,
    name: str,
    in_topic: str,
    out_topic: str,
    make_stage: Callable[[int], Stage],
    bulk: bool = False,
    max_batch_tuples: int = MAX_BATCH_TUPLES,
) -> AgentStats:
    """Envelopes -> stage -> envelopes, one stage instance per partition.

    With ``bulk``, ``in_topic`` must be one of the app's bulk topics: every fetched run of
    envelopes is one event, and consecutive envelopes of the same layout are concatenated (up
    to ``max_batch_tuples``, and to the arbiter's grant) into one ``process`` call. If that call
    fails, the run's envelopes are processed one by one, so that only the failing ones become
    dead letters; use it for stages whose failed ``process`` leaves no half-applied state.

    Plan changes a stage reports in its ``stats()`` (``changes_total`` and the latest
    ``recent_changes``) become the ``events`` of the agent's Stats records.
    """
    stages: dict[int, Stage] = {}
    changes_seen: dict[int, int] = {}

    def process(batch: Batch, partition: int) -> list[Batch]:
        stage = stages.get(partition)
        if stage is None:
            stage = stages[partition] = make_stage(partition)
        return stage.process(batch)

    def emit(outputs: list[Batch], partition: int, arrival_ms: int | None) -> Written:
        written = sum(
            ctx.send_envelopes(name, out_topic, output, partition, arrival_ms) for output in outputs
        )
        return sum(len(o) for o in outputs), written

    def plan() -> dict[str, Any]:
        return {str(p): s.stats() for p, s in sorted(stages.items())}

    def events() -> list[dict[str, Any]]:
        """Plan changes since the previous call, from the stages' recent_changes."""
        new_events: list[dict[str, Any]] = []
        for partition, stage in sorted(stages.items()):
            stats = stage.stats()
            total, recent = stats.get("changes_total"), stats.get("recent_changes")
            if not isinstance(total, int) or not isinstance(recent, list):
                continue
            fresh = total - changes_seen.get(partition, 0)
            changes_seen[partition] = total
            if fresh > 0:
                shown = recent[-fresh:]
                if fresh > len(shown):  # more changes than the stage remembers
                    new_events.append({"partition": partition, "unreported": fresh - len(shown)})
                new_events.extend({"partition": partition, **change} for change in shown)
        return new_events

    async def on_assigned(sender: Any, assigned: Any, **_: Any) -> None:
        """After a rebalance, only the stages of partitions this worker still holds stay: the
        status page shows what the worker runs, and the stages it kept keep what they learned
        (a partition that moved starts afresh on its new worker; a stateless stage's plan is
        re-learned from the data, nothing else is lost)."""
        held = {tp.partition for tp in assigned if tp.topic == in_topic}
        for partition in set(stages) - held:
            del stages[partition]
            changes_seen.pop(partition, None)

    ctx.app.on_partitions_assigned.connect(on_assigned)
    if bulk:
        batch_tuples = min(max_batch_tuples, ctx.grant_tuples)
        stats = _bulk_stage_agent(ctx, name, in_topic, process, emit, plan, batch_tuples)
    else:
        stats = _envelope_agent(ctx, name, in_topic, process, emit, plan)
    stats.out_topic = out_topic
    stats.new_events = events
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

    async def run(events: Any) -> None:
        async for event in events.events():
            message = event.message
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

    ctx.app.agent(source, name=name)(run)
    return stats


def _same_layout(a: Batch, b: Batch) -> bool:
    """Whether ``a`` and ``b`` concatenate without losing anything (columns, keys, meta)."""
    if a.meta != b.meta or (a.key is None) != (b.key is None):
        return False
    if a.key is not None and b.key is not None and a.key.utf8 != b.key.utf8:
        return False
    if list(a.columns) != list(b.columns):
        return False
    for name, col in a.columns.items():
        other = b.columns[name]
        if isinstance(col, VarColumn):
            if not isinstance(other, VarColumn) or col.utf8 != other.utf8:
                return False
        elif isinstance(other, VarColumn) or col.dtype != other.dtype:
            return False
    return True


#: a part of an envelope: (its index in the block, the tuples, whether it is the envelope's last
#: part, the position of its first tuple in the envelope)
Piece = tuple[int, Batch, bool, int]


def _pieces(decoded: list[tuple[int, Batch]], limit: int) -> list[Piece]:
    """Envelopes cut into parts of at most ``limit`` tuples (one turn's worth each), in order."""
    out: list[Piece] = []
    for index, batch in decoded:
        n = len(batch)
        if n <= limit:
            out.append((index, batch, True, 0))
            continue
        for start in range(0, n, limit):
            stop = min(start + limit, n)
            out.append((index, batch.slice(start, stop), stop == n, start))
    return out


def _runs(batches: list[Any], max_tuples: int) -> list[list[Any]]:
    """Consecutive batches grouped for concatenation: same layout, at most ``max_tuples``.

    A batch of at least a quarter of ``max_tuples`` stays alone: its per-call overhead is
    already small, and concatenating would only copy it (~15 ns/tuple). Measured with 4
    filters: FilterStage.process takes 133 ns/tuple on 1,000-tuple batches, 56 on 16,000;
    envelopes of 6,400 tuples gain nothing from concatenation.
    """
    runs: list[list[tuple[int, Batch]]] = []
    size = 0
    alone = max(max_tuples // 4, 1)
    for item in batches:
        n = len(item[1])
        if runs and n < alone and size + n <= max_tuples and _same_layout(runs[-1][-1][1], item[1]):
            runs[-1].append(item)
            size += n
        else:
            runs.append([item])
            size = n if n < alone else max_tuples  # nothing joins a batch that stays alone
    return runs


def _bulk_stage_agent(
    ctx: AgentContext,
    name: str,
    in_topic: str,
    work: Callable[[Batch, int], list[Batch]],
    emit: Callable[[list[Batch], int, int | None], Written],
    plan: Callable[[], dict[str, Any]],
    max_batch_tuples: int,
) -> AgentStats:
    """A stage agent over a bulk envelope topic: one event per fetched run of envelopes, one
    turn per group of envelopes processed together."""
    source = ctx.app.topic(in_topic, value_serializer="raw", key_serializer="raw")
    stats = ctx.board.agent(name, name, plan=plan)
    stats.topic = in_topic
    block_rows: dict[int, int] = {}  # tuples per envelope of the block being processed

    def dead_letter(block: RecordBlock, index: int, reason: str) -> None:
        _block_dead_letter(ctx, name, block, index, reason)
        stats.dead_letters += 1

    def one_by_one(block: RecordBlock, run: list[Piece]) -> Written:
        n_out = written = 0
        for index, batch, _, first_row in run:
            try:
                outputs = work(batch, block.partition)
            except Exception as exc:
                log.exception(
                    "stage %s failed on %s[%d]@%d",
                    name, block.topic, block.partition, block.offsets[index],
                )  # fmt: skip
                rows = ""
                if first_row or len(batch) != block_rows.get(index, len(batch)):
                    rows = f" (its tuples {first_row}..{first_row + len(batch) - 1})"
                dead_letter(block, index, f"stage {name} failed{rows}: {exc}")
                continue
            tuples, nbytes = emit(outputs, block.partition, block.arrival_ms(index, index + 1))
            n_out += tuples
            written += nbytes
        return n_out, written

    def process_group(block: RecordBlock, group: list[Piece]) -> Written:
        if len(group) == 1:
            return one_by_one(block, group)
        first, last = group[0][0], group[-1][0]
        try:
            outputs = work(Batch.concat(piece[1] for piece in group), block.partition)
        except Exception as exc:
            log.warning(
                "stage %s failed on %d envelopes of %s[%d] (%r); one by one now",
                name, len(group), block.topic, block.partition, exc,
            )  # fmt: skip
            return one_by_one(block, group)
        return emit(outputs, block.partition, block.arrival_ms(first, last + 1))

    async def run(blocks: Any) -> None:
        async for block in blocks:
            if not isinstance(block, RecordBlock):  # the bulk path is not installed: fail loudly
                fatal(name, TypeError(f"got {type(block).__name__}, not a RecordBlock"))
            decode_started = time.perf_counter_ns()
            decoded: list[tuple[int, Batch]] = []
            for index, value in enumerate(block.values):
                try:
                    decoded.append((index, decode_batch(value or b"")))
                except Exception as exc:
                    dead_letter(block, index, f"bad batch envelope: {exc}")
            block_rows.clear()
            block_rows.update((index, len(batch)) for index, batch in decoded)
            # decoding happens before the turns (grouping needs the batches); charge it to the
            # first group, so that the agent's busy time stays whole
            decode_ns = time.perf_counter_ns() - decode_started
            limit = ctx.turn_tuples(stats, max_batch_tuples)
            for group in _runs(_pieces(decoded, limit), limit):
                first, (last, _, last_done, _) = group[0][0], group[-1]
                n_in = sum(len(piece[1]) for piece in group)
                arrival = block.arrival_ms(first, last + 1)
                async with ctx.arbiter.turn(name, arrival_s(arrival), n_in):
                    started = time.perf_counter_ns()
                    n_out, written = process_group(block, group)
                    # an envelope's bytes count once, with its last piece
                    nbytes = sum(len(block.values[p[0]] or b"") for p in group if p[2])
                    elapsed = time.perf_counter_ns() - started + decode_ns
                    decode_ns = 0
                    envelopes = sum(1 for piece in group if piece[2])
                    stats.record(n_in, n_out, elapsed, envelopes, nbytes, written)
                    done = block.offsets[last] + 1 if last_done else block.offsets[last]
                    stats.positions[block.partition] = done
            if block.offsets:
                stats.positions[block.partition] = block.offsets[-1] + 1

    ctx.app.agent(source, name=name)(run)
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
        ctx.dead_letters.send(
            source_topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            key=message.key,
            value=message.value,
            reason=f"{what}: {exc}",
            stage=stage,
        )
        stats.dead_letters += 1
        return batch, []


def backlog_of(app: BulkApp, stats: AgentStats) -> tuple[int, int]:
    """Pending tuples/bytes of an agent's input, from fetch high watermarks minus positions.

    High watermarks come with fetch responses (not ListOffsets, which tansu answers wrongly).
    """
    held = app.consumer.assignment()
    pending = 0
    for partition, position in list(stats.positions.items()):
        tp = TP(stats.topic, partition)
        if tp not in held:  # moved to another worker at a rebalance: its backlog is theirs now
            del stats.positions[partition]
            continue
        try:
            high = app.consumer.highwater(tp)
        except AssertionError:  # revoked between the two calls (the consumer has its own thread)
            continue
        if high is not None and high > position:
            pending += high - position
    return stats.backlog(pending)
