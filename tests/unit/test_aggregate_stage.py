"""AggregateStage against a naive oracle that recomputes every aggregate from scratch.

The oracle follows docs/windows-and-joins.md ("Aggregates") independently of the stage: a list of
value tuples per group, deltas applied one by one, and after each batch, per group touched (in
order of first appearance), ``-old`` unless it was empty and ``+new`` unless it is empty, if the
values changed, stamped with the ts of the group's last applied delta of the batch. Float values
are multiples of 1/4 with small magnitudes, so every sum is exact and comparisons can be exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.core.batch import ROW_ID, Batch, VarColumn
from processors.core.state_codec import decode_state
from processors.stages.aggregate_stage import Aggregate, AggregateStage

ALL_AGGS = (
    Aggregate("count", None, "n"),
    Aggregate("sum", "v", "sum_v"),
    Aggregate("avg", "v", "avg_v"),
    Aggregate("min", "v", "min_v"),
    Aggregate("max", "v", "max_v"),
    Aggregate("sum", "w", "sum_w"),
    Aggregate("avg", "w", "avg_w"),
    Aggregate("min", "w", "min_w"),
    Aggregate("max", "w", "max_w"),
)
INT_AGGS = (
    Aggregate("count", None, "n"),
    Aggregate("sum", "v", "s"),
    Aggregate("min", "v", "lo"),
    Aggregate("max", "v", "hi"),
)

# a delta: (group key tuple, value tuple (v, w), sign, ts)
Delta = tuple[tuple, tuple, int, int]


# ---------------------------------------------------------------------------------------------
# the oracle


def value_columns(aggs: Sequence[Aggregate]) -> list[str]:
    cols: list[str] = []
    for a in aggs:
        if a.func != "count" and a.column not in cols:
            cols.append(a.column)  # type: ignore[arg-type]
    return cols


def reduce(func: str, xs: list) -> object:
    if func == "sum":
        return sum(xs)
    if func == "avg":
        return sum(xs) / len(xs)
    return min(xs) if func == "min" else max(xs)


def aggregate_row(aggs: Sequence[Aggregate], rows: list[dict[str, object]]) -> dict[str, object]:
    """Every aggregate of a non-empty group, computed from scratch."""
    return {
        a.name: len(rows) if a.func == "count" else reduce(a.func, [r[a.column] for r in rows])
        for a in aggs
    }


class Oracle:
    """Dict of lists per group; deltas applied one at a time."""

    def __init__(self, group_by: Sequence[str], aggs: Sequence[Aggregate]) -> None:
        self.group_by = list(group_by)
        self.aggs = list(aggs)
        self.vcols = value_columns(aggs)
        self.groups: dict[tuple, list[dict[str, object]]] = {}
        self.dead: list[dict[str, object]] = []

    def _key(self, row: dict[str, object]) -> tuple:
        return tuple(row[c] for c in self.group_by)

    def _same(self, a: dict[str, object], b: dict[str, object]) -> bool:
        return all(a[c] == b[c] for c in self.vcols)

    def _apply(self, row: dict[str, object], sign: int) -> bool:
        rows = self.groups.setdefault(self._key(row), [])
        if sign == 1:
            rows.append(row)
            return True
        for j, held in enumerate(rows):
            if sign == -1 and self._same(held, row):
                del rows[j]
                return True
        return False

    def process(self, rows: list[dict[str, object]], signs: list[int], ts: list[int]) -> list:
        """Output rows as (sign, ts, row dict) in emission order."""
        order: list[tuple] = []
        before: dict[tuple, dict | None] = {}
        last_ts: dict[tuple, int] = {}
        for row, sign, t in zip(rows, signs, ts, strict=True):
            key = self._key(row)
            if key not in before:
                order.append(key)
                held = self.groups.get(key, [])
                before[key] = aggregate_row(self.aggs, held) if held else None
            if self._apply(row, sign):
                last_ts[key] = t
            else:
                self.dead.append(row)
        out = []
        for key in order:
            held = self.groups.get(key, [])
            new = aggregate_row(self.aggs, held) if held else None
            if not held:
                self.groups.pop(key, None)
            old = before[key]
            if old == new:
                continue
            base = dict(zip(self.group_by, key, strict=True))
            if old is not None:
                out.append((-1, last_ts[key], {**base, **old}))
            if new is not None:
                out.append((1, last_ts[key], {**base, **new}))
        return out

    def current(self) -> dict[tuple, dict[str, object]]:
        return {k: aggregate_row(self.aggs, rows) for k, rows in self.groups.items() if rows}


# ---------------------------------------------------------------------------------------------
# building batches and running the stage


def make_batch(
    key_cols: dict[str, str],
    rows: list[dict[str, object]],
    signs: list[int],
    ts: list[int],
) -> Batch:
    """A batch of the given rows; ``key_cols`` maps each group column to "int" or "str"."""
    cols: dict[str, np.ndarray | VarColumn] = {}
    for name, kind in key_cols.items():
        values = [r[name] for r in rows]
        cols[name] = (
            VarColumn.from_values(values)  # type: ignore[arg-type]
            if kind == "str"
            else np.array(values, np.int64)
        )
    cols["v"] = np.array([r["v"] for r in rows], np.int64)
    cols["w"] = np.array([r["w"] for r in rows], np.float64)
    cols[ROW_ID] = np.arange(len(rows), dtype=np.int64)
    return Batch(cols, np.array(signs, np.int8), np.array(ts, np.int64))


def emitted(outs: list[Batch]) -> list[tuple[int, int, dict[str, object]]]:
    result = []
    for out in outs:
        for sign, t, row in zip(out.sign.tolist(), out.ts.tolist(), out.rows(), strict=True):
            result.append((sign, t, row))
    return result


def run_both(
    group_by: Sequence[str],
    key_cols: dict[str, str],
    aggs: Sequence[Aggregate],
    batches: list[tuple[list[dict[str, object]], list[int], list[int]]],
) -> tuple[AggregateStage, Oracle]:
    """Feed the same batches to the stage and to the oracle, comparing each batch's output."""
    stage = AggregateStage(group_by, aggs)
    oracle = Oracle(group_by, aggs)
    for rows, signs, ts in batches:
        got = emitted(stage.process(make_batch(key_cols, rows, signs, ts)))
        assert got == oracle.process(rows, signs, ts)
    assert stage.current() == oracle.current()
    return stage, oracle


