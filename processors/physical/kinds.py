"""The stage kinds, one registry: a kind of operator is a stage class, an entry here and a plan
node (``docs/architecture.md``, "Adding an operator"). The compiler names kinds in its
:class:`~processors.physical.steps.StageNode`; the builders below make the stage of one
partition from the plan, so nothing in the runtime knows any kind by name."""

from __future__ import annotations

from collections.abc import Callable

from processors.core.plan import LogicalPlan
from processors.core.predicates import plan_predicates
from processors.physical.steps import StageNode
from processors.stages.aggregate_stage import Aggregate, AggregateStage
from processors.stages.base import PassThroughStage, Stage
from processors.stages.filter_stage import FilterStage
from processors.stages.mjoin_stage import MJoinStage
from processors.stages.shape_stages import ProjectStage, RowIdsStage, joined_name
from processors.stages.synthetic_stage import SyntheticStage
from processors.stages.window_stage import WindowStage

#: makes the stage of ``node`` for one partition of a query
StageBuilder = Callable[[LogicalPlan, StageNode, int], Stage]


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


def _window(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    assert node.stream is not None
    window = plan.windows[node.stream]
    return WindowStage(window, plan.lateness_ms, name=f"window.{node.stream}[{partition}]")


def _row_ids(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    return RowIdsStage(name=f"row_ids.{node.stream}[{partition}]")


def _mjoin(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    names = [s.name for s in plan.streams]
    predicates = [
        ((names.index(j.left.stream), j.left.field), (names.index(j.right.stream), j.right.field))
        for j in plan.joins
    ]
    config = plan.ordering_config
    return MJoinStage(
        names, predicates, config.with_(seed=config.seed + partition), name=f"mjoin[{partition}]"
    )


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


STAGE_KINDS: dict[str, StageBuilder] = {
    "filter": _filter,
    "window": _window,
    "row_ids": _row_ids,
    "mjoin": _mjoin,
    "aggregate": _aggregate,
    "project": _project,
    "synthetic": _synthetic,
    "passthrough": _passthrough,
}


def build_stage(plan: LogicalPlan, node: StageNode, partition: int) -> Stage:
    """The stage of ``node`` for ``partition`` of ``plan``."""
    try:
        builder = STAGE_KINDS[node.kind]
    except KeyError:
        raise ValueError(f"no stage kind {node.kind!r} (kinds: {sorted(STAGE_KINDS)})") from None
    return builder(plan, node, partition)
