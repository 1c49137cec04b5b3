"""Value columns of the GROUP BY kernels, with SQL null semantics for nullable columns.

The kernels of :mod:`.aggregate` keep, per group and *value column*, a sum, a min and a max of
int64 ordered keys, and count rows. A nullable column ``c`` (its companion ``c?`` says where it
is null, docs/windows-and-joins.md, "Nulls") is fed to them as derived value columns, so that
the kernels need no notion of null:

- ``valid``: 1 where ``c`` holds a value, 0 where null; its sum is count(c), the number of
  values, and says when sum, avg, min and max have no value (null, as in SQL);
- ``zero``: ``c`` with nulls as 0, whose sum is the sum of the values (sum and avg);
- ``min`` / ``max``: ``c`` as ordered keys with nulls as the largest / smallest int64, which a
  min / max only reaches when the group has no value (then the result is null anyway).

Each derived column is a function of the tuple, so a retraction finds the tuple it retracts.
A column that is never null is one ``plain`` value column, exactly as without nulls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from processors.core.batch import Column, null_column
from processors.kernels.aggregate_groups import floats_from_keys, ordered_keys

_MAX = np.iinfo(np.int64).max
_MIN = np.iinfo(np.int64).min
_MODE = {"sum": "zero", "avg": "zero", "min": "min", "max": "max", "count": None}


@dataclass(frozen=True)
class ValueColumn:
    """One value column of the kernels: ``source`` read as ``mode`` (module docstring)."""

    source: str
    mode: str  # plain, valid, zero, min or max


def value_columns(aggregates: Sequence[Any], nullable: frozenset[str]) -> tuple[ValueColumn, ...]:
    """The value columns the ``aggregates`` read, in order of first use; ``nullable`` names
    the columns that have a companion null column."""
    cols: list[ValueColumn] = []
    for agg in aggregates:
        if agg.column is None:
            continue
        if agg.column not in nullable:
            wanted = [] if agg.func == "count" else [ValueColumn(agg.column, "plain")]
        else:
            mode = _MODE[agg.func]
            wanted = [ValueColumn(agg.column, m) for m in (mode, "valid") if m is not None]
        cols += [v for v in wanted if v not in cols]
    return tuple(cols)


def value_flags(
    specs: Sequence[ValueColumn], kinds: Sequence[str | None], aggregates: Sequence[Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(is_float, track min/max, report sum) per value column, for the kernels; ``kinds``
    is 'f' or 'i' per value column's source."""
    is_float, track, report = [], [], []
    for spec, kind in zip(specs, kinds, strict=True):
        funcs = {a.func for a in aggregates if a.column == spec.source}
        is_float.append(kind == "f" and spec.mode != "valid")
        if spec.mode == "plain":
            track.append(bool(funcs & {"min", "max"}))
            report.append(bool(funcs & {"sum", "avg"}))
        else:
            track.append(spec.mode in ("min", "max"))
            report.append(spec.mode in ("zero", "valid"))
    return (np.array(is_float, np.bool_), np.array(track, np.bool_), np.array(report, np.bool_))


def value_arrays(
    specs: Sequence[ValueColumn], is_float: np.ndarray, columns: dict[str, Column], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The value columns as ordered int64 keys and as float64 (k x n each)."""
    k = len(specs)
    vals = np.empty((k, n), np.int64)
    fvals = np.zeros((k, n), np.float64)
    for c, spec in enumerate(specs):
        col = columns[spec.source]
        nulls = None if spec.mode == "plain" else np.asarray(columns[null_column(spec.source)])
        if spec.mode == "valid":
            vals[c] = ~nulls  # type: ignore[operator]
            continue
        if is_float[c]:
            f = np.asarray(col, np.float64)
            if nulls is not None:
                f = np.where(nulls, 0.0, f)
            vals[c] = ordered_keys(f)
            fvals[c] = floats_from_keys(vals[c])
        else:
            vals[c] = col
            if nulls is not None:
                vals[c][nulls] = 0
        if spec.mode in ("min", "max"):
            vals[c][nulls] = _MAX if spec.mode == "min" else _MIN
    return vals, fvals


def aggregate_columns(
    aggregates: Sequence[Any],
    specs: Sequence[ValueColumn],
    is_float: np.ndarray,
    dtypes: dict[str, np.dtype],
    parts: tuple[np.ndarray, Sequence[np.ndarray], Sequence[np.ndarray], Sequence[np.ndarray]],
) -> dict[str, np.ndarray]:
    """Aggregate output columns (with a companion null column for those over a nullable
    column, except count) from per-row counts and per-value-column reported sums and extremes
    (ordered keys): ``parts`` = (count, sums, vmin, vmax)."""
    count, sums, vmin, vmax = parts
    out: dict[str, np.ndarray] = {}
    for agg in aggregates:
        nullable = ValueColumn(agg.column, "valid") in specs
        if agg.func == "count":
            n = sums[specs.index(ValueColumn(agg.column, "valid"))] if nullable else count
            out[agg.name] = n.astype(np.int64, copy=True)
            continue
        if nullable:
            n = sums[specs.index(ValueColumn(agg.column, "valid"))].astype(np.int64)
            none = n == 0
            c = specs.index(ValueColumn(agg.column, _MODE[agg.func]))  # type: ignore[arg-type]
        else:
            n, none = count, None
            c = specs.index(ValueColumn(agg.column, "plain"))
        if agg.func == "sum":
            value = sums[c].copy()
        elif agg.func == "avg":
            value = sums[c].astype(np.float64) / (n if none is None else np.maximum(n, 1))
        else:
            keys = vmin[c] if agg.func == "min" else vmax[c]
            raw = floats_from_keys(keys) if is_float[c] else keys
            value = raw.astype(dtypes[agg.column], copy=True)
        if none is not None:
            value[none] = 0
            out[agg.name] = value
            out[null_column(agg.name)] = none
        else:
            out[agg.name] = value
    return out