# ---------------------------------------------------------------------------------------------
# random signed streams


def build_stream(ops: list[tuple[int, int, int, int, int]], keys: list[dict[str, object]]) -> list:
    """Turn drawn operations into a signed stream whose deletes retract live tuples.

    Each op is (kind, key index, v, w quarters, pick): kind 0-1 inserts, 2 deletes the
    ``pick``-th live tuple (an insert if none is live), 3 deletes the oldest live tuple of the
    same group if any (so min/max and emptied groups get hit often).
    """
    live: list[dict[str, object]] = []
    rows, signs = [], []
    for kind, key_i, v, wq, pick in ops:
        key = keys[key_i % len(keys)]
        if kind == 2 and live:
            row = live.pop(pick % len(live))
            rows.append(row)
            signs.append(-1)
            continue
        if kind == 3:
            same = [j for j, r in enumerate(live) if all(r[c] == key[c] for c in key)]
            if same:
                rows.append(live.pop(same[0]))
                signs.append(-1)
                continue
        row = {**key, "v": v, "w": wq / 4}
        live.append(row)
        rows.append(row)
        signs.append(1)
    return list(zip(rows, signs, strict=True))


def split(stream: list, cuts: list[int], ts: list[int]) -> list:
    """Batches of the stream at the given cut points (ts per delta in order)."""
    bounds = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    batches = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        part = stream[lo:hi]
        if part:
            rows = [r for r, _ in part]
            signs = [s for _, s in part]
            batches.append((rows, signs, ts[lo:hi]))
    return batches


