"""Binary join trees (Ayad & Naughton, Fig. 3) against the naive oracle and against the MJoin.

Every tree over the inputs (Cartesian products included) must give the MJoin's results: the
same multiset of signed rows in every released batch, which the oracle checks independently.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle.naive import naive_join, result_counter
from test_mjoin_differential import (
    CLASS_GRAPHS,
    GRAPHS,
    class_predicates,
    engine_results,
    oracle_deltas,
    predicates,
    random_window,
    raw_stream,
)

from processors.core.batch import Batch
from processors.core.cost.shapes import trees
from processors.core.join_tree import JoinTreeError, check_join_tree, parse_join_tree, tree_text
from processors.core.ordering.config import OrderingConfig
from processors.core.state_codec import SnapshotError
from processors.stages.join_tree_stage import JoinTreeStage
from processors.stages.mjoin_stage import MJoinStage
from processors.stages.shape_stages import RowIds
from processors.stages.window_stage import WindowStage


def random_tree(names: list[str], rng: np.random.Generator):  # type: ignore[no-untyped-def]
    """One of every unordered binary tree over ``names``, mirrored at random."""
    shapes = list(trees(names))
    tree = _as_tuple(shapes[int(rng.integers(0, len(shapes)))])
    return _mirror(tree, rng)


def _as_tuple(t):  # type: ignore[no-untyped-def]
    return t.stream if hasattr(t, "stream") else (_as_tuple(t.left), _as_tuple(t.right))


def _mirror(t, rng):  # type: ignore[no-untyped-def]
    if isinstance(t, str):
        return t
    a, b = _mirror(t[0], rng), _mirror(t[1], rng)
    return (b, a) if rng.integers(0, 2) else (a, b)


def _rows(batch: Batch) -> Counter:
    cols = sorted(batch.columns)
    values = [batch.columns[c].tolist() for c in cols]
    return Counter(zip(batch.sign.tolist(), batch.ts.tolist(), *values, strict=True))


def _run_both(seed: int, n: int, preds, windows, streams, rng):  # type: ignore[no-untyped-def]
    names = [f"s{i}" for i in range(n)]
    tree = random_tree(names, rng)
    config = OrderingConfig(profile_probability=0.3, seed=seed, min_profile_tuples=1)
    # the same arrival order for both: the same rng state
    state = rng.bit_generator.state
    got = engine_results(streams, windows, preds, rng, config, JoinTreeStage(names, preds, tree))
    rng.bit_generator.state = state
    want = engine_results(streams, windows, preds, rng, config, MJoinStage(names, preds, config))
    return tree, got, want


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 5),
    graph=st.sampled_from([*GRAPHS, *CLASS_GRAPHS]),
)
def test_every_join_tree_equals_the_mjoin_and_the_naive_join(seed: int, n: int, graph: str) -> None:
    if graph in ("via_child", "span3"):
        n = max(n, 3)
    rng = np.random.default_rng(seed)
    size = int(rng.integers(5, 30 if n <= 3 else 16))
    domain = int(rng.integers(2, 5) if n <= 3 else rng.integers(3, 6))
    streams = [raw_stream(rng, size, domain) for _ in range(n)]
    windows = [random_window(rng, unbounded=n <= 3) for _ in range(n)]
    preds = predicates(graph, n) if graph in GRAPHS else class_predicates(graph, n, rng)
    tree, got, want = _run_both(seed, n, preds, windows, streams, rng)
    assert [_rows(b) for b in got] == [_rows(b) for b in want], tree_text(tree)
    expected = naive_join(
        [oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)], preds
    )
    assert result_counter(got, [["a", "b", "c"]] * n, [f"s{i}." for i in range(n)]) == expected


def test_a_cartesian_product_in_the_tree() -> None:
    """Example 1's plan (c): (A x C) joined with B, on A.a = B.a and B.b = C.b."""
    preds = [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))]
    names = ["A", "B", "C"]
    join = JoinTreeStage(names, preds, (("A", "C"), "B"))
    rng = np.random.default_rng(3)
    streams = [raw_stream(rng, 25, 3) for _ in range(3)]
    windows = [random_window(rng, unbounded=False) for _ in range(3)]
    got = engine_results(streams, windows, preds, rng, OrderingConfig(), join)
    expected = naive_join(
        [oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)], preds
    )
    assert sum(expected.values()) > 0
    assert result_counter(got, [["a", "b", "c"]] * 3, ["A.", "B.", "C."]) == expected
    assert join.stats()["intermediate_tuples"]  # (A x C) is materialized


