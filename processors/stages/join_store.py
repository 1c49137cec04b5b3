"""The window contents of one MJoin input: columns in slots, with join-key indexes.

Slots are reused through a free list, so memory follows the window, not the stream. Each slot
has the global sequence numbers at which its tuple entered and left the window (``born``,
``died``; see :mod:`processors.kernels.multimap` for why) and the window's row id, through which
a delete finds exactly the tuple it removes. Strings and bytes live in one byte arena per column,
compacted when dead bytes outweigh live ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from processors.core.batch import ROW_ID, Batch, Column, VarColumn
from processors.kernels.gather import gather_spans, hash_var
from processors.kernels.multimap import MultiMap
from processors.kernels.scan_index import ScanIndex

ALIVE = np.iinfo(np.int64).max  # ``died`` of a tuple still in the window
#: an eager join's stored copy of each tuple's event time (processors.stages.eager_mjoin)
EVENT_TIME = "__ts"


def join_keys(col: Column, what: str) -> np.ndarray:
    """A column's values as int64 join keys: integers, booleans and enum indexes as they are,
    strings and bytes by a 64-bit hash (two different values share a key with probability
    about 2^-64 per pair; see docs/windows-and-joins.md)."""
    if isinstance(col, VarColumn):
        return hash_var(col.offsets, col.data)  # type: ignore[no-any-return]
    if col.dtype.kind not in "iub":
        raise TypeError(f"join column {what} is {col.dtype}; joins are on integers or strings")
    return col.astype(np.int64, copy=False)


class VarArena:
    """Variable-length values by slot: spans into one growing byte buffer."""

    def __init__(self, capacity: int, utf8: bool) -> None:
        self.utf8 = utf8
        self.start = np.zeros(capacity, np.int64)
        self.length = np.zeros(capacity, np.int64)
        self.data = np.zeros(1 << 12, np.uint8)
        self.used = 0
        self.live = 0

    def grow_slots(self, capacity: int) -> None:
        extra = capacity - len(self.start)
        self.start = np.concatenate([self.start, np.zeros(extra, np.int64)])
        self.length = np.concatenate([self.length, np.zeros(extra, np.int64)])

    def put(self, slots: np.ndarray, values: VarColumn) -> None:
        need = int(values.offsets[-1] - values.offsets[0])
        if self.used + need > len(self.data):
            size = len(self.data)
            while self.used + need > size:
                size *= 2
            self.data = np.concatenate([self.data, np.zeros(size - len(self.data), np.uint8)])
        base = int(values.offsets[0])
        self.data[self.used : self.used + need] = values.data[base : base + need]
        self.start[slots] = values.offsets[:-1] - base + self.used
        self.length[slots] = np.diff(values.offsets)
        self.used += need
        self.live += need

    def free(self, slots: np.ndarray) -> None:
        self.live -= int(self.length[slots].sum())
        self.length[slots] = 0

    def take(self, slots: np.ndarray) -> VarColumn:
        offsets, data = gather_spans(self.start, self.length, self.data, slots)
        return VarColumn(offsets, data, self.utf8)

    def compact(self, live_slots: np.ndarray) -> None:
        """Rewrite the buffer with only the live values, when dead bytes dominate."""
        if self.used < 1 << 16 or self.used < 2 * self.live:
            return
        offsets, data = gather_spans(self.start, self.length, self.data, live_slots)
        self.data = np.concatenate([data, np.zeros(max(len(data), 1 << 12), np.uint8)])
        self.start[live_slots] = offsets[:-1]
        self.used = self.live = len(data)


class WindowStore:
    """One input's window: columns by slot, an index per join column, a row-id index."""

    def __init__(self, name: str, key_columns: list[str], capacity: int = 1024) -> None:
        self.name = name
        self.key_columns = list(key_columns)
        self.capacity = capacity
        self.columns: dict[str, np.ndarray | VarArena] = {}
        self.born = np.zeros(capacity, np.int64)
        self.died = np.full(capacity, ALIVE, np.int64)
        self.rid = np.zeros(capacity, np.int64)
        self.indexes: dict[str, MultiMap | ScanIndex] = {
            c: MultiMap(capacity) for c in self.key_columns
        }
        self.by_rid = MultiMap(capacity)
        self.free_slots = np.arange(capacity - 1, -1, -1, dtype=np.int64)  # a stack
        self.n_free = capacity
        self.dying: list[np.ndarray] = []  # slots marked deleted in the current epoch

    def __len__(self) -> int:
        return self.capacity - self.n_free

    # -- capacity -----------------------------------------------------------------------------
    def _grow(self, need: int) -> None:
        new = self.capacity
        while new - len(self) < need:
            new *= 2
        extra = new - self.capacity
        for name, col in self.columns.items():
            if isinstance(col, VarArena):
                col.grow_slots(new)
            else:
                self.columns[name] = np.concatenate([col, np.zeros(extra, col.dtype)])
        self.born = np.concatenate([self.born, np.zeros(extra, np.int64)])
        self.died = np.concatenate([self.died, np.full(extra, ALIVE, np.int64)])
        self.rid = np.concatenate([self.rid, np.zeros(extra, np.int64)])
        for index in [*self.indexes.values(), self.by_rid]:
            index.grow_slots(new)
        stack = np.empty(new, np.int64)  # fresh slots below, the old free ones on top
        stack[:extra] = np.arange(new - 1, self.capacity - 1, -1, dtype=np.int64)
        stack[extra : extra + self.n_free] = self.free_slots[: self.n_free]
        self.free_slots = stack
        self.n_free += extra
        self.capacity = new

    def declare_columns(self, batch: Batch) -> None:
        for name, col in batch.columns.items():
            if name == ROW_ID or name in self.columns:
                continue
            if isinstance(col, VarColumn):
                self.columns[name] = VarArena(self.capacity, col.utf8)
            else:
                self.columns[name] = np.zeros(self.capacity, col.dtype)

    def column_type(self, name: str) -> str:
        """Column ``name``'s type: its dtype string, or ``string`` / ``bytes``."""
        col = self.columns[name]
        if isinstance(col, VarArena):
            return "string" if col.utf8 else "bytes"
        return col.dtype.str

    def scan(self, column: str) -> None:
        """Probe join column ``column`` by scanning the window, without an index (a nested-loop
        join, as the A-Caching paper's Fig. 10 forces); an empty store only. An experiment's
        setting: a snapshot's store is restored with its indexes."""
        if column not in self.indexes:
            raise ValueError(f"{self.name}: {column!r} is not a join column ({self.key_columns})")
        if len(self):
            raise ValueError(f"{self.name}: the index of {column!r} can go only before any tuple")
        self.indexes[column] = ScanIndex(self.capacity)

    # -- changes ------------------------------------------------------------------------------
    def insert(self, batch: Batch, born: np.ndarray) -> np.ndarray:
        """Store the tuples of ``batch`` (inserts with row ids); returns their slots."""
        m = len(batch)
        if m == 0:
            return np.zeros(0, np.int64)
        self.declare_columns(batch)
        if self.n_free < m:
            self._grow(m)
        slots = self.free_slots[self.n_free - m : self.n_free][::-1].copy()
        self.n_free -= m
        for name, col in batch.columns.items():
            if name == ROW_ID:
                continue
            store = self.columns[name]
            if isinstance(store, VarArena):
                store.put(slots, col)  # type: ignore[arg-type]
            else:
                store[slots] = col
        self.born[slots] = born
        self.died[slots] = ALIVE
        rids = batch.columns[ROW_ID].astype(np.int64, copy=False)  # type: ignore[union-attr]
        self.rid[slots] = rids
        for name, index in self.indexes.items():
            index.insert(join_keys(batch.columns[name], f"{self.name}.{name}"), slots)
        self.by_rid.insert(rids, slots)
        return slots

    def mark_deleted(self, rids: np.ndarray, died: np.ndarray) -> np.ndarray:
        """Set ``died`` of the tuples with these row ids; returns their slots (-1: unknown)."""
        slots = self.by_rid.heads(rids.astype(np.int64, copy=False))
        found = slots >= 0
        found[found] = self.died[slots[found]] == ALIVE  # a second delete finds nothing
        slots[~found] = -1
        if found.sum() > 1:  # the same row id twice in one epoch: only the first deletes
            order = np.flatnonzero(found)
            _, first = np.unique(slots[order], return_index=True)
            repeat = np.ones(len(order), np.bool_)
            repeat[first] = False
            slots[order[repeat]] = -1
            found[order[repeat]] = False
        self.died[slots[found]] = died[found]
        self.dying.append(slots[found])
        return slots

    def remove_dying(self) -> int:
        """Physically remove the tuples marked deleted in this epoch."""
        if not self.dying:
            return 0
        slots = np.concatenate(self.dying)
        self.dying = []
        if len(slots) == 0:
            return 0
        for name, index in self.indexes.items():
            index.remove(self.keys(name, slots), slots)
        self.by_rid.remove(self.rid[slots], slots)
        for col in self.columns.values():
            if isinstance(col, VarArena):
                col.free(slots)
        self.died[slots] = ALIVE
        self.born[slots] = ALIVE  # a free slot is never alive (cached references check born)
        self.free_slots[self.n_free : self.n_free + len(slots)] = slots
        self.n_free += len(slots)
        arenas = [c for c in self.columns.values() if isinstance(c, VarArena)]
        if arenas:
            live = self.live_slots()
            for arena in arenas:
                arena.compact(live)
        return len(slots)

    def remove(self, slots: np.ndarray) -> int:
        """Remove these tuples now, not at an epoch's end (an eager join's purge)."""
        self.dying.append(slots)
        return self.remove_dying()

    def live_slots(self) -> np.ndarray:
        free = np.zeros(self.capacity, np.bool_)
        free[self.free_slots[: self.n_free]] = True
        return np.flatnonzero(~free).astype(np.int64)

    # -- reads --------------------------------------------------------------------------------
    def keys(self, name: str, slots: np.ndarray) -> np.ndarray:
        col = self.columns[name]
        if isinstance(col, VarArena):
            return join_keys(col.take(slots), name)
        return col[slots].astype(np.int64, copy=False)

    def take(self, name: str, slots: np.ndarray) -> Column:
        col = self.columns[name]
        return col.take(slots) if isinstance(col, VarArena) else col[slots]

    @property
    def nbytes(self) -> int:
        total = self.born.nbytes * 3 + self.by_rid.nbytes
        total += sum(i.nbytes for i in self.indexes.values())
        for col in self.columns.values():
            total += (
                col.data.nbytes + col.start.nbytes * 2 if isinstance(col, VarArena) else col.nbytes
            )
        return total