ops_strategy = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.integers(0, 5),
        st.integers(-3, 3),
        st.integers(-8, 8),
        st.integers(0, 1000),
    ),
    min_size=1,
    max_size=60,
)
cuts_strategy = st.lists(st.integers(0, 60), max_size=6)
ts_strategy = st.lists(st.integers(0, 50), min_size=60, max_size=60)

INT_KEYS = [{"k": i} for i in (0, 1, -1, 7, 2**40, 3)]
STR_KEYS = [{"s": s} for s in ("a", "b", "", "ab", "é", "ba")]
MULTI_KEYS = [{"s": s, "k": k} for s, k in (("a", 1), ("a", 2), ("b", 1), ("", 0), ("b", 2))]


@settings(max_examples=150, deadline=None)
@given(ops=ops_strategy, cuts=cuts_strategy, ts=ts_strategy)
def test_random_streams_int_keys(ops, cuts, ts) -> None:
    stream = build_stream(ops, INT_KEYS)
    run_both(["k"], {"k": "int"}, ALL_AGGS, split(stream, cuts, ts))


@settings(max_examples=100, deadline=None)
@given(ops=ops_strategy, cuts=cuts_strategy, ts=ts_strategy)
def test_random_streams_string_keys(ops, cuts, ts) -> None:
    stream = build_stream(ops, STR_KEYS)
    run_both(["s"], {"s": "str"}, ALL_AGGS, split(stream, cuts, ts))


@settings(max_examples=100, deadline=None)
@given(ops=ops_strategy, cuts=cuts_strategy, ts=ts_strategy)
def test_random_streams_multi_column_keys(ops, cuts, ts) -> None:
    stream = build_stream(ops, MULTI_KEYS)
    run_both(["s", "k"], {"s": "str", "k": "int"}, ALL_AGGS, split(stream, cuts, ts))


@settings(max_examples=60, deadline=None)
@given(ops=ops_strategy, cuts=cuts_strategy, ts=ts_strategy)
def test_random_streams_global_aggregate_and_count_only(ops, cuts, ts) -> None:
    stream = build_stream(ops, [{}])
    run_both([], {}, INT_AGGS, split(stream, cuts, ts))
    stream = build_stream(ops, INT_KEYS)
    run_both(["k"], {"k": "int"}, [Aggregate("count", None, "n")], split(stream, cuts, ts))


@settings(max_examples=60, deadline=None)
@given(ops=ops_strategy, cuts=cuts_strategy, other=cuts_strategy, ts=ts_strategy)
def test_net_state_does_not_depend_on_batching(ops, cuts, other, ts) -> None:
    stream = build_stream(ops, MULTI_KEYS)
    a, oracle = run_both(["s", "k"], {"s": "str", "k": "int"}, ALL_AGGS, split(stream, cuts, ts))
    b, _ = run_both(["s", "k"], {"s": "str", "k": "int"}, ALL_AGGS, split(stream, other, ts))
    assert a.current() == b.current() == oracle.current()
    assert a.stats()["groups"] == b.stats()["groups"] == len(oracle.current())


@settings(max_examples=60, deadline=None)
@given(ops=ops_strategy, bogus=st.lists(st.integers(0, 59), max_size=5), ts=ts_strategy)
def test_random_retractions_of_absent_tuples_are_dead_letters(ops, bogus, ts) -> None:
    stream = build_stream(ops, INT_KEYS)
    for pos in sorted(set(bogus), reverse=True):  # deletes of values never inserted
        stream.insert(pos % (len(stream) + 1), ({"k": pos % 3, "v": 99, "w": 0.0}, -1))
    stage, oracle = run_both(["k"], {"k": "int"}, INT_AGGS, split(stream, [7, 19, 33], ts * 2))
    dead = stage.take_dead_letters()
    assert [b.rows()[0]["v"] for b, _ in dead] == [r["v"] for r in oracle.dead]
    assert stage.take_dead_letters() == []


