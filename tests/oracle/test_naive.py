"""The naive oracles on hand-worked examples, and the two join oracles against each other."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle.naive import (
    batches_to_rows,
    naive_join,
    naive_join_by_difference,
    naive_join_by_difference_steps,
    naive_join_steps,
    naive_window_deltas,
    result_counter,
)
from processors.core.batch import ROW_ID, Batch, VarColumn


def d(sign: int, ts: int, rid: int, **row: object) -> dict:
    """One delta in the oracle's format."""
    return {"sign": sign, "ts": ts, "rid": rid, "row": row}


def vals(**row: object) -> tuple[tuple[str, object], ...]:
    """One input's part of a join result key."""
    return tuple(sorted(row.items()))


# -- windows -----------------------------------------------------------------------------------


def test_rows_window() -> None:
    rows = [{"ts": 1, "v": 1}, {"ts": 2, "v": 2}, {"ts": 3, "v": 3}, {"ts": 5, "v": 4}]
    deltas, late = naive_window_deltas(rows, "rows", 2)
    # ROWS 2 holds the last two tuples:
    # v1 enters (rid 0); v2 enters (rid 1); v3 would be the third: v1 leaves at ts 3, v3 enters
    # (rid 2); v4 would be the third: v2 leaves at ts 5, v4 enters (rid 3)
    assert deltas == [
        d(1, 1, 0, v=1),
        d(1, 2, 1, v=2),
        d(-1, 3, 0, v=1),
        d(1, 3, 2, v=3),
        d(-1, 5, 1, v=2),
        d(1, 5, 3, v=4),
    ]
    assert late == []


def test_rows_window_flush_emits_nothing_more() -> None:
    deltas, _ = naive_window_deltas([{"ts": 7, "v": 1}], "rows", 1)
    assert deltas == [d(1, 7, 0, v=1)]


def test_partition_by_rows_window() -> None:
    keys_ts = [("x", 1), ("y", 2), ("x", 3), ("x", 4), ("y", 5), ("y", 6), ("x", 7)]
    rows = [{"ts": t, "k": k, "i": n} for n, (k, t) in enumerate(keys_ts)]
    deltas, late = naive_window_deltas(rows, "rows", 2, partition_by=("k",))
    # x@1 -> +rid0; y@2 -> +rid1; x@3 -> +rid2 (x holds rid0, rid2)
    # x@4: x is full -> -rid0 at 4, +rid3 (x: rid2, rid3)
    # y@5 -> +rid4 (y: rid1, rid4); y@6: -rid1 at 6, +rid5; x@7: -rid2 at 7, +rid6
    assert deltas == [
        d(1, 1, 0, k="x", i=0),
        d(1, 2, 1, k="y", i=1),
        d(1, 3, 2, k="x", i=2),
        d(-1, 4, 0, k="x", i=0),
        d(1, 4, 3, k="x", i=3),
        d(1, 5, 4, k="y", i=4),
        d(-1, 6, 1, k="y", i=1),
        d(1, 6, 5, k="y", i=5),
        d(-1, 7, 2, k="x", i=2),
        d(1, 7, 6, k="x", i=6),
    ]
    assert late == []


def test_partition_by_two_columns() -> None:
    rows = [
        {"ts": 1, "a": 1, "b": 1},
        {"ts": 2, "a": 1, "b": 2},  # another partition (a=1, b=2)
        {"ts": 3, "a": 1, "b": 1},  # (1, 1) is full with ROWS 1: rid0 leaves
    ]
    deltas, _ = naive_window_deltas(rows, "rows", 1, partition_by=("a", "b"))
    assert deltas == [
        d(1, 1, 0, a=1, b=1),
        d(1, 2, 1, a=1, b=2),
        d(-1, 3, 0, a=1, b=1),
        d(1, 3, 2, a=1, b=1),
    ]


