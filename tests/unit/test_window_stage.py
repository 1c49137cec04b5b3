"""WindowStage: the delta stream of docs/windows-and-joins.md, checked against a naive oracle.

The oracle below is written from the doc's table and its "Late and out-of-order data" paragraph
alone: tuple at a time, lists of dicts, no shared code with the stage.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processors.core.batch import ROW_ID, Batch, VarColumn
from processors.core.plan import Window
from processors.core.state_codec import decode_state
from processors.kernels.window import (
    BOUNDED,
    IN_ORDER,
    LATE_POSSIBLE,
    admit,
    classify_arrivals,
)
from processors.stages.window_stage import NOT_APPEND_ONLY, WindowStage

Event = tuple[int, int, int, tuple[Any, ...]]  # sign, ts, rid, values
Row = tuple[int, dict[str, Any]]  # ts, values


class Oracle:
    """The doc's semantics, one tuple at a time."""

    def __init__(self, kind: str, size: int, by: Sequence[str] = (), lateness: int = 0) -> None:
        self.kind, self.size, self.by, self.lateness = kind, size, tuple(by), lateness
        self.window: list[dict[str, Any]] = []  # {"rid", "ts", "values"}
        self.buffer: list[dict[str, Any]] = []  # {"ts", "seq", "values"}
        self.max_ts: int | None = None
        self.last: int | None = None
        self.next_rid = 0
        self.seq = 0
        self.out: list[Event] = []
        self.dead: list[Row] = []

    def push(self, ts: int, values: dict[str, Any]) -> None:
        if self.last is not None and ts < self.last:
            self.dead.append((ts, values))
            return
        self.buffer.append({"ts": ts, "seq": self.seq, "values": values})
        self.seq += 1
        self.max_ts = ts if self.max_ts is None else max(self.max_ts, ts)
        ready = [b for b in self.buffer if b["ts"] <= self.max_ts - self.lateness]
        self._admit_all(ready)

    def flush(self) -> None:
        self._admit_all(list(self.buffer))

    def _admit_all(self, ready: list[dict[str, Any]]) -> None:
        for b in sorted(ready, key=lambda b: (b["ts"], b["seq"])):
            self.buffer.remove(b)
            self._admit(b["ts"], b["values"])

    def _admit(self, ts: int, values: dict[str, Any]) -> None:
        if self.kind == "rows":
            key = tuple(values[c] for c in self.by)
            same = [w for w in self.window if tuple(w["values"][c] for c in self.by) == key]
            if len(same) >= self.size:  # the window holds the last n: this is the n-th newer
                oldest = min(same, key=lambda w: w["rid"])
                self._delete(oldest, ts)
        else:
            gone = [w for w in self.window if w["ts"] + self.size <= ts]
            for w in sorted(gone, key=lambda w: (w["ts"] + self.size, w["rid"])):
                self._delete(w, w["ts"] + self.size)
        row = {"rid": self.next_rid, "ts": ts, "values": values}
        self.next_rid += 1
        self.window.append(row)
        self.out.append((1, ts, row["rid"], tuple(values.values())))
        self.last = ts

    def _delete(self, w: dict[str, Any], ts: int) -> None:
        self.window.remove(w)
        self.out.append((-1, ts, w["rid"], tuple(w["values"].values())))


# -- helpers ------------------------------------------------------------------------------------
def make_batch(rows: Sequence[Row], kinds: dict[str, str]) -> Batch:
    """Rows (ts, values) as a batch; kinds: int, float, str or bytes per column."""
    cols: dict[str, Any] = {}
    for name, kind in kinds.items():
        vals = [r[1][name] for r in rows]
        if kind == "str":
            cols[name] = VarColumn.from_values(vals)
        elif kind == "bytes":
            cols[name] = VarColumn.from_values(vals, utf8=False)
        else:
            cols[name] = np.array(vals, np.int64 if kind == "int" else np.float64)
    return Batch.inserts(cols, np.array([r[0] for r in rows], np.int64))


def events(batches: Sequence[Batch]) -> list[Event]:
    out: list[Event] = []
    for b in batches:
        assert list(b.columns)[-1] == ROW_ID and b.columns[ROW_ID].dtype == np.int64
        for sign, ts, row in zip(b.sign.tolist(), b.ts.tolist(), b.rows(), strict=True):
            rid = row.pop(ROW_ID)
            out.append((sign, ts, rid, tuple(row.values())))
    return out


