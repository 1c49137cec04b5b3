"""MJoin snapshots: a stage restored from snapshot bytes continues exactly as the original.

A random workload (windows with expiries, string join columns, random interleavings) is run
once; at random points the stage is snapshotted, the bytes are loaded into a freshly built stage,
and both continue with the same remaining input. The restored stage must give the original's
outputs (batch for batch where the join orders cannot change, as multisets per call where they
adapt) and, with the outputs before the snapshot, the naive oracle's join.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from oracle.naive import batches_to_rows, naive_join, naive_window_deltas, result_counter

from processors.core.batch import ROW_ID, Batch, VarColumn
from processors.core.ordering.config import OrderingConfig
from processors.core.plan import Window
from processors.core.state_codec import SnapshotError, decode_state, encode_state
from processors.stages.mjoin_stage import MJoinStage
from processors.stages.shape_stages import RowIds
from processors.stages.window_stage import WindowStage

COLUMNS = ["a", "b", "s"]
Event = tuple[str, int, Batch | None]  # ("push", input, deltas) | ("release" | "flush", -1, None)


def predicates(n: int, rng: np.random.Generator) -> list[tuple[tuple[int, str], tuple[int, str]]]:
    """A chain on ints, a string equality, and sometimes a class with two columns of input 0."""
    preds = [((i, "b"), (i + 1, "a")) for i in range(n - 1)]
    preds.append(((0, "s"), (n - 1, "s")))
    if rng.random() < 0.5:
        preds.append(((0, "a"), (1, "a")))
    return preds


def raw_stream(rng: np.random.Generator, size: int, domain: int) -> dict[str, Any]:
    return {
        "a": rng.integers(0, domain, size).astype(np.int64),
        "b": rng.integers(0, domain, size).astype(np.int32),
        "s": [f"v{x}" * int(1 + x % 3) for x in rng.integers(0, domain, size)],
        "ts": np.sort(rng.integers(0, 80, size)).astype(np.int64),
    }


def random_window(rng: np.random.Generator) -> Window | None:
    kind = int(rng.integers(0, 4))
    if kind == 0:
        return Window("x", "rows", int(rng.integers(1, 6)))
    if kind == 1:
        return Window("x", "range", int(rng.integers(1, 25)))
    if kind == 2:
        return Window("x", "rows", int(rng.integers(1, 3)), ("a",))
    return None


def workload(rng: np.random.Generator, n: int) -> tuple[list[Event], list[list[dict]]]:
    """The MJoin's input events (window deltas pushed in random batches and interleavings,
    releases in between) and the oracle's delta streams."""
    domain = int(rng.integers(2, 5))
    streams = [raw_stream(rng, int(rng.integers(8, 30)), domain) for _ in range(n)]
    windows = [random_window(rng) for _ in range(n)]
    fronts = [WindowStage(w) if w is not None else RowIds() for w in windows]
    events: list[Event] = []
    pos = [0] * n
    while any(pos[i] < len(s["ts"]) for i, s in enumerate(streams)):
        i = int(rng.integers(0, n))
        lo, s = pos[i], streams[i]
        hi = min(lo + int(rng.integers(1, 6)), len(s["ts"]))
        if lo >= hi:
            continue
        pos[i] = hi
        cols = {"a": s["a"][lo:hi], "b": s["b"][lo:hi], "s": VarColumn.from_values(s["s"][lo:hi])}
        for deltas in fronts[i].process(Batch.inserts(cols, s["ts"][lo:hi])):
            events.append(("push", i, deltas))
        if rng.random() < 0.7:
            events.append(("release", -1, None))
    for i, front in enumerate(fronts):
        if isinstance(front, WindowStage):
            events += [("push", i, deltas) for deltas in front.flush()]
    events.append(("flush", -1, None))
    return events, [_oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)]


def _oracle_deltas(stream: dict[str, Any], window: Window | None) -> list[dict]:
    rows = [
        {"a": int(a), "b": int(b), "s": s, "ts": int(t)}
        for a, b, s, t in zip(stream["a"], stream["b"], stream["s"], stream["ts"], strict=True)
    ]
    if window is None:
        return [
            {"sign": 1, "ts": r["ts"], "rid": k, "row": {c: r[c] for c in COLUMNS}}
            for k, r in enumerate(rows)
        ]
    deltas, late = naive_window_deltas(rows, window.kind, window.size, window.partition_by)
    assert not late
    return deltas