def test_range_window_expires_at_exactly_ts_plus_size() -> None:
    rows = [{"ts": t, "n": t} for t in (0, 5, 10, 12, 25, 26)]
    deltas, late = naive_window_deltas(rows, "range", 10)
    # 0 -> +rid0; 5 -> +rid1
    # 10: rid0 expires at 0 + 10 = 10 <= 10 -> -rid0 at 10, then +rid2
    # 12: rid1 expires at 15 > 12 -> +rid3
    # 25: rid1 (15), rid2 (20), rid3 (22) are due, oldest first -> deletes at 15, 20, 22; +rid4
    # 26: rid4 expires at 35 -> +rid5; flush: nothing (time has not passed)
    assert deltas == [
        d(1, 0, 0, n=0),
        d(1, 5, 1, n=5),
        d(-1, 10, 0, n=0),
        d(1, 10, 2, n=10),
        d(1, 12, 3, n=12),
        d(-1, 15, 1, n=5),
        d(-1, 20, 2, n=10),
        d(-1, 22, 3, n=12),
        d(1, 25, 4, n=25),
        d(1, 26, 5, n=26),
    ]
    assert late == []


def test_range_window_equal_expiry_times_by_row_id() -> None:
    rows = [{"ts": 1, "n": "p"}, {"ts": 1, "n": "q"}, {"ts": 3, "n": "r"}, {"ts": 6, "n": "s"}]
    deltas, _ = naive_window_deltas(rows, "range", 5)
    # p and q both expire at 6: rid 0 before rid 1; r expires at 8 and stays
    assert deltas == [
        d(1, 1, 0, n="p"),
        d(1, 1, 1, n="q"),
        d(1, 3, 2, n="r"),
        d(-1, 6, 0, n="p"),
        d(-1, 6, 1, n="q"),
        d(1, 6, 3, n="s"),
    ]


def test_lateness_buffer_and_late_rows() -> None:
    arrivals = [("a", 10), ("b", 12), ("c", 8), ("d", 16), ("e", 9)]
    arrivals += [("f", 11), ("g", 20), ("h", 14), ("i", 30), ("j", 13)]
    rows = [{"ts": t, "n": n} for n, t in arrivals]
    deltas, late = naive_window_deltas(rows, "rows", 100, lateness_ms=5)
    # L = 5; admit buffered tuples with ts <= max_ts - 5, in ts order
    # a@10 max 10 (<= 5: none); b@12 max 12 (<= 7: none); c@8 (<= 7: none)
    # d@16 max 16, <= 11: c@8, a@10 -> rid0, rid1; last admitted 10
    # e@9 < 10: late
    # f@11 >= 10: buffered, <= 11: f -> rid2; last 11
    # g@20 max 20, <= 15: b@12 -> rid3; last 12
    # h@14 >= 12, <= 15: h -> rid4; last 14
    # i@30 max 30, <= 25: d@16, g@20 -> rid5, rid6; last 20
    # j@13 < 20: late
    # flush: i@30 -> rid7
    assert deltas == [
        d(1, 8, 0, n="c"),
        d(1, 10, 1, n="a"),
        d(1, 11, 2, n="f"),
        d(1, 12, 3, n="b"),
        d(1, 14, 4, n="h"),
        d(1, 16, 5, n="d"),
        d(1, 20, 6, n="g"),
        d(1, 30, 7, n="i"),
    ]
    assert late == [{"ts": 9, "n": "e"}, {"ts": 13, "n": "j"}]


def test_lateness_ties_in_arrival_order_and_equal_ts_not_late() -> None:
    arrivals = [("x1", 5), ("x2", 3), ("x3", 3), ("x4", 9), ("x5", 5), ("x6", 4)]
    rows = [{"t": t, "n": n} for n, t in arrivals]
    deltas, late = naive_window_deltas(rows, "rows", 10, lateness_ms=2, ts_field="t")
    # L = 2: nothing is admitted until x4@9 (<= 7): x2@3, x3@3 (arrival order), x1@5; last 5
    # x5@5 is not below 5: buffered and admitted at once (5 <= 7); x6@4 < 5: late
    # flush: x4@9
    assert deltas == [
        d(1, 3, 0, n="x2"),
        d(1, 3, 1, n="x3"),
        d(1, 5, 2, n="x1"),
        d(1, 5, 3, n="x5"),
        d(1, 9, 4, n="x4"),
    ]
    assert late == [{"t": 4, "n": "x6"}]


