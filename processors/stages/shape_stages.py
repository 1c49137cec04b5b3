"""Stages that shape tuples without deciding which pass: row ids for a join input without a
window, and the projection to the result fields (arithmetic computed, CQL's ISTREAM or DSTREAM
applied, if asked)."""

from __future__ import annotations

from typing import Any

import numpy as np

from processors.core.batch import ROW_ID, Batch, Column, null_column
from processors.core.expressions import evaluate
from processors.core.plan import ColumnRef, LogicalPlan
from processors.stages.base import StageBase


def joined_name(plan: LogicalPlan, stream: str, field: str) -> str:
    """A column's name in the relation the projection or aggregate reads."""
    return f"{stream}.{field}" if len(plan.streams) > 1 else field


class RowIdsStage(StageBase):
    """Row ids for a join input without a window: every tuple stays, so ids just count."""

    kind = "row_ids"

    def __init__(self, name: str = "row_ids") -> None:
        self.name = name
        self.next = 0

    def process(self, batch: Batch) -> list[Batch]:
        ids = np.arange(self.next, self.next + len(batch), dtype=np.int64)
        self.next += len(batch)
        cols = dict(batch.columns)
        cols[ROW_ID] = ids
        return [Batch(cols, batch.sign, batch.ts, batch.key, dict(batch.meta))]

    def stats(self) -> dict[str, Any]:
        return {"kind": self.kind, "next": self.next}

    def state(self) -> dict[str, Any]:
        return {"next": self.next}

    def load_state(self, state: dict[str, Any]) -> None:
        self.next = int(state["next"])


#: the name the MJoin tests and tools knew it by
RowIds = RowIdsStage


class ProjectStage(StageBase):
    """The result fields of the plan, renamed, from the joined (or single) relation; after a
    GROUP BY, the group columns keep their field names. A nullable column's companion null
    column goes along, renamed with it (``name?``)."""

    kind = "project"

    def __init__(self, plan: LogicalPlan, name: str = "project") -> None:
        self.name = name
        self.plan = plan
        self._group_names = {joined_name(plan, c.stream, c.field): c.field for c in plan.group_by}
        self._group_names |= {null_column(k): null_column(v) for k, v in self._group_names.items()}

    def process(self, batch: Batch) -> list[Batch]:
        return [_stream_op(b, self.plan.stream_op) for b in self._project(batch)]

    def _project(self, batch: Batch) -> list[Batch]:
        plan = self.plan
        if plan.aggregates:
            cols = {self._group_names.get(k, k): v for k, v in batch.columns.items()}
            return [Batch(cols, batch.sign, batch.ts, batch.key, dict(batch.meta))]
        out: dict[str, Column] = {}
        for col in plan.output:
            if col.expr is not None:
                values, nulls = evaluate(
                    col.expr, lambda ref: self._numbers(batch, ref), len(batch)
                )
                out[col.name] = values
                if nulls is not None:
                    out[null_column(col.name)] = nulls
                continue
            source = joined_name(plan, col.source.stream, col.source.field)
            out[col.name] = batch.columns[source]
            nulls = batch.columns.get(null_column(source))
            if nulls is not None:
                out[null_column(col.name)] = nulls
        key = batch.key if len(plan.streams) == 1 else None
        return [Batch(out, batch.sign, batch.ts, key, dict(batch.meta))]

    def _numbers(self, batch: Batch, ref: ColumnRef) -> tuple[np.ndarray, np.ndarray | None]:
        """A numeric column of the relation read, with its null flags if nullable."""
        source = joined_name(self.plan, ref.stream, ref.field)
        nulls = batch.columns.get(null_column(source))
        return np.asarray(batch.columns[source]), None if nulls is None else np.asarray(nulls)

    def stats(self) -> dict[str, Any]:
        return {"kind": self.kind}


def _stream_op(batch: Batch, op: str | None) -> Batch:
    """CQL's ISTREAM (the inserts) or DSTREAM (the deletes, as inserts) of a result batch."""
    if op is None:
        return batch
    keep = np.flatnonzero(batch.sign > 0 if op == "istream" else batch.sign < 0)
    kept = batch.take(keep) if len(keep) < len(batch) else batch
    if op == "dstream":
        sign = np.ones_like(kept.sign)
        kept = Batch(kept.columns, sign, kept.ts, kept.key, dict(kept.meta))
    return kept