def chunks(rows: Sequence[Row], sizes: Sequence[int]) -> list[list[Row]]:
    out, i = [], 0
    for s in sizes:
        out.append(list(rows[i : i + s]))
        i += s
    if i < len(rows):
        out.append(list(rows[i:]))
    return out


def run_stage(
    stage: WindowStage, parts: Sequence[Sequence[Row]], kinds: dict[str, str], flush: bool = True
) -> list[Event]:
    out: list[Batch] = []
    for part in parts:
        out += stage.process(make_batch(part, kinds))
    if flush:
        out += stage.flush()
    return events(out)


def run_oracle(oracle: Oracle, rows: Sequence[Row], flush: bool = True) -> list[Event]:
    for ts, values in rows:
        oracle.push(ts, values)
    if flush:
        oracle.flush()
    return oracle.out


def random_rows(rng: random.Random, n: int, spread: int = 3, keys: int = 4) -> list[Row]:
    """Mostly increasing timestamps with duplicates, keys and string values."""
    rows, ts = [], 1_000
    for i in range(n):
        ts += rng.choice([0, 0, 1, 2, rng.randint(0, spread)])
        k = rng.randrange(keys)
        rows.append((ts, {"k": k, "s": f"k{k}", "v": i, "w": rng.choice(["", "x", "yy", "é"])}))
    return rows


KINDS = {"k": "int", "s": "str", "v": "int", "w": "str"}
WINDOWS = [
    ("rows", 1, ()),
    ("rows", 3, ()),
    ("rows", 3, ("k",)),
    ("rows", 2, ("s",)),
    ("rows", 2, ("k", "w")),
    ("range", 1, ()),
    ("range", 5, ()),
]


def stage_for(kind: str, size: int, by: Sequence[str] = (), lateness: int = 0) -> WindowStage:
    return WindowStage(Window("r", kind, size, tuple(by)), lateness)  # type: ignore[arg-type]


def window_params() -> Any:
    return pytest.mark.parametrize(("kind", "size", "by"), WINDOWS)


# -- the oracle agrees with the doc's table on hand-worked cases --------------------------------
def test_oracle_matches_the_doc_table() -> None:
    rows = [(0, {"v": 0}), (10, {"v": 1}), (20, {"v": 2})]
    assert run_oracle(Oracle("rows", 2), rows) == [
        (1, 0, 0, (0,)),
        (1, 10, 1, (1,)),
        (-1, 20, 0, (0,)),
        (1, 20, 2, (2,)),
    ]
    assert run_oracle(Oracle("range", 10), rows) == [
        (1, 0, 0, (0,)),
        (-1, 10, 0, (0,)),
        (1, 10, 1, (1,)),
        (-1, 20, 1, (1,)),
        (1, 20, 2, (2,)),
    ]


# -- exact sequences against the oracle --------------------------------------------------------
@window_params()
def test_matches_oracle_on_random_streams(kind: str, size: int, by: tuple[str, ...]) -> None:
    rng = random.Random(f"{kind}{size}{by}")
    rows = random_rows(rng, 400)
    sizes = [rng.randint(0, 40) for _ in range(30)]
    got = run_stage(stage_for(kind, size, by), chunks(rows, sizes), KINDS)
    assert got == run_oracle(Oracle(kind, size, by), rows)


@window_params()
def test_small_batches_give_the_same_output_as_one_big_batch(
    kind: str, size: int, by: tuple[str, ...]
) -> None:
    rows = random_rows(random.Random(7), 300)
    whole = run_stage(stage_for(kind, size, by), [rows], KINDS)
    ones = run_stage(stage_for(kind, size, by), [[r] for r in rows], KINDS)
    assert whole == ones == run_oracle(Oracle(kind, size, by), rows)


def test_equal_timestamps_and_duplicate_tuples() -> None:
    rows = [(5, {"k": 1, "v": 7})] * 6 + [(9, {"k": 1, "v": 7})] * 3
    kinds = {"k": "int", "v": "int"}
    for kind, size, by in [("rows", 2, ()), ("rows", 2, ("k",)), ("range", 4, ())]:
        got = run_stage(stage_for(kind, size, by), [rows[:4], rows[4:]], kinds)
        assert got == run_oracle(Oracle(kind, size, by), rows)
    got = run_stage(stage_for("range", 4), [rows], kinds)
    # RANGE 4 at ts 9: the six tuples of ts 5 expire at 9, oldest first, before the inserts
    assert [e[:3] for e in got[6:12]] == [(-1, 9, r) for r in range(6)]


