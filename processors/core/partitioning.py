"""How a query's work spreads over partitions without changing its results.

streamon does not trust producers to have partitioned alike: producers in one company use
different clients (Java's murmur2, librdkafka's crc32) and topics differ in partition counts.
The ingest agent therefore *routes* each decoded record itself, by streamon's own hash of the
key a keyed stage needs (:mod:`processors.kernels.routing`), so co-partitioning holds by
construction. What each stage needs:

- a ROWS n window means the last n tuples of the *whole* stream: one partition, unless it is
  PARTITION BY some fields, which the stream is then routed by;
- a RANGE window (or none) keeps each tuple for its own time span: any partitioning works, so
  records stay on the partition they came in on unless a later stage needs a key;
- an MJoin runs on as many partitions as its largest input has when every input is routed by
  the join key (a key shared by all inputs through the equalities), else on one;
- a GROUP BY runs per partition when it groups by the routing key, else on one; a single
  stream is routed by its GROUP BY fields for that.

When a stage needs fewer partitions than its input has, the step before it writes every batch
to partition 0. A stream step fed from several input partitions (routed, or all to 0) merges
them in event-time order (:mod:`processors.stages.merge_stage`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from processors.core.plan import LogicalPlan


@dataclass(frozen=True)
class Partitioning:
    """Partitions of each internal step, how ingest routes each stream, and why (shown on the
    status page)."""

    streams: dict[str, int]  # the stream step of each input (window and filters)
    #: stream -> the fields ingest routes it by (streamon's hash); None: no key is needed, each
    #: record stays on its input partition (or goes to partition 0 when its step has one)
    routes: dict[str, tuple[str, ...] | None]
    inputs: dict[str, int]  # partitions of each input topic, as declared
    join: int  # the MJoin (1 when there is no join: unused)
    aggregate: int  # the GROUP BY (unused without aggregates)
    reasons: tuple[str, ...]

    def sources(self, stream: str) -> int:
        """How many input partitions feed each partition of ``stream``'s step."""
        fans_in = self.routes[stream] is not None or self.streams[stream] != self.inputs[stream]
        return self.inputs[stream] if fans_in else 1

    def to_json(self) -> dict[str, object]:
        return {
            "streams": dict(self.streams),
            "routes": {
                s: {
                    "by": None if by is None else list(by),
                    "input_partitions": self.inputs[s],
                    "partitions": self.streams[s],
                }
                for s, by in self.routes.items()
            },
            "join": self.join,
            "aggregate": self.aggregate,
            "reasons": list(self.reasons),
        }


def _declared(plan: LogicalPlan, stream: str) -> int:
    return plan.stream(stream).partitions or 1


def _whole_stream(plan: LogicalPlan, stream: str) -> bool:
    """A ROWS window without PARTITION BY: the last tuples of the whole stream."""
    window = plan.windows.get(stream)
    return window is not None and window.kind == "rows" and not window.partition_by


def partitioning(plan: LogicalPlan) -> Partitioning:
    inputs = {s.name: _declared(plan, s.name) for s in plan.streams}
    if len(plan.streams) == 1:
        return _single(plan, inputs)
    return _joined(plan, inputs)


def _single(plan: LogicalPlan, inputs: dict[str, int]) -> Partitioning:
    (name,) = inputs
    n = inputs[name]
    reasons: list[str] = []
    window = plan.windows.get(name)
    grouped = tuple(c.field for c in plan.group_by)
    route: tuple[str, ...] | None = None
    if _whole_stream(plan, name):
        partitions = 1
        if n > 1:
            reasons.append(f"{window} keeps the last tuples of the whole stream: one partition")
    elif window is not None and window.partition_by:
        partitions, route = n, window.partition_by
        reasons.append(f"stream {name!r} is routed by {', '.join(route)} ({window})")
    elif grouped:
        partitions, route = n, grouped
        reasons.append(f"stream {name!r} is routed by its GROUP BY fields {', '.join(route)}")
    else:
        partitions = n
    aggregate = partitions
    if plan.aggregates and (route is None or not set(route) <= set(grouped)):
        if partitions > 1:
            reasons.append("GROUP BY does not include the routing key: one partition")
        aggregate = 1
    return Partitioning({name: partitions}, {name: route}, inputs, partitions, aggregate,
                        tuple(reasons))  # fmt: skip


def _joined(plan: LogicalPlan, inputs: dict[str, int]) -> Partitioning:
    reasons: list[str] = []
    names = list(inputs)
    one = Partitioning({s: 1 for s in names}, {s: None for s in names}, inputs, 1, 1, ())
    if plan.join_key is None:
        reasons.append("no join key is shared by all inputs: the MJoin runs on one partition")
        return _with_reasons(one, reasons)
    by_stream = {c.stream: c.field for c in plan.join_key}
    for s in names:
        window = plan.windows.get(s)
        if window is not None and window.kind == "rows" and window.partition_by != (by_stream[s],):
            reasons.append(
                f"{window} is not PARTITION BY the join key {by_stream[s]!r}: the MJoin runs "
                "on one partition"
            )
            return _with_reasons(one, reasons)
    partitions = max(inputs.values())
    routes: dict[str, tuple[str, ...] | None] = {s: (by_stream[s],) for s in names}
    reasons.append(
        "inputs are routed by the join key ("
        + ", ".join(f"{s}.{by_stream[s]}" for s in names)
        + f") into {partitions} partition(s), whatever their producers' partitioners"
    )
    aggregate = partitions
    if plan.aggregates:
        grouped = {(c.stream, c.field) for c in plan.group_by}
        if not any((s, f) in grouped for s, f in by_stream.items()):
            if partitions > 1:
                reasons.append("GROUP BY does not include the join key: one partition")
            aggregate = 1
    return Partitioning({s: partitions for s in names}, routes, inputs, partitions, aggregate,
                        tuple(reasons))  # fmt: skip


def _with_reasons(base: Partitioning, reasons: list[str]) -> Partitioning:
    return Partitioning(base.streams, base.routes, base.inputs, base.join, base.aggregate,
                        tuple(reasons))  # fmt: skip


def with_input_partitions(plan: LogicalPlan, counts: Mapping[str, int]) -> LogicalPlan:
    """``plan`` with each stream's partitions as its input topic has them (``counts``: topic
    -> partitions), where the topic has more than declared or none was declared: every input
    partition must be read, and each step's parallelism follows from them."""
    streams = []
    for s in plan.streams:
        have = counts.get(s.topic)
        if have is not None and have > (s.partitions or 0):
            s = dataclasses.replace(s, partitions=have)
        streams.append(s)
    return dataclasses.replace(plan, streams=tuple(streams))


def single_partition(plan: LogicalPlan) -> LogicalPlan:
    """``plan`` as one partition fed by one input partition sees it (the in-process runner, the
    layout probe): no routing, and every event-time merge forwards what it gets."""
    streams = tuple(dataclasses.replace(s, partitions=None) for s in plan.streams)
    return dataclasses.replace(plan, streams=streams)
