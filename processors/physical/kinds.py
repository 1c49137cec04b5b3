"""The stage kinds, one registry: a kind of operator is a stage class, an entry here and a plan
node (``docs/architecture.md``, "Adding an operator"). The compiler names kinds in its
:class:`~processors.physical.steps.StageNode`; the builders below make the stage of one
partition from the plan, so nothing in the runtime knows any kind by name."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from processors.core.batch import null_column
from processors.core.expressions import refs
from processors.core.joins.graph import Side
from processors.core.partitioning import partitioning
from processors.core.plan import LogicalPlan, OperatorNode, QueryError
from processors.core.predicates import plan_predicates
from processors.physical.steps import StageNode
from processors.stages.aggregate_stage import Aggregate, AggregateStage
from processors.stages.base import PassThroughStage, Stage
from processors.stages.eager_mjoin import EagerMJoinStage
from processors.stages.filter_stage import FilterStage
from processors.stages.join_tree_stage import JoinTreeStage
from processors.stages.merge_stage import MergeStage
from processors.stages.mjoin_stage import MJoinStage
from processors.stages.shape_stages import ProjectStage, RowIdsStage, joined_name
from processors.stages.synthetic_stage import SyntheticStage
from processors.stages.window_stage import WindowStage

log = logging.getLogger(__name__)

#: makes the stage of ``node`` for one partition of a query
StageBuilder = Callable[[LogicalPlan, StageNode, int], Stage]
#: checks an operator's plan node (``Query.apply``) against the plan; raises QueryError
OperatorCheck = Callable[[LogicalPlan, OperatorNode], None]


@dataclass(frozen=True)
class StageKind:
    """A registry entry: how to build the stage, whether it keeps state (its step is then
    snapshotted like a window's), and, for kinds users place with ``Query.apply``, how to check
    their parameters when the plan is compiled."""

    build: StageBuilder
    stateful: bool = False
    check: OperatorCheck | None = None


def _filter(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    assert node.stream is not None
    config = plan.ordering_config
    # each partition profiles with its own random stream, reproducibly; its log lines and stats
    # name the partition
    config = config.with_(seed=config.seed + partition)
    predicates = plan_predicates(plan, node.stream, node.placement)
    if node.placement is None:  # the only filter step of a single-stream query
        label = "filter"
    elif node.placement == "above_window":
        label = f"filter.{node.stream}.above"
    else:
        label = f"filter.{node.stream}"
    return FilterStage(predicates, config, name=f"{label}[{partition}]")


def _merge(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    assert node.stream is not None
    part = partitioning(plan)
    sources = part.sources(node.stream)
    routed = part.routes[node.stream] is not None and part.streams[node.stream] > 1
    name = f"merge.{node.stream}[{partition}]"
    return MergeStage(sources, plan.lateness_ms, name, drives_time=routed or sources > 1,
                      idle_timeout_ms=plan.idle_timeout_ms, eager=plan.eager_join)  # fmt: skip


def _window(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    assert node.stream is not None
    window = plan.windows[node.stream]
    return WindowStage(window, plan.lateness_ms, name=f"window.{node.stream}[{partition}]")


def _row_ids(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    return RowIdsStage(name=f"row_ids.{node.stream}[{partition}]")


def _join_inputs(plan: LogicalPlan) -> tuple[list[str], list[tuple[Side, Side]]]:
    names = [s.name for s in plan.streams]
    predicates = [
        ((names.index(j.left.stream), j.left.field), (names.index(j.right.stream), j.right.field))
        for j in plan.joins
    ]
    return names, predicates


def _mjoin(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    names, predicates = _join_inputs(plan)
    config = plan.ordering_config
    if plan.eager_join:
        if config.caches_on and partition == 0:
            log.info("adaptive caching is not run by the eager join (join_output = 'eager'); "
                     "the join runs without caches")  # fmt: skip
        return EagerMJoinStage(
            names, predicates, [plan.windows[n].size for n in names],
            config.with_(seed=config.seed + partition), name=f"mjoin[{partition}]",
            idle_timeout_ms=plan.idle_timeout_ms, result_columns=_projected(plan),
        )  # fmt: skip
    return MJoinStage(
        names, predicates, config.with_(seed=config.seed + partition), name=f"mjoin[{partition}]",
        idle_timeout_ms=plan.idle_timeout_ms,
    )  # fmt: skip


def _projected(plan: LogicalPlan) -> set[str]:
    """The joined relation's columns the projection reads (with their null companions)."""
    sources = [r for c in plan.output for r in ([c.source] if c.expr is None else refs(c.expr))]
    names = {joined_name(plan, r.stream, r.field) for r in sources}
    return names | {null_column(n) for n in names}


def _join_tree(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    names, predicates = _join_inputs(plan)
    assert plan.join_tree is not None
    return JoinTreeStage(
        names, predicates, plan.join_tree, name=f"join_tree[{partition}]",
        idle_timeout_ms=plan.idle_timeout_ms,
    )  # fmt: skip


def _aggregate(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    group_by = [joined_name(plan, c.stream, c.field) for c in plan.group_by]
    aggregates = [
        Aggregate(
            a.func,
            None if a.source is None else joined_name(plan, a.source.stream, a.source.field),
            a.name,
        )
        for a in plan.aggregates
    ]
    return AggregateStage(group_by, aggregates, name=f"aggregate[{partition}]")


def _project(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    return ProjectStage(plan, name=f"project[{partition}]")


def _synthetic(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    op = next(o for o in plan.operators if o.name == node.operator)
    # the name seeds the operator's selection hash: it must not depend on the partition
    return SyntheticStage(op.name, op.cost_us * 1000, op.selectivity, op.key)


def _passthrough(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    return PassThroughStage("passthrough")


STAGE_KINDS: dict[str, StageKind] = {
    "merge": StageKind(_merge, stateful=True),
    "filter": StageKind(_filter),
    "window": StageKind(_window, stateful=True),
    "row_ids": StageKind(_row_ids, stateful=True),
    "mjoin": StageKind(_mjoin, stateful=True),
    "join_tree": StageKind(_join_tree, stateful=True),
    "aggregate": StageKind(_aggregate, stateful=True),
    "project": StageKind(_project),
    "synthetic": StageKind(_synthetic),
    "passthrough": StageKind(_passthrough),
}


def stage_kind(kind: str, what: str) -> StageKind:
    """The registry entry of ``kind``; a QueryError naming ``what`` asked for it if none."""
    try:
        return STAGE_KINDS[kind]
    except KeyError:
        raise QueryError(f"{what}: no stage kind {kind!r} (kinds: {sorted(STAGE_KINDS)})") from None


def check_operator(plan: LogicalPlan, op: OperatorNode) -> StageKind:
    """An operator's registry entry, after its own check of the node's parameters."""
    entry = stage_kind(op.kind, f"operator {op.name}")
    if entry.check is None:
        raise QueryError(f"operator {op.name}: stage kind {op.kind!r} is not placed by apply()")
    entry.check(plan, op)
    return entry


def build_stage(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    """The stage of ``node`` for ``partition`` of ``plan``."""
    return stage_kind(node.kind, "stage").build(plan, node, partition)
