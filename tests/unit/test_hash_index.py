"""HashIndex and select_in_index against Python Counter/set oracles."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.kernels.hash_index import (
    MAX_LOAD,
    HashIndex,
    home_slot,
    probe_key,
    select_in_index,
)

EDGE_KEYS = [0, 1, -1, 2**63 - 1, -(2**63), 2**32, -(2**32), 2**62]


def check_table(index: HashIndex, oracle: Counter[int]) -> None:
    """The index holds exactly ``oracle`` and every key is reachable from its home slot."""
    keys, counts, mask = index.keys, index.counts, index.mask
    size = mask + 1
    assert size & mask == 0 and len(keys) == len(counts) == size
    live = {k: c for k, c in oracle.items() if c > 0}
    occupied = np.flatnonzero(counts)
    assert sorted(keys[occupied].tolist()) == sorted(live)
    assert {int(keys[s]): int(counts[s]) for s in occupied} == live
    assert (keys[counts == 0] == 0).all()
    for s in occupied.tolist():
        i = home_slot(int(keys[s]), mask)
        while i != s:  # the probe path from home to the key has no empty slot
            assert counts[i] != 0
            i = (i + 1) & mask
    assert len(index) == len(live)
    assert index.total == sum(live.values())
    assert len(live) <= size * MAX_LOAD
    assert index.nbytes == keys.nbytes + counts.nbytes
    # probes read keys only: the slot of the key 0 is tracked, every other key-0 slot is empty
    zero = [s for s in occupied.tolist() if keys[s] == 0]
    assert index.zero_slot == (zero[0] if zero else -1)


def apply_deletes(oracle: Counter[int], batch: list[int]) -> int | None:
    """Delete like the index does: in order, stopping at the first absent key (returned)."""
    for k in batch:
        if oracle[k] == 0:
            return k
        oracle[k] -= 1
    return None


key_values = st.one_of(st.integers(-6, 6), st.sampled_from(EDGE_KEYS))
operations = st.lists(
    st.tuples(st.sampled_from(["insert", "delete"]), st.lists(key_values, max_size=12)),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(ops=operations, hint=st.integers(0, 20))
def test_random_inserts_and_deletes_match_a_counter(
    ops: list[tuple[str, list[int]]], hint: int
) -> None:
    index = HashIndex(hint)
    oracle: Counter[int] = Counter()
    for op, batch in ops:
        arr = np.array(batch, dtype=np.int64)
        if op == "insert":
            index.insert_many(arr)
            oracle.update(batch)
        else:
            missing = apply_deletes(oracle, batch)
            if missing is None:
                index.delete_many(arr)
            else:
                with pytest.raises(KeyError) as err:
                    index.delete_many(arr)
                assert err.value.args == (missing,)
        check_table(index, oracle)
        probe = np.array(sorted(set(batch) | set(EDGE_KEYS) | {7, -7}), dtype=np.int64)
        assert index.contains_many(probe).tolist() == [oracle[k] > 0 for k in probe.tolist()]
        assert [index.count(k) for k in probe.tolist()] == [oracle[k] for k in probe.tolist()]


def test_delete_of_absent_key_names_it_and_keeps_earlier_deletes() -> None:
    index = HashIndex()
    index.insert_many(np.array([5, 5, 9], np.int64))
    with pytest.raises(KeyError, match="123456789"):
        index.delete_many(np.array([5, 123456789, 9], np.int64))
    check_table(index, Counter({5: 1, 9: 1}))
    with pytest.raises(KeyError, match="9"):
        index.delete_many(np.array([9, 9], np.int64))
    check_table(index, Counter({5: 1}))


def test_growth_keeps_every_key_and_the_load_bound() -> None:
    index = HashIndex(0)
    assert index.mask + 1 == 8
    rng = np.random.default_rng(7)
    keys = rng.integers(-(2**63), 2**63 - 1, 20_000, dtype=np.int64, endpoint=True)
    oracle: Counter[int] = Counter()
    sizes = []
    for chunk in np.array_split(keys, 37):
        index.insert_many(chunk)
        oracle.update(chunk.tolist())
        sizes.append(index.mask + 1)
    assert sizes == sorted(sizes) and sizes[-1] == 65536  # 20,000 distinct at load <= 0.5
    check_table(index, oracle)
    # duplicates alone never grow the table
    index.insert_many(np.repeat(keys[:5], 10_000))
    oracle.update(np.repeat(keys[:5], 10_000).tolist())
    assert index.mask + 1 == 65536
    check_table(index, oracle)
    assert index.contains_many(keys).all()


def test_capacity_hint_presizes_the_table() -> None:
    assert HashIndex(10_000).mask + 1 == 32768
    assert HashIndex(1024).mask + 1 == 2048
    with pytest.raises(ValueError, match="capacity_hint"):
        HashIndex(-1)


def clustered_keys(mask: int, homes: set[int], count: int, seed: int) -> list[int]:
    """``count`` distinct keys whose home slots all lie in ``homes``."""
    rng = np.random.default_rng(seed)
    found: list[int] = []
    while len(found) < count:
        for k in rng.integers(-(2**62), 2**62, 4096).tolist():
            if home_slot(k, mask) in homes and k not in found:
                found.append(k)
                if len(found) == count:
                    break
    return found


@pytest.mark.parametrize("seed", range(6))
def test_backward_shift_deletion_with_clustered_keys(seed: int) -> None:
    index = HashIndex(32)
    mask = index.mask
    assert mask + 1 == 64
    # homes straddle the end of the table, so the run wraps around slot 0
    keys = clustered_keys(mask, {61, 62, 63, 0, 1}, 24, seed)
    keys += clustered_keys(mask, {20}, 6, seed + 100)  # a second, separate run
    rng = np.random.default_rng(seed)
    oracle: Counter[int] = Counter()
    for k in rng.permutation(keys).tolist():
        reps = int(rng.integers(1, 3))
        index.insert_many(np.full(reps, k, np.int64))
        oracle[k] += reps
    assert index.mask == mask  # 30 keys fit without growing
    check_table(index, oracle)
    # delete in random order, one occurrence at a time, checking the probe invariant each time
    pending = [k for k, c in oracle.items() for _ in range(c)]
    for k in rng.permutation(pending).tolist():
        index.delete_many(np.array([k], np.int64))
        oracle[k] -= 1
        check_table(index, oracle)
        assert index.contains_many(np.array(keys, np.int64)).tolist() == [
            oracle[x] > 0 for x in keys
        ]
    assert len(index) == 0 and index.total == 0 and not index.counts.any()


def test_sliding_window_keeps_short_runs() -> None:
    """Insert and delete forever (no tombstones): the table neither grows nor clogs."""
    rng = np.random.default_rng(3)
    window = 1000
    index = HashIndex(window)
    size = index.mask + 1
    ring = rng.integers(0, 2**62, window)
    index.insert_many(ring)
    oracle = Counter(ring.tolist())
    for step in range(200):
        fresh = rng.integers(0, 2**62, 250)
        pos = (np.arange(250) + step * 250) % window
        index.delete_many(ring[pos])
        oracle.subtract(ring[pos].tolist())
        index.insert_many(fresh)
        oracle.update(fresh.tolist())
        ring[pos] = fresh
    assert index.mask + 1 == size
    check_table(index, oracle)
    occupied = (index.counts != 0).astype(np.int8)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], occupied, [0]])))
    assert (edges[1::2] - edges[::2]).max() < 40


def oracle_select(col: np.ndarray, present: set[int], sel: np.ndarray, n: int) -> list[int]:
    return [r for r in sel[:n].tolist() if int(col[r]) in present]


def oracle_extra_hits(col: np.ndarray, present: set[int], sel: np.ndarray, n: int, c: int) -> int:
    return sum(
        int(probe_key(int(col[r]), p)) in present for r in sel[:n].tolist() for p in range(1, c)
    )


@pytest.mark.parametrize("seed", range(4))
def test_select_in_index_matches_a_set(seed: int) -> None:
    rng = np.random.default_rng(seed)
    stored = rng.integers(-(2**40), 2**40, 3000)
    index = HashIndex(16)
    index.insert_many(stored)
    index.insert_many(stored[:500])  # multiplicities do not change membership
    present = set(stored.tolist())
    rows = 5000
    absent = rng.integers(-(2**40), 2**40, rows)
    col = np.where(rng.random(rows) < 0.4, rng.choice(stored, rows), absent)
    sel = np.sort(rng.choice(rows, 3500, replace=False)).astype(np.int64)
    n = 3000
    out = np.full(rows, -1, np.int64)
    hits = np.full(1, -1, np.int64)
    m = select_in_index(col, index.keys, index.mask, index.zero_slot, 1, sel, n, out, hits)
    expected = oracle_select(col, present, sel, n)
    assert 0 < m < n
    assert out[:m].tolist() == expected
    assert hits[0] == 0
    # in place: out aliases sel
    sel2 = sel.copy()
    m2 = select_in_index(col, index.keys, index.mask, index.zero_slot, 1, sel2, n, sel2, hits)
    assert sel2[:m2].tolist() == expected


@pytest.mark.parametrize("probes", [2, 3, 17])
def test_more_probes_select_the_same_rows_and_really_probe(probes: int) -> None:
    rng = np.random.default_rng(probes)
    stored = rng.integers(0, 2**62, 2000) * 2
    col = np.where(rng.random(4000) < 0.5, rng.choice(stored, 4000), stored.max() + 1)
    # make some extra probes hit: store the key that probe 1 of the first 300 rows looks up
    planted = np.array([probe_key(int(k), 1) for k in col[:300]], np.int64)
    index = HashIndex()
    index.insert_many(stored)
    index.insert_many(planted)
    present = set(stored.tolist()) | set(planted.tolist())
    sel = rng.permutation(4000).astype(np.int64)  # any order is kept
    n = len(sel)
    out1 = np.empty(n, np.int64)
    outc = np.empty(n, np.int64)
    hits = np.zeros(1, np.int64)
    m1 = select_in_index(col, index.keys, index.mask, index.zero_slot, 1, sel, n, out1, hits)
    assert hits[0] == 0
    mc = select_in_index(col, index.keys, index.mask, index.zero_slot, probes, sel, n, outc, hits)
    assert mc == m1 and outc[:mc].tolist() == out1[:m1].tolist()
    assert out1[:m1].tolist() == oracle_select(col, present, sel, n)
    assert hits[0] == oracle_extra_hits(col, present, sel, n, probes) >= 300


def test_empty_inputs() -> None:
    index = HashIndex()
    index.insert_many(np.zeros(0, np.int64))
    index.delete_many(np.zeros(0, np.int64))
    assert index.contains_many(np.zeros(0, np.int64)).shape == (0,)
    assert len(index) == 0 and index.total == 0 and index.count(0) == 0
    hits = np.zeros(1, np.int64)
    empty = np.zeros(0, np.int64)
    m = select_in_index(empty, index.keys, index.mask, index.zero_slot, 3, empty, 0, empty, hits)
    assert m == 0
    with pytest.raises(TypeError, match="integers"):
        index.insert_many(np.array([1.5]))
