"""A parsed CQL SELECT as the same :class:`Query` calls a Python user would write.

Each FROM item becomes ``Query.stream`` (named by its alias, else its stream name) and its
window ``Query.window``; the WHERE conjunction becomes join predicates (column = column of two
streams) and filters (column op constant, IN, BETWEEN, IS [NOT] NULL); the select list becomes
``select`` or, with GROUP BY or aggregates, ``group_by`` and ``aggregate``. Anything else is a
:class:`CqlError` at the construct, never a different query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlglot import exp

from processors.core.columns import Col, Predicate, col
from processors.core.expressions import ColExpr, Expr
from processors.core.plan import QueryError
from processors.core.query import Query
from processors.cql.arithmetic import ARITHMETIC, to_expr
from processors.cql.catalog import StreamDecl
from processors.cql.dialect import Statement, WindowSpec
from processors.cql.errors import CqlError, at_node, at_token
from processors.cql.settings import apply_settings

_COMPARE: dict[type, tuple[str, str]] = {  # node -> (operator, operator with sides swapped)
    exp.EQ: ("==", "=="), exp.NEQ: ("!=", "!="), exp.GT: (">", "<"), exp.GTE: (">=", "<="),
    exp.LT: ("<", ">"), exp.LTE: ("<=", ">="),
}  # fmt: skip
_AGGREGATES = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}
_UNSUPPORTED = {
    "order": "ORDER BY", "limit": "LIMIT", "having": "HAVING", "distinct": "DISTINCT",
    "with_": "WITH", "qualify": "QUALIFY", "windows": "WINDOW",
}  # fmt: skip


def _literal(node: exp.Expr) -> Any:
    """A constant's Python value (a negative number is a Neg of a literal)."""
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return -_literal(node.this)
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        return float(text) if any(c in text for c in ".eE") else int(text)
    raise at_node(node, "expected a constant (a number, a quoted string, TRUE or FALSE)")


def _field_names(decl: StreamDecl) -> set[str]:
    return {f["name"] for f in decl.schema["fields"]}


class _Scope:
    """The streams of one query by the names its columns use."""

    def __init__(self, streams: dict[str, StreamDecl]) -> None:
        self.streams = streams
        self.names: dict[str, str] = {}  # query name (alias or stream) -> declared stream

    def ref(self, column: exp.Column) -> str:
        """``stream.field`` of a column; an unqualified one must be unambiguous."""
        if column.args.get("db"):
            raise at_node(column, "nested fields (stream.record.field) are not supported in CQL")
        if column.table:
            if column.table not in self.names:
                known = ", ".join(sorted(self.names))
                raise at_node(column, f"no stream {column.table!r} in FROM (streams: {known})")
            fields = _field_names(self.streams[self.names[column.table]])
            if column.name not in fields:
                raise at_node(column, f"stream {column.table!r} has no column {column.name!r} "
                              f"(columns: {', '.join(sorted(fields))})")  # fmt: skip
            return f"{column.table}.{column.name}"
        owners = [n for n, s in self.names.items() if column.name in _field_names(self.streams[s])]
        if len(owners) != 1:
            which = "no stream in FROM has" if not owners else f"{', '.join(owners)} all have"
            raise at_node(column, f"{which} a column {column.name!r}: write stream.{column.name}")
        return f"{owners[0]}.{column.name}"