def test_range_deletes_carry_expiry_time_and_come_oldest_first() -> None:
    rows = [(0, {"v": 0}), (3, {"v": 1}), (3, {"v": 2}), (100, {"v": 3})]
    got = run_stage(stage_for("range", 10), [rows], {"v": "int"})
    assert got == [
        (1, 0, 0, (0,)),
        (1, 3, 1, (1,)),
        (1, 3, 2, (2,)),
        (-1, 10, 0, (0,)),
        (-1, 13, 1, (1,)),
        (-1, 13, 2, (2,)),
        (1, 100, 3, (3,)),
    ]


def test_partition_by_string_and_bytes_keys() -> None:
    rng = random.Random(3)
    rows = [
        (i, {"s": rng.choice(["a", "b", "", "é", "ab"]), "b": rng.choice([b"\x00", b"", b"zz"])})
        for i in range(300)
    ]
    kinds = {"s": "str", "b": "bytes"}
    for by in [("s",), ("b",), ("b", "s")]:
        got = run_stage(stage_for("rows", 3, by), chunks(rows, [17] * 20), kinds)
        assert got == run_oracle(Oracle("rows", 3, by), rows)


def test_partition_by_float_keys_groups_nan_and_signed_zero() -> None:
    vals = [0.0, -0.0, float("nan"), 1.5, float("nan"), 0.0, 1.5]
    stage = stage_for("rows", 1, ("f",))
    out = events(stage.process(make_batch([(i, {"f": f}) for i, f in enumerate(vals)], {"f": "f"})))
    deleted = [rid for sign, _, rid, _ in out if sign == -1]
    assert deleted == [0, 2, 1, 3]  # -0.0 replaces 0.0, NaN replaces NaN, 0.0 replaces -0.0


def test_deltas_are_in_non_decreasing_timestamp_order_and_rids_count_from_zero() -> None:
    rows = random_rows(random.Random(11), 500, spread=20)
    for kind, size, by in WINDOWS:
        got = run_stage(stage_for(kind, size, by, lateness=5), chunks(rows, [33] * 20), KINDS)
        ts = [e[1] for e in got]
        assert ts == sorted(ts)
        inserts = [e[2] for e in got if e[0] == 1]
        assert inserts == list(range(len(inserts)))


# -- lateness -----------------------------------------------------------------------------------
def jitter(rows: Sequence[Row], lateness: int, rng: random.Random) -> list[Row]:
    """An arrival order no more than ``lateness`` out of order: sorted by ts + U[0, lateness]."""
    keyed = [(r[0] + rng.uniform(0, lateness), i, r) for i, r in enumerate(rows)]
    return [r for _, _, r in sorted(keyed)]


@window_params()
def test_out_of_order_within_lateness_equals_sorted_input(
    kind: str, size: int, by: tuple[str, ...]
) -> None:
    rng = random.Random(5)
    rows = random_rows(rng, 400, spread=10)
    for lateness in (1, 4, 30):
        shuffled = jitter(rows, lateness, rng)
        stage = stage_for(kind, size, by, lateness)
        got = run_stage(stage, chunks(shuffled, [rng.randint(1, 50) for _ in range(40)]), KINDS)
        in_order = sorted(shuffled, key=lambda r: r[0])  # stable: ties keep arrival order
        assert got == run_stage(stage_for(kind, size, by), [in_order], KINDS)
        assert stage.take_dead_letters() == []


NO_TS = np.iinfo(np.int64).min


def test_classify_arrivals() -> None:
    state = np.array([NO_TS, NO_TS], np.int64)
    ts = np.array([5, 5, 9, 7, 12], np.int64)
    assert classify_arrivals(np.sort(ts), 0, 0, state) == IN_ORDER
    assert classify_arrivals(ts, 0, 2, state) == BOUNDED  # 7 >= 9 - 2
    assert classify_arrivals(ts, 0, 1, state) == LATE_POSSIBLE
    assert classify_arrivals(ts, 2, 5, state) == BOUNDED  # 5, 5 were buffered
    state[:] = (10, 8)  # e.g. after a flush: last admitted 8
    assert classify_arrivals(np.array([9, 8, 7], np.int64), 0, 5, state) == LATE_POSSIBLE
    assert classify_arrivals(np.array([9, 8], np.int64), 0, 5, state) == BOUNDED
    assert state.tolist() == [10, 8]


