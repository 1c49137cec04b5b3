"""Arithmetic in the select list: ``SELECT r.temperature * 1.8 + 32 AS fahrenheit``.

An expression is a small tree of numeric columns, constants and ``+ - * / %`` (and unary
minus), evaluated on whole columns with numpy by the projection. Types follow SQL's numeric
promotion: integers (Avro int or long) stay ``long`` under ``+ - * %`` (64-bit, wrapping on
overflow), anything with a float or double is ``double``, and ``/`` always gives ``double``
(``7 / 2`` is 3.5, as in Python). A null operand makes the result null, and so does a division
or remainder by zero (SQL would stop the query; a stream processor cannot, and a null says
exactly that no value exists), so such a field is nullable in the result schema.
In Python: ``query.select(fahrenheit=col("r.temperature") * 1.8 + 32)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from processors.core.plan import ColumnRef, FieldInfo, QueryError

OPS = ("+", "-", "*", "/", "%")
NUMERIC = {"int": "long", "long": "long", "float": "double", "double": "double"}


@dataclass(frozen=True)
class Lit:
    value: int | float

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class Ref:
    ref: ColumnRef

    def __str__(self) -> str:
        return str(self.ref)


@dataclass(frozen=True)
class Arith:
    op: str
    left: Expr
    right: Expr

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True)
class Neg:
    arg: Expr

    def __str__(self) -> str:
        return f"-{self.arg}"


Expr = Union[Lit, Ref, Arith, Neg]  # noqa: UP007 (a recursive alias)


def lit(value: object, what: str) -> Lit:
    """A numeric constant; QueryError naming ``what`` for anything else (booleans included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QueryError(f"{what}: {value!r} is not a number (arithmetic takes numbers)")
    if isinstance(value, float) and not math.isfinite(value):
        raise QueryError(f"{what}: {value!r} is not a finite number")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise QueryError(f"{what}: {value} does not fit a 64-bit long")
    return Lit(value)


def refs(e: Expr) -> list[ColumnRef]:
    """The columns ``e`` reads, left to right, each once."""
    if isinstance(e, Ref):
        return [e.ref]
    if isinstance(e, Arith):
        return list(dict.fromkeys([*refs(e.left), *refs(e.right)]))
    return refs(e.arg) if isinstance(e, Neg) else []


def result_type(e: Expr, field: Callable[[ColumnRef], FieldInfo], what: str) -> tuple[str, bool]:
    """(Avro type, nullable) of ``e``'s values; QueryError naming ``what`` if a column is not
    numeric."""
    if isinstance(e, Lit):
        return ("long" if isinstance(e.value, int) else "double"), False
    if isinstance(e, Ref):
        info = field(e.ref)
        if info.type not in NUMERIC or info.symbols:
            raise QueryError(
                f"{what}: {e.ref} is {info.type}; arithmetic takes int, long, float or double"
            )
        return NUMERIC[info.type], info.nullable
    if isinstance(e, Neg):
        return result_type(e.arg, field, what)
    (lt, ln), (rt, rn) = result_type(e.left, field, what), result_type(e.right, field, what)
    kind = "double" if e.op == "/" or "double" in (lt, rt) else "long"
    return kind, ln or rn or e.op in ("/", "%")


Columns = Callable[[ColumnRef], tuple[np.ndarray, np.ndarray | None]]


def evaluate(e: Expr, columns: Columns, rows: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, nulls or None) of ``e`` over ``rows`` rows; ``columns`` gives a column's values
    and null flags. Null rows hold 0, as every null value in a batch does."""
    if isinstance(e, Lit):
        return np.full(rows, e.value, np.int64 if isinstance(e.value, int) else np.float64), None
    if isinstance(e, Ref):
        values, nulls = columns(e.ref)
        wide = np.float64 if values.dtype.kind == "f" else np.int64
        return values.astype(wide, copy=False), nulls
    if isinstance(e, Neg):
        values, nulls = evaluate(e.arg, columns, rows)
        return _zero_nulls(-values, nulls), nulls
    (a, an), (b, bn) = evaluate(e.left, columns, rows), evaluate(e.right, columns, rows)
    nulls = an if bn is None else (bn if an is None else an | bn)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if e.op in ("/", "%"):
            zero = b == 0
            nulls = zero if nulls is None else nulls | zero
            safe = np.where(zero, 1, b)
            if e.op == "/":
                values = a.astype(np.float64) / safe
            elif a.dtype.kind == "i" and safe.dtype.kind == "i":
                values = np.fmod(a, safe)  # SQL: the sign of the dividend
            else:
                values = np.fmod(a.astype(np.float64), safe.astype(np.float64))
        else:
            values = {"+": np.add, "-": np.subtract, "*": np.multiply}[e.op](a, b)
    return _zero_nulls(values, nulls), nulls


def _zero_nulls(values: np.ndarray, nulls: np.ndarray | None) -> np.ndarray:
    if nulls is None or not nulls.any():
        return values
    values = values.copy()
    values[nulls] = 0
    return values


class ColExpr:
    """An arithmetic expression built in Python: ``col("r.x") * 1.8 + 32`` (see the module
    docstring); usable where select() takes a column, by name."""

    __slots__ = ("expr",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, expr: Expr) -> None:
        self.expr = expr

    def __repr__(self) -> str:
        return f"ColExpr({self.expr})"

    def __neg__(self) -> ColExpr:
        return ColExpr(Neg(self.expr))

    def __pos__(self) -> ColExpr:
        return self


def as_expr(x: Any, what: str) -> Expr:
    """``x`` as an expression: a ColExpr, a column (anything with a ``ref``) or a number."""
    if isinstance(x, ColExpr):
        return x.expr
    if isinstance(getattr(x, "ref", None), ColumnRef):
        return Ref(x.ref)
    return lit(x, what)


def _binary(op: str, swapped: bool = False) -> Callable[[Any, Any], ColExpr]:
    def method(self: Any, other: Any) -> ColExpr:
        a, b = as_expr(self, "arithmetic"), as_expr(other, f"arithmetic {op}")
        return ColExpr(Arith(op, b, a) if swapped else Arith(op, a, b))

    return method


for _op, _name in zip(OPS, ("add", "sub", "mul", "truediv", "mod"), strict=True):
    setattr(ColExpr, f"__{_name}__", _binary(_op))
    setattr(ColExpr, f"__r{_name}__", _binary(_op, swapped=True))


def arithmetic_methods() -> dict[str, Callable[..., ColExpr]]:
    """The operator methods that give a column class arithmetic (``columns.Col`` takes them)."""
    out: dict[str, Callable[..., ColExpr]] = {}
    for op, name in zip(OPS, ("add", "sub", "mul", "truediv", "mod"), strict=True):
        out[f"__{name}__"] = _binary(op)
        out[f"__r{name}__"] = _binary(op, swapped=True)
    out["__neg__"] = lambda self: ColExpr(Neg(Ref(self.ref)))
    return out
