"""The physical plan as data: the steps a query runs as, the stages each step chains, the topics
between them. Built by :func:`processors.physical.compiler.compile_plan`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from processors.core.batch import Batch
from processors.kernels.routing import route, split_by_partition
from topics.specs import TopicSpec

#: the agent that writes result records (the last hop of every path)
SINK_AGENT = "sink"


def internal_topic(query: str, name: str) -> str:
    """An internal topic of ``query``: ``streamon.<query>.<name>``."""
    return f"streamon.{query}.{name}"


def state_topic(query: str) -> str:
    """The compacted topic holding the snapshots of ``query``'s stateful steps."""
    return internal_topic(query, "state")


@dataclass(frozen=True)
class StageNode:
    """One stage of a step: its ``kind`` (a key of
    :data:`processors.physical.kinds.STAGE_KINDS`) and what the builder needs to find its part
    of the plan."""

    kind: str
    stream: str | None = None
    #: filters: ``below_window``, ``above_window`` or None (every filter of the stream)
    placement: str | None = None
    #: synthetic operators: the operator's name
    operator: str | None = None


@dataclass(frozen=True)
class Step:
    """One agent of the query: reads ``in_topics`` (topic -> the stream its batches belong to),
    runs ``nodes`` in order on each partition, writes ``out_topic``.

    ``stateful`` steps keep state across batches (windows, joins, aggregates): they read all
    their inputs in one agent and snapshot their state before offsets commit. Stateless ones
    with ``bulk`` concatenate several envelopes into one ``process`` call."""

    name: str
    kind: str
    in_topics: dict[str, str]
    out_topic: str
    out_partitions: int
    nodes: tuple[StageNode, ...]
    stateful: bool
    bulk: bool = True
    stream: str | None = None
    finish: bool = False  # ends with the projection to the result fields
    #: the MJoin step: each input stream's stages (the event-time merge, filters, the window),
    #: run in front of ``nodes`` on the same partition (processors.physical.joined)
    inputs: tuple[tuple[str, tuple[StageNode, ...]], ...] = ()

    @property
    def in_topic(self) -> str:
        """The (first) input topic."""
        return next(iter(self.in_topics))


@dataclass(frozen=True)
class IngestRoute:
    """Where a stream's ingest agent writes each decoded record.

    ``by`` set: the partition streamon's hash of those fields picks
    (:mod:`processors.kernels.routing`); unset: the record's own input partition, or 0 when
    the envelope topic has one partition. With ``progress``, every envelope names its input
    partition and that partition's watermark, and ingest also sends watermarks and idle marks
    on their own (the event-time merge of :mod:`processors.stages.merge_stage` needs them)."""

    partitions: int  # of the envelope topic
    by: tuple[str, ...] | None = None
    progress: bool = False

    def target(self, partition: int) -> int:
        """The envelope partition of a record of input ``partition`` (without ``by``)."""
        return partition if self.partitions > 1 else 0

    def split(self, batches: list[Batch], partition: int) -> list[tuple[int, Batch]]:
        """(envelope partition, rows) of ``batches`` read from input ``partition``; each
        part keeps its rows' order."""
        out: list[tuple[int, Batch]] = []
        for batch in batches:
            if self.by is None or self.partitions == 1:
                out.append((self.target(partition), batch))
                continue
            parts = route([batch.columns[f] for f in self.by], len(batch), self.partitions)
            for q, rows in enumerate(split_by_partition(parts, self.partitions)):
                if len(rows) == len(batch):
                    out.append((q, batch))
                elif len(rows):
                    out.append((q, batch.take(rows)))
        return out


@dataclass
class PhysicalPlan:
    """The steps of a plan, in data-flow order, and the topics they need."""

    query: str
    ingest_topics: dict[str, str]  # stream -> envelope topic its ingest agent writes
    ingest_routes: dict[str, IngestRoute]  # stream -> where its ingest writes
    steps: list[Step]
    sink_topic: str
    specs: list[TopicSpec]
    partitioning: dict[str, Any] | None = None
    state_topic: str | None = None  # set when a step is stateful
    #: one stateless step between ingest and sink, which the worker runs in the ingest agent
    #: (processors.runtime.fused): ``ingest_topics`` are not created
    fused: bool = False
    #: a sink agent reads ``sink_topic`` and writes the results; False: the agent that runs
    #: the last step writes them itself (processors.runtime.results), ``sink_topic`` is not
    #: created
    sink_agent: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def stage_topics(self) -> list[tuple[str, str, str]]:
        """(name, in topic, out topic) of the stateless steps."""
        return [(s.name, s.in_topic, s.out_topic) for s in self.steps if not s.stateful]

    @property
    def stateful(self) -> list[Step]:
        return [s for s in self.steps if s.stateful]

    def step(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(f"no step {name!r} (steps: {[s.name for s in self.steps]})")

    def reader_of(self, topic: str) -> Step | None:
        """The step that reads ``topic`` (None: the sink's topic, or nobody's)."""
        return next((s for s in self.steps if topic in s.in_topics), None)

    def paths(self) -> dict[str, list[str]]:
        """The operator paths of the scheduling model (Babcock et al., Sect. 4.3): per input
        stream, the agents its tuples pass from its ingest agent to the sink."""
        paths = {}
        for stream, topic in self.ingest_topics.items():
            path = [f"ingest.{stream}"]
            step = self.reader_of(topic)
            while step is not None:
                path.append(step.name)
                step = self.reader_of(step.out_topic)
            paths[stream] = [*path, SINK_AGENT]
        return paths