# -- snapshots ----------------------------------------------------------------------------------


def encode_column(col: Column) -> Any:
    """A column as a snapshot state tree: an array, or a dict of the parts of strings/bytes."""
    if isinstance(col, VarColumn):
        base = int(col.offsets[0]) if len(col.offsets) else 0
        offsets = np.asarray(col.offsets, np.int64) - base
        data = np.asarray(col.data[base : base + int(offsets[-1])] if len(offsets) else col.data)
        return {"offsets": offsets, "data": data.astype(np.uint8), "utf8": bool(col.utf8)}
    return np.array(col, copy=True)


def decode_column(tree: Any, rows: int, what: str) -> Column:
    """The column of :func:`encode_column`, checked so that no kernel reads out of bounds
    (ValueError naming ``what`` otherwise)."""
    if isinstance(tree, dict):
        offsets, data = tree.get("offsets"), tree.get("data")
        if not isinstance(offsets, np.ndarray) or not isinstance(data, np.ndarray):
            raise ValueError(f"{what}: a string column needs offsets and data arrays")
        offsets = offsets.astype(np.int64, copy=False)
        if (
            offsets.ndim != 1
            or len(offsets) != rows + 1
            or offsets[0] != 0
            or bool((np.diff(offsets) < 0).any())
            or offsets[-1] > len(data)
        ):
            raise ValueError(f"{what}: string offsets do not fit {rows} values in the data")
        return VarColumn(offsets, data.astype(np.uint8, copy=False), bool(tree.get("utf8")))
    if not isinstance(tree, np.ndarray) or tree.ndim != 1 or len(tree) != rows:
        raise ValueError(f"{what}: not a column of {rows} values")
    return tree


