"""The statistics a cost estimate needs, from a TOML file written before deployment.

    capacity = 1.0            # processors available (Ayad & Naughton, Sect. 4: the bound of eq. 15)
    join_cost_ms = 0.5        # time to handle one tuple at a join (uniform, as in Example 1)
    filter_cost_ms = 0.05     # time to test one tuple against one filter (default: join_cost_ms)
    [streams.A]
    rate = 10.0               # tuples per second
    keys = 100                # distinct PARTITION BY keys (only for PARTITION BY ... ROWS n)
    window = 600              # optional: tuples its window holds, as measured
    [selectivity]
    "A.a = B.a" = 0.5         # join predicates: matches per pair of tuples
    "A.x > 3" = 0.2           # filters: the share of tuples that pass

Every problem is an :class:`StatsError` naming the file, the key and what was expected.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TOP = {"capacity", "join_cost_ms", "filter_cost_ms", "streams", "selectivity"}
_STREAM_KEYS = {"rate", "keys", "window"}


class StatsError(ValueError):
    """A statistics file or table that cannot be used; names where and why."""


@dataclass(frozen=True)
class StreamStats:
    rate: float  # tuples per second
    keys: float | None = None  # distinct PARTITION BY keys
    #: tuples its window holds, measured (None: from the window's definition and the rate)
    window: float | None = None


@dataclass(frozen=True)
class PlanStats:
    """Rates, selectivities and per-tuple costs (seconds) for the cost model."""

    capacity: float
    join_cost_s: float
    filter_cost_s: float
    streams: Mapping[str, StreamStats]
    #: predicate text, normalized by :func:`predicate_key`, -> selectivity
    selectivity: Mapping[str, float] = field(default_factory=dict)
    source: str = "statistics"


def predicate_key(text: str) -> str:
    """A predicate's text as a lookup key: whitespace collapsed, an equality's sides sorted (so
    ``B.a = A.a`` finds ``A.a = B.a``)."""
    flat = " ".join(text.split())
    left, eq, right = flat.partition(" = ")
    if eq and "=" not in left and "=" not in right and " " not in left + right:
        return " = ".join(sorted((left, right)))
    return flat


def _number(
    value: Any, where: str, *, positive: bool = True, at_most: float | None = None
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StatsError(f"{where}: expected a number, got {value!r}")
    if positive and value <= 0:
        raise StatsError(f"{where}: must be greater than 0, got {value!r}")
    if not positive and value < 0:
        raise StatsError(f"{where}: must not be negative, got {value!r}")
    if at_most is not None and value > at_most:
        raise StatsError(f"{where}: must be at most {at_most}, got {value!r}")
    return float(value)


def _unknown(keys: set[str], known: set[str], where: str) -> None:
    extra = sorted(keys - known)
    if extra:
        raise StatsError(
            f"{where}: unknown key(s) {', '.join(extra)} (known: {', '.join(sorted(known))})"
        )


def parse_stats(table: Mapping[str, Any], source: str = "statistics") -> PlanStats:
    """A :class:`PlanStats` from a decoded TOML table; ``source`` names it in errors."""
    _unknown(set(table), _TOP, source)
    for required in ("capacity", "join_cost_ms", "streams"):
        if required not in table:
            raise StatsError(f"{source}: missing {required!r}")
    capacity = _number(table["capacity"], f"{source}: capacity")
    join_ms = _number(table["join_cost_ms"], f"{source}: join_cost_ms")
    filter_ms = _number(table.get("filter_cost_ms", join_ms), f"{source}: filter_cost_ms")
    streams_table = table["streams"]
    if not isinstance(streams_table, Mapping) or not streams_table:
        raise StatsError(f"{source}: [streams.NAME] tables expected, each with a rate")
    streams: dict[str, StreamStats] = {}
    for name, entry in streams_table.items():
        where = f"{source}: [streams.{name}]"
        if not isinstance(entry, Mapping):
            raise StatsError(f"{where}: expected a table with rate = ...")
        _unknown(set(entry), _STREAM_KEYS, where)
        if "rate" not in entry:
            raise StatsError(f"{where}: missing rate (tuples per second)")
        rate = _number(entry["rate"], f"{where} rate", positive=False)
        keys, window = entry.get("keys"), entry.get("window")
        streams[name] = StreamStats(
            rate,
            None if keys is None else _number(keys, f"{where} keys"),
            None if window is None else _number(window, f"{where} window", positive=False),
        )
    selectivity: dict[str, float] = {}
    raw = table.get("selectivity", {})
    if not isinstance(raw, Mapping):
        raise StatsError(f'{source}: [selectivity] must be a table of "predicate" = number')
    for text, value in raw.items():
        where = f"{source}: [selectivity] {text!r}"
        selectivity[predicate_key(text)] = _number(value, where, positive=False, at_most=1.0)
    return PlanStats(capacity, join_ms / 1000.0, filter_ms / 1000.0, streams, selectivity, source)


def load_stats(path: str | Path) -> PlanStats:
    """Read a statistics file (TOML); a syntax error names its line and column."""
    p = Path(path)
    try:
        table = tomllib.loads(p.read_text())
    except OSError as exc:
        raise StatsError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise StatsError(f"{p}: not valid TOML: {exc}") from exc
    return parse_stats(table, str(p))