def test_long_stream_with_table_rebuilds_and_list_walks() -> None:
    """Thousands of deltas in many small batches: the row table fills with tombstones and is
    rebuilt, and group lists are walked after their extremes leave."""
    rng = np.random.default_rng(7)
    keys = [{"k": int(k)} for k in range(40)]
    ops = [
        (
            int(rng.choice(4, p=[0.3, 0.2, 0.2, 0.3])),
            int(rng.integers(40)),
            int(v),
            int(v) % 9,
            int(p),
        )
        for v, p in zip(rng.integers(-50, 50, 20_000), rng.integers(0, 10**6, 20_000), strict=True)
    ]
    stream = build_stream(ops, keys)
    ts = [int(t) for t in rng.integers(0, 10**6, len(stream))]
    cuts = list(range(0, len(stream), 301))
    stage, _ = run_both(["k"], {"k": "int"}, ALL_AGGS, split(stream, cuts, ts))
    assert stage.stats()["tuples_in"] == len(stream)


# ---------------------------------------------------------------------------------------------
# hand examples


def int_batch(ks: list[int], vs: list[int], signs: list[int], ts: list[int]) -> Batch:
    return Batch(
        {"k": np.array(ks, np.int64), "v": np.array(vs, np.int64)},
        np.array(signs, np.int8),
        np.array(ts, np.int64),
    )


def test_exact_rows_of_a_hand_example() -> None:
    stage = AggregateStage(["k"], INT_AGGS + (Aggregate("avg", "v", "a"),))
    out = stage.process(int_batch([1, 2, 1], [5, 3, 7], [1, 1, 1], [10, 11, 12]))
    assert emitted(out) == [
        (1, 12, {"k": 1, "n": 2, "s": 12, "lo": 5, "hi": 7, "a": 6.0}),
        (1, 11, {"k": 2, "n": 1, "s": 3, "lo": 3, "hi": 3, "a": 3.0}),
    ]
    # deleting the max of group 1 brings back the previous max; group 2 becomes empty
    out = stage.process(int_batch([2, 1], [3, 7], [-1, -1], [20, 21]))
    assert emitted(out) == [
        (-1, 20, {"k": 2, "n": 1, "s": 3, "lo": 3, "hi": 3, "a": 3.0}),
        (-1, 21, {"k": 1, "n": 2, "s": 12, "lo": 5, "hi": 7, "a": 6.0}),
        (1, 21, {"k": 1, "n": 1, "s": 5, "lo": 5, "hi": 5, "a": 5.0}),
    ]
    assert stage.current() == {(1,): {"n": 1, "s": 5, "lo": 5, "hi": 5, "a": 5.0}}
    # group 2 comes back: only +new
    out = stage.process(int_batch([2], [4], [1], [30]))
    assert emitted(out) == [(1, 30, {"k": 2, "n": 1, "s": 4, "lo": 4, "hi": 4, "a": 4.0})]
    assert stage.stats() == {
        "kind": "aggregate",
        "groups": 2,
        "tuples_in": 6,
        "rows_out": 6,
        "batches": 3,
        "dead_letters": 0,
        "distinct_tuples": 2,
        "group_by": ["k"],
        "aggregates": [
            {"func": "count", "column": None, "name": "n"},
            {"func": "sum", "column": "v", "name": "s"},
            {"func": "min", "column": "v", "name": "lo"},
            {"func": "max", "column": "v", "name": "hi"},
            {"func": "avg", "column": "v", "name": "a"},
        ],
    }


def test_insert_then_delete_in_one_batch_emits_nothing() -> None:
    stage = AggregateStage(["k"], INT_AGGS)
    stage.process(int_batch([1], [5], [1], [1]))
    assert stage.process(int_batch([1, 1], [9, 9], [1, -1], [2, 3])) == []
    assert stage.process(int_batch([2, 2], [9, 9], [1, -1], [4, 5])) == []  # new and gone
    assert stage.current() == {(1,): {"n": 1, "s": 5, "lo": 5, "hi": 5}}
    assert stage.stats()["groups"] == 1