@pytest.mark.parametrize("fraction", [0.2, 0.5, 0.8])
def test_a_restored_tree_continues_with_the_same_results(fraction: float) -> None:
    """Snapshot mid-stream, load into a fresh stage: the intermediate relations are rebuilt
    from the windows, and the rest of the results are those of the stage that kept running."""
    preds = [((0, "b"), (1, "a")), ((1, "b"), (2, "a")), ((2, "b"), (3, "a"))]
    names = ["s0", "s1", "s2", "s3"]
    tree = (("s0", "s1"), ("s2", "s3"))
    rng = np.random.default_rng(int(fraction * 10))
    streams = [raw_stream(rng, 30, 3) for _ in range(4)]
    windows = [random_window(rng, unbounded=False) for _ in range(4)]
    fronts = [WindowStage(w) if w is not None else RowIds() for w in windows]
    deltas = []  # (input, batch) in one arrival order
    for i, s in enumerate(streams):
        for lo in range(0, 30, 3):
            b = Batch.inserts({c: s[c][lo : lo + 3] for c in "abc"}, s["ts"][lo : lo + 3])
            deltas += [(i, d) for d in fronts[i].process(b)]
    deltas.sort(key=lambda x: int(x[1].ts[0]))
    cut, mark = int(len(deltas) * fraction), 0
    kept, other = JoinTreeStage(names, preds, tree), None
    out_kept: list[Batch] = []
    out_restored: list[Batch] = []
    for k, (i, d) in enumerate(deltas):
        kept.push(i, d)
        out_kept += kept.release()
        if k == cut:
            other = JoinTreeStage(names, preds, tree)
            other.load_snapshot(kept.snapshot())
            mark = len(out_kept)
        elif other is not None:
            other.push(i, d)
            out_restored += other.release()
    assert other is not None
    out_kept += kept.flush()
    out_restored += other.flush()
    assert sum(len(b) for b in out_restored) > 0
    assert [_rows(b) for b in out_restored] == [_rows(b) for b in out_kept[mark:]]
    with pytest.raises(SnapshotError, match="join tree"):
        JoinTreeStage(names, preds, ((("s0", "s1"), "s2"), "s3")).load_snapshot(kept.snapshot())


def test_join_tree_text() -> None:
    assert parse_join_tree("(a, b), c") == (("a", "b"), "c")
    assert parse_join_tree("((a,b),(c , d))") == (("a", "b"), ("c", "d"))
    assert parse_join_tree([["a", "b"], "c"]) == (("a", "b"), "c")
    assert tree_text((("a", "b"), ("c", "d"))) == "(a, b), (c, d)"
    for bad, where in [("(a, b", "missing ')'"), ("a, b, c", "third subtree"),
                       ("a, ", "missing stream name"), ("a ; b", "unexpected ';'"),
                       ("(a, b))", "unexpected ')'")]:  # fmt: skip
        with pytest.raises(JoinTreeError, match=re.escape(where)):
            parse_join_tree(bad)  # the message names what is wrong
        with pytest.raises(JoinTreeError) as info:
            parse_join_tree(bad)
        assert "column" in str(info.value)
    check_join_tree((("a", "b"), "c"), ["a", "b", "c"])
    with pytest.raises(JoinTreeError, match="d missing"):
        check_join_tree((("a", "b"), "c"), ["a", "b", "c", "d"])
    with pytest.raises(JoinTreeError, match="a more than once"):
        check_join_tree((("a", "b"), "a"), ["a", "b"])