@pytest.mark.parametrize("lateness", [0, 3, 100, 5000])
def test_admit_kernel_heap_agrees_with_a_stable_sort(lateness: int) -> None:
    """Where nothing is late the heap's admission order is the stable sort by ts (the stage's
    fast path), for large buffers too."""
    rng = np.random.default_rng(lateness)
    ts = np.cumsum(rng.integers(0, 3, 20_000))
    ts = ts[np.argsort(ts + rng.uniform(0, lateness, len(ts)), kind="stable")].astype(np.int64)
    state = np.array([NO_TS, NO_TS], np.int64)
    work = np.empty((6, len(ts)), np.int64)
    n_adm, n_late, n_heap = admit(ts, 0, lateness, state, *work)
    order = np.argsort(ts, kind="stable")
    assert n_late == 0 and n_adm + n_heap == len(ts)
    assert np.array_equal(work[0][:n_adm], order[:n_adm])
    watermark = int(ts.max()) - lateness
    assert int(ts[order[n_adm - 1]]) <= watermark
    assert n_heap == 0 or watermark < int(ts[order[n_adm]])
    assert state.tolist() == [int(ts.max()), int(ts[order[n_adm - 1]])]


def test_buffered_tuples_wait_for_the_watermark_and_flush_admits_them() -> None:
    stage = stage_for("rows", 5, lateness=10)
    kinds = {"v": "int"}
    assert stage.process(make_batch([(100, {"v": 0}), (95, {"v": 1})], kinds)) == []
    assert stage.stats()["buffered"] == 2 and len(stage) == 0
    out = events(stage.process(make_batch([(106, {"v": 2})], kinds)))
    assert out == [(1, 95, 0, (1,))]  # 95 <= 106 - 10; 100 is not yet
    assert events(stage.flush()) == [(1, 100, 1, (0,)), (1, 106, 2, (2,))]
    assert stage.flush() == [] and stage.stats()["buffered"] == 0


def test_range_flush_expires_nothing() -> None:
    stage = stage_for("range", 10)
    stage.process(make_batch([(0, {"v": 0}), (5, {"v": 1})], {"v": "int"}))
    assert stage.flush() == [] and len(stage) == 2


def test_late_tuples_are_dead_lettered_with_reason_and_not_lost() -> None:
    rows = [(10, {"v": 0}), (20, {"v": 1}), (15, {"v": 2}), (12, {"v": 3}), (25, {"v": 4})]
    rows += [(19, {"v": 5})]
    stage = stage_for("rows", 2, lateness=3)
    got = run_stage(stage, [rows[:2], rows[2:]], {"v": "int"})
    oracle = Oracle("rows", 2, lateness=3)
    assert got == run_oracle(oracle, rows)
    dead = stage.take_dead_letters()
    assert stage.take_dead_letters() == []
    assert dead_rows(dead) == [(ts, v["v"]) for ts, v in oracle.dead] == [(12, 3), (19, 5)]
    # 12 came after 15 was admitted (max_ts 20); 19 after 20 was (max_ts 25)
    assert [reason for _, reason in dead] == [
        "late: ts 12 is below the last admitted ts 15; watermark 17 (max_ts 20, lateness 3 ms)",
        "late: ts 19 is below the last admitted ts 20; watermark 22 (max_ts 25, lateness 3 ms)",
    ]
    inserts = sum(1 for e in got if e[0] == 1)
    assert inserts + sum(len(b) for b, _ in dead) == len(rows)
    assert stage.stats()["late_total"] == 2


def test_late_tuples_meeting_one_state_share_one_dead_letter() -> None:
    stage = stage_for("range", 10)
    stage.process(make_batch([(50, {"v": 0})], {"v": "int"}))
    stage.process(make_batch([(40, {"v": 1}), (30, {"v": 2}), (60, {"v": 3})], {"v": "int"}))
    [(dead, reason)] = stage.take_dead_letters()
    assert dead_rows([(dead, reason)]) == [(40, 1), (30, 2)]
    assert reason.startswith("late: ts 30..40 is below the last admitted ts 50; watermark 50")


def dead_rows(dead: Sequence[tuple[Batch, str]]) -> list[tuple[int, Any]]:
    return [(int(t), r["v"]) for b, _ in dead for t, r in zip(b.ts, b.rows(), strict=True)]


