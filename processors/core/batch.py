"""Columnar tuple batches: the unit every stage consumes and produces.

A batch holds many tuples as parallel numpy columns, so that per-tuple work happens in numpy or
numba and Python runs once per batch. Besides the user's fields a batch carries a sign per tuple
(+1 insert, -1 delete, for the delta streams of windows and joins), an event timestamp in
milliseconds, and optionally the Kafka key of each tuple's source record.

Variable-length values (Avro ``string`` and ``bytes``) live in :class:`VarColumn`, an
Arrow-style pair of offsets and one flat byte buffer, so that they too move without per-value
Python objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

INSERT = 1
DELETE = -1
# int64 column a window stage adds to its delta stream: the id of each tuple in the window, so
# that a delete names exactly the tuple it removes (docs/windows-and-joins.md)
ROW_ID = "__rid"
# a nullable field ``c`` is the value column ``c`` (zero where null) plus a bool column
# ``c + NULL_SUFFIX`` (True where null); a column without that companion is never null
NULL_SUFFIX = "?"


def null_column(name: str) -> str:
    """The name of the companion bool column saying where column ``name`` is null."""
    return name + NULL_SUFFIX


@dataclass(slots=True)
class VarColumn:
    """Variable-length binary/UTF-8 values: value i is ``data[offsets[i]:offsets[i+1]]``."""

    offsets: np.ndarray  # int64, length n + 1, offsets[0] == 0
    data: np.ndarray  # uint8
    utf8: bool = True

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def from_values(cls, values: Sequence[str | bytes | None], utf8: bool = True) -> VarColumn:
        """Build from Python values (for tests and small inputs, not hot paths)."""
        raw = [v.encode() if isinstance(v, str) else (v or b"") for v in values]
        offsets = np.zeros(len(raw) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in raw], out=offsets[1:])
        data = np.frombuffer(b"".join(raw), dtype=np.uint8).copy()
        return cls(offsets, data, utf8)

    def value(self, i: int) -> str | bytes:
        raw = self.data[self.offsets[i] : self.offsets[i + 1]].tobytes()
        return raw.decode() if self.utf8 else raw

    def to_list(self) -> list[str | bytes]:
        return [self.value(i) for i in range(len(self))]

    def slice(self, start: int, stop: int) -> VarColumn:
        """Values start..stop-1 (offsets rebased, data copied only for that range)."""
        lo, hi = int(self.offsets[start]), int(self.offsets[stop])
        return VarColumn(self.offsets[start : stop + 1] - lo, self.data[lo:hi], self.utf8)

    def take(self, indices: np.ndarray) -> VarColumn:
        """Values at ``indices`` (negative ones count from the end, as in numpy)."""
        from processors.kernels.gather import gather_var

        idx = np.asarray(indices, dtype=np.int64)
        try:
            offsets, data = gather_var(self.offsets, self.data, idx)
        except IndexError:
            raise IndexError(f"index out of range for a column of {len(self)} values") from None
        return VarColumn(offsets, data, self.utf8)

    @staticmethod
    def concat(parts: Sequence[VarColumn]) -> VarColumn:
        if not parts:
            return VarColumn(np.zeros(1, np.int64), np.zeros(0, np.uint8))
        sizes = [len(p.data) for p in parts]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        offsets = np.concatenate(
            [np.zeros(1, np.int64)]
            + [p.offsets[1:] + s for p, s in zip(parts, starts, strict=True)]
        )
        data = np.concatenate([p.data for p in parts]) if parts else np.zeros(0, np.uint8)
        return VarColumn(offsets.astype(np.int64), data, parts[0].utf8 if parts else True)

    def equals(self, other: object) -> bool:
        return (
            isinstance(other, VarColumn)
            and self.utf8 == other.utf8
            and np.array_equal(self.offsets, other.offsets)
            and np.array_equal(self.data, other.data)
        )


Column = np.ndarray | VarColumn


def _take(col: Column, indices: np.ndarray) -> Column:
    return col.take(indices) if isinstance(col, VarColumn) else col[indices]


@dataclass(slots=True)
class Batch:
    """n tuples as columns. ``columns`` keeps the schema's field order."""

    columns: dict[str, Column]
    sign: np.ndarray  # int8, +1 insert / -1 delete
    ts: np.ndarray  # int64 event time, ms since the epoch
    key: VarColumn | None = None  # Kafka key of each tuple's source record, if any
    meta: dict[str, str] = field(default_factory=dict)  # e.g. source stream name

    def __post_init__(self) -> None:
        n = len(self.sign)
        # a plain loop: a batch is made for every step of every call, and a generator in
        # any() cost more than the check itself
        bad = len(self.ts) != n
        for c in self.columns.values():
            bad = bad or len(c) != n
        if bad:
            lengths = {k: len(c) for k, c in self.columns.items()}
            raise ValueError(
                f"batch columns differ in length: sign={n} ts={len(self.ts)} {lengths}"
            )
        if self.key is not None and len(self.key) != n:
            raise ValueError(f"batch key column has {len(self.key)} values for {n} tuples")

    def __len__(self) -> int:
        return len(self.sign)

    @classmethod
    def empty_marker(cls, meta: dict[str, str]) -> Batch:
        """A batch of no tuples and no columns that only carries ``meta`` (event-time progress
        between agents)."""
        return cls({}, np.zeros(0, np.int8), np.zeros(0, np.int64), None, dict(meta))

    @classmethod
    def inserts(
        cls,
        columns: dict[str, Column],
        ts: np.ndarray | None = None,
        key: VarColumn | None = None,
    ) -> Batch:
        """A batch of inserts (the delta stream of an append-only stream)."""
        n = len(next(iter(columns.values()))) if columns else (0 if ts is None else len(ts))
        ts_col = np.zeros(n, np.int64) if ts is None else np.asarray(ts, dtype=np.int64)
        return cls(dict(columns), np.ones(n, np.int8), ts_col, key)

    def take(self, indices: np.ndarray) -> Batch:
        """Tuples at ``indices`` (int array) in that order."""
        idx = np.asarray(indices, dtype=np.int64)
        return Batch(
            {k: _take(c, idx) for k, c in self.columns.items()},
            self.sign[idx],
            self.ts[idx],
            None if self.key is None else self.key.take(idx),
            dict(self.meta),
        )

    def slice(self, start: int, stop: int) -> Batch:
        """Tuples start..stop-1, as views where possible."""
        return Batch(
            {
                k: c.slice(start, stop) if isinstance(c, VarColumn) else c[start:stop]
                for k, c in self.columns.items()
            },
            self.sign[start:stop],
            self.ts[start:stop],
            None if self.key is None else self.key.slice(start, stop),
            dict(self.meta),
        )

    def row_nbytes(self) -> np.ndarray:
        """Payload bytes of each tuple (fixed-width columns plus its variable-length values)."""
        fixed = self.sign.itemsize + self.ts.itemsize
        per_row = np.zeros(len(self), np.int64)
        for col in list(self.columns.values()) + ([self.key] if self.key is not None else []):
            if isinstance(col, VarColumn):
                per_row += np.diff(col.offsets) + col.offsets.itemsize
            else:
                fixed += col.itemsize
        return per_row + fixed

    def nbytes(self) -> int:
        """Approximate payload size (columns, sign, ts, keys)."""
        total = self.sign.nbytes + self.ts.nbytes
        for col in list(self.columns.values()) + ([self.key] if self.key is not None else []):
            total += (
                col.offsets.nbytes + col.data.nbytes if isinstance(col, VarColumn) else col.nbytes
            )
        return total

    def filter(self, mask: np.ndarray) -> Batch:
        """Tuples where ``mask`` is true, in order."""
        return self.take(np.flatnonzero(mask))

    @staticmethod
    def concat(batches: Iterable[Batch]) -> Batch:
        parts = [b for b in batches]
        if not parts:
            raise ValueError("cannot concatenate zero batches")
        if len(parts) == 1:
            return parts[0]
        names = list(parts[0].columns)
        cols: dict[str, Column] = {}
        for name in names:
            pieces = [p.columns[name] for p in parts]
            cols[name] = (
                VarColumn.concat(pieces)  # type: ignore[arg-type]
                if isinstance(pieces[0], VarColumn)
                else np.concatenate(pieces)  # type: ignore[arg-type]
            )
        keys = [p.key for p in parts]
        key = None if any(k is None for k in keys) else VarColumn.concat(keys)  # type: ignore[arg-type]
        return Batch(
            cols,
            np.concatenate([p.sign for p in parts]),
            np.concatenate([p.ts for p in parts]),
            key,
            dict(parts[0].meta),
        )

    def rows(self) -> list[dict[str, object]]:
        """Tuples as dicts of Python values (tests and debugging; not for hot paths)."""
        out: list[dict[str, object]] = []
        pycols = {
            k: (c.to_list() if isinstance(c, VarColumn) else c.tolist())
            for k, c in self.columns.items()
        }
        for i in range(len(self)):
            out.append({k: v[i] for k, v in pycols.items()})
        return out

    def equals(self, other: object) -> bool:
        if not isinstance(other, Batch) or list(self.columns) != list(other.columns):
            return False
        for name, col in self.columns.items():
            o = other.columns[name]
            if isinstance(col, VarColumn):
                if not col.equals(o):
                    return False
            elif not (
                isinstance(o, np.ndarray) and o.dtype == col.dtype and np.array_equal(col, o)
            ):
                return False
        keys_equal = (self.key is None and other.key is None) or (
            self.key is not None and self.key.equals(other.key)
        )
        return (
            keys_equal
            and np.array_equal(self.sign, other.sign)
            and np.array_equal(self.ts, other.ts)
        )


def same_layout(a: Batch, b: Batch) -> bool:
    """Whether ``a`` and ``b`` concatenate without losing anything (columns, keys, meta)."""
    if a.meta != b.meta or (a.key is None) != (b.key is None):
        return False
    if a.key is not None and b.key is not None and a.key.utf8 != b.key.utf8:
        return False
    if list(a.columns) != list(b.columns):
        return False
    for name, col in a.columns.items():
        other = b.columns[name]
        if isinstance(col, VarColumn):
            if not isinstance(other, VarColumn) or col.utf8 != other.utf8:
                return False
        elif isinstance(other, VarColumn) or col.dtype != other.dtype:
            return False
    return True


def coalesce(batches: Sequence[Batch]) -> list[Batch]:
    """``batches`` in order, each run of consecutive ones of the same layout (columns, keys,
    meta: :func:`same_layout`) concatenated into one: what an agent writes as one envelope
    instead of one per input."""
    out: list[Batch] = []
    run: list[Batch] = []
    for batch in batches:
        if run and not same_layout(run[-1], batch):
            out.append(Batch.concat(run))
            run = []
        run.append(batch)
    if run:
        out.append(Batch.concat(run))
    return out
