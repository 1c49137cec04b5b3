"""The plan compiler: a validated logical plan -> the steps that run it (and their topics).

Single-stream plans with filters at most run ingest -> filter (or pass-through) -> synthetic
operators -> sink, stateless; without synthetic operators the worker fuses the three agents
(``PhysicalPlan.fused``). Others run ingest -> the stateful stages of each stream (the
event-time merge, filters that commute with its window, the window, row ids for an unwindowed
join input, the filters that must see the window's deltas): a step of their own for one stream,
in front of the MJoin in its step for several -> the GROUP BY (with aggregates), on the
partitions :func:`processors.core.partitioning.partitioning` allows. The last step projects to
the result fields and writes the results. Both the worker and the in-process runner are built from
the one list this returns.
"""

from __future__ import annotations

from processors.core.partitioning import partitioning
from processors.core.plan import LogicalPlan, OperatorNode
from processors.physical.kinds import check_operator
from processors.physical.steps import (
    IngestRoute,
    PhysicalPlan,
    StageNode,
    Step,
    internal_topic,
    state_topic,
)
from topics.specs import TopicSpec

FILTER_STEP = "filter"
#: synthetic operator steps are named OPERATOR_PREFIX + the operator's name
OPERATOR_PREFIX = "op."


def is_simple(plan: LogicalPlan) -> bool:
    """One stream without window, projection, aggregate or stream operator: ingest, filters,
    sink."""
    return (
        len(plan.streams) == 1
        and not plan.windows
        and not plan.projected
        and not plan.aggregates
        and plan.stream_op is None
    )


def compile_plan(plan: LogicalPlan) -> PhysicalPlan:
    """The steps, topics and partitioning of ``plan``."""
    return _simple(plan) if is_simple(plan) else _general(plan)


def _simple(plan: LogicalPlan) -> PhysicalPlan:
    (stream,) = plan.streams
    partitions = stream.partitions or 1
    ingest = internal_topic(plan.name, f"ingest.{stream.name}")
    out = internal_topic(plan.name, "out")
    chosen: list[tuple[str, StageNode, bool, bool]] = []  # (step name, node, bulk, stateful)
    if plan.filters:
        chosen.append((FILTER_STEP, StageNode("filter", stream.name), True, False))
    for op in plan.operators:
        stateful = isinstance(op, OperatorNode) and check_operator(plan, op).stateful
        node = StageNode(op.kind, stream.name, operator=op.name)
        chosen.append((OPERATOR_PREFIX + op.name, node, True, stateful))
    if not chosen:
        chosen.append(("passthrough", StageNode("passthrough", stream.name), False, False))
    # each step reads what the one before wrote: ingest -> step 1 -> ... -> out
    inputs = [ingest] + [internal_topic(plan.name, f"after.{c[0]}") for c in chosen[:-1]]
    outputs = inputs[1:] + [out]
    steps = [
        Step(name, node.kind, {src: stream.name}, dst, partitions, (node,), stateful, bulk)
        for (name, node, bulk, stateful), src, dst in zip(chosen, inputs, outputs, strict=True)
    ]
    # with one stateless step and nothing between it and the sink, the worker fuses the three
    # agents (processors.runtime.fused): no envelope topic between them
    fused = not plan.operators
    specs = [
        TopicSpec(stream.topic, partitions),
        *(() if fused else (TopicSpec(t, partitions) for t in [*inputs, out])),
        TopicSpec(plan.result_topic, plan.result_partitions or 1),
    ]
    state = None
    if any(step.stateful for step in steps) or plan.processing_guarantee == "exactly_once":
        state = state_topic(plan.name)
        specs.append(TopicSpec(state, 1, compacted=True))
    return PhysicalPlan(
        plan.name, {stream.name: ingest}, {stream.name: IngestRoute(partitions)}, steps, out,
        specs, state_topic=state, fused=fused, sink_agent=not fused,
    )  # fmt: skip


def _stream_nodes(plan: LogicalPlan, stream: str, finish: bool) -> tuple[StageNode, ...]:
    nodes = [StageNode("merge", stream)]
    if plan.filters_on(stream, "below_window"):
        nodes.append(StageNode("filter", stream, "below_window"))
    if stream in plan.windows and not plan.eager_join:
        nodes.append(StageNode("window", stream))
    elif len(plan.streams) > 1:
        nodes.append(StageNode("row_ids", stream))
    if plan.filters_on(stream, "above_window"):
        nodes.append(StageNode("filter", stream, "above_window"))
    if finish:
        nodes.append(StageNode("project"))
    return tuple(nodes)


def _general(plan: LogicalPlan) -> PhysicalPlan:
    part = partitioning(plan)
    specs = [TopicSpec(s.topic, s.partitions or 1) for s in plan.streams]
    ingest: dict[str, str] = {}
    routes: dict[str, IngestRoute] = {}
    steps: list[Step] = []
    multi = len(plan.streams) > 1
    out = internal_topic(plan.name, "out")
    agg_in = internal_topic(plan.name, "joined") if plan.aggregates else out
    for s in plan.streams:
        topic = internal_topic(plan.name, f"ingest.{s.name}")
        ingest[s.name] = topic
        p = part.streams[s.name]
        routes[s.name] = IngestRoute(p, part.routes[s.name], progress=True)
        specs.append(TopicSpec(topic, p))
        if multi:  # the stream's stages run in the MJoin's step (processors.physical.joined)
            continue
        finish = not plan.aggregates
        steps.append(
            Step(
                f"stream.{s.name}", "stream", {topic: s.name}, agg_in,
                part.aggregate if plan.aggregates else part.join,
                _stream_nodes(plan, s.name, finish), True, stream=s.name, finish=finish,
            )
        )  # fmt: skip
    if multi:
        # co-partitioned with its inputs: partition p of every stream feeds partition p
        assert all(part.streams[s.name] == part.join for s in plan.streams)
        finish = not plan.aggregates
        join = StageNode("mjoin" if plan.join_tree is None else "join_tree")
        nodes = (join, *((StageNode("project"),) if finish else ()))
        steps.append(
            Step(
                "mjoin", "mjoin", {ingest[s.name]: s.name for s in plan.streams}, agg_in,
                part.aggregate if plan.aggregates else part.join, nodes, True, finish=finish,
                inputs=tuple((s.name, _stream_nodes(plan, s.name, False)) for s in plan.streams),
            )
        )  # fmt: skip
    if plan.aggregates:
        specs.append(TopicSpec(agg_in, part.aggregate))
        nodes = (StageNode("aggregate"), StageNode("project"))
        steps.append(
            Step("aggregate", "aggregate", {agg_in: "joined"}, out, part.aggregate, nodes, True)
        )
    specs += [
        TopicSpec(plan.result_topic, plan.result_partitions or 1),
        TopicSpec(state_topic(plan.name), 1, compacted=True),
    ]
    # the last step writes the results itself (processors.runtime.results): no `out` topic
    return PhysicalPlan(
        plan.name, ingest, routes, steps, out, specs, part.to_json(),
        state_topic=state_topic(plan.name), sink_agent=False,
    )  # fmt: skip
