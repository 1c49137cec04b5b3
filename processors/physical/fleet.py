"""A query on all its partitions in process, routed as a fleet of workers routes it.

:class:`~processors.physical.runner.QueryRunner` runs one partition fed by one input
partition. This runner runs every partition of every step and moves batches between them as
the worker's agents do: ingest routes each input partition's records by the plan's
:class:`~processors.physical.steps.IngestRoute` and tags them with their input partition and
watermark (:mod:`processors.stages.merge_stage`), sends watermarks to the partitions that got
nothing, each step writes to the partition the worker would, and each stream's chain tells the
MJoin its event-time progress (inside the MJoin's step: processors.physical.joined). So tests
can check routing, the event-time merge and progress against an oracle on many partitions
and arbitrary producer partitionings, without a broker.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from processors.core.batch import Batch
from processors.core.plan import LogicalPlan
from processors.physical.build import chain_factory
from processors.physical.chain import StageChain
from processors.physical.compiler import compile_plan
from processors.stages.merge_stage import marker, tag
from topics.envelope import decode_batch, encode_batch

NO_TS = -(2**63)


class FleetRunner:
    """Every partition of every step of ``plan``, connected as the worker connects them."""

    def __init__(self, plan: LogicalPlan, envelopes: bool = False) -> None:
        self.plan = plan
        #: batches between steps go through the envelope format as on the internal topics
        #: (their arrays then read-only views, as a worker's are: numba compiles those apart)
        self.envelopes = envelopes
        self.physical = compile_plan(plan)
        partitions = {spec.name: spec.partitions for spec in self.physical.specs}
        for stream, route in self.physical.ingest_routes.items():  # a fused plan has no topic
            partitions.setdefault(self.physical.ingest_topics[stream], route.partitions)
        self.chains: dict[tuple[str, int], StageChain] = {}
        for step in self.physical.steps:
            make = chain_factory(plan, step)
            for q in range(partitions[step.in_topic]):
                self.chains[(step.name, q)] = make(q)
        self.high: dict[tuple[str, int], int] = defaultdict(lambda: NO_TS)
        self.results: list[tuple[int, Batch]] = []  # (partition of the sink topic, batch)

    def push(self, stream: str, partition: int, batch: Batch) -> None:
        """Records of ``stream`` read from its input ``partition``, as ingest routes them."""
        route = self.physical.ingest_routes[stream]
        topic = self.physical.ingest_topics[stream]
        key = (stream, partition)
        if len(batch):
            self.high[key] = max(self.high[key], int(batch.ts.max()))
        reached = set()
        for q, part in route.split([batch] if len(batch) else [], partition):
            if route.progress:
                tag(part, partition, self.high[key])
            reached.add(q)
            self._deliver(topic, q, part)
        if route.progress and self.high[key] != NO_TS:
            for q in range(route.partitions):
                if q not in reached:
                    self._deliver(topic, q, marker(partition, self.high[key]))

    def idle(self, stream: str, partition: int) -> None:
        """Ingest's idle mark for ``stream``'s input ``partition`` (read to its end, quiet)."""
        route = self.physical.ingest_routes[stream]
        topic = self.physical.ingest_topics[stream]
        for q in range(route.partitions):
            self._deliver(topic, q, marker(partition, self.high[(stream, partition)], idle=True))

    def flush(self) -> None:
        """End of input: what windows, merges and joins hold back, step by step."""
        for step in self.physical.steps:
            for (name, q), chain in self.chains.items():
                if name == step.name:
                    self._forward(step.name, q, chain.flush())

    def _deliver(self, topic: str, q: int, batch: Batch) -> None:
        step = self.physical.reader_of(topic)
        if step is None:
            if len(batch):
                self.results.append((q, batch))
            return
        if self.envelopes:
            batch = decode_batch(encode_batch(batch))
        chain = self.chains[(step.name, q)]
        outputs = [o for o in chain.push(step.in_topics[topic], batch) if len(o)]
        self._forward(step.name, q, outputs)

    def _forward(self, step_name: str, q: int, outputs: list[Batch]) -> None:
        step = self.physical.step(step_name)
        target = q if step.out_partitions > 1 else 0
        for out in outputs:
            if len(out):
                self._deliver(step.out_topic, target, out)

    def result(self) -> Batch | None:
        """Every result batch so far, concatenated (None: none)."""
        batches = [b for _, b in self.results]
        return Batch.concat(batches) if batches else None

    def dead_letters(self) -> list[tuple[Batch, str]]:
        return [d for chain in self.chains.values() for d in chain.take_dead_letters()]

    def partitions_used(self) -> set[int]:
        return {q for q, _ in self.results}

    def result_rows(self) -> int:
        return int(np.sum([len(b) for _, b in self.results]))
