"""Finding the query a worker should run: a file, a module attribute or a built-in example."""

from __future__ import annotations

import importlib
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from processors.core.query import LogicalPlan, Query, QueryError
from processors.workloads import examples

BUILTIN: dict[str, Callable[[], Query]] = {
    "readings": examples.readings_passthrough,
}


def load_plan(spec: str, catalog: str | None = None, *, require_into: bool = True) -> LogicalPlan:
    """``file.cql`` (CQL; ``catalog``: a .cql file of more CREATE STREAMs), ``file.py``
    (defining ``query``), ``package.module:attr``, or a built-in name. A CQL query without
    INTO is refused when ``require_into`` (a worker must know where results go)."""
    if spec in BUILTIN:
        return _to_plan(BUILTIN[spec](), spec)
    if spec.endswith(".cql"):
        query = load_cql(spec, catalog, require_into=require_into)
        try:
            return query.build()
        except QueryError as exc:
            raise QueryError(f"{spec}: {exc}") from None
    if catalog is not None:
        raise QueryError("--catalog goes with a .cql query")
    if spec.endswith(".py") or Path(spec).is_file():
        path = Path(spec)
        if not path.is_file():
            raise QueryError(f"query file {spec} does not exist")
        namespace = runpy.run_path(str(path))
        for name in ("query", "plan"):
            if name in namespace:
                return _to_plan(namespace[name], spec)
        raise QueryError(f"query file {spec} defines neither 'query' nor 'plan'")
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            value = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise QueryError(f"cannot load query {spec}: {exc}") from exc
        return _to_plan(value, spec)
    known = ", ".join(sorted(BUILTIN))
    raise QueryError(f"unknown query {spec!r}: give a .py file, module:attr, or one of {known}")


def _to_plan(value: Any, spec: str) -> LogicalPlan:
    if callable(value) and not isinstance(value, Query | LogicalPlan):
        value = value()
    if isinstance(value, Query):
        return value.build()
    if isinstance(value, LogicalPlan):
        return value
    raise QueryError(f"{spec} is a {type(value).__name__}, not a Query or LogicalPlan")


def _read(path: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise QueryError(f"{what} {path} does not exist")
    return p.read_text()


def load_cql(spec: str, catalog: str | None = None, *, require_into: bool = True) -> Query:
    """The query of a .cql file; a CQL error names the file, line and column."""
    from processors.cql import CqlError, parse_cql

    text = _read(spec, "query file")
    try:
        declared = None if catalog is None else parse_cql(_read(catalog, "catalog"))
    except CqlError as exc:
        raise QueryError(f"{catalog}: {exc}") from None
    try:
        script = parse_cql(text, declared)
        if require_into and script.explain:
            raise QueryError(f"{spec} EXPLAINs its query: run `streamon explain {spec} --stats "
                             "FILE`, or leave EXPLAIN out to run the query")  # fmt: skip
        return script.query(Path(spec).stem, require_into=require_into)
    except CqlError as exc:
        raise QueryError(f"{spec}: {exc}") from None
