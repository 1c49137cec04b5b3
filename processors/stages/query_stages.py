"""A query's logical plan as stages: what runs, per stream and after the streams meet.

Per input stream: the filters that may run on the raw stream (``below_window``: no window, or a
RANGE window, which commutes with selections), the window stage, then the filters that must see
the window's delta stream (``above_window``: ROWS windows, which do not commute). Then, with
several streams, the MJoin; then either the projection to the result fields or the GROUP BY
aggregate. The runtime runs the same objects inside Faust agents; :class:`QueryStages` chains
them in process for tests, benchmarks and experiments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from processors.core.batch import ROW_ID, Batch, Column
from processors.core.ordering.config import OrderingConfig
from processors.core.plan import LogicalPlan
from processors.core.predicates import plan_predicates
from processors.stages.aggregate_stage import Aggregate, AggregateStage
from processors.stages.filter_stage import FilterStage
from processors.stages.mjoin_stage import MJoinStage
from processors.stages.window_stage import WindowStage


def joined_name(plan: LogicalPlan, stream: str, field: str) -> str:
    """A column's name in the relation the projection or aggregate reads."""
    return f"{stream}.{field}" if len(plan.streams) > 1 else field


def filter_stage(
    plan: LogicalPlan, stream: str, placement: str, partition: int = 0
) -> FilterStage | None:
    predicates = plan_predicates(plan, stream, placement)
    if not predicates:
        return None
    config = plan.ordering_config
    config = config.with_(seed=config.seed + partition)
    return FilterStage(predicates, config, name=f"filter.{stream}[{partition}]")


def window_stage(plan: LogicalPlan, stream: str, partition: int = 0) -> WindowStage | None:
    window = plan.windows.get(stream)
    if window is None:
        return None
    return WindowStage(window, plan.lateness_ms, name=f"window.{stream}[{partition}]")


def mjoin_stage(plan: LogicalPlan, partition: int = 0) -> MJoinStage | None:
    if len(plan.streams) < 2:
        return None
    names = [s.name for s in plan.streams]
    predicates = [
        ((names.index(j.left.stream), j.left.field), (names.index(j.right.stream), j.right.field))
        for j in plan.joins
    ]
    config: OrderingConfig = plan.ordering_config
    return MJoinStage(
        names, predicates, config.with_(seed=config.seed + partition), name=f"mjoin[{partition}]"
    )


def aggregate_stage(plan: LogicalPlan, partition: int = 0) -> AggregateStage | None:
    if not plan.aggregates:
        return None
    group_by = [joined_name(plan, c.stream, c.field) for c in plan.group_by]
    aggregates = [
        Aggregate(a.func, None if a.source is None else joined_name(plan, *_ref(a.source)), a.name)
        for a in plan.aggregates
    ]
    return AggregateStage(group_by, aggregates, name=f"aggregate[{partition}]")


def _ref(ref: Any) -> tuple[str, str]:
    return ref.stream, ref.field


def project(plan: LogicalPlan, batch: Batch) -> Batch:
    """The result fields of the plan, renamed, from the joined (or single) relation."""
    if plan.aggregates:  # group columns keep their field names
        names = {joined_name(plan, c.stream, c.field): c.field for c in plan.group_by}
        cols = {names.get(k, k): v for k, v in batch.columns.items()}
        return Batch(cols, batch.sign, batch.ts, batch.key, dict(batch.meta))
    cols: dict[str, Column] = {}
    for out in plan.output:
        cols[out.name] = batch.columns[joined_name(plan, out.source.stream, out.source.field)]
    key = batch.key if len(plan.streams) == 1 else None
    return Batch(cols, batch.sign, batch.ts, key, dict(batch.meta))


class RowIds:
    """Row ids for a join input without a window: every tuple stays, so ids just count."""

    def __init__(self) -> None:
        self.next = 0

    def process(self, batch: Batch) -> list[Batch]:
        ids = np.arange(self.next, self.next + len(batch), dtype=np.int64)
        self.next += len(batch)
        cols = dict(batch.columns)
        cols[ROW_ID] = ids
        return [Batch(cols, batch.sign, batch.ts, batch.key, dict(batch.meta))]

    def snapshot(self) -> dict[str, Any]:
        return {"next": self.next}


