"""Windows and MJoin against the independent naive oracle (tests/oracle/naive.py).

Random streams over tiny domains (so that duplicates and matches are common), 2 to 6 inputs,
star, chain, cyclic and natural join graphs, ROWS / RANGE / PARTITION BY windows (or none), fed
in random batches and interleavings. The engine's multiset of signed results must equal the
oracle's: the oracle windows the raw streams and joins them by nested loops, in the order that
docs/windows-and-joins.md defines.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle.naive import naive_join, naive_window_deltas, result_counter

from processors.core.batch import ROW_ID, Batch
from processors.core.ordering.config import OrderingConfig
from processors.core.plan import Window
from processors.stages.mjoin_stage import MJoinStage
from processors.stages.shape_stages import RowIds
from processors.stages.window_stage import WindowStage

GRAPHS = ("star", "chain", "cycle", "natural")


def predicates(graph: str, n: int) -> list[tuple[tuple[int, str], tuple[int, str]]]:
    if graph == "star":  # the centre joins each leaf on its own attribute
        return [((0, "abc"[(i - 1) % 3]), (i, "a")) for i in range(1, n)]
    if graph == "natural":
        return [((i, "a"), (i + 1, "a")) for i in range(n - 1)]
    chain = [((i, "b"), (i + 1, "a")) for i in range(n - 1)]
    if graph == "cycle" and n >= 3:
        chain.append(((n - 1, "b"), (0, "c")))
    return chain


def random_window(rng: np.random.Generator, unbounded: bool) -> Window | None:
    """A random window; None (no window: tuples stay forever) only where ``unbounded``."""
    kind = rng.integers(0, 4 if unbounded else 3)
    if kind == 0:
        return Window("x", "rows", int(rng.integers(1, 6)))
    if kind == 1:
        return Window("x", "range", int(rng.integers(1, 25)))
    if kind == 2:
        return Window("x", "rows", int(rng.integers(1, 3)), ("a",))
    return None


def raw_stream(rng: np.random.Generator, n: int, domain: int) -> dict[str, np.ndarray]:
    ts = np.sort(rng.integers(0, 60, n)).astype(np.int64)
    return {c: rng.integers(0, domain, n).astype(np.int64) for c in "abc"} | {"ts": ts}


def oracle_deltas(stream: dict[str, np.ndarray], window: Window | None) -> list[dict]:
    rows = [
        {"a": int(a), "b": int(b), "c": int(c), "ts": int(t)}
        for a, b, c, t in zip(stream["a"], stream["b"], stream["c"], stream["ts"], strict=True)
    ]
    if window is None:
        return [
            {"sign": 1, "ts": r["ts"], "rid": k, "row": {c: r[c] for c in "abc"}}
            for k, r in enumerate(rows)
        ]
    deltas, late = naive_window_deltas(rows, window.kind, window.size, window.partition_by)
    assert not late
    return deltas


def engine_results(
    streams: list[dict[str, np.ndarray]],
    windows: list[Window | None],
    preds: list,
    rng: np.random.Generator,
    config: OrderingConfig,
    join: MJoinStage | None = None,
) -> list[Batch]:
    """Feed the streams' window deltas to ``join`` (an MJoin by default) in random batches
    and interleavings; every result batch."""
    n = len(streams)
    join = join or MJoinStage([f"s{i}" for i in range(n)], preds, config)
    fronts = [WindowStage(w) if w is not None else RowIds() for w in windows]
    pos = [0] * n
    out: list[Batch] = []
    while any(pos[i] < len(streams[i]["ts"]) for i in range(n)):
        i = int(rng.integers(0, n))
        lo = pos[i]
        hi = min(lo + int(rng.integers(1, 6)), len(streams[i]["ts"]))
        if lo >= hi:
            continue
        s = streams[i]
        batch = Batch.inserts({c: s[c][lo:hi] for c in "abc"}, s["ts"][lo:hi])
        pos[i] = hi
        for deltas in fronts[i].process(batch):
            join.push(i, deltas)
        out += join.release()
    for i, front in enumerate(fronts):
        if isinstance(front, WindowStage):
            for deltas in front.flush():
                join.push(i, deltas)
    out += join.flush()
    assert not join.take_dead_letters()
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 6),
    graph=st.sampled_from(GRAPHS),
    algorithm=st.sampled_from(["agreedy", "sweep", "independent", "localswaps", "fixed"]),
)
def test_windowed_mjoin_equals_the_naive_join(
    seed: int, n: int, graph: str, algorithm: str
) -> None:
    rng = np.random.default_rng(seed)
    # results grow like (window / domain)^n: keep them in the thousands at most
    size = int(rng.integers(5, 30 if n <= 3 else 16))
    domain = int(rng.integers(2, 5) if n <= 3 else rng.integers(3, 6))
    streams = [raw_stream(rng, size, domain) for _ in range(n)]
    windows = [random_window(rng, unbounded=n <= 3) for _ in range(n)]
    preds = predicates(graph, n)
    config = OrderingConfig(
        algorithm, profile_probability=float(rng.choice([0.0, 0.3, 1.0])), seed=seed,
        min_profile_tuples=1, window_tuples=16,
    )  # fmt: skip
    expected = naive_join(
        [oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)], preds
    )
    batches = engine_results(streams, windows, preds, rng, config)
    got = result_counter(batches, [["a", "b", "c"]] * n, [f"s{i}." for i in range(n)])
    assert got == expected, _diff(got, expected)


def _diff(got: Counter, want: Counter) -> str:
    missing, extra = want - got, got - want
    return (
        f"missing {sum(missing.values())}: {list(missing.items())[:3]}; "
        f"extra {sum(extra.values())}: {list(extra.items())[:3]}"
    )


@pytest.mark.slow  # 29-41 s measured
def test_larger_windows_equal_the_naive_join() -> None:
    """Bigger windows than the property test (hash tables grow, slots are reused); kept to three
    inputs so that the nested-loop oracle stays fast."""
    rng = np.random.default_rng(7)
    n = 3
    streams = []
    for _ in range(n):
        s = raw_stream(rng, 500, 40)
        s["ts"] = np.sort(rng.integers(0, 2000, 500)).astype(np.int64)
        streams.append(s)
    windows: list[Window | None] = [
        Window("x", "rows", 60),
        Window("x", "range", 250),
        Window("x", "rows", 3, ("a",)),
    ]
    preds = predicates("natural", n)
    deltas = [oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)]
    expected = naive_join(deltas, preds)
    batches = engine_results(streams, windows, preds, rng, OrderingConfig(profile_probability=0.2))
    got = result_counter(batches, [["a", "b", "c"]] * n, [f"s{i}." for i in range(n)])
    assert sum(expected.values()) > 1000
    assert got == expected, _diff(got, expected)


# -- equality classes with several columns of one input ----------------------------------------

Predicates = list[tuple[tuple[int, str], tuple[int, str]]]


def class_predicates(graph: str, n: int, rng: np.random.Generator) -> Predicates:
    """Join graphs whose equality classes hold two or more columns of one input, or span three
    or more inputs; the remaining inputs hang on in a chain so every graph is connected."""

    def chain_from(first: int, col: str = "b") -> Predicates:
        return [((i, col), (i + 1, "a")) for i in range(first, n - 1)]

    if graph == "root_two":  # r.a = s.a and r.c = s.a: r.a = r.c must hold as well
        return [((0, "a"), (1, "a")), ((0, "c"), (1, "a")), *chain_from(1)]
    if graph == "leaf_two":  # s has two columns equal to r.a
        return [((0, "a"), (1, "a")), ((0, "a"), (1, "c")), *chain_from(1)]
    if graph == "all_three":  # all of r's columns equal s.a
        return [((0, "a"), (1, "a")), ((0, "b"), (1, "a")), ((0, "c"), (1, "a")), *chain_from(1)]
    if graph == "via_child":  # s.b = t.a and s.c = t.a: s is reached from r on another class
        preds = [((0, "a"), (1, "a")), ((1, "b"), (2, "a")), ((1, "c"), (2, "a"))]
        return preds + [((i, "b"), (i + 1, "a")) for i in range(2, n - 1)]
    if graph == "span3":  # one class over three inputs, with two columns of the middle one
        preds = [((0, "a"), (1, "a")), ((2, "b"), (1, "c")), ((2, "b"), (0, "a"))]
        return preds + [((i, "c"), (i + 1, "a")) for i in range(2, n - 1)]
    # random: a random spanning tree on random columns, then a few more random equalities
    preds = []
    for i in range(1, n):
        j = int(rng.integers(0, i))
        preds.append(((j, str(rng.choice(list("abc")))), (i, str(rng.choice(list("abc"))))))
    for _ in range(int(rng.integers(1, 4))):
        i, j = (int(x) for x in rng.choice(n, 2, replace=False))
        preds.append(((i, str(rng.choice(list("abc")))), (j, str(rng.choice(list("abc"))))))
    return preds


CLASS_GRAPHS = ("root_two", "leaf_two", "all_three", "via_child", "span3", "random")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 5),
    graph=st.sampled_from(CLASS_GRAPHS),
    algorithm=st.sampled_from(["agreedy", "sweep", "independent", "localswaps", "fixed"]),
)
def test_equality_classes_with_several_columns_of_one_input(
    seed: int, n: int, graph: str, algorithm: str
) -> None:
    """Every equality a class implies holds in every result, whatever the arrival order, the
    pipeline (the input whose delta arrives) and the join order."""
    if graph in ("via_child", "span3"):
        n = max(n, 3)
    rng = np.random.default_rng(seed)
    size = int(rng.integers(5, 30 if n <= 3 else 16))
    domain = int(rng.integers(2, 4))  # tiny: columns of one tuple often agree, often not
    streams = [raw_stream(rng, size, domain) for _ in range(n)]
    windows = [random_window(rng, unbounded=n <= 3) for _ in range(n)]
    preds = class_predicates(graph, n, rng)
    config = OrderingConfig(
        algorithm, profile_probability=float(rng.choice([0.0, 0.3, 1.0])), seed=seed,
        min_profile_tuples=1, window_tuples=16,
    )  # fmt: skip
    expected = naive_join(
        [oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)], preds
    )
    batches = engine_results(streams, windows, preds, rng, config)
    got = result_counter(batches, [["a", "b", "c"]] * n, [f"s{i}." for i in range(n)])
    assert got == expected, _diff(got, expected)


@pytest.mark.parametrize("first", [0, 1])
def test_a_root_tuple_whose_own_columns_differ_joins_nothing(first: int) -> None:
    """query.join("r.a", "s.k").join("r.c", "s.k"): r(a=1, c=2) never meets s(k=1) or s(k=2),
    whichever arrives first."""
    preds = [((0, "a"), (1, "k")), ((0, "c"), (1, "k"))]
    join = MJoinStage(["r", "s"], preds)
    rid = np.arange(3, dtype=np.int64)
    r = Batch.inserts({ROW_ID: rid[:2], "a": np.array([1, 3]), "c": np.array([2, 3])})
    s = Batch.inserts({ROW_ID: rid, "k": np.array([1, 2, 3])})
    inputs = [r, s]
    join.push(first, inputs[first])
    out = join.flush()
    join.push(1 - first, inputs[1 - first])
    out += join.flush()
    rows = [
        row
        for b in out
        for row in zip(*(b.columns[c].tolist() for c in ("r.a", "r.c", "s.k")), strict=True)
    ]
    assert rows == [(3, 3, 3)]
