"""The column layout a stateful step expects on each of its input topics, from the plan.

A window pins its columns on its first batch, an MJoin its inputs' columns: one internal
envelope with a renamed column, first on a fresh partition, would poison that partition's state
for good (every later envelope refused, or a stage further on failing). So a stateful agent
checks each envelope against the layout its upstream writes before the chain sees it, and a
mismatch is a dead letter naming the columns.

The layouts come from a probe, once per worker: one zero-valued record of every stream (what
the ingest agent's codec decodes) run through fresh chains of every step, filters left out
(they drop rows, never change columns), with every step flushed; the first batch written to
each topic gives its layout. A topic the probe reaches with no batch is not checked.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from processors.core.batch import Batch, Column, null_column
from processors.core.partitioning import single_partition
from processors.core.plan import LogicalPlan, StreamSpec
from processors.physical.build import chain_factory
from processors.physical.compiler import compile_plan
from processors.physical.steps import PhysicalPlan, StageNode, Step
from processors.runtime.ingest import input_codec
from processors.stages.pinned_columns import column_type, zeros
from topics.columnar import DTYPES, RecordCodec

log = logging.getLogger(__name__)

#: (column name, "string" | "bytes" | numpy dtype string) in column order (pinned_columns'
#: names, which the stages' restored state is checked with too)
Layout = tuple[tuple[str, str], ...]

#: stage kinds that select rows and never change columns (left out of the probe)
ROW_SELECTING_KINDS = frozenset({"filter"})


def layout_of(batch: Batch) -> Layout:
    """A batch's columns and their types, in order."""
    return tuple((name, column_type(col)) for name, col in batch.columns.items())


def narrowed(expected: Layout, batch: Batch) -> Batch | None:
    """``batch`` with only the ``expected`` columns, in their order, if it has every one of
    them with its type (None otherwise): an envelope written by an ingest that carried more
    fields (before projection pushdown, during an upgrade) holds nothing else the step reads."""
    have = dict(layout_of(batch))
    if any(have.get(name) != type_ for name, type_ in expected):
        return None
    columns = {name: batch.columns[name] for name, _ in expected}
    return Batch(columns, batch.sign, batch.ts, batch.key, dict(batch.meta))


def mismatch(expected: Layout, got: Layout) -> str | None:
    """Why ``got`` is not ``expected`` (naming the columns), or None if they agree."""
    if got == expected:
        return None
    want, have = dict(expected), dict(got)
    parts = []
    missing = [n for n in want if n not in have]
    extra = [n for n in have if n not in want]
    retyped = [f"{n} ({have[n]}, not {want[n]})" for n in want if n in have and want[n] != have[n]]
    if missing:
        parts.append(f"missing column(s) {missing}")
    if extra:
        parts.append(f"unexpected column(s) {extra}")
    if retyped:
        parts.append(f"column type(s) {retyped}")
    if not parts:
        parts.append(f"columns in order {list(have)}, not {list(want)}")
    return "; ".join(parts)


def _probe_step(step: Step) -> Step:
    def kept(nodes: tuple[StageNode, ...]) -> tuple[StageNode, ...]:
        return tuple(n for n in nodes if n.kind not in ROW_SELECTING_KINDS)

    inputs = tuple((stream, kept(nodes)) for stream, nodes in step.inputs)
    return dataclasses.replace(step, nodes=kept(step.nodes), inputs=inputs)


def _zero_columns(spec: StreamSpec, codec: RecordCodec) -> dict[str, Column]:
    """One zero-valued record of the flat fields of ``spec`` that ``codec`` decodes, a
    nullable one with its companion column (when the codec cannot say)."""
    columns: dict[str, Column] = {}
    decoded = {f.name for f in codec.fields}
    for f in spec.fields:
        if f.name not in decoded:
            continue
        var = f.type in ("string", "bytes")
        columns[f.name] = zeros(f.type if var else np.dtype(DTYPES[f.type]).str, 1)
        if f.nullable:  # the companion follows its column, as the codec decodes it
            columns[null_column(f.name)] = np.zeros(1, np.bool_)
    return columns


def _stream_probe(plan: LogicalPlan, spec: StreamSpec) -> Batch:
    """One zero-valued record of a stream, as its ingest agent would write it (the fields the
    plan reads: :func:`processors.runtime.ingest.input_codec`)."""
    codec = input_codec(plan, spec)
    try:
        columns = codec.warm_up()
    except Exception:
        columns = _zero_columns(spec, codec)
    ts = np.asarray(columns[spec.timestamp], np.int64) if spec.timestamp else None
    return Batch.inserts(columns, ts=ts)


def _probe(plan: LogicalPlan, physical: PhysicalPlan) -> dict[str, Layout]:
    single = single_partition(plan)  # one record, one source: the merges forward it
    chains = {s.name: chain_factory(single, _probe_step(s))(0) for s in physical.steps}
    seen: dict[str, Layout] = {}

    def write(topic: str, batches: list[Batch]) -> None:
        step = physical.reader_of(topic)
        batches = [b for b in batches if len(b.columns)]
        if batches:
            seen.setdefault(topic, layout_of(batches[0]))
        if step is None or not batches:
            return
        label = step.in_topics[topic]
        out = [o for b in batches for o in chains[step.name].push(label, b)]
        write(step.out_topic, out)

    for stream in plan.streams:
        write(physical.ingest_topics[stream.name], [_stream_probe(plan, stream)])
    for step in physical.steps:
        write(step.out_topic, chains[step.name].flush())
    return seen


def expected_layouts(plan: LogicalPlan) -> dict[str, Layout]:
    """Input topic -> the layout its envelopes must have, for every topic the probe reached;
    empty (nothing checked) if the probe fails, which is logged."""
    try:
        return _probe(plan, compile_plan(plan))
    except Exception:
        log.warning("could not derive the input layouts of the steps; envelopes of internal "
                    "topics are not checked", exc_info=True)  # fmt: skip
        return {}
