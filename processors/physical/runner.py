"""A query run in process from its compiled steps: the same stages, in the same order, as the
worker's agents, with the topics between steps replaced by direct calls. For tests, benchmarks,
experiments and the demo's replay (one runner per partition)."""

from __future__ import annotations

from typing import Any

from processors.core.batch import Batch
from processors.core.partitioning import single_partition
from processors.core.plan import LogicalPlan
from processors.physical.build import chain_factory
from processors.physical.chain import StageChain
from processors.physical.compiler import compile_plan
from processors.physical.steps import Step
from processors.stages.base import Stage


class QueryRunner:
    """Every step of one query partition, chained in process."""

    def __init__(self, plan: LogicalPlan, partition: int = 0) -> None:
        self.plan = plan
        # one partition fed by one input partition: every event-time merge forwards as it is
        single = single_partition(plan)
        self.physical = compile_plan(single)
        self.chains: dict[str, StageChain] = {
            step.name: chain_factory(single, step)(partition) for step in self.physical.steps
        }

    def push(self, stream: str, batch: Batch) -> list[Batch]:
        """One batch of raw input of ``stream``; returns result batches (result fields)."""
        step = self.physical.reader_of(self.physical.ingest_topics[stream])
        if step is None:
            return [batch]
        return self._downstream(step, self.chains[step.name].push(stream, batch))

    def flush(self) -> list[Batch]:
        """End of input: release what windows and joins hold back, step by step."""
        out: list[Batch] = []
        for step in self.physical.steps:
            out += self._downstream(step, self.chains[step.name].flush())
        return out

    def _downstream(self, step: Step, batches: list[Batch]) -> list[Batch]:
        """``batches`` written by ``step``, through every step after it."""
        nxt = self.physical.reader_of(step.out_topic)
        while nxt is not None and batches:
            label = nxt.in_topics[step.out_topic]
            chain = self.chains[nxt.name]
            batches = [out for b in batches for out in chain.push(label, b)]
            step, nxt = nxt, self.physical.reader_of(nxt.out_topic)
        return batches

    def all_stages(self) -> list[Stage]:
        return [stage for chain in self.chains.values() for stage in chain.stages]

    def stage(self, kind: str) -> Any:
        """The first stage of ``kind`` (for example ``"mjoin"``), or None."""
        return next((s for s in self.all_stages() if getattr(s, "kind", None) == kind), None)

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        return [dead for chain in self.chains.values() for dead in chain.take_dead_letters()]

    def stats(self) -> dict[str, Any]:
        return {
            name: stats for chain in self.chains.values() for name, stats in chain.stats().items()
        }
