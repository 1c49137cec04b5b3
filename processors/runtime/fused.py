"""The fused tail of a stateless single-stream plan: the step's stage and the sink's Avro encode,
run by the ingest agent on the batches it has just decoded.

A plan of one stream with filters at most (no window, join, aggregate or synthetic operator)
holds no state between records and needs no repartitioning, so its three agents (ingest ->
filter -> sink) would only hand columns to each other through two internal topics: two
envelope encodes and decodes, two produce-fetch round trips through the broker, and a wait for
each fetch. Fused (:attr:`processors.physical.steps.PhysicalPlan.fused`), the ingest agent runs
the stage and writes the result records itself: in ``streamon bench latency`` the filter's
p99 went from 144 ms to the figure in docs/benchmarks.md ("Fused stateless plans").

The status page keeps the three agents' statistics (ingest, the stage with its plan and plan
changes, the sink with its output latency), so a fused plan is watched like any other.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from processors.core.batch import Batch
from processors.runtime.context import AgentContext, Written, block_dead_letter
from processors.runtime.partitions import PartitionUnits
from processors.runtime.record_block import RecordBlock
from processors.runtime.results import Encoded, ResultWriter
from processors.runtime.stats import AgentStats
from processors.stages.base import Stage

log = logging.getLogger(__name__)

#: decodes one record of a block again (index -> its batches; decode errors already reported)
Redecode = Callable[[int], list[Batch]]


class FusedTail:
    """Stage ``stage_name`` (one instance per input partition) and the result encode, for the
    batches of one input block; the statistics of both as the unfused agents would keep them.
    """

    def __init__(
        self,
        ctx: AgentContext,
        *,
        source_topic: str,
        stage_name: str,
        make_stage: Callable[[int], Stage],
        results: ResultWriter,
    ) -> None:
        self.ctx = ctx
        self.stage_name = stage_name
        self.results = results
        self.units = PartitionUnits(stage_name, [source_topic], make_stage)
        self.units.connect(ctx.app, ctx.flush)
        self.stage_stats: AgentStats = ctx.board.agent(stage_name, stage_name, plan=self.units.plan)
        self.stage_stats.new_events = self.units.events
        self.stage_stats.out_topic = results.result_topic

    def __call__(
        self, batches: list[Batch], block: RecordBlock, arrival_ms: int | None, redecode: Redecode
    ) -> Written:
        """Run the stage on ``batches`` (decoded from ``block``) and write its results; the
        tuples and bytes written. If the stage or the encode raises, the block's records go
        through both one by one, and those that still fail become dead letters naming the
        stage."""
        started = time.perf_counter_ns()
        stage = self.units.get(block.partition).unit
        n_in = sum(len(b) for b in batches)
        try:
            encoded = self.results.encode([out for b in batches for out in stage.process(b)])
        except Exception as exc:
            log.warning("stage %s failed on %d records of %s[%d] (%r); one by one now",
                        self.stage_name, len(block), block.topic, block.partition, exc)  # fmt: skip
            encoded = self._one_by_one(stage, block, redecode)
        n_out = sum(len(batch) for batch, _, _ in encoded)
        self.stage_stats.record(n_in, n_out, time.perf_counter_ns() - started, 1, 0)
        return self.results.produce(encoded, block.partition, arrival_ms)

    def _one_by_one(self, stage: Stage, block: RecordBlock, redecode: Redecode) -> list[Encoded]:
        encoded: list[Encoded] = []
        for index in range(len(block)):
            try:
                outputs = [o for b in redecode(index) for o in stage.process(b)]
                encoded += self.results.encode(outputs)
            except Exception as exc:
                log.exception("stage %s failed on %s[%d]@%d", self.stage_name, block.topic,
                              block.partition, block.offsets[index])  # fmt: skip
                block_dead_letter(self.ctx, self.stage_name, block, index,
                                  f"stage {self.stage_name} failed: {exc}")  # fmt: skip
                self.stage_stats.dead_letters += 1
        return encoded