def step(stage: MJoinStage, event: Event) -> list[Batch]:
    kind, i, batch = event
    if kind == "push":
        assert batch is not None
        stage.push(i, batch)
        return []
    return stage.flush() if kind == "flush" else stage.release()


def rows(batches: list[Batch]) -> list[dict]:
    return batches_to_rows(batches)


def no_bytes(stats: dict[str, Any]) -> dict[str, Any]:
    """Stats without the memory estimate (a restored arena holds no dead bytes)."""
    return {k: v for k, v in stats.items() if k != "state_bytes"}


@pytest.mark.parametrize("seed", range(12))
def test_a_restored_stage_continues_exactly_as_the_original(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    names = [f"s{i}" for i in range(n)]
    preds = predicates(n, rng)
    adaptive = seed % 2 == 1  # even seeds: orders never change, outputs equal batch for batch
    config = OrderingConfig(
        "agreedy" if adaptive else "fixed", profile_probability=1.0 if adaptive else 0.0,
        seed=seed, min_profile_tuples=1, window_tuples=16,
    )  # fmt: skip
    events, oracle_inputs = workload(rng, n)
    expected = naive_join(oracle_inputs, preds)
    points = rng.choice(np.arange(1, len(events)), min(4, len(events) - 1), replace=False)
    pending = expired = 0
    for k in sorted(points.tolist()):
        original = MJoinStage(names, preds, config, clock_ms=lambda: 0)
        before = [step(original, e) for e in events[:k]]
        data = original.snapshot()
        assert isinstance(data, bytes | bytearray)
        restored = MJoinStage(names, preds, config, clock_ms=lambda: 0)
        restored.load_snapshot(data)
        assert no_bytes(restored.stats()) == no_bytes(original.stats())  # orders, counters
        assert restored.snapshot() == data  # nothing lost, nothing added
        pending += original.stats()["buffered"] > 0
        expired += any(e[0] == "push" and bool((e[2].sign < 0).any()) for e in events[:k])
        twin = [step(restored, e) for e in events[k:]]
        rest = [step(original, e) for e in events[k:]]
        if adaptive:  # fresh statistics may reorder differently: the same results per call
            assert [Counter(map(_key, rows(b))) for b in twin] == [
                Counter(map(_key, rows(b))) for b in rest
            ]
        else:
            assert [rows(b) for b in twin] == [rows(b) for b in rest]
        whole = [b for out in before + twin for b in out]
        assert result_counter(whole, [COLUMNS] * n, [f"{x}." for x in names]) == expected
    assert pending and expired  # some points had deltas awaiting release, some saw deletes


def _key(row: dict) -> tuple:
    return row["sign"], row["ts"], tuple(sorted(row["row"].items()))


def test_snapshots_at_every_point_of_one_workload() -> None:
    """Snapshot after every event, restore, and continue with the restored copy: the whole
    output equals the naive join (so pending deltas, expiries and counters all survive)."""
    rng = np.random.default_rng(99)
    n = 3
    names = ["r", "s", "t"]
    preds = predicates(n, rng)
    events, oracle_inputs = workload(rng, n)
    config = OrderingConfig(profile_probability=0.5, seed=3, min_profile_tuples=1)
    stage = MJoinStage(names, preds, config)
    out: list[Batch] = []
    saw_buffered = saw_deletes = False
    for event in events:
        out += step(stage, event)
        saw_buffered |= stage.stats()["buffered"] > 0
        saw_deletes |= any(len(s) for s in stage.stores) and event[0] == "release"
        copy = MJoinStage(names, preds, config)
        copy.load_snapshot(stage.snapshot())
        stage = copy
    assert saw_buffered
    got = result_counter(out, [COLUMNS] * n, [f"{x}." for x in names])
    assert got == naive_join(oracle_inputs, preds)
    sizes = {x: len(d) for x, d in zip(names, oracle_inputs, strict=True)}
    assert stage.stats()["deltas_in"] == sizes


def test_dead_letters_and_plan_changes_survive() -> None:
    stage = MJoinStage(["r", "s"], [((0, "a"), (1, "a"))])
    bad = Batch(
        {ROW_ID: np.array([99]), "a": np.array([7])}, np.array([-1], np.int8), np.array([4])
    )
    stage.push(0, Batch({ROW_ID: np.array([1]), "a": np.array([7])}, np.ones(1, np.int8),
                        np.array([1])))  # fmt: skip
    stage.push(0, bad)
    stage.flush()
    copy = MJoinStage(["r", "s"], [((0, "a"), (1, "a"))])
    copy.load_snapshot(stage.snapshot())
    (letter,) = copy.take_dead_letters()
    assert letter[0].columns["a"].tolist() == [7] and "not in the window" in letter[1]
    assert copy.stats()["window_tuples"] == {"r": 1, "s": 0}


def _stage(**kw: Any) -> MJoinStage:
    names = kw.get("names", ["r", "s", "t"])
    preds = kw.get("preds", [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))])
    stage = MJoinStage(names, preds)
    stage.push(0, Batch({ROW_ID: np.arange(3), "a": np.arange(3), "b": np.arange(3),
                         "s": VarColumn.from_values(["x", "yy", "zzz"])},
                        np.ones(3, np.int8), np.arange(3)))  # fmt: skip
    stage.advance(1, 10)
    stage.advance(2, 10)
    assert not stage.release()  # r's tuples before ts 2 enter its window; s, t are empty
    stage.push(0, Batch({ROW_ID: np.arange(3, 4), "a": np.arange(1), "b": np.arange(1),
                         "s": VarColumn.from_values(["w"])},
                        np.ones(1, np.int8), np.array([20])))  # fmt: skip
    return stage


