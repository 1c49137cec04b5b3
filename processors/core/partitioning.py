"""How a query's work spreads over partitions without changing its results.

A stage may run per partition only when its answer is the union of per-partition answers:

- a ROWS n window means the last n tuples of the *whole* stream, so it needs one partition,
  unless it is PARTITION BY the field the stream is keyed (so partitioned) by;
- a RANGE window (or none) keeps each tuple for its own time span: any partitioning works;
- an MJoin can run per partition when every input is partitioned by the join key, the same way
  (DESIGN.md: co-partitioned by a join key shared by all inputs), else on one partition;
- a GROUP BY runs per partition when it groups by the partitioning key, else on one.

When a stage needs fewer partitions than its input has, the agent before it writes every batch
to partition 0 of the next internal topic.
"""

from __future__ import annotations

from dataclasses import dataclass

from processors.core.plan import LogicalPlan


@dataclass(frozen=True)
class Partitioning:
    """Partitions of each internal step, and why (shown on the status endpoint)."""

    streams: dict[str, int]  # the stream stage of each input (window and filters)
    join: int  # the MJoin (1 when there is no join: unused)
    aggregate: int  # the GROUP BY (unused without aggregates)
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "streams": dict(self.streams),
            "join": self.join,
            "aggregate": self.aggregate,
            "reasons": list(self.reasons),
        }


def _declared(plan: LogicalPlan, stream: str) -> int:
    return plan.stream(stream).partitions or 1


def _stream_partitions(plan: LogicalPlan, stream: str, reasons: list[str]) -> int:
    window = plan.windows.get(stream)
    spec = plan.stream(stream)
    keyed_rows = window is not None and window.partition_by == (spec.key,) and spec.key is not None
    if window is not None and window.kind == "rows" and not keyed_rows:
        if _declared(plan, stream) > 1:
            reasons.append(
                f"{window} keeps the last tuples of the whole stream: one partition "
                f"(PARTITION BY the stream's key {spec.key!r} would spread it)"
            )
        return 1
    return _declared(plan, stream)


def partitioning(plan: LogicalPlan) -> Partitioning:
    reasons: list[str] = []
    streams = {s.name: _stream_partitions(plan, s.name, reasons) for s in plan.streams}
    key_field: dict[str, str | None] = {s.name: None for s in plan.streams}
    if len(plan.streams) == 1:
        (name,) = streams
        join = streams[name]
        key_field[name] = plan.stream(name).key if join > 1 else None
    else:
        join = _join_partitions(plan, streams, reasons)
        if join > 1 and plan.join_key is not None:
            key_field = {c.stream: c.field for c in plan.join_key}
        streams = {name: (p if join > 1 else 1) for name, p in streams.items()}
    aggregate = join
    if plan.aggregates and join > 1:
        grouped = {(c.stream, c.field) for c in plan.group_by}
        if not any((s, f) in grouped for s, f in key_field.items() if f is not None):
            reasons.append("GROUP BY does not include the partitioning key: one partition")
            aggregate = 1
    return Partitioning(streams, join, aggregate, tuple(reasons))


def _join_partitions(plan: LogicalPlan, streams: dict[str, int], reasons: list[str]) -> int:
    if plan.join_key is None:
        reasons.append("no join key is shared by all inputs: the MJoin runs on one partition")
        return 1
    by_stream = {c.stream: c.field for c in plan.join_key}
    counts = set(streams.values())
    for s in plan.streams:
        if s.key != by_stream[s.name]:
            reasons.append(
                f"stream {s.name!r} is keyed by {s.key!r}, not by the join key "
                f"{by_stream[s.name]!r}: the MJoin runs on one partition"
            )
            return 1
    if len(counts) != 1:
        reasons.append(f"inputs have different partition counts {sorted(counts)}: one partition")
        return 1
    return counts.pop()
