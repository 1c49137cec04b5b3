"""Writing result records: the query's output batches, Avro-encoded, one record per tuple on
the result topic. The sink agent writes what it reads from the ``out`` envelope topic; a plan's
last step may write its outputs itself (a fused stateless plan's ingest agent,
:mod:`processors.runtime.fused`; the last stateful step, :mod:`processors.runtime.stateful`),
which saves the hop through the broker and an envelope encode and decode per batch. Either way
the statistics are the sink's, so the status page shows the output latency in one place.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import numpy as np

from processors.core.batch import Batch, null_column
from processors.core.plan import LogicalPlan
from processors.core.schema_derivation import ESTIMATED, KEPT_FIELD, estimate_field
from processors.runtime.context import AgentContext, Written, arrival_s, fatal
from processors.runtime.stats import AgentStats
from topics.columnar import RecordCodec

#: a batch of results with its Avro encoding (the buffer and each record's end offsets)
Encoded = tuple[Batch, np.ndarray, np.ndarray]


def produce_results(
    ctx: AgentContext,
    agent: str,
    result_topic: str,
    result_partitions: int,
    encoded: list[Encoded],
    partition: int,
) -> Written:
    """Queue encoded results on ``result_topic`` (partition ``partition`` modulo its count),
    one record per tuple, with the tuples' Kafka keys; a delete carries a sign header. A
    record that cannot be queued stops the worker without commit."""
    written = 0
    for batch, buf, offsets in encoded:
        try:
            ctx.producer.produce_many(
                result_topic, buf, offsets, keys=batch.key,
                partition=partition % result_partitions,
                signs=batch.sign if bool((batch.sign < 0).any()) else None,
            )  # fmt: skip
        except Exception as exc:
            fatal(agent, exc)
        written += int(offsets[-1])
    return sum(len(batch) for batch, _, _ in encoded), written


class SharesStamp:
    """What the results of a query that sheds load carry (docs/shedding.md): ``_kept``, the
    product of its inputs' drop-box shares in force when the record is written, and beside each
    count and sum its Horvitz-Thompson estimate, the sampled value over that product."""

    def __init__(self, plan: LogicalPlan, shares: Callable[[], Mapping[str, float]]) -> None:
        self.shares = shares
        self.streams = [s.name for s in plan.streams]
        self.estimates = [(a.name, estimate_field(a.name)) for a in plan.aggregates
                          if a.func in ESTIMATED]  # fmt: skip

    @classmethod
    def of(cls, plan: LogicalPlan, shares: Callable[[], Mapping[str, float]]) -> SharesStamp | None:
        """The stamp of ``plan``'s results (None: the query does not shed load)."""
        return None if plan.shedding is None else cls(plan, shares)

    def __call__(self, batch: Batch) -> Batch:
        now = self.shares()
        kept = math.prod(now.get(s, 1.0) for s in self.streams)
        cols = dict(batch.columns)
        cols[KEPT_FIELD] = np.full(len(batch), kept)
        for name, estimate in self.estimates:
            values = np.asarray(cols[name], np.float64)
            cols[estimate] = values / kept if kept > 0 else values
            if null_column(name) in cols:
                cols[null_column(estimate)] = cols[null_column(name)]
        return Batch(cols, batch.sign, batch.ts, batch.key, batch.meta)


class ResultWriter:
    """Encodes and writes the results of the agent that runs a plan's last step, counting them
    in the sink's statistics (``sink_name``) as the sink agent would."""

    def __init__(
        self,
        ctx: AgentContext,
        codec: RecordCodec,
        result_topic: str,
        result_partitions: int,
        sink_name: str,
        stamp: Callable[[Batch], Batch] | None = None,
    ) -> None:
        self.ctx = ctx
        self.stamp = stamp
        self.codec = codec
        self.result_topic = result_topic
        self.result_partitions = result_partitions
        self.sink_name = sink_name
        self.stats: AgentStats = ctx.board.agent(sink_name, sink_name)
        self.stats.out_topic = result_topic

    def encode(self, batches: list[Batch]) -> list[Encoded]:
        """The non-empty ``batches`` with their records (raises if one cannot be encoded)."""
        if self.stamp is not None:
            batches = [self.stamp(b) for b in batches if len(b)]
        return [(b, *self.codec.encode_many(b.columns, len(b))) for b in batches if len(b)]

    def produce(self, encoded: list[Encoded], partition: int, arrival_ms: int | None) -> Written:
        """Write ``encoded`` results of ``partition``; tuples and bytes written. Records the
        output latency: now minus the arrival of the oldest input they come from."""
        started = time.perf_counter_ns()
        n_out, written = produce_results(self.ctx, self.sink_name, self.result_topic,
                                         self.result_partitions, encoded, partition)  # fmt: skip
        if encoded:
            self.stats.record_latency(max(time.time() - arrival_s(arrival_ms), 0.0))
        self.stats.record(n_out, n_out, time.perf_counter_ns() - started, 0, 0, written)
        return n_out, written
