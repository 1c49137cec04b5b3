"""Filters as the filter stage runs them: a name, the columns read, and a selection kernel call.

Each predicate narrows a selection vector of row numbers (see ``processors.kernels.select``).
The query API's comparisons, ranges and set membership become these; so do probes of a hash
index (a filter over another stream's window, Section 9 of Babu et al.) and user predicates
written as numba functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from processors.core.batch import Batch, VarColumn
from processors.core.plan import FieldInfo, Filter, LogicalPlan
from processors.kernels import select as K


class PredicateError(ValueError):
    """A predicate that cannot run on the batch it was given (names the column)."""


class Predicate:
    """Base: subclasses implement ``select``."""

    name: str
    column: str

    def select(self, batch: Batch, sel: np.ndarray, n: int, out: np.ndarray) -> int:
        """Write the rows of ``sel[:n]`` that pass to ``out`` (in order); return how many."""
        raise NotImplementedError

    def _col(self, batch: Batch) -> Any:
        try:
            return batch.columns[self.column]
        except KeyError:
            raise PredicateError(
                f"filter {self.name}: batch has no column {self.column!r} "
                f"(columns: {sorted(batch.columns)})"
            ) from None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def _numeric_constant(col: np.ndarray, value: Any) -> Any:
    """The constant in a type numba compares exactly with the column."""
    if col.dtype.kind in "iub" and float(value).is_integer():
        return np.int64(value)
    return np.float64(value)


def _bytes(value: str | bytes) -> np.ndarray:
    raw = value.encode() if isinstance(value, str) else value
    return np.frombuffer(raw, dtype=np.uint8).copy()


class Compare(Predicate):
    """``column <op> value`` for op in <, <=, >, >=, ==, != (numbers, strings, bytes, enums)."""

    def __init__(self, column: str, op: str, value: Any, name: str | None = None) -> None:
        if op not in K.OPS:
            raise PredicateError(f"unknown comparison {op!r}; use one of {sorted(K.OPS)}")
        self.column, self.op, self.value = column, op, value
        self.code = K.OPS[op]
        self.name = name or f"{column} {op} {value!r}"
        self._const = _bytes(value) if isinstance(value, str | bytes) else None

    def select(self, batch: Batch, sel: np.ndarray, n: int, out: np.ndarray) -> int:
        col = self._col(batch)
        if isinstance(col, VarColumn):
            if self._const is None:
                raise PredicateError(f"filter {self.name}: {self.column} is a string column")
            return K.select_var_compare(col.offsets, col.data, self.code, self._const, sel, n, out)
        if self._const is not None:
            raise PredicateError(f"filter {self.name}: {self.column} is not a string column")
        return K.select_compare(col, self.code, _numeric_constant(col, self.value), sel, n, out)


class Between(Predicate):
    """``low <= column <= high``."""

    def __init__(self, column: str, low: Any, high: Any, name: str | None = None) -> None:
        self.column, self.low, self.high = column, low, high
        self.name = name or f"{column} BETWEEN {low!r} AND {high!r}"
        text = isinstance(low, str | bytes)
        self._consts = (_bytes(low), _bytes(high)) if text else None

    def select(self, batch: Batch, sel: np.ndarray, n: int, out: np.ndarray) -> int:
        col = self._col(batch)
        if isinstance(col, VarColumn):
            if self._consts is None:
                raise PredicateError(f"filter {self.name}: {self.column} is a string column")
            low, high = self._consts
            return K.select_var_between(col.offsets, col.data, low, high, sel, n, out)
        low, high = _numeric_constant(col, self.low), _numeric_constant(col, self.high)
        return K.select_between(col, low, high, sel, n, out)


class IsIn(Predicate):
    """``column IN (values)``."""

    def __init__(self, column: str, values: Sequence[Any], name: str | None = None) -> None:
        self.column, self.values = column, tuple(values)
        self.name = name or f"{column} IN ({', '.join(map(repr, self.values))})"
        if self.values and isinstance(self.values[0], str | bytes):
            parts = [_bytes(v) for v in self.values]
            self._offsets = np.zeros(len(parts) + 1, dtype=np.int64)
            np.cumsum([len(p) for p in parts], out=self._offsets[1:])
            self._data = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
            self._sorted: np.ndarray | None = None
        else:
            self._sorted = np.unique(np.asarray(self.values, dtype=np.float64))

    def select(self, batch: Batch, sel: np.ndarray, n: int, out: np.ndarray) -> int:
        col = self._col(batch)
        if isinstance(col, VarColumn):
            if self._sorted is not None:
                raise PredicateError(f"filter {self.name}: {self.column} is a string column")
            return K.select_var_isin(col.offsets, col.data, self._offsets, self._data, sel, n, out)
        if self._sorted is None:
            raise PredicateError(f"filter {self.name}: {self.column} is not a string column")
        values = self._sorted
        if col.dtype.kind in "iub" and np.all(values == np.floor(values)):
            values = values.astype(np.int64)
        return K.select_isin(col, values, sel, n, out)


class UserPredicate(Predicate):
    """A user's numba-jitted ``fn(value) -> bool`` over one numeric column."""

    def __init__(self, column: str, fn: Callable[[Any], bool], name: str | None = None) -> None:
        if not hasattr(fn, "py_func"):
            raise PredicateError(
                f"user predicate on {column!r} must be numba-jitted (@numba.njit), "
                f"got {type(fn).__name__}"
            )
        self.column, self.fn = column, fn
        self.name = name or f"{getattr(fn, '__name__', 'udf')}({column})"

    def select(self, batch: Batch, sel: np.ndarray, n: int, out: np.ndarray) -> int:
        return K.select_udf(self.fn, self._col(batch), sel, n, out)