def test_min_and_max_come_back_after_deleting_duplicated_and_single_extremes() -> None:
    stage = AggregateStage(["k"], INT_AGGS)
    stage.process(int_batch([0] * 5, [1, 1, 5, 9, 9], [1] * 5, [0] * 5))
    stage.process(int_batch([0, 0], [1, 9], [-1, -1], [1, 1]))  # one copy of each extreme left
    assert stage.current()[(0,)] == {"n": 3, "s": 15, "lo": 1, "hi": 9}
    stage.process(int_batch([0, 0], [1, 9], [-1, -1], [2, 2]))
    assert stage.current()[(0,)] == {"n": 1, "s": 5, "lo": 5, "hi": 5}
    stage.process(int_batch([0, 0, 0], [5, 2, 3], [-1, 1, 1], [3, 3, 3]))
    assert stage.current()[(0,)] == {"n": 2, "s": 5, "lo": 2, "hi": 3}


def test_output_dtypes_follow_the_input() -> None:
    aggs = [
        Aggregate("count", None, "n"),
        Aggregate("sum", "i", "si"),
        Aggregate("avg", "i", "ai"),
        Aggregate("min", "i", "mi"),
        Aggregate("max", "f", "mf"),
        Aggregate("sum", "f", "sf"),
        Aggregate("min", "b", "mb"),
    ]
    stage = AggregateStage(["s"], aggs)
    batch = Batch(
        {
            "s": VarColumn.from_values(["x", "y"]),
            "i": np.array([3, -4], np.int32),
            "f": np.array([1.5, 2.5], np.float32),
            "b": np.array([True, False]),
        },
        np.ones(2, np.int8),
        np.zeros(2, np.int64),
    )
    (out,) = stage.process(batch)
    dtypes = {name: col.dtype for name, col in out.columns.items() if name != "s"}
    assert dtypes == {
        "n": np.int64,
        "si": np.int64,
        "ai": np.float64,
        "mi": np.int32,
        "mf": np.float32,
        "sf": np.float64,
        "mb": np.bool_,
    }
    assert isinstance(out.columns["s"], VarColumn) and out.columns["s"].to_list() == ["x", "y"]
    assert out.rows()[1] == {
        "s": "y", "n": 1, "si": -4, "ai": -4.0, "mi": -4, "mf": 2.5, "sf": 2.5, "mb": False
    }  # fmt: skip


def test_float_group_keys_compare_by_value_and_nan_is_the_largest_value() -> None:
    stage = AggregateStage(["g"], [Aggregate("count", None, "n"), Aggregate("max", "x", "m")])
    batch = Batch(
        {"g": np.array([0.0, -0.0, np.nan, np.nan]), "x": np.array([1.0, np.nan, 2.0, -1.0])},
        np.ones(4, np.int8),
        np.zeros(4, np.int64),
    )
    stage.process(batch)
    cur = stage.current()
    assert cur[(0.0,)]["n"] == 2 and np.isnan(cur[(0.0,)]["m"])
    nan_key = next(k for k in cur if k[0] != k[0])
    assert cur[nan_key] == {"n": 2, "m": 2.0}
    retract = Batch(
        {"g": np.array([-0.0]), "x": np.array([np.nan])}, -np.ones(1, np.int8), np.ones(1, np.int64)
    )
    out = stage.process(retract)
    assert [r["m"] for r in out[0].rows()][1] == 1.0
    assert out[0].columns["g"].tolist() == [0.0, 0.0]
    assert not np.signbit(out[0].columns["g"]).any()


# ---------------------------------------------------------------------------------------------
# dead letters


def test_retracting_what_was_never_inserted_is_a_dead_letter() -> None:
    stage = AggregateStage(["k"], INT_AGGS)
    stage.process(int_batch([1], [5], [1], [1]))
    out = stage.process(int_batch([1, 2, 1], [6, 5, 5], [-1, -1, 1], [2, 3, 4]))
    assert emitted(out) == [
        (-1, 4, {"k": 1, "n": 1, "s": 5, "lo": 5, "hi": 5}),
        (1, 4, {"k": 1, "n": 2, "s": 10, "lo": 5, "hi": 5}),
    ]
    dead = stage.take_dead_letters()
    assert [b.rows() for b, _ in dead] == [[{"k": 1, "v": 6}], [{"k": 2, "v": 5}]]
    assert [b.sign.tolist() for b, _ in dead] == [[-1], [-1]]
    assert "(1,)" in dead[0][1] and "does not hold" in dead[0][1]
    assert "(2,)" in dead[1][1]
    assert stage.take_dead_letters() == []
    assert stage.stats()["dead_letters"] == 2
    assert stage.stats()["groups"] == 1  # group 2 was never created


