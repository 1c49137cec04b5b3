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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle.naive import naive_join, naive_window_deltas, result_counter

from processors.core.batch import Batch
from processors.core.ordering.config import OrderingConfig
from processors.core.plan import Window
from processors.stages.mjoin_stage import MJoinStage
from processors.stages.query_stages import RowIds
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
) -> list[Batch]:
    n = len(streams)
    names = [f"s{i}" for i in range(n)]
    join = MJoinStage(names, preds, config)
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