class InIndex(Predicate):
    """``column`` is a key of a hash index (e.g. over another stream's window), probed
    ``probes`` times per tuple: the filter cost c of Section 9.3."""

    def __init__(self, column: str, index: Any, probes: int = 1, name: str | None = None):
        if probes < 1:
            raise PredicateError(f"filter on {column!r}: probes must be at least 1, got {probes}")
        self.column, self.index, self.probes = column, index, probes
        self.name = name or f"{column} IN index"
        self._hits = np.zeros(1, dtype=np.int64)

    def select(self, batch: Batch, sel: np.ndarray, n: int, out: np.ndarray) -> int:
        from processors.kernels.hash_index import select_in_index

        idx = self.index
        return select_in_index(
            self._col(batch),
            idx.keys,
            idx.mask,
            idx.zero_slot,
            self.probes,
            sel,
            n,
            out,
            self._hits,
        )


def from_plan_filter(flt: Filter, info: FieldInfo) -> Predicate:
    """The predicate of one of the query's filters (constants already checked by the plan)."""
    values: tuple[Any, ...] = flt.values
    if info.type == "enum":
        values = tuple(info.symbols.index(v) for v in values)
    name = str(flt)
    column = flt.column
    if flt.op == "between":
        return Between(column, values[0], values[1], name=name)
    if flt.op == "in":
        return IsIn(column, values, name=name)
    return Compare(column, flt.op, values[0], name=name)


def plan_predicates(
    plan: LogicalPlan, stream: str, placement: str | None = None
) -> list[Predicate]:
    """The predicates of the filters of ``stream`` in the plan (those with ``placement``, if
    given), in the query's order."""
    spec = plan.stream(stream)
    out = []
    for flt in plan.filters_on(stream, placement):  # type: ignore[arg-type]
        info = spec.filter_field(flt.column)  # a companion null column is a bool field here
        if info is None:  # the plan validated its filters; this is a bug if it happens
            raise PredicateError(f"filter {flt}: stream {stream} has no field {flt.column}")
        out.append(from_plan_filter(flt, info))
    return out
