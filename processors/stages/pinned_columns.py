"""A stateful stage's columns are fixed by its first batch or its restored state; a batch that
lacks columns the state holds gets them as zeros.

Ingest decodes only the fields a query reads (:mod:`processors.core.plan_columns`). State
restored from a worker that carried more of them (an earlier streamon, which carried every
field, or a version of the query that read more) holds columns the envelopes no longer bring.
Nothing reads those columns, so a batch without them gets them as zeros (empty strings), in
the state's order, and the state stays valid across the upgrade. A batch that brings a column
the state lacks, or one of another type, is refused as before (the stage raises).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from processors.core.batch import Batch, Column, VarColumn


def column_type(col: Column) -> str:
    """A column's type: its numpy dtype string, or ``string`` / ``bytes`` for a VarColumn."""
    if isinstance(col, VarColumn):
        return "string" if col.utf8 else "bytes"
    return np.asarray(col).dtype.str


def zeros(type_: str, n: int) -> Column:
    """``n`` zero values of type ``type_`` (:func:`column_type`'s names)."""
    if type_ in ("string", "bytes"):
        return VarColumn(np.zeros(n + 1, np.int64), np.zeros(0, np.uint8), type_ == "string")
    return np.zeros(n, np.dtype(type_))


def filled(
    batch: Batch, pinned: Sequence[tuple[str, str]], also: str | None = None
) -> Batch | None:
    """``batch`` with the ``pinned`` (name, type) columns it lacks as zeros, in the pinned
    order, then its column ``also`` if named (a row id the state does not pin); None: it brings
    a column not pinned, or one of another type; itself if it has them all in that order."""
    have = {name: column_type(col) for name, col in batch.columns.items() if name != also}
    names = [name for name, _ in pinned]
    if list(have) == names and all(have[n] == t for n, t in pinned):
        return batch
    if not set(have) <= set(names) or any(have.get(n, t) != t for n, t in pinned):
        return None
    n = len(batch)
    columns = {name: batch.columns[name] if name in have else zeros(t, n) for name, t in pinned}
    if also is not None and also in batch.columns:
        columns[also] = batch.columns[also]
    return Batch(columns, batch.sign, batch.ts, batch.key, dict(batch.meta))
