"""Making the stages of a step for one partition: the only place that calls the registry."""

from __future__ import annotations

from collections.abc import Callable

from processors.core.plan import LogicalPlan
from processors.physical.chain import StageChain
from processors.physical.joined import JoinedChain
from processors.physical.kinds import build_stage
from processors.physical.steps import Step
from processors.stages.base import Stage


def chain_factory(plan: LogicalPlan, step: Step) -> Callable[[int], StageChain | JoinedChain]:
    """Makes ``step``'s chain of stages for one partition (with its input streams' chains in
    front, for a step that has them: :class:`JoinedChain`)."""

    def make(partition: int) -> StageChain | JoinedChain:
        stages = [build_stage(plan, node, partition) for node in step.nodes]
        chain = StageChain(step.name, stages, step.stream)
        if not step.inputs:
            return chain
        inputs = {
            stream: StageChain(
                f"stream.{stream}", [build_stage(plan, n, partition) for n in nodes], stream
            )
            for stream, nodes in step.inputs
        }
        return JoinedChain(step.name, inputs, chain)

    return make


def stage_factory(plan: LogicalPlan, step: Step) -> Callable[[int], Stage]:
    """Makes the one stage of a stateless step for one partition (its statistics are the
    stage's own, as the status page and the stats records show them)."""
    if len(step.nodes) != 1:
        raise ValueError(f"step {step.name} chains {len(step.nodes)} stages; use chain_factory")
    (node,) = step.nodes
    return lambda partition: build_stage(plan, node, partition)