def test_a_sign_other_than_plus_or_minus_one_is_a_dead_letter() -> None:
    stage = AggregateStage(["k"], INT_AGGS)
    out = stage.process(int_batch([1, 1], [5, 6], [1, 2], [1, 2]))
    assert emitted(out) == [(1, 1, {"k": 1, "n": 1, "s": 5, "lo": 5, "hi": 5})]
    ((batch, reason),) = stage.take_dead_letters()
    assert batch.rows() == [{"k": 1, "v": 6}] and "sign 2" in reason


# ---------------------------------------------------------------------------------------------
# snapshot and restore


@settings(max_examples=40, deadline=None)
@given(ops=ops_strategy, cut=st.integers(0, 60), ts=ts_strategy)
def test_restored_stage_continues_like_an_uninterrupted_one(ops, cut, ts) -> None:
    for group_by, key_cols, keys in (
        (["k"], {"k": "int"}, INT_KEYS),
        (["s", "k"], {"s": "str", "k": "int"}, MULTI_KEYS),
    ):
        batches = split(build_stream(ops, keys), [cut, cut + 5, cut + 11], ts)
        whole = AggregateStage(group_by, ALL_AGGS, name="agg")
        first = AggregateStage(group_by, ALL_AGGS, name="agg")
        half = len(batches) // 2
        for rows, signs, t in batches[:half]:
            whole.process(make_batch(key_cols, rows, signs, t))
            first.process(make_batch(key_cols, rows, signs, t))
        state = decode_state(first.snapshot())
        restored = AggregateStage.restore(group_by, ALL_AGGS, state, name="agg")
        assert restored.current() == whole.current()
        for rows, signs, t in batches[half:]:
            a = emitted(whole.process(make_batch(key_cols, rows, signs, t)))
            assert emitted(restored.process(make_batch(key_cols, rows, signs, t))) == a
        assert restored.current() == whole.current()
        assert restored.stats() == whole.stats()


def test_restore_checks_the_configuration() -> None:
    stage = AggregateStage(["k"], INT_AGGS)
    stage.process(int_batch([1], [5], [1], [1]))
    state = stage.snapshot()
    with pytest.raises(ValueError, match="another group_by or aggregates"):
        AggregateStage.restore(["k"], INT_AGGS[:2], state)
    with pytest.raises(ValueError, match="snapshot version"):
        AggregateStage.restore(["k"], INT_AGGS, {**decode_state(state), "version": 99})
    empty = AggregateStage.restore(["k"], INT_AGGS, AggregateStage(["k"], INT_AGGS).snapshot())
    assert empty.current() == {}
    assert emitted(empty.process(int_batch([3], [4], [1], [0])))[0][2]["n"] == 1


# ---------------------------------------------------------------------------------------------
# configuration errors


@pytest.mark.parametrize(
    ("group_by", "aggs", "message"),
    [
        (["k"], [Aggregate("median", "v", "m")], "unknown function 'median'"),  # type: ignore[arg-type]
        (["k"], [Aggregate("sum", None, "s")], "sum needs a column"),
        (["k"], [Aggregate("count", None, "n"), Aggregate("max", "v", "n")], "duplicate .* 'n'"),
        (["k"], [Aggregate("count", None, "k")], "duplicate .* 'k'"),
        (["k", "k"], [Aggregate("count", None, "n")], "twice"),
    ],
)
def test_bad_configuration_is_refused(group_by, aggs, message) -> None:
    with pytest.raises(ValueError, match=message):
        AggregateStage(group_by, aggs)