def test_deletes_in_the_input_are_rejected_as_dead_letters() -> None:
    batch = make_batch([(1, {"v": 0}), (2, {"v": 1}), (3, {"v": 2})], {"v": "int"})
    batch.sign[1] = -1
    stage = stage_for("rows", 10)
    out = events(stage.process(batch))
    assert out == [(1, 1, 0, (0,)), (1, 3, 1, (2,))]
    [(dead, reason)] = stage.take_dead_letters()
    assert reason == NOT_APPEND_ONLY == "window input must be append-only"
    assert dead.rows() == [{"v": 1}] and dead.sign.tolist() == [-1]
    assert stage.stats()["tuples_in"] == 3


# -- snapshot / restore -------------------------------------------------------------------------
@window_params()
def test_restore_continues_exactly_like_the_uninterrupted_stage(
    kind: str, size: int, by: tuple[str, ...]
) -> None:
    rng = random.Random(f"snap{kind}{size}{by}")
    rows = jitter(random_rows(rng, 600, spread=8), 6, rng)
    parts = chunks(rows, [rng.randint(1, 60) for _ in range(40)])
    for _ in range(4):
        cut = rng.randint(0, len(parts))
        window = Window("r", kind, size, by)  # type: ignore[arg-type]
        stage = WindowStage(window, 3)
        before = run_stage(stage, parts[:cut], KINDS, flush=False)
        state = decode_state(stage.snapshot())
        kept = copy.deepcopy(state)
        rest = run_stage(stage, parts[cut:], KINDS)  # the original keeps going ...
        restored = WindowStage.restore(window, 3, kept, name="w2")
        assert restored.name == "w2"
        assert run_stage(restored, parts[cut:], KINDS) == rest  # ... and so does its copy
        assert before + rest == run_oracle(Oracle(kind, size, by, 3), rows)
        assert restored.stats() == stage.stats()
        assert _same_state(state, kept)  # later processing did not write into the snapshot


