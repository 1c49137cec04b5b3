"""The column DSL of the query builder: ``col("r.x") > 30.0``, ``.isin(...)``, ``.between(...)``.

A comparison builds an unchecked :class:`Predicate`, as written; ``Query.build()`` checks it
against the stream's schema (:func:`processors.core.validation.check_constants`) and turns it
into a plan :class:`~processors.core.plan.Filter`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from processors.core.expressions import arithmetic_methods
from processors.core.plan import ColumnRef, Filter, QueryError


def parse_ref(ref: object, what: str) -> ColumnRef:
    """``"stream.field"`` as a ColumnRef; split at the first dot only, so that
    ``"r.loc.lat"`` is field ``loc.lat`` (field ``lat`` of nested record ``loc``) of stream r."""
    parts = ref.split(".") if isinstance(ref, str) else []
    if len(parts) < 2 or not all(parts):
        raise QueryError(
            f"{what}: column reference {ref!r} must look like 'stream.field' "
            "(or 'stream.record.field' for a field of a nested record)"
        )
    return ColumnRef(parts[0], ".".join(parts[1:]))


@dataclass(frozen=True)
class Predicate:
    """An unchecked filter, as written; ``build()`` checks it against the stream's schema."""

    ref: ColumnRef
    op: str
    values: tuple[Any, ...]

    def __bool__(self) -> bool:
        raise QueryError(
            f"filter on {self.ref} used as a truth value: pass filters to where() separately "
            "and use .between(lo, hi) instead of chained comparisons"
        )

    def __str__(self) -> str:
        if self.op in ("is_null", "is_not_null"):
            return f"{self.ref} IS {'NOT ' if self.op == 'is_not_null' else ''}NULL"
        return str(Filter(self.ref.stream, self.ref.field, self.op, self.values))  # type: ignore[arg-type]


def _compare(op: str) -> Callable[[Col, Any], Predicate]:
    def compare(self: Col, value: Any) -> Predicate:
        return Predicate(self.ref, op, (value,))

    return compare


class Col:
    """A column in filters: ``col("r.x") > 30.0``, ``.isin({...})``, ``.between(lo, hi)``,
    ``.is_null()``, ``.is_not_null()``; in arithmetic for select(): ``col("r.x") * 1.8 + 32``
    (:mod:`processors.core.expressions`)."""

    __slots__ = ("ref",)
    __hash__ = None  # type: ignore[assignment]  # == builds a Predicate, so no hashing

    def __init__(self, ref: str) -> None:
        self.ref = parse_ref(ref, "col()")

    __lt__ = _compare("<")
    __le__ = _compare("<=")
    __gt__ = _compare(">")
    __ge__ = _compare(">=")
    __eq__ = _compare("==")  # type: ignore[assignment]
    __ne__ = _compare("!=")  # type: ignore[assignment]

    def isin(self, values: Iterable[Any]) -> Predicate:
        vals = tuple(values)
        if not vals:
            raise QueryError(f"filter {self.ref} IN (): the set is empty, so nothing would pass")
        return Predicate(self.ref, "in", vals)

    def between(self, low: Any, high: Any) -> Predicate:
        """Inclusive on both ends, as in SQL."""
        return Predicate(self.ref, "between", (low, high))

    def is_null(self) -> Predicate:
        """SQL ``IS NULL``: true where a nullable field is null."""
        return Predicate(self.ref, "is_null", ())

    def is_not_null(self) -> Predicate:
        """SQL ``IS NOT NULL``: true where the field holds a value."""
        return Predicate(self.ref, "is_not_null", ())


for _name, _method in arithmetic_methods().items():  # col("r.x") * 1.8 + 32: select() takes it
    setattr(Col, _name, _method)


def col(ref: str) -> Col:
    """A column reference ``"stream.field"`` (``"stream.record.field"``) for filters."""
    return Col(ref)
