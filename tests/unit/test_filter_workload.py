"""The Section 9 filter workload: truth vs index probes, statistics, changes, validation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import within

from processors.kernels.hash_index import select_in_index
from processors.workloads.filters import (
    FilterWorkload,
    FilterWorkloadRun,
    copy_probability,
    pair_agreement,
)


def generate(workload: FilterWorkload, sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated key columns (tuples x n) and truth of batches of the given sizes."""
    run = FilterWorkloadRun(workload)
    keys, truth = [], []
    for size in sizes:
        batch, passes = run.next_batch(size)
        keys.append(np.stack([batch.columns[c] for c in run.column_names], axis=1))
        truth.append(passes)
    return np.concatenate(keys), np.concatenate(truth)


def test_batch_shape_columns_and_metadata() -> None:
    workload = FilterWorkload(n=5, gamma=2, selectivity=[0.1, 0.5, 0.9], costs=[1, 2, 3, 1, 5])
    run = FilterWorkloadRun(workload)
    assert run.column_names == ["k0", "k1", "k2", "k3", "k4"]
    assert run.probes == [1, 2, 3, 1, 5]
    assert run.group_of.tolist() == [0, 0, 1, 1, 2]
    assert run.current_selectivities.tolist() == [0.1, 0.1, 0.5, 0.5, 0.9]
    assert len(run.indexes) == 5
    assert all(ix.total == 10_000 for ix in run.indexes)
    batch, passes = run.next_batch(300)
    batch2, _ = run.next_batch(200)
    assert list(batch.columns) == run.column_names
    assert all(c.dtype == np.int64 and len(c) == 300 for c in batch.columns.values())
    assert batch.ts.tolist() == list(range(300)) and batch2.ts.tolist() == list(range(300, 500))
    assert (batch.sign == 1).all()
    assert passes.dtype == np.bool_ and passes.shape == (300, 5)
    assert run.tuples_generated == 500
    assert FilterWorkload(n=4, costs=7).probes == [7, 7, 7, 7]
    empty, none = run.next_batch(0)
    assert len(empty) == 0 and none.shape == (0, 5) and run.tuples_generated == 500


def test_same_seed_same_tuples_and_other_seed_differs() -> None:
    workload = FilterWorkload(n=4, window=500, window_rate=0.7, change_every=250, seed=11)
    sizes = [100, 333, 1, 900]
    keys_a, truth_a = generate(workload, sizes)
    keys_b, truth_b = generate(workload, sizes)
    assert np.array_equal(keys_a, keys_b) and np.array_equal(truth_a, truth_b)
    keys_c, truth_c = generate(FilterWorkload(n=4, window=500, window_rate=0.7, seed=12), sizes)
    assert not np.array_equal(keys_a, keys_c) and not np.array_equal(truth_a, truth_c)


def test_truth_does_not_depend_on_batch_sizes() -> None:
    workload = FilterWorkload(n=6, gamma=3, selectivity=[0.3, 0.7], change_every=97, seed=5)
    keys_a, truth_a = generate(workload, [1000])
    keys_b, truth_b = generate(workload, [1, 250, 300, 449])
    assert np.array_equal(truth_a, truth_b)
    # failing keys are the same too; passing keys depend on when the windows slid
    assert np.array_equal(keys_a[~truth_a], keys_b[~truth_b])
    # without sliding windows, the tuples are identical
    static = FilterWorkload(n=3, window_rate=0.0, seed=5)
    assert all(
        np.array_equal(x, y)
        for x, y in zip(generate(static, [700]), generate(static, [100, 600]), strict=True)
    )


@pytest.mark.parametrize(
    ("window", "rate", "sizes"),
    [
        (10_000, 0.1, [5000, 5000, 12345]),
        (64, 0.5, [100, 1, 3, 500, 129, 64]),  # slides longer than the window
        (1, 1.0, [10, 10]),
        (300, 0.0, [1000, 1000]),  # static windows
        (200, 2.5, [7, 11, 400]),
    ],
)
def test_truth_is_what_probing_the_indexes_returns(
    window: int, rate: float, sizes: list[int]
) -> None:
    workload = FilterWorkload(
        n=4, gamma=2, selectivity=[0.3, 0.8], costs=[1, 3, 1, 2], window=window,
        window_rate=rate, change_every=50, seed=3,
    )  # fmt: skip
    run = FilterWorkloadRun(workload)
    before = [ix.keys.copy() for ix in run.indexes]
    for size in sizes:
        batch, passes = run.next_batch(size)
        for i, (index, name) in enumerate(zip(run.indexes, run.column_names, strict=True)):
            col = batch.columns[name]
            assert index.total == window
            assert np.array_equal(index.contains_many(col), passes[:, i])
            assert (col[passes[:, i]] % 2 == 0).all() and (col[~passes[:, i]] % 2 == 1).all()
            # the filter kernel itself, with the filter's cost, selects the passing rows
            sel = np.arange(size, dtype=np.int64)
            out = np.empty(size, np.int64)
            hits = np.zeros(1, np.int64)
            m = select_in_index(
                col, index.keys, index.mask, index.zero_slot, run.probes[i], sel, size, out, hits
            )
            assert out[:m].tolist() == np.flatnonzero(passes[:, i]).tolist()
    after = [ix.keys for ix in run.indexes]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True)) == (rate == 0)


