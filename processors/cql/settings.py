"""``CREATE QUERY name ... WITH (setting = value, ...)``: how the query runs, as Query settings.

    WITH (idle_timeout_ms = 1000, lateness_ms = 0, memory_limit_mb = 512,
          processing_guarantee = 'exactly_once', join_tree = '(a, b), c', join_output = 'ordered',
          max_latency = '500 ms', min_keep = 0.05, target_utilization = 0.8,
          adapt = 'agreedy', adapt_profile_probability = 0.2, adapt_window_tuples = 200,
          schedule = 'chain-flush', schedule_latency_ms = 50, cache_memory = '64 MB')

``adapt_X`` is setting X of ``Query.adapt`` and ``schedule_X`` of ``Query.schedule``; a value the
Query refuses is an error at the setting's name. ``cache_memory`` (a size: '64 MB', '512 KB',
'1 GB', or a number of MB) enables A-Caching in the MJoin with that budget: ``Query.adapt``'s
``cache_memory_mb`` (with ``adapt = '...'`` or on its own).
"""

from __future__ import annotations

from typing import Any

from sqlglot.tokens import Token

from processors.core.plan import QueryError
from processors.core.query import Query
from processors.cql.dialect import UNITS_MS
from processors.cql.errors import CqlError, at_token

#: a plain setting and the Query method that takes it
PLAIN = {
    "idle_timeout_ms": "idle_timeout",
    "lateness_ms": "lateness",
    "memory_limit_mb": "memory_limit",
    "processing_guarantee": "processing_guarantee",
    "join_tree": "join_tree",
    "join_output": "join_output",
}
#: shedding's settings, as Query.shed takes them (max_latency is a duration: '500 ms')
SHED_SETTINGS = ("max_latency", "min_keep", "target_utilization")
GROUPS = ("adapt", "schedule")
CACHE_MEMORY = "cache_memory"
SIZE_UNITS_MB = {"B": 2**-20, "KB": 2**-10, "MB": 1.0, "GB": 1024.0}


def apply_settings(q: Query, settings: dict[str, tuple[Any, Token]]) -> None:
    """Call ``q``'s setting methods for ``settings`` (name -> (value, the name's token))."""
    grouped: dict[str, dict[str, Any]] = {g: {} for g in GROUPS}
    heads: dict[str, tuple[Any, Token]] = {}
    for name, (value, tok) in settings.items():
        if name in SHED_SETTINGS or name == CACHE_MEMORY:
            continue  # below, together
        if name in PLAIN:
            _call(tok, getattr(q, PLAIN[name]), value)
        elif name in GROUPS:
            heads[name] = (value, tok)
        elif name.partition("_")[0] in GROUPS and "_" in name:
            group, _, key = name.partition("_")
            if group not in settings:
                raise at_token(tok, f"{name} needs {group} = '...' (which {group} it sets)")
            grouped[group][key] = value
        else:
            known = [*PLAIN, *SHED_SETTINGS, CACHE_MEMORY, *GROUPS,
                     *(f"{g}_..." for g in GROUPS)]  # fmt: skip
            raise at_token(tok, f"unknown setting {name!r}; expected one of {', '.join(known)}")
    if CACHE_MEMORY in settings:
        value, tok = settings[CACHE_MEMORY]
        if "adapt" in heads:
            grouped["adapt"]["cache_memory_mb"] = size_mb(value, tok)
        else:
            _call(tok, q.adapt, "agreedy", cache_memory_mb=size_mb(value, tok))
    for group, (value, tok) in heads.items():
        _call(tok, getattr(q, group), value, **grouped[group])
    shed = {n: settings[n] for n in SHED_SETTINGS if n in settings}
    if shed:
        if "max_latency" not in shed:
            raise at_token(next(iter(shed.values()))[1], "shedding needs max_latency = '500 ms' "
                           "(the output latency to keep)")  # fmt: skip
        value, tok = shed["max_latency"]
        others = {n: v for n, (v, _) in shed.items() if n != "max_latency"}
        _call(tok, q.shed, duration_ms(value, tok), **others)
    if "join_tree" in settings:  # the FROM list is known: the tree must join it
        _call(settings["join_tree"][1], q.check_join_tree)


def _call(tok: Token, method: Any, *args: Any, **kwargs: Any) -> None:
    try:
        method(*args, **kwargs)
    except QueryError as exc:
        if isinstance(exc, CqlError):
            raise
        raise at_token(tok, str(exc)) from None
    except TypeError as exc:  # a setting the method does not take
        raise at_token(tok, f"{tok.text}: {exc}") from None


def duration_ms(value: Any, tok: Token) -> int:
    """``'500 ms'``, ``'2 seconds'`` (a RANGE window's units) or a number of ms, as ms."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    parts = str(value).split()
    unit = parts[1].upper() if len(parts) == 2 else ""
    unit = unit[:-1] if unit.endswith("S") and unit[:-1] in UNITS_MS else unit
    try:
        amount = float(parts[0])
    except (ValueError, IndexError):
        amount = -1.0
    if len(parts) != 2 or unit not in UNITS_MS or amount <= 0:
        raise at_token(tok, f"{tok.text} = {value!r}: expected a duration such as '500 ms' or "
                       f"'2 seconds' (units: {', '.join(UNITS_MS)})")  # fmt: skip
    return max(1, round(amount * UNITS_MS[unit]))


def size_mb(value: Any, tok: Token) -> float:
    """``'64 MB'``, ``'512 KB'``, ``'1 GB'`` or a number of MB, as MB."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    parts = str(value).split()
    unit = parts[1].upper() if len(parts) == 2 else ""
    try:
        amount = float(parts[0])
    except (ValueError, IndexError):
        amount = -1.0
    if len(parts) != 2 or unit not in SIZE_UNITS_MB or not amount >= 0:
        raise at_token(tok, f"{tok.text} = {value!r}: expected a size such as '64 MB' "
                       f"(units: {', '.join(SIZE_UNITS_MB)})")  # fmt: skip
    return amount * SIZE_UNITS_MB[unit]