def test_another_configuration_or_version_is_refused_by_name() -> None:
    data = _stage().snapshot()
    with pytest.raises(SnapshotError, match="inputs"):
        MJoinStage(["r", "s", "u"], [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))]).load_snapshot(
            data
        )
    with pytest.raises(SnapshotError, match="joins on"):
        MJoinStage(["r", "s", "t"], [((0, "a"), (1, "a")), ((1, "c"), (2, "b"))]).load_snapshot(
            data
        )
    tree = decode_state(data)
    with pytest.raises(SnapshotError, match="version"):
        _stage().load_snapshot(encode_state({**tree, "version": 2}))
    with pytest.raises(SnapshotError, match="window"):
        _stage().load_snapshot(encode_state({**tree, "kind": "window"}))
    # the same predicates written the other way round are the same configuration
    same = MJoinStage(["r", "s", "t"], [((2, "b"), (1, "b")), ((1, "a"), (0, "a"))])
    same.load_snapshot(data)
    assert same.stats()["window_tuples"] == {"r": 2, "s": 0, "t": 0}
    assert same.stats()["buffered"] == 2


def test_corrupt_or_truncated_snapshots_are_refused() -> None:
    data = _stage().snapshot()
    fresh = MJoinStage(["r", "s", "t"], [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))])
    for bad in (data[: len(data) // 2], data[:-1], data[:6], b"", b"\x80\x04pickle" + data):
        with pytest.raises(SnapshotError):
            fresh.load_snapshot(bad)
    tree = decode_state(data)
    store = tree["stores"][0]
    broken: list[dict[str, Any]] = []
    for change in (
        {"born": store["born"][:1]},  # lengths disagree
        {"columns": {**store["columns"], "s": {**store["columns"]["s"],
                                               "offsets": np.array([0, 2, 1])}}},  # backwards
        {"columns": {**store["columns"], "s": {**store["columns"]["s"],
                                               "offsets": np.array([0, 1, 600])}}},  # past the data
        {"columns": {k: v for k, v in store["columns"].items() if k != "a"}},
    ):  # fmt: skip
        stores = [{**store, **change}, *tree["stores"][1:]]
        broken.append({**tree, "stores": stores})
    broken.append({**tree, "orders": [[1, 0], [0, 1], [0, 1]]})  # t before its parent s
    broken.append({**tree, "next_gen": 1})
    broken.append({**tree, "shown": "x"})
    del_key = dict(tree)
    del del_key["buffers"]
    broken.append(del_key)
    for bad_tree in broken:
        with pytest.raises(SnapshotError):
            fresh.load_snapshot(encode_state(bad_tree))
    # a refused snapshot leaves the stage as it was: it still loads a good one and joins
    fresh.load_snapshot(data)
    fresh.push(1, Batch({ROW_ID: np.arange(1), "a": np.array([2]), "b": np.array([5])},
                        np.ones(1, np.int8), np.array([12])))  # fmt: skip
    fresh.push(2, Batch({ROW_ID: np.arange(1), "b": np.array([5])}, np.ones(1, np.int8),
                        np.array([13])))  # fmt: skip
    (out,) = fresh.flush()
    assert out.columns["r.s"].to_list() == ["zzz"]
