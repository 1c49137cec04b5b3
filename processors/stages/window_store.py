"""The window stage's storage: window contents in a slot store in row-id order (so that a
delete reads back exactly the values its insert carried; it compacts itself when dead slots
outnumber live ones, which keeps the copying amortized O(1) per tuple), and the PARTITION BY
groups as lists through the slots."""

from __future__ import annotations

import numpy as np

from processors.core.batch import Batch, Column, VarColumn
from processors.kernels.gather import gather_var
from processors.kernels.keys import canonical_int64, key_codes

_MIN_SLOTS = 1024


def var_parts(col: VarColumn) -> tuple[np.ndarray, np.ndarray]:
    """Offsets rebased to 0 and exactly the data bytes they cover."""
    lo, hi = int(col.offsets[0]), int(col.offsets[-1])
    return col.offsets - lo, col.data[lo:hi]


def _grow(arr: np.ndarray, n: int, fill: int = 0) -> np.ndarray:
    """``arr`` with room for at least ``n`` entries (doubling, so growth is amortized)."""
    if len(arr) >= n:
        return arr
    out = np.full(max(n, 2 * len(arr), 16), fill, arr.dtype)
    out[: len(arr)] = arr
    return out


class VarSlots:
    """Variable-length values of the store's slots: offsets and bytes with spare capacity."""

    __slots__ = ("offsets", "data", "utf8")

    def __init__(self, cap: int, utf8: bool) -> None:
        self.offsets = np.zeros(cap + 1, np.int64)
        self.data = np.empty(4096, np.uint8)
        self.utf8 = utf8

    def write(self, slot: int, col: VarColumn) -> None:
        """Values of ``col`` into slots ``slot..`` (slots before it stay as they are)."""
        offsets, data = var_parts(col)
        base = int(self.offsets[slot])
        self.data = _grow(self.data, base + len(data))
        self.data[base : base + len(data)] = data
        self.offsets[slot + 1 : slot + len(offsets)] = offsets[1:] + base

    def view(self, lo: int, hi: int) -> VarColumn:
        base = int(self.offsets[lo])
        return VarColumn(
            self.offsets[lo : hi + 1] - base,
            self.data[base : int(self.offsets[hi])],
            self.utf8,
        )

    def take(self, slots: np.ndarray) -> VarColumn:
        offsets, data = gather_var(self.offsets, self.data, slots)
        return VarColumn(offsets, data, self.utf8)

    def moved(self, keep: np.ndarray, cap: int) -> VarSlots:
        """The values of slots ``keep`` in slots 0.. of a store with ``cap`` slots."""
        out = VarSlots(cap, self.utf8)
        out.write(0, self.take(keep))
        return out