CQL = """
CREATE STREAM a (k BIGINT NOT NULL, x BIGINT NOT NULL, ts BIGINT NOT NULL)
  WITH (topic = 'ta', timestamp = 'ts');
CREATE STREAM b (k BIGINT NOT NULL, y BIGINT NOT NULL, ts BIGINT NOT NULL)
  WITH (topic = 'tb', timestamp = 'ts');
CREATE STREAM c (y BIGINT NOT NULL, z BIGINT NOT NULL, ts BIGINT NOT NULL)
  WITH (topic = 'tc', timestamp = 'ts');
CREATE QUERY q INTO 'out' {settings} AS
SELECT a.x, count(*) AS n, sum(c.z) AS total
FROM a [ROWS 6], b [RANGE 40 MS], c [PARTITION BY y ROWS 2]
WHERE a.k = b.k AND b.y = c.y
GROUP BY a.x;
"""


@pytest.mark.parametrize("tree", ["(a, b), c", "(a, c), b", "a, (b, c)"])
def test_a_cql_query_runs_as_a_join_tree_with_the_mjoins_results(tree: str) -> None:
    """The whole plan (windows, the join, GROUP BY) with ``join_tree`` gives, batch for batch,
    the MJoin plan's results; the plan names the tree and the step runs a JoinTreeStage."""
    from processors.core.query import Query
    from processors.physical.runner import QueryRunner

    plans = {
        shape: Query.from_cql(CQL.format(settings=settings)).build()
        for shape, settings in [("mjoin", ""), ("tree", f"WITH (join_tree = '{tree}')")]
    }
    assert plans["tree"].to_json()["join_tree"] == tree
    runners = {shape: QueryRunner(plan) for shape, plan in plans.items()}
    assert isinstance(runners["tree"].stage("join_tree"), JoinTreeStage)
    assert runners["mjoin"].stage("join_tree") is None
    rng = np.random.default_rng(5)
    outputs: dict[str, list[Counter]] = {"mjoin": [], "tree": []}
    clock = {s: 0 for s in "abc"}
    for _ in range(60):
        s = "abc"[int(rng.integers(0, 3))]
        m = int(rng.integers(1, 5))
        ts = clock[s] + np.cumsum(rng.integers(0, 4, m)).astype(np.int64)
        clock[s] = int(ts[-1])
        cols = {"k": rng.integers(0, 3, m), "x": rng.integers(0, 3, m), "y": rng.integers(0, 3, m),
                "z": rng.integers(0, 100, m)}  # fmt: skip
        fields = {"a": ("k", "x"), "b": ("k", "y"), "c": ("y", "z")}[s]
        batch = Batch.inserts({f: cols[f].astype(np.int64) for f in fields} | {"ts": ts}, ts)
        for shape, runner in runners.items():
            outputs[shape] += [_rows(b) for b in runner.push(s, batch)]
    for shape, runner in runners.items():
        outputs[shape] += [_rows(b) for b in runner.flush()]
    assert sum(sum(c.values()) for c in outputs["mjoin"]) > 20
    assert outputs["tree"] == outputs["mjoin"]


def test_a_join_tree_that_does_not_fit_the_query_is_refused() -> None:
    from processors.core.query import Query
    from processors.cql import CqlError

    with pytest.raises(CqlError, match=r"join_tree.*d missing|no stream named d"):
        Query.from_cql(CQL.format(settings="WITH (join_tree = '(a, b), d')")).build()
    with pytest.raises(CqlError, match="third subtree"):
        Query.from_cql(CQL.format(settings="WITH (join_tree = 'a, b, c')")).build()