def decode_int64(tree: Any, rows: int | None, what: str) -> np.ndarray:
    """A one-dimensional integer array of the snapshot as int64 (``rows`` values if given)."""
    if not isinstance(tree, np.ndarray) or tree.ndim != 1 or tree.dtype.kind not in "iu":
        raise ValueError(f"{what}: not an integer array")
    if rows is not None and len(tree) != rows:
        raise ValueError(f"{what}: {len(tree)} values, not {rows}")
    return tree.astype(np.int64, copy=False)


def store_state(store: WindowStore) -> dict[str, Any]:
    """A window store's tuples as a state tree, in insertion (``born``) order, so that
    re-inserting them rebuilds every index chain in the same order (matches come out of a
    probe in the same order after a restore)."""
    live = store.live_slots()
    live = live[np.argsort(store.born[live], kind="stable")]
    return {
        "capacity": store.capacity,
        "columns": {name: encode_column(store.take(name, live)) for name in store.columns},
        "born": store.born[live].copy(),
        "died": store.died[live].copy(),
        "rid": store.rid[live].copy(),
    }


def load_store(name: str, key_columns: list[str], tree: dict[str, Any]) -> WindowStore:
    """The store of :func:`store_state` (ValueError, KeyError or TypeError if malformed)."""
    born = decode_int64(tree["born"], None, f"{name}.born")
    rows = len(born)
    died = decode_int64(tree["died"], rows, f"{name}.died")
    rid = decode_int64(tree["rid"], rows, f"{name}.rid")
    capacity = int(tree["capacity"])
    if not 1 <= capacity <= 1 << 40:
        raise ValueError(f"{name}: capacity {capacity}")
    columns: dict[str, Column] = {
        str(c): decode_column(v, rows, f"{name}.{c}") for c, v in tree["columns"].items()
    }
    missing = [c for c in key_columns if c not in columns]
    if missing and (rows or columns):
        raise ValueError(f"{name}: join columns {missing} are missing")
    store = WindowStore(name, key_columns, max(capacity, rows))
    if not columns:
        return store  # nothing arrived yet: columns are declared by the first batch
    batch = Batch({**columns, ROW_ID: rid}, np.ones(rows, np.int8), np.zeros(rows, np.int64))
    store.declare_columns(batch)
    slots = store.insert(batch, born)
    store.died[slots] = died
    dying = slots[died != ALIVE]
    if len(dying):
        store.dying.append(dying)
    return store