def test_windows_slide_at_the_window_rate() -> None:
    """Every arrival evicts the oldest key: after w arrivals none of the first keys remain."""
    workload = FilterWorkload(n=2, window=1000, window_rate=0.25, seed=9)
    run = FilterWorkloadRun(workload)
    initial = [set(ix.keys[ix.counts > 0].tolist()) for ix in run.indexes]
    run.next_batch(2000)  # 500 arrivals: half of each window replaced
    for ix, keys in zip(run.indexes, initial, strict=True):
        kept = ix.contains_many(np.array(sorted(keys), np.int64)).sum()
        assert kept == 500
    run.next_batch(2000)
    for ix, keys in zip(run.indexes, initial, strict=True):
        assert not ix.contains_many(np.array(sorted(keys), np.int64)).any()


def test_unconditional_selectivities() -> None:
    sel = [0.05, 0.3, 0.5, 0.92]
    workload = FilterWorkload(n=7, gamma=2, selectivity=sel, window=1000, seed=21)
    _, truth = generate(workload, [100_000, 100_000])
    group_of = np.arange(7) // 2
    for i in range(7):
        assert within(truth[:, i].mean(), sel[group_of[i]], len(truth)), i


def test_within_group_agreement_and_across_group_independence() -> None:
    sel = [0.5, 0.3, 0.08]
    workload = FilterWorkload(n=9, gamma=3, selectivity=sel, window=1000, seed=4)
    _, truth = generate(workload, [150_000, 150_000])
    samples = len(truth)
    group_of = np.arange(9) // 3
    for i, j in itertools.combinations(range(9), 2):
        gi, gj = group_of[i], group_of[j]
        if gi == gj:
            s = sel[gi]
            # 0.08: independent draws already agree 85% of the time, so q = 0
            expected = max(0.8, s**2 + (1 - s) ** 2)
            assert within((truth[:, i] == truth[:, j]).mean(), expected, samples), (i, j)
        else:
            both = (truth[:, i] & truth[:, j]).mean()
            assert within(both, sel[gi] * sel[gj], samples), (i, j)


def test_copy_probability_solves_the_agreement_equation() -> None:
    for s, a in itertools.product([0.1, 0.25, 0.5, 0.6, 0.95], [0.8, 0.9, 1.0]):
        q = copy_probability(s, a)
        independent = s * s + (1 - s) ** 2
        if independent >= a:
            assert q == 0.0
        else:
            assert 0 < q <= 1 and pair_agreement(s, q) == pytest.approx(a)
    assert copy_probability(0.0, 0.8) == copy_probability(1.0, 0.8) == 0.0
    assert copy_probability(0.5, 1.0) == 1.0


@pytest.mark.parametrize("sizes", [[37, 250, 13, 1000, 200], [100, 100, 100, 5000]])
def test_selectivities_are_permuted_exactly_at_multiples_of_change_every(
    sizes: list[int],
) -> None:
    # selectivities 0 and 1 make the truth show the assignment in force for each tuple
    k = 100
    workload = FilterWorkload(
        n=5, gamma=1, selectivity=[1.0, 0.0, 1.0, 0.0, 0.0], change_every=k, seed=8
    )
    run = FilterWorkloadRun(workload)
    truth = []
    for size in sizes:
        _, passes = run.next_batch(size)
        truth.append(passes)
        assert run.current_selectivities.tolist() == passes[-1].astype(float).tolist()
    rows = np.concatenate(truth)
    total = len(rows)
    assert run.changes == list(range(k, total, k))
    assert (rows.sum(axis=1) == 2).all()  # always a permutation of the selectivities
    changed_at = [t for t in range(1, total) if not np.array_equal(rows[t], rows[t - 1])]
    assert all(t % k == 0 for t in changed_at)
    assert len(changed_at) > len(run.changes) // 2  # permutations really move selectivities
    # the same seed gives the same sequence of assignments
    again = FilterWorkloadRun(workload)
    assert np.array_equal(again.next_batch(total)[1], rows) and again.changes == run.changes


def test_no_changes_without_change_every() -> None:
    run = FilterWorkloadRun(FilterWorkload(n=3, gamma=1, selectivity=[0.0, 1.0, 0.0]))
    _, passes = run.next_batch(5000)
    assert run.changes == []
    assert (passes == np.array([False, True, False])).all()


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n": 0}, "n"),
        ({"n": 2.5}, "n"),
        ({"n": 4, "gamma": 0}, "gamma"),
        ({"n": 4, "selectivity": 1.5}, "selectivity"),
        ({"n": 4, "selectivity": -0.1}, "selectivity"),
        ({"n": 4, "selectivity": [0.5]}, "selectivity"),
        ({"n": 4, "selectivity": [0.5, float("nan")]}, "selectivity"),
        ({"n": 4, "costs": 0}, "costs"),
        ({"n": 4, "costs": [1, 2, 3]}, "costs"),
        ({"n": 4, "costs": [1, 2, 3, 1.5]}, "costs"),
        ({"n": 4, "window": 0}, "window"),
        ({"n": 4, "window_rate": -0.1}, "window_rate"),
        ({"n": 4, "window_rate": float("inf")}, "window_rate"),
        ({"n": 4, "change_every": 0}, "change_every"),
        ({"n": 4, "agreement": 1.2}, "agreement"),
        ({"n": 4, "seed": -1}, "seed"),
    ],
)
def test_bad_parameters_name_themselves(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} "):
        FilterWorkload(**kwargs)  # type: ignore[arg-type]


def test_bad_batch_size() -> None:
    run = FilterWorkloadRun(FilterWorkload(n=2, window=10))
    with pytest.raises(ValueError, match="^size "):
        run.next_batch(-1)


def test_gamma_larger_than_n_is_one_group() -> None:
    workload = FilterWorkload(n=1)
    assert workload.n_groups == 1
    assert FilterWorkload(n=5, gamma=2).n_groups == 3
    assert FilterWorkload(n=5, gamma=2, selectivity=(0.1, 0.2, 0.3)).selectivity == (0.1, 0.2, 0.3)