def _same_state(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    return bool(a == b)


def test_snapshot_of_a_fresh_stage_restores() -> None:
    window = Window("r", "rows", 2)
    stage = WindowStage.restore(window, 0, WindowStage(window).snapshot())
    rows = [(1, {"v": 1}), (2, {"v": 2}), (3, {"v": 3})]
    assert run_stage(stage, [rows], {"v": "int"}) == run_oracle(Oracle("rows", 2), rows)


def test_restore_rejects_a_snapshot_of_another_window() -> None:
    state = WindowStage(Window("r", "rows", 2)).snapshot()
    with pytest.raises(ValueError, match="snapshot of window"):
        WindowStage.restore(Window("r", "rows", 3), 0, state)


# -- long runs: store compaction keeps values and links right ----------------------------------
@pytest.mark.parametrize(
    ("kind", "size", "by"), [("rows", 50, ()), ("rows", 3, ("s",)), ("range", 40, ())]
)
def test_long_streams_through_store_compaction(kind: str, size: int, by: tuple[str, ...]) -> None:
    rng = random.Random(17)
    rows = [
        (i // 3, {"s": f"key{rng.randrange(100)}", "v": i, "w": "x" * rng.randrange(5)})
        for i in range(6000)
    ]
    kinds = {"s": "str", "v": "int", "w": "str"}
    stage = stage_for(kind, size, by)
    got = run_stage(stage, chunks(rows, [rng.randint(1, 300) for _ in range(60)]), kinds)
    assert got == run_oracle(Oracle(kind, size, by), rows)
    stats = stage.stats()
    assert stats["inserts_out"] - stats["deletes_out"] == stats["window_size"] == len(stage)


# -- properties ---------------------------------------------------------------------------------
@st.composite
def streams(draw: st.DrawFn) -> tuple[list[Row], list[int], int]:
    n = draw(st.integers(0, 60))
    deltas = draw(st.lists(st.integers(-6, 6), min_size=n, max_size=n))
    ts, rows = 0, []
    for i, d in enumerate(deltas):
        ts += d
        k = draw(st.integers(0, 3))
        rows.append((ts, {"k": k, "s": ["", "a", "bé"][k % 3], "v": i, "w": str(d)}))
    sizes = draw(st.lists(st.integers(0, 12), max_size=12))
    return rows, sizes, draw(st.integers(0, 8))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stream=streams(),
    window=st.sampled_from(WINDOWS + [("range", 3, ()), ("rows", 1, ("s",))]),
    split=st.integers(0, 20),
)
def test_property_stage_equals_oracle(
    stream: tuple[list[Row], list[int], int], window: tuple[Any, ...], split: int
) -> None:
    rows, sizes, lateness = stream
    kind, size, by = window
    parts = chunks(rows, sizes)
    cut = min(split, len(parts))
    stage = stage_for(kind, size, by, lateness)
    got = run_stage(stage, parts[:cut], KINDS, flush=False)
    dead = dead_rows(stage.take_dead_letters())
    stage = WindowStage.restore(stage.window, lateness, stage.snapshot())
    got += run_stage(stage, parts[cut:], KINDS)
    dead += dead_rows(stage.take_dead_letters())
    oracle = Oracle(kind, size, by, lateness)
    assert got == run_oracle(oracle, rows)
    assert dead == [(t, v["v"]) for t, v in oracle.dead]
    inserts = sum(1 for e in got if e[0] == 1)
    assert inserts + len(oracle.dead) == len(rows)
    assert [e[1] for e in got] == sorted(e[1] for e in got)


# -- configuration and schema errors ------------------------------------------------------------
@pytest.mark.parametrize(
    ("window", "lateness", "match"),
    [
        (Window("r", "rows", 2), -1, "lateness_ms must be >= 0"),
        (Window("r", "rows", 2), 1.5, "lateness_ms must be an int"),
        (Window("r", "rows", 2), True, "lateness_ms must be an int"),
        (Window("r", "rows", 0), 0, "size must be a positive int"),
        (Window("r", "range", -5), 0, "size must be a positive int"),
        (Window("r", "range", 5, ("k",)), 0, "PARTITION BY needs a ROWS window"),
        (Window("r", "slide", 5), 0, "kind must be"),  # type: ignore[arg-type]
        ("r [ROWS 2]", 0, "must be a processors.core.plan.Window"),
    ],
)
def test_bad_configuration(window: Any, lateness: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        WindowStage(window, lateness)


def test_schema_changes_and_rid_columns_are_errors() -> None:
    stage = stage_for("rows", 2)
    stage.process(make_batch([(1, {"v": 1})], {"v": "int"}))
    with pytest.raises(ValueError, match="differ"):
        stage.process(make_batch([(2, {"v": 1.0})], {"v": "float"}))
    with pytest.raises(ValueError, match="differ"):
        stage.process(make_batch([(2, {"w": 1})], {"w": "int"}))
    with pytest.raises(ValueError, match=ROW_ID):
        stage.process(Batch.inserts({ROW_ID: np.zeros(1, np.int64)}, np.zeros(1, np.int64)))


def test_stats_and_len() -> None:
    stage = WindowStage(Window("r", "rows", 2), name="w")
    run_stage(stage, [[(i, {"v": i}) for i in range(5)]], {"v": "int"})
    assert stage.name == "w" and len(stage) == 2
    stats = stage.stats()
    assert {k: stats[k] for k in ("kind", "window", "tuples_in", "inserts_out")} == {
        "kind": "window",
        "window": "r [ROWS 2]",
        "tuples_in": 5,
        "inserts_out": 5,
    }
    assert (stats["deletes_out"], stats["window_size"], stats["buffered"]) == (3, 2, 0)
    assert stats["late_total"] == 0


def test_empty_batches_and_meta() -> None:
    stage = stage_for("rows", 2)
    assert stage.process(make_batch([], {"v": "int"})) == []
    batch = make_batch([(1, {"v": 1})], {"v": "int"})
    batch.meta["stream"] = "r"
    [out] = stage.process(batch)
    assert out.meta == {"stream": "r"} and out.key is None


def test_a_watermark_admits_buffered_tuples_before_it_expires_others() -> None:
    """With lateness, tuples wait in the buffer for the partition's next tuple; a watermark
    (no later input below it) lets them in, then expires what its time is up for, deltas in
    time order. Before, the buffer held both back until the partition's next tuple."""
    stage = WindowStage(Window("s", "range", 10), lateness_ms=3)
    rows = [(0, {"k": 1}), (2, {"k": 2}), (5, {"k": 3})]
    (out,) = stage.process(make_batch(rows, {"k": "long"}))
    assert out.ts.tolist() == [0, 2]  # 5 waits: max 5 less the lateness 3
    batches = stage.advance(14)
    got = [(int(t), int(s)) for b in batches for t, s in zip(b.ts, b.sign, strict=True)]
    assert got == [(5, 1), (10, -1), (12, -1)]
    assert stage.progress(14) == 14 and stage._buffer is None