class StreamStages:
    """One input stream's stages: filters below the window, the window, filters above it."""

    def __init__(self, plan: LogicalPlan, stream: str, partition: int = 0) -> None:
        self.stream = stream
        self.below = filter_stage(plan, stream, "below_window", partition)
        self.window = window_stage(plan, stream, partition)
        self.above = filter_stage(plan, stream, "above_window", partition)
        self.ids = RowIds() if self.window is None and len(plan.streams) > 1 else None

    def stages(self) -> list[Any]:
        return [s for s in (self.below, self.window, self.ids, self.above) if s is not None]

    def process(self, batch: Batch) -> list[Batch]:
        batches = [batch]
        for stage in self.stages():
            batches = [out for b in batches for out in stage.process(b) if len(out)]
        for b in batches:
            b.meta["stream"] = self.stream
        return batches

    def flush(self) -> list[Batch]:
        """What the window still holds back (lateness buffer), through the filters above it."""
        if self.window is None:
            return []
        batches = self.window.flush()
        if self.above is not None:
            batches = [out for b in batches for out in self.above.process(b) if len(out)]
        for b in batches:
            b.meta["stream"] = self.stream
        return batches


class QueryStages:
    """Every stage of one query partition, chained in process."""

    def __init__(self, plan: LogicalPlan, partition: int = 0) -> None:
        self.plan = plan
        self.streams = {s.name: StreamStages(plan, s.name, partition) for s in plan.streams}
        self.join = mjoin_stage(plan, partition)
        self.aggregate = aggregate_stage(plan, partition)

    def push(self, stream: str, batch: Batch) -> list[Batch]:
        """One batch of raw input of ``stream``; returns result batches (result fields)."""
        return self._after_streams(self.streams[stream].process(batch))

    def flush(self) -> list[Batch]:
        """End of input: release what windows and the join hold back."""
        pending = [b for s in self.streams.values() for b in s.flush()]
        out = self._after_streams(pending)
        if self.join is not None:
            out += self._finish(self.join.flush())
        return out

    def _after_streams(self, batches: list[Batch]) -> list[Batch]:
        if self.join is None:
            return self._finish(batches)
        joined: list[Batch] = []
        for b in batches:
            joined += self.join.process(b)
        return self._finish(joined)

    def _finish(self, batches: list[Batch]) -> list[Batch]:
        out = []
        for b in batches:
            if self.aggregate is not None:
                out += [project(self.plan, a) for a in self.aggregate.process(b) if len(a)]
            elif len(b):
                out.append(project(self.plan, b))
        return out

    def all_stages(self) -> list[Any]:
        stages = [st for s in self.streams.values() for st in s.stages()]
        return stages + [s for s in (self.join, self.aggregate) if s is not None]

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        out: list[tuple[Batch, str]] = []
        for stage in self.all_stages():
            take = getattr(stage, "take_dead_letters", None)
            if take is not None:
                out += take()
        return out

    def stats(self) -> dict[str, Any]:
        return {
            getattr(s, "name", type(s).__name__): s.stats()
            for s in self.all_stages()
            if hasattr(s, "stats")
        }


# -- per-partition chains for the runtime's stateful agents ------------------------------------
class StreamChain:
    """One input stream's stages as one agent; ``finish`` projects to the result fields (a
    single-stream query without GROUP BY ends here)."""

    def __init__(self, plan: LogicalPlan, stream: str, partition: int, finish: bool) -> None:
        self.plan = plan
        self.stages = StreamStages(plan, stream, partition)
        self.finish = finish

    def push(self, stream: str, batch: Batch) -> list[Batch]:
        out = self.stages.process(batch)
        return [project(self.plan, b) for b in out] if self.finish else out

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        out: list[tuple[Batch, str]] = []
        for stage in self.stages.stages():
            take = getattr(stage, "take_dead_letters", None)
            if take is not None:
                out += take()
        return out

    def stats(self) -> dict[str, Any]:
        return {s.name: s.stats() for s in self.stages.stages() if hasattr(s, "stats")}


class JoinChain:
    """The MJoin of one partition; ``finish`` projects to the result fields."""

    def __init__(self, plan: LogicalPlan, partition: int, finish: bool) -> None:
        self.plan = plan
        join = mjoin_stage(plan, partition)
        assert join is not None
        self.join = join
        self.finish = finish

    def push(self, stream: str, batch: Batch) -> list[Batch]:
        self.join.push(self.join.input_index(stream), batch)
        out = self.join.release()
        return [project(self.plan, b) for b in out] if self.finish else out

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        return self.join.take_dead_letters()

    def stats(self) -> dict[str, Any]:
        return {self.join.name: self.join.stats()}


class AggregateChain:
    """The GROUP BY of one partition, projected to the result fields."""

    def __init__(self, plan: LogicalPlan, partition: int) -> None:
        self.plan = plan
        stage = aggregate_stage(plan, partition)
        assert stage is not None
        self.aggregate = stage

    def push(self, stream: str, batch: Batch) -> list[Batch]:
        return [project(self.plan, b) for b in self.aggregate.process(batch) if len(b)]

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        return self.aggregate.take_dead_letters()

    def stats(self) -> dict[str, Any]:
        return {self.aggregate.name: self.aggregate.stats()}
