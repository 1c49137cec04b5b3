"""A-Greedy+ (the default ``agreedy``): significant violations, drift, the profiling rate, the
re-sort points, and the stage against oracles (exact optimal orders, the paper's A-Greedy)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.bench.filters import workload_predicates
from processors.core.batch import Batch
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.static import optimal_order, order_cost
from processors.core.predicates import Compare
from processors.kernels.drift import (
    NEVER_DRIFTED,
    P_NEXT,
    REF_IN,
    REF_ORDER,
    drift_check,
    heeded_drift,
    new_checkpoint,
    new_reference,
    next_rate,
    resort_due,
)
from processors.kernels.profile_view import FULL, find_violation, view_from_patterns
from processors.kernels.routing import kafka_partitions
from processors.stages.filter_stage import FilterStage
from processors.workloads.examples import reading_columns
from processors.workloads.filters import FilterWorkload, FilterWorkloadRun

NO_PARENT = np.full(8, -1, dtype=np.int64)


def view_of(drops: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The full matrix view of profile tuples ``drops`` (bool, tuples x filters)."""
    n = drops.shape[1]
    codes = (drops.astype(np.int64) << np.arange(n, dtype=np.int64)).sum(axis=1)
    patterns = np.bincount(codes, minlength=1 << n).astype(np.int64)
    view = np.zeros((n, n), dtype=np.int64)
    view_from_patterns(patterns, order, view, FULL, -1)
    return view