def _where(node: exp.Expr, scope: _Scope, q: Query) -> None:
    if isinstance(node, exp.And):
        _where(node.this, scope, q)
        _where(node.expression, scope, q)
        return
    if isinstance(node, exp.Paren):
        _where(node.this, scope, q)
        return
    if isinstance(node, exp.Or):
        raise at_node(node, "OR is not supported: a query's WHERE is a conjunction (AND) of "
                      "conditions; write one query per alternative")  # fmt: skip
    kind = type(node)
    if kind in _COMPARE:
        left, right = node.this, node.expression
        op, swapped = _COMPARE[kind]
        if isinstance(left, exp.Column) and isinstance(right, exp.Column):
            a, b = scope.ref(left), scope.ref(right)
            if op != "==" or a.split(".")[0] == b.split(".")[0]:
                raise at_node(node, "a condition between two columns must be an equality "
                              "between two different streams (a join predicate)")  # fmt: skip
            q.join(a, b)
            return
        if isinstance(right, exp.Column):
            left, right, op = right, left, swapped
        if not isinstance(left, exp.Column):
            raise at_node(node, "expected column op constant (arithmetic is not supported here)")
        compare: Callable[[Col, Any], Predicate] = getattr(Col, _DUNDER[op])
        q.where(compare(col(scope.ref(left)), _literal(right)))
        return
    if isinstance(node, exp.In) and isinstance(node.this, exp.Column):
        if node.args.get("query") is not None:
            raise at_node(node, "IN (SELECT ...) is not supported: give the values")
        q.where(col(scope.ref(node.this)).isin(_literal(v) for v in node.expressions))
        return
    if isinstance(node, exp.Between) and isinstance(node.this, exp.Column):
        low, high = _literal(node.args["low"]), _literal(node.args["high"])
        q.where(col(scope.ref(node.this)).between(low, high))
        return
    is_null = isinstance(node, exp.Is) and isinstance(node.expression, exp.Null)
    if is_null and isinstance(node.this, exp.Column):
        q.where(col(scope.ref(node.this)).is_null())
        return
    if isinstance(node, exp.Not) and isinstance(node.this, exp.Is):
        inner = node.this
        if isinstance(inner.this, exp.Column) and isinstance(inner.expression, exp.Null):
            q.where(col(scope.ref(inner.this)).is_not_null())
            return
    raise at_node(node, "this condition is not supported; expected column = column (a join), "
                  "column op constant, IN (...), BETWEEN ... AND ..., IS [NOT] NULL")  # fmt: skip


_DUNDER = {"==": "__eq__", "!=": "__ne__", ">": "__gt__", ">=": "__ge__", "<": "__lt__",
           "<=": "__le__"}  # fmt: skip


def _window(q: Query, name: str, spec: WindowSpec) -> None:
    if spec.kind == "unbounded":
        return  # a stream without a window is unbounded
    if spec.kind == "now":
        q.window(name, range_ms=1)  # (t - 1 ms, t]: the tuples of this very millisecond
    elif spec.kind == "range":
        q.window(name, range_ms=spec.size)
    else:
        q.window(name, rows=spec.size, partition_by=spec.partition_by)


def _from(select: exp.Select, st: Statement, scope: _Scope, q: Query) -> list[exp.Expr]:
    """Declare the FROM items' streams and windows; the ON conditions of JOINs, if any."""
    source = select.args.get("from_")
    if source is None:
        raise at_token(st.start, "a query needs FROM stream, ...")
    items, conditions = [source.this], []
    for join in select.args.get("joins") or []:
        if join.args.get("kind") or join.side:
            raise at_node(join, f"{join.side or join.args['kind']} JOIN is not supported; "
                          "list the streams in FROM and join them in WHERE or ON")  # fmt: skip
        items.append(join.this)
        if join.args.get("on") is not None:
            conditions.append(join.args["on"])
        if join.args.get("using"):
            raise at_node(join, "JOIN ... USING is not supported: write ON a.x = b.x")
    for item in items:
        if not isinstance(item, exp.Table) or item.args.get("db"):
            raise at_node(item, "expected a declared stream in FROM (no subqueries)")
        declared = scope.streams.get(item.name)
        if declared is None:
            known = ", ".join(sorted(scope.streams)) or "none"
            raise at_node(item, f"unknown stream {item.name!r} (declared: {known}); "
                          "CREATE STREAM it first")  # fmt: skip
        name = item.alias or item.name
        if name in scope.names:
            raise at_node(item, f"{name!r} appears twice in FROM: give each an alias")
        scope.names[name] = item.name
        q.stream(name, topic=declared.topic, schema=declared.schema, key=declared.key,
                 timestamp=declared.timestamp, partitions=declared.partitions)  # fmt: skip
        spec = st.windows.get(item.this.meta.get("start", -1))
        if spec is not None:
            _window(q, name, spec)
    return conditions


