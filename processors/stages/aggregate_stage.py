"""AggregateStage: GROUP BY over a signed stream (docs/windows-and-joins.md, "Aggregates").

Per group the stage keeps count, sum, avg, min and max of the tuples inserted and not retracted.
After each batch it emits, for every group whose reported values changed, ``-old`` (unless the
group was new) and ``+new`` (unless the group became empty), both stamped with the ts of the
last delta of the batch that touched the group (dead letters do not count), groups in order of
their first appearance in the batch (any delta counts).
The per-delta work runs in :mod:`processors.kernels.aggregate`.

Group keys: one numeric column goes through an int64 hash map in numba; strings, several
columns or no column (a global aggregate) are coded per batch with ``np.unique`` and looked up in
a Python dict once per distinct key of the batch. Float keys are made canonical (-0.0 -> 0.0, one
NaN), as GROUP BY compares them by value.

Nulls (SQL semantics; a nullable column ``c`` comes with its companion null column ``c?``,
found in the first batch): the group key includes the companion, so that the nulls of a group
column form one group whose output group column is null; count(c) counts values, and sum, avg,
min and max ignore nulls and are null in a group without values
(:mod:`processors.kernels.aggregate_nulls` feeds the kernels derived value columns).

A delete that retracts a tuple its group does not hold (same values in the aggregated columns)
is not applied: it goes to :meth:`AggregateStage.take_dead_letters` with the reason, as does a
tuple whose sign is neither +1 nor -1. The ``__rid`` column of a window's delta stream is not
looked at. Min and max take numeric columns only (no string min/max); uint64 value columns are
refused because sums and comparisons run in int64.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from processors.core.batch import DELETE, INSERT, Batch, Column, VarColumn, null_column
from processors.core.plan import AGGREGATE_FUNCS, AggregateFunc
from processors.core.state_codec import SnapshotError, decode_state, expect
from processors.kernels import aggregate as kern
from processors.kernels.aggregate_nulls import (
    aggregate_columns,
    value_arrays,
    value_columns,
    value_flags,
)
from processors.kernels.keys import key_codes
from processors.stages.base import StageBase

FUNCS = AGGREGATE_FUNCS  # the one list, shared with the query builder
SNAPSHOT_VERSION = 1
_NAN = float("nan")  # the one NaN object in dict keys, so that a NaN key finds itself


@dataclass(frozen=True)
class Aggregate:
    """One output column: ``func`` over ``column`` (None only for count(*)), named ``name``."""

    func: AggregateFunc
    column: str | None
    name: str


def _validate(group_by: Sequence[str], aggregates: Sequence[Aggregate]) -> None:
    if len(set(group_by)) != len(group_by):
        raise ValueError(f"group_by names a column twice: {list(group_by)}")
    names = list(group_by)
    for agg in aggregates:
        if agg.func not in FUNCS:
            raise ValueError(f"aggregate {agg.name!r}: unknown function {agg.func!r} ({FUNCS})")
        if agg.column is None and agg.func != "count":
            raise ValueError(f"aggregate {agg.name!r}: {agg.func} needs a column")
        if agg.name in names:
            raise ValueError(f"duplicate output column name {agg.name!r}")
        names.append(agg.name)


def _describe(col: Column) -> str:
    """A column's type as the schema records it."""
    if isinstance(col, VarColumn):
        return "var-utf8" if col.utf8 else "var-bytes"
    return np.dtype(col.dtype).str


def _numeric_kind(desc: str) -> str | None:
    """'i' for integer-like (bool, int, uint up to 32 bits, int64), 'f' for floats, else None."""
    if desc.startswith("var"):
        return None
    dtype = np.dtype(desc)
    if dtype.kind == "f":
        return "f"
    if dtype.kind in "bi" or (dtype.kind == "u" and dtype.itemsize < 8):
        return "i"
    return None