def test_range_expiry_driven_by_admitted_tuples_only() -> None:
    rows = [{"ts": 0, "n": "a"}, {"ts": 8, "n": "b"}]
    deltas, late = naive_window_deltas(rows, "range", 5, lateness_ms=10)
    # nothing is admitted before flush (8 - 10 < 0); flush admits a@0, then b@8, which shows
    # that a's expiry time 5 has passed: -a at 5 before +b; nothing after
    assert deltas == [d(1, 0, 0, n="a"), d(-1, 5, 0, n="a"), d(1, 8, 1, n="b")]
    assert late == []


def test_lateness_zero_out_of_order_is_late() -> None:
    rows = [{"ts": 5, "n": 1}, {"ts": 4, "n": 2}, {"ts": 5, "n": 3}]
    deltas, late = naive_window_deltas(rows, "range", 100)
    assert deltas == [d(1, 5, 0, n=1), d(1, 5, 1, n=3)]
    assert late == [{"ts": 4, "n": 2}]


def test_window_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        naive_window_deltas([], "tumbling", 1)
    with pytest.raises(ValueError):
        naive_window_deltas([], "rows", 0)
    with pytest.raises(ValueError):
        naive_window_deltas([], "range", 5, partition_by=("k",))


window_rows = st.lists(
    st.fixed_dictionaries({"ts": st.integers(0, 20), "k": st.integers(0, 2)}), max_size=25
)


@settings(max_examples=150, deadline=None)
@given(
    rows=window_rows,
    kind=st.sampled_from(["rows", "range"]),
    size=st.integers(1, 6),
    partitioned=st.booleans(),
    lateness=st.integers(0, 6),
)
def test_window_invariants(
    rows: list[dict], kind: str, size: int, partitioned: bool, lateness: int
) -> None:
    """Properties the doc states, checked on the oracle's own output."""
    partition_by = ("k",) if partitioned and kind == "rows" else ()
    deltas, late = naive_window_deltas(rows, kind, size, partition_by, lateness)
    inserts = [x for x in deltas if x["sign"] == 1]
    # every tuple either enters once or is late; rids count from 0 in admission order
    assert len(inserts) + len(late) == len(rows)
    assert [x["rid"] for x in inserts] == list(range(len(inserts)))
    # non-decreasing timestamps
    assert all(a["ts"] <= b["ts"] for a, b in zip(deltas, deltas[1:], strict=False))
    live: dict[int, dict] = {}
    entered: dict[int, int] = {}
    for x in deltas:
        if x["sign"] == 1:
            live[x["rid"]] = x["row"]
            entered[x["rid"]] = x["ts"]
            if kind == "rows":
                same = [r for r in live.values() if r["k"] == x["row"]["k"] or not partition_by]
                assert len(same) <= size
            else:
                assert all(x["ts"] - size < entered[r] <= x["ts"] for r in live)
        else:
            assert live.pop(x["rid"]) == x["row"]  # a delete names a live tuple, same values
            if kind == "range":
                assert x["ts"] == entered[x["rid"]] + size


# -- joins -------------------------------------------------------------------------------------


def test_two_way_join_with_duplicates_and_deletes() -> None:
    r = [d(1, 1, 0, k=1, a="x"), d(1, 3, 1, k=1, a="x"), d(-1, 5, 0, k=1, a="x")]
    r += [d(1, 7, 2, k=1, a="x")]
    s = [d(1, 2, 0, k=1, b=10), d(1, 3, 1, k=2, b=20), d(1, 5, 2, k=1, b=10)]
    s += [d(1, 6, 3, k=1, b=10)]
    preds = [((0, "k"), (1, "k"))]
    # order (ts, input, position):
    # (1,r) +r0: S empty                                        R = {r0}
    # (2,s) +s0 k1: r0 matches -> +1 at 2                       S = {s0}
    # (3,r) +r1 k1: s0 -> +1 at 3                               R = {r0, r1}
    # (3,s) +s1 k2: no k2 in R                                  S = {s0, s1}
    # (5,r) -r0: removed, joins s0 -> -1 at 5                   R = {r1}
    # (5,s) +s2 k1: r1 -> +1 at 5                               S = {s0, s1, s2}
    # (6,s) +s3 k1: r1 -> +1 at 6                               S = {s0, s1, s2, s3}
    # (7,r) +r2 k1: s0, s2, s3 -> 3 x +1 at 7
    v = (vals(k=1, a="x"), vals(k=1, b=10))
    expected = Counter({(1, 2, v): 1, (1, 3, v): 1, (-1, 5, v): 1, (1, 5, v): 1})
    expected += Counter({(1, 6, v): 1, (1, 7, v): 3})
    assert naive_join([r, s], preds) == expected
    assert naive_join_by_difference([r, s], preds) == expected


