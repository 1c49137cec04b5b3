"""MJoinStage: adaptive join orders, precedence, bad input, state growth (no broker)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from processors.core.batch import ROW_ID, Batch, VarColumn
from processors.core.joins.graph import JoinGraph, JoinGraphError
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.static import static_greedy
from processors.stages.mjoin_stage import MJoinStage


def deltas(cols: dict[str, np.ndarray], ts: np.ndarray, sign=None, rid=None) -> Batch:
    n = len(ts)
    columns = {ROW_ID: np.arange(n, dtype=np.int64) if rid is None else rid, **cols}
    return Batch(columns, np.ones(n, np.int8) if sign is None else sign, ts.astype(np.int64))


# Leaves of a star hold fixed sets of keys out of 0..999; a root key passes leaf j when its
# digit j is small enough, so the leaves drop independent fractions of the root's tuples.
PASS_DIGIT = {1: 9, 2: 5, 3: 1}  # leaf -> digits that pass: 90%, 50%, 10%


def leaf_keys(j: int) -> np.ndarray:
    k = np.arange(1000, dtype=np.int64)
    return k[(k // 10 ** (j - 1)) % 10 < PASS_DIGIT[j]]


def star_stage(p: float = 0.2) -> MJoinStage:
    names = ["root", "l1", "l2", "l3"]
    predicates = [((0, "a"), (j, "a")) for j in (1, 2, 3)]
    config = OrderingConfig(profile_probability=p, window_tuples=2000, seed=5)
    return MJoinStage(names, predicates, config)


def fill_leaves(stage: MJoinStage) -> None:
    for j in (1, 2, 3):
        keys = leaf_keys(j)
        stage.push(j, deltas({"a": keys}, np.zeros(len(keys), np.int64)))


def test_each_pipeline_converges_to_the_greedy_order_of_its_drop_probabilities() -> None:
    stage = star_stage()
    fill_leaves(stage)
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 1000, 40_000)
    ts = 1 + np.arange(len(keys), dtype=np.int64)
    for lo in range(0, len(keys), 2000):
        stage.push(
            0, deltas({"a": keys[lo : lo + 2000]}, ts[lo : lo + 2000], rid=ts[lo : lo + 2000])
        )
        for j in (1, 2, 3):  # the leaves' clocks move on (no new tuples)
            stage.push(j, deltas({"a": np.zeros(0, np.int64)}, np.zeros(0, np.int64)))
            stage._shown[j] = int(ts[lo + 1999]) + 1
        stage.release()
    # independent oracle: which leaf drops each root key, then Static Greedy on those bits
    drops = np.stack([~np.isin(keys, leaf_keys(j)) for j in (1, 2, 3)], axis=1)
    greedy = static_greedy(drops)
    want = [["l1", "l2", "l3"][f] for f in greedy]
    assert want == ["l3", "l2", "l1"]
    assert stage.orders()["root"] == want
    assert stage.changes_total >= 1
    change = stage.recent_changes[-1]
    assert change["pipeline"] == "root" and change["to"] == want


def test_a_leaf_pipeline_probes_the_root_first_whatever_the_statistics() -> None:
    # root.a = l1.a, root.b = l2.b, root.c = l3.c: a leaf reaches the others through the root
    # (on a natural join all inputs share one class and every pipeline is a star)
    names = ["root", "l1", "l2", "l3"]
    predicates = [((0, col), (j, col)) for j, col in ((1, "a"), (2, "b"), (3, "c"))]
    stage = MJoinStage(names, predicates, OrderingConfig(profile_probability=1.0, seed=2))
    assert stage.pipelines[1].parent == (-1, 0, 0) and stage.graph.kind == "star"
    rng = np.random.default_rng(2)
    for step in range(10):  # domains as large as the windows: few matches, small results
        for i, col in enumerate(["root", "a", "b", "c"]):
            cols = (
                {c: rng.integers(0, 1000, 100) for c in "abc"}
                if i == 0
                else {col: rng.integers(0, 1000 if i < 3 else 10_000, 100)}
            )
            stage.push(i, deltas(cols, np.full(100, step), rid=step * 100 + np.arange(100)))
        stage.release()
        assert stage.orders()["l1"][0] == "root"
        assert stage.orders()["l2"][0] == "root"


@pytest.mark.slow  # 5.6-9.5 s measured
def test_chain_join_orders_respect_the_path_precedence() -> None:
    # s0.a = s1.a, s1.b = s2.b: from s0, s2 is reached through s1 only
    graph = JoinGraph(3, [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))], ["s0", "s1", "s2"])
    pipe = graph.pipeline(0)
    assert pipe.parent == (-1, 0) and not pipe.existence_only[0] and pipe.existence_only[1]
    stage = MJoinStage(
        ["s0", "s1", "s2"], graph.predicates, OrderingConfig(profile_probability=1.0)
    )
    rng = np.random.default_rng(3)
    for step in range(30):
        for i in range(3):
            cols = {"a": rng.integers(0, 5, 50), "b": rng.integers(0, 5, 50)}
            stage.push(i, deltas(cols, np.full(50, step, np.int64), rid=step * 50 + np.arange(50)))
        stage.release()
        orders = stage.orders()
        assert orders["s0"].index("s1") < orders["s0"].index("s2")
        assert orders["s2"].index("s1") < orders["s2"].index("s0")


def test_graph_kinds_and_refusals() -> None:
    star = JoinGraph(4, [((0, "a"), (i, "a")) for i in (1, 2, 3)])
    assert star.kind == "star"
    natural = JoinGraph(3, [((0, "a"), (1, "a")), ((1, "a"), (2, "a"))])
    assert natural.kind == "star" and natural.pipeline(0).parent == (-1, -1)  # transitivity
    chain = JoinGraph(4, [((0, "a"), (1, "a")), ((1, "b"), (2, "b")), ((2, "c"), (3, "c"))])
    assert chain.kind == "acyclic"
    cycle = JoinGraph(3, [((0, "a"), (1, "a")), ((1, "b"), (2, "b")), ((2, "c"), (0, "c"))])
    assert cycle.kind == "cyclic"
    with pytest.raises(JoinGraphError, match="cross product"):
        JoinGraph(3, [((0, "a"), (1, "a"))], ["x", "y", "z"])
    with pytest.raises(JoinGraphError, match="itself"):
        JoinGraph(2, [((0, "a"), (0, "b")), ((0, "a"), (1, "a"))])


def test_unknown_deletes_are_dead_letters_and_time_must_not_go_back() -> None:
    stage = MJoinStage(["r", "s"], [((0, "a"), (1, "a"))])
    stage.push(0, deltas({"a": np.array([1, 2])}, np.array([1, 2])))
    stage.push(1, deltas({"a": np.array([1])}, np.array([3])))
    bad = deltas(
        {"a": np.array([7])}, np.array([4]), sign=np.array([-1], np.int8), rid=np.array([99])
    )
    stage.push(0, bad)
    stage.flush()
    (letter,) = stage.take_dead_letters()
    assert "not in the window" in letter[1] and letter[0].columns["a"].tolist() == [7]
    # deltas below what their input already showed (a replay): dead letters, the rest joins
    stage.push(1, deltas({"a": np.array([1, 2])}, np.array([0, 9])))
    ((behind, reason),) = stage.take_dead_letters()
    assert behind.ts.tolist() == [0] and "below the 3 it already showed" in reason
    assert stage.stats()["buffered"] == 1
    with pytest.raises(ValueError, match="back in time"):  # unordered within a batch
        stage.push(1, deltas({"a": np.array([1, 1])}, np.array([12, 11])))
    with pytest.raises(ValueError, match="no join input"):
        stage.input_index("nope")


def test_slots_are_reused_and_string_keys_join() -> None:
    stage = MJoinStage(["r", "s"], [((0, "k"), (1, "k"))])
    names = [f"key{i % 7}" for i in range(300)]
    results = 0
    for step in range(20):  # insert 300, then delete them: the stores stay small
        rid = np.arange(step * 300, (step + 1) * 300, dtype=np.int64)
        ts = np.full(300, 2 * step, np.int64)
        for i in (0, 1):
            stage.push(i, deltas({"k": VarColumn.from_values(names)}, ts, rid=rid))
        for i in (0, 1):
            gone = deltas(
                {"k": VarColumn.from_values(names)}, ts + 1, np.full(300, -1, np.int8), rid
            )
            stage.push(i, gone)
        results += sum(len(b) for b in stage.release(final=True))
        assert all(len(s) == 0 for s in stage.stores)
    assert max(s.capacity for s in stage.stores) <= 1024
    # per step: 7 keys; r inserts meet nothing, s inserts meet r's (300*300/7-ish pairs), and
    # the deletes retract the same pairs
    per_key = [names.count(f"key{k}") for k in range(7)]
    pairs = sum(c * c for c in per_key)
    assert results == 20 * 2 * pairs


def test_results_are_ordered_by_the_deltas_that_made_them() -> None:
    stage = MJoinStage(["r", "s"], [((0, "a"), (1, "a"))])
    for t in range(10):
        stage.push(t % 2, deltas({"a": np.array([1])}, np.array([t]), rid=np.array([t])))
    out = stage.flush()
    ts = np.concatenate([b.ts for b in out])
    assert (np.diff(ts) >= 0).all()
    # r at even t, s at odd t, one key: a delta at t meets every tuple of the other input before
    assert len(ts) == sum((t + 1) // 2 if t % 2 else t // 2 for t in range(10))


@pytest.mark.parametrize("algorithm", ["agreedy", "independent", "sweep", "localswaps", "fixed"])
def test_every_ordering_algorithm_gives_the_same_results(algorithm: str) -> None:
    rng = np.random.default_rng(11)
    preds = [((0, "a"), (1, "a")), ((0, "a"), (2, "a")), ((1, "b"), (3, "b"))]
    outs = []
    for algo in (algorithm, "fixed"):
        stage = MJoinStage(
            ["w", "x", "y", "z"], preds, OrderingConfig(algo, profile_probability=0.5, seed=1)
        )
        rng = np.random.default_rng(11)
        got: list[tuple] = []
        for step in range(10):  # fan-out about 4 per key: results stay in the tens of thousands
            for i in range(4):
                cols = {"a": rng.integers(0, 50, 20), "b": rng.integers(0, 50, 20)}
                stage.push(i, deltas(cols, np.full(20, step), rid=step * 20 + np.arange(20)))
            for b in stage.release():
                got += list(
                    zip(*(b.columns[c].tolist() for c in b.columns), b.sign.tolist(), strict=True)
                )
        outs.append(sorted(got))
    assert outs[0] == outs[1]
    assert list(itertools.islice(outs[0], 1))  # something joined
