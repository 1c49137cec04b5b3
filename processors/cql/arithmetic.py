"""Arithmetic of the select list, sqlglot's expression tree -> :mod:`processors.core.expressions`.

``SELECT r.temperature * 1.8 + 32 AS fahrenheit``: ``+ - * / %``, unary minus and parentheses
over numeric columns and number constants. Anything else is an error at the node."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from processors.core.columns import parse_ref
from processors.core.expressions import Arith, Expr, Neg, Ref, lit
from processors.core.plan import QueryError
from processors.cql.errors import CqlError, at_node

_OPS: dict[type[exp.Expr], str] = {
    exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%",
}  # fmt: skip
#: the node kinds that make a select-list item arithmetic
ARITHMETIC = (*_OPS, exp.Neg, exp.Paren)


def to_expr(node: exp.Expr, ref: Callable[[exp.Column], str]) -> Expr:
    """The expression of ``node``; ``ref`` names a column as ``stream.field``."""
    if isinstance(node, exp.Paren):
        return to_expr(node.this, ref)
    if isinstance(node, exp.Column):
        return Ref(parse_ref(ref(node), "select list"))
    if isinstance(node, exp.Literal) and not node.is_string:
        text = node.this
        value = float(text) if any(c in text for c in ".eE") else int(text)
        return _checked(node, lambda: lit(value, "select list"))
    if isinstance(node, exp.Neg):
        return Neg(to_expr(node.this, ref))
    if type(node) in _OPS:
        return Arith(_OPS[type(node)], to_expr(node.this, ref), to_expr(node.expression, ref))
    raise at_node(
        node, "arithmetic takes numeric columns, numbers, + - * / %, unary minus and "
        "parentheses (functions other than the aggregates are not supported)",
    )  # fmt: skip


def _checked(node: exp.Expr, make: Callable[[], Expr]) -> Expr:
    try:
        return make()
    except QueryError as exc:
        if isinstance(exc, CqlError):
            raise
        raise at_node(node, str(exc)) from None