def test_three_way_join_with_duplicates_and_deletes() -> None:
    a = [d(1, 1, 0, k=1), d(1, 4, 1, k=1), d(1, 4, 2, k=2), d(-1, 6, 0, k=1)]
    b = [d(1, 2, 0, k=1, m=7), d(1, 2, 1, k=1, m=7), d(1, 2, 2, k=1, m=8)]
    c = [d(1, 3, 0, m=7), d(-1, 5, 0, m=7), d(1, 6, 1, m=7)]
    preds = [((0, "k"), (1, "k")), ((1, "m"), (2, "m"))]
    # (1,A) +a0: B empty.  (2,B) +b0, +b1, +b2: C empty.
    # (3,C) +c0 m7: A x B matching k and m=7: a0 x {b0, b1} -> 2 x +1 at 3 (b2 has m8)
    # (4,A) +a1 k1: B x C: {b0, b1} x c0 -> 2 x +1 at 4;  +a2 k2: no k2 in B
    # (5,C) -c0: A x B = {a0, a1} x {b0, b1} -> 4 x -1 at 5; C empty
    # (6,A) -a0: C is empty, nothing; A = {a1, a2}
    # (6,C) +c1 m7: a1 x {b0, b1} -> 2 x +1 at 6
    v = (vals(k=1), vals(k=1, m=7), vals(m=7))
    expected = Counter({(1, 3, v): 2, (1, 4, v): 2, (-1, 5, v): 4, (1, 6, v): 2})
    assert naive_join([a, b, c], preds) == expected
    assert naive_join_by_difference([a, b, c], preds) == expected


def test_join_checks_every_predicate_literally() -> None:
    """r.a = s.k and r.c = s.k: a result needs r.a = r.c, whichever side arrives first."""
    r = [d(1, 1, 0, a=1, c=2), d(1, 1, 1, a=3, c=3), d(1, 4, 2, a=2, c=2)]
    s = [d(1, 0, 0, k=1), d(1, 2, 1, k=2), d(1, 3, 2, k=3)]
    preds = [((0, "a"), (1, "k")), ((0, "c"), (1, "k"))]
    # r0 (1 != 2) never joins; r1 meets s2 when s2 arrives at 3; r2 meets s1 at 4
    expected = Counter(
        {(1, 3, (vals(a=3, c=3), vals(k=3))): 1, (1, 4, (vals(a=2, c=2), vals(k=2))): 1}
    )
    assert naive_join([r, s], preds) == expected
    assert naive_join_by_difference([r, s], preds) == expected
    # three inputs in one class, one of them with two columns: t.x = r.a = t.y
    t = [d(1, 5, 0, x=3, y=3), d(1, 5, 1, x=3, y=1)]
    preds3 = [((0, "a"), (1, "k")), ((2, "x"), (0, "a")), ((2, "y"), (1, "k"))]
    got = naive_join([r, s, t], preds3)
    v = (vals(a=3, c=3), vals(k=3), vals(x=3, y=3))
    assert got == Counter({(1, 5, v): 1})


def test_join_rejects_delete_of_unknown_row() -> None:
    with pytest.raises(ValueError):
        naive_join([[d(-1, 1, 0, k=1)], []], [((0, "k"), (1, "k"))])
    with pytest.raises(ValueError):
        naive_join([[d(1, 1, 0, k=1), d(-1, 2, 0, k=2)], []], [((0, "k"), (1, "k"))])