def eq4_first_violation(view: np.ndarray, order: np.ndarray, costs: np.ndarray, alpha: float):
    """Eq. 4 (Fig. 4) by the definition: the first i with V[i,i]/a_i < alpha V[i,c]/a_c."""
    n = len(order)
    for i in range(n - 1):
        for c in range(i + 1, n):
            if view[i, i] / costs[order[i]] < alpha * view[i, c] / costs[order[c]]:
                return i
    return -1


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(0, 10_000))
def test_z_zero_is_equation_4_and_z_only_removes_violations(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    drops = rng.random((rng.integers(1, 300), n)) < rng.uniform(0.05, 0.95, n)
    drops = drops[drops.any(axis=1)]  # profile tuples: some filter dropped each
    order = rng.permutation(n).astype(np.int64)
    costs = rng.uniform(0.5, 2.0, n)
    view = view_of(drops, order)
    exact = find_violation(view, order, costs, 0.9, FULL, -1, NO_PARENT[:n], 0.0)
    assert exact == eq4_first_violation(view, order, costs, 0.9)
    plus = find_violation(view, order, costs, 0.9, FULL, -1, NO_PARENT[:n], 2.5)
    if plus >= 0:  # a significant violation is an eq. 4 violation at that row
        i = plus
        assert any(
            view[i, i] / costs[order[i]] < 0.9 * view[i, c] / costs[order[c]]
            for c in range(i + 1, n)
        )
        assert exact >= 0 and exact <= plus


def _difference_variance(drops: np.ndarray, i: int, c: int, wx: float, wy: float) -> float:
    """The sample variance of the sum of the per-tuple terms of alpha y/a_c - x/a_i, with the
    true overlap (the oracle the significance test's bound must not fall below)."""
    terms = wy * drops[:, c] - wx * drops[:, i]
    return float(len(terms) * terms.var())


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_the_tests_variance_bounds_the_true_one(seed: int) -> None:
    """The view has no overlap counts; the test assumes the least overlap the counts allow,
    so its variance is never below the variance with the true overlap."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(5, 400))
    shared = rng.random(m) < rng.uniform(0, 1)
    drops = np.stack(
        [shared | (rng.random(m) < rng.uniform(0, 0.9)), rng.random(m) < rng.uniform(0, 1)],
        axis=1,
    )
    x, y, rows = drops[:, 0].sum(), drops[:, 1].sum(), m
    wx, wy = 1.0, 0.9
    both = max(0.0, x + y - rows)
    diff = wy * y - wx * x
    bound = wx * wx * x + wy * wy * y - 2 * wx * wy * both - diff * diff / rows
    assert bound >= _difference_variance(drops, 0, 1, wx, wy) - 1e-9


def _violation_rate(p0: float, p1: float, tuples: int, z: float, trials: int = 400) -> float:
    rng = np.random.default_rng(11)
    order = np.arange(2, dtype=np.int64)
    costs = np.ones(2)
    found = 0
    for _ in range(trials):
        drops = np.stack([rng.random(tuples) < p0, rng.random(tuples) < p1], axis=1)
        drops = drops[drops.any(axis=1)]
        view = view_of(drops, order)
        found += find_violation(view, order, costs, 0.9, FULL, -1, NO_PARENT[:2], z) >= 0
    return found / trials


def test_ties_rarely_signal_and_real_differences_do() -> None:
    # two independent filters dropping 30% each: eq. 4 with alpha = 0.9 fires on noise at
    # small counts; the test asks for significance
    assert _violation_rate(0.3, 0.3, 60, 0.0) > 0.2
    assert _violation_rate(0.3, 0.3, 60, 2.5) < 0.02
    # a filter dropping 60% behind one dropping 30%: found from 300 tuples on
    assert _violation_rate(0.3, 0.6, 300, 2.5) > 0.95


def test_drift_check_is_quiet_on_stationary_batches_and_sees_a_change() -> None:
    rng = np.random.default_rng(3)
    rates = np.array([0.5, 0.3, 0.7, 0.5])
    ref = new_reference(4)
    order = np.arange(4, dtype=np.int64)
    params = np.array([5.0, 0.05, 200.0, 1e6, 30.0])

    def batch(r: np.ndarray, size: int) -> np.ndarray:
        counts = np.zeros(5, dtype=np.int64)
        counts[0] = size
        for k in range(4):
            counts[k + 1] = rng.binomial(counts[k], r[k])
        return counts

    assert all(drift_check(batch(rates, 65_536), order, ref, params) == -1 for _ in range(300))
    assert all(drift_check(batch(rates, 2_000), order, ref, params) == -1 for _ in range(300))
    assert all(drift_check(batch(rates, 60), order, ref, params) == -1 for _ in range(2000))
    moved = rates.copy()
    moved[2] = 0.6  # position 2 passes 60% instead of 70%
    assert drift_check(batch(moved, 65_536), order, ref, params) == 2
    assert ref[:REF_ORDER].sum() == 0  # the reference restarts from the new statistics


def test_small_batches_add_up_and_a_young_reference_still_tests() -> None:
    """Batches too small to test alone are pooled until they are not; a reference of a few
    dozen tuples (all a small partition may have had since an order change, which restarts
    the reference) is tested against rather than absorbing the change."""
    params = np.array([5.0, 0.05, 200.0, 1e6, 30.0])
    order = np.array([2, 1, 0], dtype=np.int64)
    ref = new_reference(3)
    old, new = np.array([50, 5, 4, 4]), np.array([50, 49, 3, 3])  # position 0: 10% -> 98%
    for _ in range(41):  # 2,050 tuples of the old rates, 50 a batch (none left pending)
        assert drift_check(old, order, ref, params) == -1
    assert drift_check(new, order, ref, params) == -1  # 50 tuples: pending, not tested yet
    assert drift_check(new, order, ref, params) == -1
    assert drift_check(new, order, ref, params) == -1
    assert drift_check(new, order, ref, params) == 0  # 200 pending tuples: drift
    # an order change restarts the reference; 40 tuples of it suffice to see the change
    for _ in range(10):
        drift_check(np.array([400, 40, 38, 36]), order, ref, params)
    swapped = np.array([2, 0, 1], dtype=np.int64)
    assert drift_check(np.array([40, 4, 4, 4]), swapped, ref, params) == -1
    assert ref[REF_IN].tolist() == [40.0, 4.0, 4.0] and ref[REF_ORDER].tolist() == [2, 0, 1]
    assert drift_check(np.array([2_000, 1_960, 1_900, 1_850]), swapped, ref, params) == 0


def test_the_rate_drops_to_its_floor_once_the_window_holds_enough_and_jumps_back() -> None:
    # [p now, floor, max, -, enough, K, batches at the floor, p next]
    rate = np.array([0.01, 0.01 / 16, 0.01, 0.0, 250.0, 8.0, 0.0, 0.01])  # K = 8 here
    assert next_rate(rate, False, 100) == 0.01
    assert next_rate(rate, False, 249) == 0.01
    # at the floor: one batch in 8 at 8 times the floor, the others not profiled
    got = [next_rate(rate, False, 250 + k) for k in range(16)]
    assert got.count(0.0) == 14 and got.count(pytest.approx(0.005)) == 2
    assert next_rate(rate, True, 6000) == 0.01 and rate[P_NEXT] == 0.01  # drift: at once


def test_a_drift_is_heeded_only_spacing_tuples_after_the_last() -> None:
    """The first drift is heeded; one found fewer than ``spacing`` tuples after the previous
    (heeded or not) is not (``out[1]`` says so); batches without drift add their tuples."""
    # [p now, floor, max, since, enough, K, batches at the floor, p next, spacing]
    rate = np.array([0.01, 0.01 / 16, 0.01, NEVER_DRIFTED, 250.0, 16.0, 0.0, 0.01, 75_000.0])
    out = np.array([-1, 0], np.int64)
    assert heeded_drift(rate, 3, 10_000, out) == 3 and out[1] == 0  # the first
    assert heeded_drift(rate, -1, 10_000, out) == -1 and out[1] == 0
    assert heeded_drift(rate, 2, 10_000, out) == -1 and out[1] == 1  # 20,000 after
    for _ in range(6):
        assert heeded_drift(rate, -1, 10_000, out) == -1 and out[1] == 0
    assert heeded_drift(rate, 0, 10_000, out) == -1  # 70,000 after the unheeded one
    for _ in range(7):
        heeded_drift(rate, -1, 10_000, out)
    assert heeded_drift(rate, 5, 5_000, out) == 5 and out[1] == 0  # 75,000


@pytest.mark.parametrize(("period", "heeds_all"), [(20_000, False), (200_000, True)])
def test_drifts_closer_than_the_spacing_are_not_heeded(period: int, heeds_all: bool) -> None:
    """Fig. 19's workload in 10,000-tuple batches: with a change every 200,000 tuples every
    drift is heeded (the window emptied, p at its maximum); every 20,000 only a few are,
    and the stage keeps p at its floor (and reports the drifts it did not heed)."""
    workload = FilterWorkload(
        n=8, gamma=2, selectivity=(0.2, 0.4, 0.6, 0.8), costs=(1, 1, 1, 1, 10, 10, 10, 10),
        change_every=period, seed=3,
    )  # fmt: skip
    run = FilterWorkloadRun(workload)
    stage = _stage(run, "agreedy")
    for _ in range(100):
        stage.process(run.next_batch(10_000)[0])
    stats = stage.stats()
    changes = 1_000_000 // period
    if heeds_all:
        assert stats["drifts_unheeded"] == 0 and stats["drifts"] >= changes - 1
    else:
        assert stats["drifts"] <= 3 and stats["drifts_unheeded"] >= changes // 2, stats["drifts"]
        assert stage.reoptimizer.profile_probability < 0.01


def test_resort_points_double_up_to_the_capacity() -> None:
    checkpoint = new_checkpoint(100)
    fired = [s for s in range(0, 2_000, 10) if resort_due(checkpoint, s, 1_000)]
    assert fired == [200, 400, 800, 1000]


def _stage(run: FilterWorkloadRun, algorithm: str, **settings_: object) -> FilterStage:
    n = run.workload.n
    config = OrderingConfig(algorithm, costs=(1.0,) * n, seed=2, **settings_)  # type: ignore[arg-type]
    return FilterStage(workload_predicates(run), config)


@pytest.mark.parametrize("n", [3, 5, 6])
def test_converges_to_the_optimal_order(n: int) -> None:
    """Distinct selectivities (Γ = 1): the optimal order (exact, from the batches' truth) is
    reached, then p backs off to its floor and the order stays."""
    sel = tuple(np.linspace(0.2, 0.8, n).round(2))
    workload = FilterWorkload(n=n, gamma=1, selectivity=sel, window_rate=0.0, seed=n)
    run = FilterWorkloadRun(workload)
    stage = _stage(run, "agreedy")
    truth = []
    for _ in range(60):
        batch, passes = run.next_batch(20_000)
        stage.process(batch)
        truth.append(~passes)
    drops = np.concatenate(truth)
    best, cost = optimal_order(drops)
    assert order_cost(stage.order, drops) <= cost * 1.01
    assert stage.mean_profile_probability == pytest.approx(0.01 / 16)  # at the floor
    changes = stage.changes_total
    for _ in range(20):
        stage.process(run.next_batch(20_000)[0])
    assert stage.changes_total == changes


def test_ties_do_not_thrash() -> None:
    """Eight filters of equal selectivity (the bench's workload): every order costs about the
    same, and the paper's A-Greedy reorders on noise; A-Greedy+ hardly does."""
    runs = [FilterWorkloadRun(FilterWorkload(n=8, window_rate=0.0, seed=1)) for _ in range(2)]
    plus, exact = _stage(runs[0], "agreedy"), _stage(runs[1], "agreedy_exact")
    for _ in range(40):
        plus.process(runs[0].next_batch(65_536)[0])
        exact.process(runs[1].next_batch(65_536)[0])
    assert plus.changes_total <= 8
    assert exact.changes_total >= 3 * plus.changes_total
    assert plus.reoptimizer.adaptive is not None and plus.reoptimizer.adaptive.drifts == 0


def test_adapts_after_a_change_as_fast_as_the_paper() -> None:
    """One permutation of the group selectivities (Figs 16-18): the order's expected cost is
    within 5% of the new optimum sooner than the paper's A-Greedy gets there."""
    from processors.experiments.filters_changes import (
        settle_tuples,
        timeline,
        timeline_workloads,
    )

    change = 200_000
    workload, _ = next(timeline_workloads(change, 0, 1.5))
    rows, _ = timeline(workload, 0, ("agreedy", "agreedy_exact"))
    plus, exact = (
        settle_tuples(rows, "agreedy", change),
        settle_tuples(rows, "agreedy_exact", change),
    )
    assert plus < change / 2
    assert plus <= 1.2 * exact


def test_index_filters_adapt_as_the_per_position_path_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Drift, the rate and the re-sorts run inside the index filters' kernel call and in
    Python on the per-position path: same samples, windows, views, orders and changes."""
    workload = FilterWorkload(
        n=5, gamma=1, selectivity=(0.2, 0.4, 0.5, 0.6, 0.9), change_every=30_000, seed=9
    )
    runs = [FilterWorkloadRun(workload), FilterWorkloadRun(workload)]
    stages = [_stage(r, "agreedy", min_profile_tuples=20) for r in runs]
    stages[1]._index_filters = False
    with caplog.at_level(logging.INFO):
        for _ in range(40):
            outs = []
            for run, stage in zip(runs, stages, strict=True):
                batch, passes = run.next_batch(3_000)
                out = stage.process(batch)
                outs.append(out[0].ts.tolist() if out else [])
                assert outs[-1] == batch.ts[passes.all(axis=1)].tolist()
            fused, plain = stages
            assert fused.order == plain.order
            assert fused.reoptimizer.profile_probability == plain.reoptimizer.profile_probability
            assert fused.reoptimizer.view.tolist() == plain.reoptimizer.view.tolist()
            w1, w2 = fused.reoptimizer.window, plain.reoptimizer.window
            assert w1.bits[w1.live_rows()].tolist() == w2.bits[w2.live_rows()].tolist()
    fused, plain = stages
    assert fused.changes_total == plain.changes_total > 0
    assert fused.reoptimizer.adaptive.drifts == plain.reoptimizer.adaptive.drifts > 0  # type: ignore[union-attr]
    assert "filter order changed" in caplog.text  # every change is still reported


def _partitions_of_two_phases(partitions: int = 4) -> list[tuple[Batch, Batch]]:
    """The filter integration test's stream (tests/integration/test_filter_query.py): 30,000
    readings per phase, split over ``partitions`` by Kafka's partitioner on the sensor keys.
    Phase 1: temperature < 25 passes 10%, humidity > 10 95%; phase 2: 98% and 10%."""
    phases = []
    for phase in (1, 2):
        batch = reading_columns(30_000, seed=phase, start_ms=1_700_000_000_000 + phase * 300_000)
        rng = np.random.default_rng(100 + phase)
        a = rng.random(30_000) < (0.10 if phase == 1 else 0.98)
        b = rng.random(30_000) < (0.95 if phase == 1 else 0.10)
        batch.columns["temperature"] = np.where(a, 20.0, 30.0)
        batch.columns["humidity"] = np.where(b, 50.0, 5.0).astype(np.float32)
        assert batch.key is not None
        phases.append((batch, kafka_partitions(batch.key, partitions)))
    return [
        (phases[0][0].take(np.flatnonzero(phases[0][1] == p)),
         phases[1][0].take(np.flatnonzero(phases[1][1] == p)))
        for p in range(partitions)
    ]  # fmt: skip


@pytest.mark.parametrize("batch_size", [50, 100, 573, 2_000, 4_096])
def test_every_partition_reorders_after_the_change(batch_size: int) -> None:
    """Each partition of the integration test's stream (about 7,000 tuples a phase) puts the
    filter that drops most first after each phase, however small its batches, on fixed
    costs. (Before the drift test pooled small batches and tested young references, a
    partition whose order had changed shortly before the change took the new rates as its
    reference and kept the old order: partition 3 at 100 tuples a batch, as once in CI.)"""
    names = ("temperature < 25.0", "humidity > 10.0")
    for p, phases in enumerate(_partitions_of_two_phases()):
        for seed in range(3):
            config = OrderingConfig(
                "agreedy", profile_probability=0.5, window_tuples=200, min_profile_tuples=20,
                costs=(1.0, 1.0, 1.0), seed=seed,
            )  # fmt: skip
            stage = FilterStage(
                [Compare("ok", "==", True), Compare("humidity", ">", 10.0),
                 Compare("temperature", "<", 25.0)], config,
            )  # fmt: skip
            for phase, name in zip(phases, names, strict=True):
                for start in range(0, len(phase), batch_size):
                    stage.process(phase.slice(start, min(len(phase), start + batch_size)))
                assert stage.order_names[0] == name, (p, seed, stage.stats()["recent_changes"])


@pytest.mark.parametrize("index_path", [True, False])
def test_a_cost_change_is_acted_on_at_the_floor(index_path: bool) -> None:
    """At p's floor 7 batches in 8 bring no profile tuple, and the kernel skips the checks of a
    window that did not change; when an a_i moves by more than 5%, A-Greedy+ checks the view
    it has again (a small partition may end before its next profiled batch)."""
    workload = FilterWorkload(n=2, gamma=1, selectivity=(0.1, 0.9), window_rate=0.0, seed=4)
    run = FilterWorkloadRun(workload)
    config = OrderingConfig("agreedy", costs=(1.0, 1.0) if index_path else None, seed=2)
    stage = FilterStage(workload_predicates(run), config)
    stage._index_filters = index_path
    for _ in range(40):
        stage.process(run.next_batch(20_000)[0])
    assert stage.order == [0, 1] and stage.mean_profile_probability < config.p  # at the floor
    while True:  # up to a profiled batch: the next 7 are not profiled
        profiled = stage.profile_tuples
        stage.process(run.next_batch(20_000)[0])
        if stage.profile_tuples > profiled:
            break
    if index_path:  # the fixed a_i change in place (the kernel holds the array)
        stage.costs.values()[0] = 100.0
    else:  # 64 timed calls at 10 us a tuple: filter 0's median a_i
        stage.costs.record_many([0] * 64, [1e9] * 64, [100_000] * 64)
    profiled, changes = stage.profile_tuples, stage.changes_total
    for _ in range(4):  # the per-position path re-measures the a_i every 4th batch
        stage.process(run.next_batch(20_000)[0])
        if stage.changes_total > changes:
            break
    assert stage.order == [1, 0] and stage.changes_total == changes + 1
    assert stage.profile_tuples == profiled  # no profile tuple came before the change


def _integration_test_stage() -> FilterStage:
    """The integration test's three filters under A-Greedy+, costs fixed (3, 2, 1)."""
    config = OrderingConfig(
        "agreedy", profile_probability=0.5, window_tuples=200, min_profile_tuples=20,
        costs=(3.0, 2.0, 1.0),
    )  # fmt: skip
    return FilterStage(
        [Compare("ok", "==", True), Compare("humidity", ">", 10.0),
         Compare("temperature", "<", 25.0)], config,
    )  # fmt: skip


def test_a_partition_reorders_when_a_batch_straddles_the_change() -> None:
    """A batch holds the end of phase 1 and the start of phase 2 (as when a worker reads both
    as one backlog), and it is one of the floor's profiled batches: its counters drift, and
    its samples from before the change row are left out. (Kept, they filled the 200-tuple
    window; one small batch later p was at its floor, and the old order held to the end.)"""
    first, second = _partitions_of_two_phases()[3]
    stage = _integration_test_stage()
    start = 0  # phase 1 in batches of 50 up to a profiled batch 800-1,700 tuples from its end
    while not (stage.reoptimizer.profile_probability > 0 and len(first) - start <= 1_700):
        stage.process(first.slice(start, start + 50))
        start += 50
    assert stage.order_names[0] == "temperature < 25.0" and len(first) - start >= 800
    stage.process(Batch.concat([first.slice(start, len(first)), second.slice(0, 200)]))
    assert stage.reoptimizer.adaptive is not None and stage.reoptimizer.adaptive.drifts == 1
    stage.process(second.slice(200, 300))  # a small batch, then large ones
    for start in range(300, len(second), 1_500):
        stage.process(second.slice(start, min(len(second), start + 1_500)))
    assert stage.order_names[0] == "humidity > 10.0", stage.stats()["recent_changes"]


def test_a_change_in_the_last_batch_is_acted_on() -> None:
    """Phase 2 comes as one batch (a worker's backlog), at p's floor, where most batches are
    not profiled: its counters drift and, since it alone can refill the window, its later
    half is profiled again at the maximum p, so the order changes before the partition's
    input ends (it once stayed as it was)."""
    for p, (first, second) in enumerate(_partitions_of_two_phases()):
        stage = _integration_test_stage()
        for start in range(0, len(first), 500):
            stage.process(first.slice(start, min(len(first), start + 500)))
        assert stage.order_names[0] == "temperature < 25.0"
        stage.process(second)
        assert stage.reoptimizer.adaptive is not None and stage.reoptimizer.adaptive.drifts == 1
        assert stage.order_names[0] == "humidity > 10.0", (p, stage.stats()["recent_changes"])


def _change_row_numpy(sels: np.ndarray, counts: np.ndarray, k: int, size: int) -> int:
    """The oracle: the same CUSUM in numpy, as the stage first computed it."""
    from processors.kernels.drift import CHANGE_LEVEL

    reach = sels[k, : counts[k]]
    flag = np.zeros(size, dtype=np.bool_)
    flag[sels[k + 1, : counts[k + 1]]] = True
    x = flag[reach].astype(np.float64)
    if len(x) < 2 or not 0.0 < x.mean() < 1.0:
        return 0
    walk = np.abs(np.cumsum(x - x.mean()))
    t = int(np.argmax(walk))
    noise = np.sqrt(len(x) * x.mean() * (1.0 - x.mean()))
    return int(reach[t]) + 1 if walk[t] > CHANGE_LEVEL * noise else 0


@pytest.mark.parametrize("seed", range(40))
def test_the_change_row_kernel_equals_numpy(seed: int) -> None:
    """A drifting batch's change row (kernels.drift.change_row) against numpy's CUSUM, on
    batches with a change at a random row, without one, and with all or none passing."""
    from processors.core.ordering.profile import change_row

    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 3_000))
    reach = np.sort(rng.choice(size, int(rng.integers(0, size + 1)), replace=False))
    cut = int(rng.integers(0, len(reach) + 1))
    before, after = rng.random(2) if seed % 4 else (seed % 8 / 4.0, seed % 8 / 4.0)
    p = np.where(np.arange(len(reach)) < cut, before, after)
    passed = reach[rng.random(len(reach)) < p]
    sels = np.zeros((3, size), dtype=np.int64)
    sels[1, : len(reach)] = reach
    sels[2, : len(passed)] = passed
    counts = np.array([size, len(reach), len(passed)], dtype=np.int64)
    assert change_row(sels, counts, 1, size) == _change_row_numpy(sels, counts, 1, size)
