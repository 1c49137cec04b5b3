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


def load_plan(spec: str) -> LogicalPlan:
    """``file.py`` (defining ``query``), ``package.module:attr``, or a built-in name."""
    if spec in BUILTIN:
        return _to_plan(BUILTIN[spec](), spec)
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
