"""Which fields of each input stream a query reads: the rest need not be decoded or carried.

The ingest agent decodes a stream's records as the plan's input columns and writes them, in
envelopes, to the steps that window, join and aggregate them: every column a query never reads
was decoded, routed, encoded, fetched, decoded again and stored in windows and snapshots for
nothing (a 3-way join of readings that reads two of their seven fields carried all of them).
Projection pushdown, as every SQL engine does it: ingest decodes only the fields below
(:func:`processors.runtime.ingest.input_codec`).

A field is read when a filter, a join predicate, the join key, a window's PARTITION BY, a
GROUP BY, an aggregate or the projection names it, or it is the stream's event time. A plan
with operators of registered kinds or synthetic operators reads what their code reads, which
the plan does not say: it keeps every field.
"""

from __future__ import annotations

from processors.core.batch import NULL_SUFFIX
from processors.core.expressions import refs
from processors.core.plan import ColumnRef, LogicalPlan


def read_fields(plan: LogicalPlan, stream: str) -> frozenset[str] | None:
    """The top-level fields of ``stream`` the plan reads (a nested field ``loc.lat`` counts
    as ``loc``); None: every field (the plan has operators that may read any)."""
    if plan.operators:
        return None
    spec = plan.stream(stream)
    named: list[ColumnRef] = []
    for j in plan.joins:
        named += [j.left, j.right]
    named += list(plan.join_key or ())
    named += list(plan.group_by)
    named += [a.source for a in plan.aggregates if a.source is not None]
    for column in () if plan.aggregates else plan.output:  # a GROUP BY writes its groups
        named += [column.source] if column.expr is None else refs(column.expr)
    fields = {r.field for r in named if r.stream == stream}
    fields |= {f.column.removesuffix(NULL_SUFFIX) for f in plan.filters if f.stream == stream}
    window = plan.windows.get(stream)
    if window is not None:
        fields |= set(window.partition_by)
    if spec.timestamp is not None:
        fields.add(spec.timestamp)
    return frozenset(name.split(".", 1)[0] for name in fields)