@pytest.mark.parametrize(
    ("group_by", "aggs", "message"),
    [
        (["nope"], [Aggregate("count", None, "n")], "'nope'"),
        (["k"], [Aggregate("sum", "missing", "s")], "'missing'"),
        (["k"], [Aggregate("count", "missing", "c")], "'missing'"),
        (["k"], [Aggregate("sum", "s", "x")], r"sum\(s\) needs a numeric column"),
        (["k"], [Aggregate("avg", "s", "x")], r"avg\(s\) needs a numeric column"),
        (["k"], [Aggregate("min", "s", "x")], r"min\(s\) needs a numeric column"),
        (["k"], [Aggregate("max", "u", "x")], r"max\(u\) needs a numeric column \(not uint64\)"),
    ],
)
def test_columns_are_checked_against_the_first_batch(group_by, aggs, message) -> None:
    batch = Batch(
        {
            "k": np.array([1], np.int64),
            "s": VarColumn.from_values(["a"]),
            "u": np.array([1], np.uint64),
        },
        np.ones(1, np.int8),
        np.zeros(1, np.int64),
    )
    stage = AggregateStage(group_by, aggs)
    with pytest.raises(ValueError, match=message):
        stage.process(batch)


def test_a_later_batch_must_keep_the_column_types() -> None:
    stage = AggregateStage(["k"], INT_AGGS)
    stage.process(int_batch([1], [5], [1], [1]))
    batch = Batch(
        {"k": np.array([1], np.int64), "v": np.array([1.0])}, np.ones(1, np.int8), np.ones(1)
    )
    with pytest.raises(ValueError, match="'v' changed type"):
        stage.process(batch)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['v'\]"):
        stage.process(Batch({"k": np.array([1])}, np.ones(1, np.int8), np.ones(1, np.int64)))


def test_empty_batches_produce_nothing() -> None:
    stage = AggregateStage(["k"], INT_AGGS)
    assert stage.process(int_batch([], [], [], [])) == []
    assert stage.current() == {} and stage.stats()["groups"] == 0


@pytest.mark.parametrize("kind", ["int", "str"])
def test_emptied_groups_give_back_their_ids(kind: str) -> None:
    """Groups come and go with ever new keys: state stays bounded by the live groups."""
    group_col = "k" if kind == "int" else "name"
    stage = AggregateStage([group_col], INT_AGGS)
    for b in range(30):
        keys = list(range(b * 100, b * 100 + 100))
        rows = [{group_col: k if kind == "int" else f"key{k}", "v": k, "w": 0.0} for k in keys]
        ins = make_batch({group_col: kind}, rows, [1] * 100, [b] * 100)
        dels = make_batch({group_col: kind}, rows, [-1] * 100, [b] * 100)
        assert len(emitted(stage.process(ins))) == 100
        assert len(emitted(stage.process(dels))) == 100
    assert stage.current() == {} and stage.stats()["groups"] == 0
    assert stage._groups.bump <= 100  # white box: gids were reused, not leaked


def test_a_stage_loaded_from_snapshot_bytes_continues_like_the_original() -> None:
    """What the runtime does: a fresh stage of the same configuration loads the snapshot."""
    rng = np.random.default_rng(3)
    stream = build_stream(
        [tuple(int(x) for x in rng.integers(0, 9, 5)) for _ in range(400)], MULTI_KEYS
    )
    batches = split(stream, list(range(0, 400, 37)), list(range(len(stream))))
    stage = AggregateStage(["s", "k"], ALL_AGGS)
    for rows, signs, t in batches[:5]:
        stage.process(make_batch({"s": "str", "k": "int"}, rows, signs, t))
    copy = AggregateStage(["s", "k"], ALL_AGGS)
    copy.load_snapshot(stage.snapshot())
    for rows, signs, t in batches[5:]:
        batch = make_batch({"s": "str", "k": "int"}, rows, signs, t)
        assert emitted(copy.process(batch)) == emitted(stage.process(batch))
    assert copy.current() == stage.current()