def _select_list(select: exp.Select, scope: _Scope, q: Query) -> None:
    plain: list[tuple[str | Expr, str | None, exp.Expr]] = []
    aggregates: dict[str, tuple[str, str | None]] = {}
    star = False
    if not select.expressions:
        raise at_node(None, "the select list is empty: name the result's columns, or *",
                      select.meta["cql"].start)  # fmt: skip
    for item in select.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else None
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star):
            star = True
        elif isinstance(node, exp.Column) and isinstance(node.this, exp.Star):
            raise at_node(node, "stream.* is not supported: list the columns, or SELECT *")
        elif isinstance(node, exp.Column):
            plain.append((scope.ref(node), alias, node))
        elif isinstance(node, ARITHMETIC):
            if alias is None:
                raise at_node(node, "name a computed column with AS (it is a field of the "
                              "result record)")  # fmt: skip
            expr = to_expr(node, scope.ref)
            try:
                q.check_expression(expr)
            except QueryError as exc:
                raise at_node(node, str(exc)) from None
            plain.append((expr, alias, node))
        elif type(node) in _AGGREGATES:
            func = _AGGREGATES[type(node)]
            arg = node.this
            if isinstance(arg, exp.Star) or arg is None:
                if func != "count":
                    raise at_node(node, f"{func}(*) makes no sense: give a column")
                ref = None
            elif isinstance(arg, exp.Column):
                ref = scope.ref(arg)
            else:
                raise at_node(node, f"{func}() takes a column (expressions are not supported)")
            name = alias or (func if ref is None else f"{func}_{ref.split('.')[-1]}")
            if name in aggregates:
                raise at_node(node, f"two results are named {name!r}: give one an alias (AS)")
            aggregates[name] = (func, ref)
        else:
            raise at_node(node, "the select list takes columns, arithmetic on them and "
                          "count/sum/avg/min/max")  # fmt: skip
    group = select.args.get("group")
    if group is not None or aggregates:
        keys = [scope.ref(c) if isinstance(c, exp.Column) else None
                for c in (group.expressions if group is not None else [])]  # fmt: skip
        if None in keys:
            raise at_node(group, "GROUP BY takes columns")
        computed = [node for ref, _, node in plain if not isinstance(ref, str)]
        if computed:
            raise at_node(
                computed[0], "arithmetic with GROUP BY is not supported: the select list is "
                "the GROUP BY columns, then the aggregates of columns",
            )  # fmt: skip
        listed = [ref for ref, _, _ in plain]
        if star or listed != keys[: len(listed)] or any(a for _, a, _ in plain):
            raise at_node(
                select.expressions[0],
                "with GROUP BY, the select list is the GROUP BY columns in the same order (no "
                "aliases), then the aggregates",
            )
        q.group_by(*keys)  # type: ignore[arg-type]
        q.aggregate(**aggregates)  # type: ignore[arg-type]
        return
    if star:
        if plain:
            raise at_node(select, "SELECT * with other columns is not supported")
        return
    renamed = [node for _, a, node in plain if a is not None]
    for (_, alias, _node), (_, after, _) in zip(plain, plain[1:], strict=False):
        if alias is not None and after is None:
            raise at_node(renamed[0], "renamed columns (AS) go after the others in the select "
                          "list: the result record holds them in that order")  # fmt: skip
    q.select(*(ref for ref, a, _ in plain if a is None),  # type: ignore[misc]
             **{a: ref if isinstance(ref, str) else ColExpr(ref)
                for ref, a, _ in plain if a is not None})  # fmt: skip


def to_query(select: exp.Expr, streams: dict[str, StreamDecl], name: str) -> Query:
    """The :class:`Query` of one parsed SELECT (``meta["cql"]`` from the dialect)."""
    st: Statement = select.meta["cql"]
    if not isinstance(select, exp.Select):
        raise at_node(
            select, "expected a SELECT (UNION and other set operations are not supported)"
        )
    for arg, text in _UNSUPPORTED.items():
        if select.args.get(arg):
            raise at_node(select.args[arg], f"{text} is not supported in a continuous query",
                          st.start)  # fmt: skip
    if st.stream_op == "RSTREAM":
        raise at_token(
            st.op_token or st.start,
            "RSTREAM is not supported: a result topic carries the relation's changes (inserts, "
            "and deletes with a sign header), from which a consumer keeps the relation itself",
        )
    q = Query(st.name or name)
    scope = _Scope(streams)
    try:
        conditions = _from(select, st, scope, q)
        where = select.args.get("where")
        for condition in [*conditions, *([where.this] if where is not None else [])]:
            _where(condition, scope, q)
        _select_list(select, scope, q)
    except CqlError as exc:
        if exc.line:
            raise
        # a construct sqlglot kept no position for: the statement's, with the construct named
        first = at_token(st.start, exc.reason)
        raise CqlError(exc.reason, first.line, first.col, exc.token or first.token) from None
    if st.into is not None:
        q.into(st.into, partitions=st.into_partitions)
    if st.stream_op is not None:
        q.emit(st.stream_op.lower())
    apply_settings(q, st.settings)
    return q
