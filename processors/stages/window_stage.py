"""WindowStage: turns an append-only stream into the delta stream of its sliding window.

Semantics (row ids, when a tuple leaves, the timestamps of deletes, lateness and late tuples)
are those of ``docs/windows-and-joins.md``. Per batch the stage runs two numba kernels
(:mod:`processors.kernels.window`): admission through the lateness buffer, then the window's
insert/delete events. Window contents live in a slot store in row-id order, so that a delete
reads back exactly the values its insert carried; the store compacts itself when dead slots
outnumber live ones, which keeps the copying amortized O(1) per tuple.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from processors.core.batch import INSERT, ROW_ID, Batch, Column, VarColumn
from processors.core.plan import Window
from processors.core.state_codec import SnapshotError, decode_state, expect
from processors.kernels.window import (
    IN_ORDER,
    LATE_POSSIBLE,
    admit,
    classify_arrivals,
    partition_events,
    range_events,
    rows_events,
)
from processors.stages.base import StageBase
from processors.stages.pinned_columns import column_type, filled
from processors.stages.window_store import PartitionGroups, SlotStore, var_parts

NOT_APPEND_ONLY = "window input must be append-only"
_NO_TS = np.iinfo(np.int64).min  # max_ts / last admitted ts before any tuple
_SNAPSHOT_VERSION = 1


def _check_config(window: Window, lateness_ms: object) -> None:
    """Reject configurations the semantics do not cover, naming the problem."""
    if not isinstance(window, Window):
        raise ValueError(f"window must be a processors.core.plan.Window, got {window!r}")
    if window.kind not in ("rows", "range"):
        raise ValueError(f"window {window}: kind must be 'rows' or 'range', got {window.kind!r}")
    size = window.size
    if not isinstance(size, int | np.integer) or isinstance(size, bool) or size <= 0:
        raise ValueError(f"window {window}: size must be a positive int, got {size!r}")
    if window.partition_by and window.kind != "rows":
        raise ValueError(f"window {window}: PARTITION BY needs a ROWS window")
    if isinstance(lateness_ms, bool) or not isinstance(lateness_ms, int | np.integer):
        raise ValueError(f"lateness_ms must be an int (milliseconds), got {lateness_ms!r}")
    if lateness_ms < 0:
        raise ValueError(f"lateness_ms must be >= 0, got {lateness_ms}")


def _encode_column(col: Column) -> Any:
    """A column as snapshot data (arrays copied, so that later processing cannot change it)."""
    if isinstance(col, VarColumn):
        offsets, data = var_parts(col)
        return {"offsets": offsets.copy(), "data": data.copy(), "utf8": col.utf8}
    return np.array(col, copy=True)


def _decode_column(data: Any) -> Column:
    if isinstance(data, dict):
        offsets = np.asarray(data["offsets"], np.int64)
        return VarColumn(offsets, np.asarray(data["data"], np.uint8), bool(data["utf8"]))
    return np.asarray(data)


class WindowStage(StageBase):
    """ROWS n, PARTITION BY k ROWS n or RANGE t over an append-only stream, emitting the delta
    stream of the window (inputs' columns plus ``__rid``) in non-decreasing timestamp order."""

    def __init__(self, window: Window, lateness_ms: int = 0, name: str = "window") -> None:
        _check_config(window, lateness_ms)
        self.window = window
        self.lateness_ms = int(lateness_ms)
        self.name = name
        self._schema: list[tuple[str, str]] | None = None
        self._store: SlotStore | None = None
        self._groups = PartitionGroups(window.partition_by) if window.partition_by else None
        self._buffer: Batch | None = None  # lateness buffer, in admission order
        self._state = np.array([_NO_TS, _NO_TS], np.int64)  # max_ts, last admitted ts
        self._next_rid = 0
        self._meta: dict[str, str] = {}
        self._dead: list[tuple[Batch, str]] = []
        self.tuples_in = 0
        self.inserts_out = 0
        self.deletes_out = 0
        self.late_total = 0
        self.rejected_total = 0

    # -- processing -----------------------------------------------------------------------
    def process(self, batch: Batch) -> list[Batch]:
        """Admit the batch's tuples (through the lateness buffer); return the window deltas."""
        batch = self._check_schema(batch)
        self.tuples_in += len(batch)
        self._meta = dict(batch.meta)
        batch = self._reject_deletes(batch)
        if not len(batch):
            return []
        core = Batch(batch.columns, batch.sign, np.asarray(batch.ts, np.int64), None, batch.meta)
        n_buf = 0 if self._buffer is None else len(self._buffer)
        combined = core if not n_buf else Batch.concat([self._buffer, core])  # type: ignore[list-item]
        order = self._admit_bounded(combined, n_buf)
        if order is None:
            order = self._admit(combined, n_buf, batch)
        n = len(order)
        if n and order[-1] == n - 1 and bool(np.all(order == np.arange(n))):
            return self._enter(combined.slice(0, n), None, n)  # a prefix, in arrival order
        return self._enter(combined, order, n)

    def _admit_bounded(self, combined: Batch, n_buf: int) -> np.ndarray | None:
        """The common case, without the heap: no arrival below the watermark before it (nor
        below the last admitted ts), so nothing is late, the admission order is the stable
        sort by ts of buffer and batch (arrival order when they are in order: no sort), and
        what is admitted by the end of the batch is the prefix up to the final watermark.
        Returns the admitted candidates in order, or None for the general path."""
        ts = combined.ts
        arrivals = classify_arrivals(ts, n_buf, self.lateness_ms, self._state)
        if arrivals == LATE_POSSIBLE:
            return None
        order = np.arange(len(ts)) if arrivals == IN_ORDER else np.argsort(ts, kind="stable")
        ordered_ts = ts if arrivals == IN_ORDER else ts[order]
        top = max(int(self._state[0]), int(ordered_ts[-1]))
        watermark = top - self.lateness_ms
        k = 0
        if watermark >= int(ordered_ts[0]):
            k = int(np.searchsorted(ordered_ts, watermark, side="right"))
        self._state[0] = top
        if k:
            self._state[1] = ordered_ts[k - 1]
        self._keep_buffered(combined, order[k:], in_order=True)
        return order[:k]

    def _admit(self, combined: Batch, n_buf: int, batch: Batch) -> np.ndarray:
        """Arrivals through the lateness buffer (its ``n_buf`` tuples lead ``combined``, the
        batch's follow): late ones go to the dead letters, the not yet admissible stay
        buffered. Returns the admitted candidates in admission order."""
        admitted, late, late_last, late_max, heap, heap_ts = np.empty((6, len(combined)), np.int64)
        n_adm, n_late, n_heap = admit(
            combined.ts, n_buf, self.lateness_ms, self._state,
            admitted, late, late_last, late_max, heap, heap_ts,
        )  # fmt: skip
        if n_late:
            self._dead_late(batch, late[:n_late] - n_buf, late_last[:n_late], late_max[:n_late])
        self._keep_buffered(combined, heap[:n_heap])
        return admitted[:n_adm]

    def flush(self) -> list[Batch]:
        """Admit every buffered tuple (end of input); RANGE windows expire nothing here."""
        buffered, self._buffer = self._buffer, None
        if buffered is None or not len(buffered):
            return []
        self._state[1] = max(int(self._state[1]), int(buffered.ts[-1]))
        return self._enter(buffered, None, len(buffered))

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        """Rejected and late tuples since the last call, as (tuples, reason) pairs."""
        dead, self._dead = self._dead, []
        return dead

    def _check_schema(self, batch: Batch) -> Batch:
        """The first batch fixes the columns and their types; later ones must match, or lack
        only columns the query no longer reads (zero-filled: :mod:`.pinned_columns`)."""
        schema = [(name, column_type(col)) for name, col in batch.columns.items()]
        if ROW_ID in batch.columns:
            raise ValueError(f"{self.name}: input already has a {ROW_ID!r} column")
        if self._schema is None:
            self._schema = schema
            self._store = SlotStore(schema, self._groups is not None)
        elif schema != self._schema:
            fitted = filled(batch, self._schema)
            if fitted is None:
                raise ValueError(f"{self.name}: batch columns {schema} differ from {self._schema}")
            return fitted
        return batch

    def _reject_deletes(self, batch: Batch) -> Batch:
        """Tuples that are not inserts go to the dead letters; the rest go on."""
        bad = batch.sign != INSERT
        if not bad.any():
            return batch
        self.rejected_total += int(bad.sum())
        self._dead.append((batch.filter(bad), NOT_APPEND_ONLY))
        return batch.filter(~bad)

    def _dead_late(
        self, batch: Batch, rows: np.ndarray, last: np.ndarray, max_ts: np.ndarray
    ) -> None:
        """Late tuples to the dead letters, one entry per admission state they met."""
        self.late_total += len(rows)
        cut = np.flatnonzero((np.diff(last) != 0) | (np.diff(max_ts) != 0)) + 1
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(rows)], strict=True):
            dead = batch.take(rows[lo:hi])
            t_lo, t_hi = int(dead.ts.min()), int(dead.ts.max())
            ts = str(t_lo) if t_lo == t_hi else f"{t_lo}..{t_hi}"
            top = int(max_ts[lo])
            reason = (
                f"late: ts {ts} is below the last admitted ts {int(last[lo])}; "
                f"watermark {top - self.lateness_ms} (max_ts {top}, "
                f"lateness {self.lateness_ms} ms)"
            )
            self._dead.append((dead, reason))

    def _keep_buffered(self, combined: Batch, rest: np.ndarray, in_order: bool = False) -> None:
        """What stays in the lateness buffer, sorted in admission order (ts, then arrival)."""
        if not len(rest):
            self._buffer = None
            return
        if not in_order:
            rest = rest[np.lexsort((rest, combined.ts[rest]))]
        self._buffer = combined.take(rest)

    # -- the window ------------------------------------------------------------------------
    def _enter(self, src: Batch, idx: np.ndarray | None, k: int) -> list[Batch]:
        """Tuples ``idx`` of ``src`` (all if None) enter the window in that order."""
        if not k:
            return []
        store = self._store
        assert store is not None
        rids = np.arange(self._next_rid, self._next_rid + k, dtype=np.int64)
        self._next_rid += k
        first = self._append(store, src, idx, rids)
        slots, signs, ts = self._events(store, first, k)
        return [self._deltas(store, slots, signs, ts)]

    def _append(
        self, store: SlotStore, src: Batch, idx: np.ndarray | None, rids: np.ndarray
    ) -> int:
        moved = store.reserve(len(rids))
        if moved is not None and self._groups is not None:
            self._groups.moved(moved, store)
        return store.append(src, idx, rids)

    def _events(self, store: SlotStore, first: int, k: int) -> tuple[np.ndarray, ...]:
        """Run the window's event kernel over the ``k`` tuples appended at slot ``first``."""
        cap = 2 * k + (first - store.start if self.window.kind == "range" else 0)
        slots, signs, ts = np.empty(cap, np.int64), np.empty(cap, np.int8), np.empty(cap, np.int64)
        size = int(self.window.size)
        if self._groups is not None:
            g = self._groups
            groups = g.assign(store.view(first, first + k))
            m = partition_events(
                first, groups, size, store.ts, store.alive, store.nxt,
                g.head, g.tail, g.count, slots, signs, ts,
            )  # fmt: skip
            store.live -= m - k
        else:
            kernel = rows_events if self.window.kind == "rows" else range_events
            m, start = kernel(store.start, first, k, size, store.ts, slots, signs, ts)
            store.kill_before(start)
        self.inserts_out += k
        self.deletes_out += m - k
        return slots[:m], signs[:m], ts[:m]

    def _deltas(
        self, store: SlotStore, slots: np.ndarray, signs: np.ndarray, ts: np.ndarray
    ) -> Batch:
        columns = store.take(slots)
        columns[ROW_ID] = store.rid[slots]
        return Batch(columns, signs, ts, None, dict(self._meta))

    def advance(self, watermark: int) -> list[Batch]:
        """No later input is below ``watermark``: a RANGE window's tuples whose time is up by
        then leave now (deletes at their expiry time), not at the next tuple of this
        partition, which may never come when the stream's keys are spread over partitions.
        Buffered tuples at or below it enter first, for the same reason."""
        entered = self._admit_until(watermark)
        store = self._store
        if self.window.kind != "range" or store is None or not store.live:
            return entered
        if self._buffer is not None and len(self._buffer):
            watermark = min(watermark, int(self._buffer.ts.min()))
        size = int(self.window.size)
        live_ts = store.ts[store.start : store.size]
        k = int(np.searchsorted(live_ts, watermark - size, side="right"))
        if not k:
            return entered
        slots = np.arange(store.start, store.start + k, dtype=np.int64)
        ts = store.ts[slots] + size
        out = self._deltas(store, slots, np.full(k, -1, np.int8), ts)
        store.kill_before(store.start + k)
        self.deletes_out += k
        # an arrival below what just left is late: deltas stay in time order
        self._state[1] = max(int(self._state[1]), int(ts[-1]))
        return [*entered, out]

    def _admit_until(self, watermark: int) -> list[Batch]:
        """The lateness buffer's tuples at or below ``watermark`` enter the window: no later
        input is below it, so their order is final. Left buffered, they would wait for this
        partition's next tuple, and hold back the expiries behind them (a RANGE window's
        tuples would then meet later tuples of other inputs that their expiry should have
        kept them from)."""
        buffered = self._buffer
        if buffered is None or not len(buffered) or int(buffered.ts[0]) > watermark:
            return []
        k = int(np.searchsorted(buffered.ts, watermark, side="right"))
        self._buffer = None if k == len(buffered) else buffered.slice(k, len(buffered))
        self._state[1] = max(int(self._state[1]), int(buffered.ts[k - 1]))
        return self._enter(buffered.slice(0, k), None, k)

    def progress(self, upstream: int) -> int:
        """Tuples in the lateness buffer come out later with their own (older) times, and a
        RANGE window's next delete with its expiry time."""
        mark = upstream
        if self._buffer is not None and len(self._buffer):
            mark = min(mark, int(self._buffer.ts.min()))
        store = self._store
        if self.window.kind == "range" and store is not None and store.live:
            first = store.start + int(np.argmax(store.alive[store.start : store.size]))
            mark = min(mark, int(store.ts[first]) + int(self.window.size))
        return mark

    # -- state -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return 0 if self._store is None else self._store.live

    def held_bytes(self) -> int:
        """The window's slots (values of every live tuple and room to grow) and the lateness
        buffer."""
        held = 0 if self._buffer is None else self._buffer.nbytes()
        return held + (0 if self._store is None else self._store.nbytes())

    def stats(self) -> dict[str, Any]:
        return {
            "kind": "window",
            "window": str(self.window),
            "lateness_ms": self.lateness_ms,
            "tuples_in": self.tuples_in,
            "inserts_out": self.inserts_out,
            "deletes_out": self.deletes_out,
            "window_size": len(self),
            "buffered": 0 if self._buffer is None else len(self._buffer),
            "late_total": self.late_total,
            "rejected_total": self.rejected_total,
        }

    kind = "window"
    SNAPSHOT_VERSION = _SNAPSHOT_VERSION

    def state(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this stage is (arrays are copies); the
        tree :meth:`snapshot` encodes."""
        contents = None
        if self._store is not None:
            live = self._store.live_slots()
            contents = {
                "columns": {k: _encode_column(c) for k, c in self._store.take(live).items()},
                "ts": self._store.ts[live].copy(),
                "rid": self._store.rid[live].copy(),
            }
        buffer = None
        if self._buffer is not None:
            buffer = {
                "columns": {k: _encode_column(c) for k, c in self._buffer.columns.items()},
                "ts": self._buffer.ts.copy(),
            }
        return {
            "version": _SNAPSHOT_VERSION,
            "window": str(self.window),
            "schema": None if self._schema is None else [list(s) for s in self._schema],
            "contents": contents,
            "buffer": buffer,
            "next_rid": self._next_rid,
            "max_ts": int(self._state[0]),
            "last_admitted_ts": int(self._state[1]),
            "meta": dict(self._meta),
            "counters": {k: getattr(self, k) for k in _COUNTERS},
        }

    @classmethod
    def restore(
        cls,
        window: Window,
        lateness_ms: int,
        state: dict[str, Any] | bytes,
        name: str = "window",
    ) -> WindowStage:
        """A stage that continues from ``state`` (a :meth:`snapshot`, or its decoded tree) as
        the original would."""
        stage = cls(window, lateness_ms, name)
        if isinstance(state, bytes | bytearray | memoryview):
            state = decode_state(state)
            expect(state, cls.kind, _SNAPSHOT_VERSION, name)
        if state.get("version") != _SNAPSHOT_VERSION:
            raise SnapshotError(f"{name}: unknown window snapshot version {state.get('version')!r}")
        if state["window"] != str(window):
            raise SnapshotError(f"{name}: snapshot of window {state['window']}, not {window}")
        if state["schema"] is not None:
            stage._schema = [(str(n), str(t)) for n, t in state["schema"]]
            stage._store = SlotStore(stage._schema, stage._groups is not None)
        if state["contents"] is not None:
            stage._refill(state["contents"])
        if state["buffer"] is not None:
            cols = {k: _decode_column(v) for k, v in state["buffer"]["columns"].items()}
            stage._buffer = Batch.inserts(cols, np.asarray(state["buffer"]["ts"], np.int64))
        stage._next_rid = int(state["next_rid"])
        stage._state[:] = (int(state["max_ts"]), int(state["last_admitted_ts"]))
        stage._meta = dict(state["meta"])
        for key in _COUNTERS:
            setattr(stage, key, int(state["counters"][key]))
        return stage

    def load_state(self, state: dict[str, Any]) -> None:
        restored = type(self).restore(self.window, self.lateness_ms, state, self.name)
        self.__dict__.update(restored.__dict__)

    def _refill(self, contents: dict[str, Any]) -> None:
        """Put snapshotted window contents back, rebuilding the PARTITION BY groups by
        replaying them (they are the last <= n per key, so the replay deletes nothing)."""
        store = self._store
        assert store is not None
        cols = {k: _decode_column(v) for k, v in contents["columns"].items()}
        rids = np.asarray(contents["rid"], np.int64)
        src = Batch.inserts(cols, np.asarray(contents["ts"], np.int64))
        if not len(rids):
            return
        first = self._append(store, src, None, rids)
        if self._groups is None:
            return
        g, k = self._groups, len(rids)
        groups = g.assign(store.view(first, first + k))
        out = np.empty(2 * k, np.int64), np.empty(2 * k, np.int8), np.empty(2 * k, np.int64)
        m = partition_events(
            first, groups, int(self.window.size), store.ts, store.alive, store.nxt,
            g.head, g.tail, g.count, *out,
        )  # fmt: skip
        if m != k:
            raise ValueError(f"{self.name}: snapshot holds more than {self.window.size} per key")


_COUNTERS = ("tuples_in", "inserts_out", "deletes_out", "late_total", "rejected_total")