def test_windows_then_join_end_to_end() -> None:
    r_rows = [{"ts": 1, "k": 1}, {"ts": 2, "k": 1}, {"ts": 4, "k": 2}]
    s_rows = [{"ts": 2, "k": 1, "b": 5}, {"ts": 3, "k": 2, "b": 6}]
    r, _ = naive_window_deltas(r_rows, "rows", 1)
    s, _ = naive_window_deltas(s_rows, "range", 10)
    # r: +r0@1, -r0@2, +r1@2, -r1@4, +r2@4;  s: +s0@2, +s1@3
    # (1,r) +r0.  (2,r) -r0: S empty.  (2,r) +r1.  (2,s) +s0 k1: r1 -> +1 at 2
    # (3,s) +s1 k2: R = {r1}, no.  (4,r) -r1: s0 -> -1 at 4.  (4,r) +r2 k2: s1 -> +1 at 4
    got = naive_join([r, s], [((0, "k"), (1, "k"))])
    assert got == Counter(
        {
            (1, 2, (vals(k=1), vals(k=1, b=5))): 1,
            (-1, 4, (vals(k=1), vals(k=1, b=5))): 1,
            (1, 4, (vals(k=2), vals(k=2, b=6))): 1,
        }
    )


@st.composite
def join_case(draw: st.DrawFn) -> tuple[list[list[dict]], list]:
    n = draw(st.integers(1, 3))
    inputs = []
    for _ in range(n):
        rows = draw(
            st.lists(
                st.fixed_dictionaries(
                    {"ts": st.integers(0, 6), "k": st.integers(0, 1), "v": st.integers(0, 1)}
                ),
                max_size=6,
            )
        )
        kind = draw(st.sampled_from(["rows", "range"]))
        size = draw(st.integers(1, 3))
        lateness = draw(st.integers(0, 3))
        deltas, _ = naive_window_deltas(rows, kind, size, (), lateness)
        inputs.append(deltas)
    sides = st.tuples(st.integers(0, n - 1), st.sampled_from(["k", "v"]))
    preds = draw(st.lists(st.tuples(sides, sides), max_size=3))
    return inputs, preds


@settings(max_examples=200, deadline=None)
@given(case=join_case())
def test_join_oracles_agree_per_delta(case: tuple[list[list[dict]], list]) -> None:
    inputs, preds = case
    by_loops = naive_join_steps(inputs, preds)
    by_difference = naive_join_by_difference_steps(inputs, preds)
    assert by_loops == by_difference
    # each delta's results carry its sign and timestamp only
    for step in by_loops:
        assert len({(sign, ts) for sign, ts, _ in step}) <= 1


# -- columnar conversion -----------------------------------------------------------------------


def test_batches_to_rows() -> None:
    batch = Batch(
        {
            "k": np.array([1, 2], np.int64),
            "name": VarColumn.from_values(["a", "日本"]),
            ROW_ID: np.array([0, 0], np.int64),
        },
        np.array([1, -1], np.int8),
        np.array([10, 20], np.int64),
    )
    plain = Batch.inserts({"x": np.array([1.5])}, np.array([3]))
    assert batches_to_rows([batch, plain]) == [
        d(1, 10, 0, k=1, name="a"),
        d(-1, 20, 0, k=2, name="日本"),
        {"sign": 1, "ts": 3, "rid": None, "row": {"x": 1.5}},
    ]


def test_result_counter_matches_oracle_keys() -> None:
    out = Batch(
        {
            "r.k": np.array([1, 1, 1], np.int64),
            "r.a": VarColumn.from_values(["x", "x", "x"]),
            "r.__rid": np.array([0, 1, 0], np.int64),
            "s.k": np.array([1, 1, 1], np.int64),
            "s.b": np.array([10, 10, 10], np.int64),
        },
        np.array([1, 1, -1], np.int8),
        np.array([2, 3, 5], np.int64),
    )
    got = result_counter([out], [["k", "a", ROW_ID], ["k", "b"]], ["r.", "s."])
    v = (vals(k=1, a="x"), vals(k=1, b=10))
    assert got == Counter({(1, 2, v): 1, (1, 3, v): 1, (-1, 5, v): 1})
    assert result_counter([], [["k"], ["k"]], ["r.", "s."]) == Counter()