class SlotStore:
    """The window's tuples in slots, in row-id order: values, row id, ts, and liveness.

    Slots ``start..size-1`` hold every tuple that may still be in the window (below ``start``
    all are dead); ``alive`` marks the live ones (for ROWS and RANGE exactly that range, for
    PARTITION BY a subset). ``nxt`` links each PARTITION BY group's tuples (see
    :func:`processors.kernels.window.partition_events`).
    """

    def __init__(self, schema: list[tuple[str, str]], linked: bool) -> None:
        self.schema = schema
        self.linked = linked
        self.size = 0
        self.start = 0
        self.live = 0
        self._allocate(_MIN_SLOTS)

    def _allocate(self, cap: int) -> None:
        self.cap = cap
        self.rid = np.empty(cap, np.int64)
        self.ts = np.empty(cap, np.int64)
        self.alive = np.zeros(cap, np.bool_)
        self.nxt = np.empty(cap if self.linked else 0, np.int64)
        self.cols: dict[str, np.ndarray | VarSlots] = {
            name: VarSlots(cap, typ == "string")
            if typ in ("string", "bytes")
            else np.empty(cap, np.dtype(typ))
            for name, typ in self.schema
        }

    def nbytes(self) -> int:
        arrays = [self.rid, self.ts, self.alive, self.nxt]
        total = sum(a.nbytes for a in arrays)
        for col in self.cols.values():
            var = isinstance(col, VarSlots)
            total += col.offsets.nbytes + col.data.nbytes if var else col.nbytes
        return total

    def live_slots(self) -> np.ndarray:
        return self.start + np.flatnonzero(self.alive[self.start : self.size])

    def reserve(self, k: int) -> np.ndarray | None:
        """Room for ``k`` more slots. Compacts (live slots move to 0..) when full, so returns
        the old slot of each new one then (for callers holding slot numbers), else None.

        The new capacity is at least twice what is kept plus ``k``, so compactions are at least
        that many appends apart: amortized O(1) copying per tuple.
        """
        if self.size + k <= self.cap:
            return None
        keep = self.live_slots()
        old = (self.rid, self.ts, self.nxt, self.cols)
        self._allocate(max(2 * (len(keep) + k), _MIN_SLOTS))
        n = len(keep)
        self.rid[:n] = old[0][keep]
        self.ts[:n] = old[1][keep]
        self.alive[:n] = True
        if self.linked:
            self.nxt[:n] = old[2][keep]
        for name, col in old[3].items():
            if isinstance(col, VarSlots):
                self.cols[name] = col.moved(keep, self.cap)
            else:
                self.cols[name][:n] = col[keep]  # type: ignore[index]
        self.size, self.start = n, 0
        return keep

    def append(self, src: Batch, idx: np.ndarray | None, rids: np.ndarray) -> int:
        """Tuples ``idx`` of ``src`` (all, in order, if None) into the next slots; returns the
        first of them. ``reserve`` must have made room."""
        k = len(rids)
        lo, hi = self.size, self.size + k
        for name, col in src.columns.items():
            dst = self.cols[name]
            if isinstance(dst, VarSlots):
                dst.write(lo, col if idx is None else col.take(idx))  # type: ignore[arg-type]
            elif idx is None:
                dst[lo:hi] = col
            else:
                np.take(col, idx, out=dst[lo:hi])
        self.ts[lo:hi] = src.ts if idx is None else src.ts[idx]
        self.rid[lo:hi] = rids
        self.alive[lo:hi] = True
        self.size = hi
        self.live += k
        return lo

    def kill_before(self, start: int) -> None:
        """FIFO windows: slots below ``start`` left the window."""
        self.alive[self.start : start] = False
        self.live -= start - self.start
        self.start = start

    def view(self, lo: int, hi: int) -> dict[str, Column]:
        """Columns of slots lo..hi-1 (views: valid until the next append)."""
        return {
            name: col.view(lo, hi) if isinstance(col, VarSlots) else col[lo:hi]
            for name, col in self.cols.items()
        }

    def take(self, slots: np.ndarray) -> dict[str, Column]:
        return {
            name: col.take(slots) if isinstance(col, VarSlots) else col[slots]
            for name, col in self.cols.items()
        }


def _key_parts(col: Column, rows: np.ndarray) -> list[object]:
    """Hashable Python values of one key column at ``rows`` (once per distinct key)."""
    if isinstance(col, VarColumn):
        return [col.data[col.offsets[r] : col.offsets[r + 1]].tobytes() for r in rows.tolist()]
    return canonical_int64(np.asarray(col)[rows]).tolist()


class PartitionGroups:
    """PARTITION BY groups: a dense id per key value and each group's FIFO in the store.

    A group never empties (its window keeps the last n tuples of the key forever), so ids are
    never reclaimed: the table grows with the key domain, as the window contents do.
    """

    def __init__(self, columns: tuple[str, ...]) -> None:
        self.columns = columns
        self.ids: dict[tuple[object, ...], int] = {}
        self.keys: list[tuple[object, ...]] = []
        self.head = np.full(16, -1, np.int64)
        self.tail = np.full(16, -1, np.int64)
        self.count = np.zeros(16, np.int64)

    def assign(self, cols: dict[str, Column]) -> np.ndarray:
        """The group id of each row (new keys get new ids; Python runs once per distinct key)."""
        key_cols = [cols[c] for c in self.columns]
        codes, first = key_codes(key_cols, len(key_cols[0]))
        parts = [_key_parts(c, first) for c in key_cols]
        gids = np.empty(len(first), np.int64)
        for i, key in enumerate(zip(*parts, strict=True)):
            gid = self.ids.get(key)
            if gid is None:
                gid = self.ids[key] = len(self.keys)
                self.keys.append(key)
            gids[i] = gid
        n = len(self.keys)
        self.head, self.tail = _grow(self.head, n, -1), _grow(self.tail, n, -1)
        self.count = _grow(self.count, n)
        return gids[codes]

    def moved(self, keep: np.ndarray, store: SlotStore) -> None:
        """The store compacted: slot ``keep[i]`` is now slot i."""
        new = np.full(int(keep.max()) + 1 if len(keep) else 1, -1, np.int64)
        new[keep] = np.arange(len(keep))
        n = len(keep)
        nxt = store.nxt[:n]
        store.nxt[:n] = np.where(nxt >= 0, new[np.clip(nxt, 0, len(new) - 1)], -1)
        used = self.count > 0
        self.head = np.where(used, new[np.clip(self.head, 0, len(new) - 1)], -1)
        self.tail = np.where(used, new[np.clip(self.tail, 0, len(new) - 1)], -1)