def _canonical(col: Column) -> Column:
    """Float keys with -0.0 made 0.0 and every NaN the same NaN (GROUP BY compares values)."""
    if isinstance(col, VarColumn) or col.dtype.kind != "f":
        return col
    fix = (col == 0) | np.isnan(col)
    if not fix.any():
        return col
    out = col.copy()
    out[col == 0] = 0
    out[np.isnan(col)] = np.nan
    return out


def _int_keys(col: np.ndarray) -> np.ndarray:
    """int64 map keys of a numeric column (floats by their float64 bit pattern)."""
    if col.dtype.kind == "f":
        return col.astype(np.float64).view(np.int64)
    if col.dtype.kind == "u" and col.dtype.itemsize == 8:
        return col.view(np.int64)
    return col.astype(np.int64)


def _py_key(value: object) -> object:
    return _NAN if isinstance(value, float) and math.isnan(value) else value


def _python_values(col: Column, rows: np.ndarray) -> list[object]:
    if isinstance(col, VarColumn):
        return col.take(rows).to_list()
    return [_py_key(v) for v in col[rows].tolist()]


class _IntKeys:
    """One numeric group column: keys -> gids in a numba hash map."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype
        self.map = kern.IntKeyMap()

    def gids(self, cols: list[Column], n: int, groups: kern.GroupState) -> np.ndarray:
        return self.map.map(_int_keys(cols[0]), groups)  # type: ignore[arg-type]

    def release(self, gids: np.ndarray) -> None:
        self.map.unmap(gids)

    def keys_of(self, gids: np.ndarray) -> list[tuple]:
        raw = self.map.key_of_gid[gids]
        if self.dtype.kind == "f":
            vals = raw.view(np.float64).astype(self.dtype)
        elif self.dtype.kind == "u" and self.dtype.itemsize == 8:
            vals = raw.view(np.uint64)
        else:
            vals = raw.astype(self.dtype)
        return [(_py_key(v),) for v in vals.tolist()]

    def load(self, keys: list[tuple], groups: kern.GroupState) -> np.ndarray:
        col = np.array([k[0] for k in keys], dtype=self.dtype)
        return self.map.map(_int_keys(col), groups)


class _DictKeys:
    """Strings, several columns or none: per-batch codes, then a dict per distinct key."""

    def __init__(self) -> None:
        self.gid_of: dict[tuple, int] = {}
        self.key_of: dict[int, tuple] = {}

    def gids(self, cols: list[Column], n: int, groups: kern.GroupState) -> np.ndarray:
        codes, reps = key_codes(cols, n)
        groups.reserve(len(reps))
        per_col = [_python_values(col, reps) for col in cols]
        keys = list(zip(*per_col, strict=True)) if cols else [()] * len(reps)
        code_gids = np.array([self._gid(key, groups) for key in keys], np.int64)
        return code_gids[codes] if n else np.zeros(0, np.int64)

    def _gid(self, key: tuple, groups: kern.GroupState) -> int:
        gid = self.gid_of.get(key)
        if gid is None:
            gid = groups.alloc()
            self.gid_of[key] = gid
            self.key_of[gid] = key
        return gid

    def release(self, gids: np.ndarray) -> None:
        for gid in gids.tolist():
            del self.gid_of[self.key_of.pop(gid)]

    def keys_of(self, gids: np.ndarray) -> list[tuple]:
        return [self.key_of[g] for g in gids.tolist()]

    def load(self, keys: list[tuple], groups: kern.GroupState) -> np.ndarray:
        groups.reserve(len(keys))
        return np.array([self._gid(tuple(_py_key(v) for v in k), groups) for k in keys], np.int64)


class AggregateStage(StageBase):
    """GROUP BY ``group_by`` computing ``aggregates`` over a signed stream (module docstring)."""

    def __init__(
        self,
        group_by: Sequence[str],
        aggregates: Sequence[Aggregate],
        name: str = "aggregate",
    ) -> None:
        _validate(group_by, aggregates)
        self.name = name
        self.group_by = tuple(group_by)
        self.aggregates = tuple(aggregates)
        self._nullable: frozenset[str] = frozenset()  # columns with a companion null column
        self._key_names = list(self.group_by)  # group columns, each nullable one + companion
        self._specs = value_columns(self.aggregates, self._nullable)
        k = len(self._specs)
        self._groups = kern.GroupState(k)
        self._rows = kern.RowTable(k)
        self._schema: dict[str, str] | None = None
        self._keys: _IntKeys | _DictKeys = _DictKeys()
        self._flags = (np.zeros(k, np.bool_),) * 3
        self._dead: list[tuple[Batch, str]] = []
        self._batches = 0
        self._tuples_in = 0
        self._rows_out = 0
        self._dead_count = 0

    # -- schema -----------------------------------------------------------------------------

    def _bind(self, schema: dict[str, str]) -> None:
        """Check the configuration against the first batch's column types and fix the plan."""
        for col in self.group_by:
            if col not in schema:
                raise ValueError(f"{self.name}: group-by column {col!r} is not in the input")
            if not schema[col].startswith("var") and np.dtype(schema[col]).kind not in "biuf":
                raise ValueError(f"{self.name}: cannot group by {col!r} of type {schema[col]}")
        for agg in self.aggregates:
            if agg.column is not None and agg.column not in schema:
                raise ValueError(
                    f"{self.name}: aggregate {agg.name!r} reads column {agg.column!r},"
                    " which is not in the input"
                )
            if agg.func != "count" and _numeric_kind(schema[agg.column]) is None:  # type: ignore[index]
                raise ValueError(
                    f"{self.name}: {agg.func}({agg.column}) needs a numeric column (not uint64),"
                    f" got {schema[agg.column]}"  # type: ignore[index]
                )
        self._nullable = frozenset(c for c in schema if null_column(c) in schema)
        self._specs = value_columns(self.aggregates, self._nullable)
        if len(self._specs) != self._groups.k:  # bound before any tuple: nothing to keep
            self._groups = kern.GroupState(len(self._specs))
            self._rows = kern.RowTable(len(self._specs))
        kinds = [_numeric_kind(schema[v.source]) for v in self._specs]
        self._flags = value_flags(self._specs, kinds, self.aggregates)
        self._key_names = [
            name
            for c in self.group_by
            for name in ((c, null_column(c)) if c in self._nullable else (c,))
        ]
        one = self.group_by[0] if len(self.group_by) == 1 else None
        if one is not None and one not in self._nullable and not schema[one].startswith("var"):
            self._keys = _IntKeys(np.dtype(schema[one]))
        else:
            self._keys = _DictKeys()
        self._schema = dict(schema)

    def _check_schema(self, batch: Batch) -> None:
        used = {*self.group_by, *(a.column for a in self.aggregates if a.column is not None)}
        if self._schema is None:
            used |= {null_column(c) for c in used if null_column(c) in batch.columns}
        else:
            used = set(self._schema)
        missing = sorted(c for c in used if c not in batch.columns)
        if missing:
            raise ValueError(f"{self.name}: input batch lacks column(s) {missing}")
        schema = {c: _describe(batch.columns[c]) for c in used}
        if self._schema is None:
            self._bind(schema)
            return
        for col, desc in schema.items():
            if self._schema[col] != desc:
                raise ValueError(
                    f"{self.name}: column {col!r} changed type from {self._schema[col]} to {desc}"
                )

    # -- processing -------------------------------------------------------------------------

    def _key_columns(self, batch: Batch) -> list[Column]:
        """The group key columns (``_key_names``): values canonical, and zero where null, so
        that the companion alone tells the null group apart."""
        out: list[Column] = []
        for name in self._key_names:
            col = batch.columns[name]
            if name in self._nullable and isinstance(col, np.ndarray):
                col = col.copy()
                col[np.asarray(batch.columns[null_column(name)])] = 0
            out.append(_canonical(col))
        return out

    def process(self, batch: Batch) -> list[Batch]:
        """Apply one batch of signed tuples; return the -old/+new rows of the changed groups."""
        self._check_schema(batch)
        self._batches += 1
        n = len(batch)
        if n == 0:
            return []
        self._tuples_in += n
        key_cols = self._key_columns(batch)
        gids = self._keys.gids(key_cols, n, self._groups)
        vals, fvals = value_arrays(self._specs, self._flags[0], batch.columns, n)
        res = kern.apply_batch(
            self._groups, self._rows, gids, batch.sign, batch.ts, vals, fvals, self._flags,
            self._batches,
        )  # fmt: skip
        self._keys.release(res.released)
        if len(res.dead):
            self._collect_dead(batch, key_cols, res)
        if len(res.sign) == 0:
            return []
        self._rows_out += len(res.sign)
        cols: dict[str, Column] = {
            name: col.take(res.row) if isinstance(col, VarColumn) else col[res.row]
            for name, col in zip(self._key_names, key_cols, strict=True)
        }
        cols.update(self._agg_columns(res.count, res.sums, res.vmin, res.vmax))
        return [Batch(cols, res.sign, res.ts, None, dict(batch.meta))]

    def _agg_columns(
        self,
        count: np.ndarray,
        sums: Sequence[np.ndarray],
        vmin: Sequence[np.ndarray],
        vmax: Sequence[np.ndarray],
    ) -> dict[str, np.ndarray]:
        """Aggregate output columns from per-row counts and per-value-column reported sums and
        extremes (ordered keys)."""
        assert self._schema is not None
        dtypes = {
            v.source: np.dtype(self._schema[v.source])
            for v in self._specs
            if not self._schema[v.source].startswith("var")
        }
        return aggregate_columns(
            self.aggregates, self._specs, self._flags[0], dtypes, (count, sums, vmin, vmax)
        )

    # -- dead letters -----------------------------------------------------------------------

    def _collect_dead(self, batch: Batch, key_cols: list[Column], res: kern.BatchResult) -> None:
        for row, code in zip(res.dead.tolist(), res.dead_code.tolist(), strict=True):
            one = batch.take(np.array([row], np.int64))
            key = tuple(_python_values(col, np.array([row]))[0] for col in key_cols)
            if code == kern.DEAD_BAD_SIGN:
                reason = (
                    f"{self.name}: sign {int(batch.sign[row])} is neither"
                    f" {INSERT} (insert) nor {DELETE} (delete)"
                )
            else:
                row_values = one.rows()[0]
                values = {c: row_values[c] for c in dict.fromkeys(v.source for v in self._specs)}
                reason = (
                    f"{self.name}: delete retracts a tuple that group {key} does not hold"
                    f" (values {values}); not applied"
                )
            self._dead.append((one, reason))
        self._dead_count += len(res.dead)

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        """Deltas not applied since the last call (one-tuple batches with the reason)."""
        out, self._dead = self._dead, []
        return out

    # -- inspection -------------------------------------------------------------------------

    def _live_gids(self) -> np.ndarray:
        g = self._groups
        return np.flatnonzero(g.count[: g.bump] > 0)

    def current(self) -> dict[tuple, dict[str, object]]:
        """Each non-empty group's key -> {aggregate name: value} (for tests, not hot paths)."""
        gids = self._live_gids()
        if self._schema is None or not len(gids):
            return {}
        g = self._groups
        sums = kern.reported_sums(g, self._flags[0], gids)
        cols = self._agg_columns(g.count[gids], sums, g.vmin[:, gids], g.vmax[:, gids])
        values = {name: col.tolist() for name, col in cols.items()}
        nulls = {null_column(a.name) for a in self.aggregates}
        return {
            self._public_key(key): {
                name: None
                if null_column(name) in values and values[null_column(name)][j]
                else vals[j]
                for name, vals in values.items()
                if name not in nulls
            }
            for j, key in enumerate(self._keys.keys_of(gids))
        }

    def _public_key(self, key: tuple) -> tuple:
        """A group key with None for a null group column (the key tuples hold companions)."""
        if not self._nullable:
            return key
        by_name = dict(zip(self._key_names, key, strict=True))
        return tuple(None if by_name.get(null_column(c)) else by_name[c] for c in self.group_by)

    def stats(self) -> dict[str, Any]:
        return {
            "kind": "aggregate",
            "groups": self._groups.live,
            "tuples_in": self._tuples_in,
            "rows_out": self._rows_out,
            "batches": self._batches,
            "dead_letters": self._dead_count,
            "distinct_tuples": self._rows.live,
            "group_by": list(self.group_by),
            "aggregates": [
                {"func": a.func, "column": a.column, "name": a.name} for a in self.aggregates
            ],
        }

    # -- snapshot / restore -----------------------------------------------------------------

    kind = "aggregate"
    SNAPSHOT_VERSION = SNAPSHOT_VERSION

    def state(self) -> dict[str, Any]:
        """The stage's state tree (Python values and numpy arrays), which :meth:`snapshot`
        encodes. Dead letters not yet taken are output, not state, and are not included."""
        g, r = self._groups, self._rows
        gids = self._live_gids()
        place = np.full(g.bump, -1, np.int64)
        place[gids] = np.arange(len(gids))
        row_gids, row_vals, row_mult = r.live_rows()
        return {
            "version": SNAPSHOT_VERSION,
            "group_by": list(self.group_by),
            "aggregates": [(a.func, a.column, a.name) for a in self.aggregates],
            "schema": None if self._schema is None else dict(self._schema),
            "keys": self._keys.keys_of(gids),
            "count": g.count[gids].copy(),
            "sum_i": g.sum_i[:, gids],
            "sum_f": g.sum_f[:, gids],
            "comp": g.comp[:, gids],
            "min": g.vmin[:, gids],
            "max": g.vmax[:, gids],
            "row_group": place[row_gids],
            "row_vals": row_vals,
            "row_mult": row_mult,
            "counters": {
                "batches": self._batches,
                "tuples_in": self._tuples_in,
                "rows_out": self._rows_out,
                "dead_letters": self._dead_count,
            },
        }

    @classmethod
    def restore(
        cls,
        group_by: Sequence[str],
        aggregates: Sequence[Aggregate],
        state: dict[str, Any] | bytes,
        name: str = "aggregate",
    ) -> AggregateStage:
        """A stage that continues exactly where the one that took ``state`` (a
        :meth:`snapshot`, or its decoded tree) stood."""
        stage = cls(group_by, aggregates, name)
        if isinstance(state, bytes | bytearray | memoryview):
            state = decode_state(state)
            expect(state, cls.kind, SNAPSHOT_VERSION, name)
        if state.get("version") != SNAPSHOT_VERSION:
            raise SnapshotError(f"{name}: unknown snapshot version {state.get('version')!r}")
        config = [(a.func, a.column, a.name) for a in stage.aggregates]
        if (
            list(state["group_by"]) != list(stage.group_by)
            or [tuple(a) for a in state["aggregates"]] != config
        ):
            raise SnapshotError(f"{name}: snapshot was taken with another group_by or aggregates")
        if state["schema"] is not None:
            stage._bind(state["schema"])
            stage._load(state)
        counters = state["counters"]
        stage._batches = int(counters["batches"])
        stage._tuples_in = int(counters["tuples_in"])
        stage._rows_out = int(counters["rows_out"])
        stage._dead_count = int(counters["dead_letters"])
        return stage

    def load_state(self, state: dict[str, Any]) -> None:
        restored = type(self).restore(self.group_by, self.aggregates, state, self.name)
        self.__dict__.update(restored.__dict__)

    def _load(self, state: dict[str, Any]) -> None:
        g = self._groups
        gids = self._keys.load(list(state["keys"]), g)
        g.count[gids] = state["count"]
        g.sum_i[:, gids] = state["sum_i"]
        g.sum_f[:, gids] = state["sum_f"]
        g.comp[:, gids] = state["comp"]
        g.vmin[:, gids] = state["min"]
        g.vmax[:, gids] = state["max"]
        row_group = np.asarray(state["row_group"], np.int64)
        kern.load_rows(self._rows, g, gids[row_group], state["row_vals"], state["row_mult"])
