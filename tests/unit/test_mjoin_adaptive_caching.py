"""Adaptive caching at run time in the MJoin (A-Caching, Sects. 4.3-4.5, 5, 6, Appendix A):
exact against the naive oracle with the selector adding and dropping caches and A-Greedy
reordering; Fig. 12's workload (the R ⋈ S cache in ΔT's pipeline, then after a 20x burst of R
the S ⋈ T cache in ΔR's); memory budgets; configuration through adapt(), CQL and the plan.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle.naive import naive_join, result_counter
from test_cql_parser import CATALOG
from test_eager_join import range_query
from test_mjoin_cache_differential import GRAPHS, feed, graph_predicates
from test_mjoin_differential import _diff, oracle_deltas, random_window, raw_stream

from processors.core.batch import Batch
from processors.core.ordering.config import OrderingConfig, OrderingConfigError
from processors.core.ordering.reoptimizers import make_reoptimizer
from processors.core.plan import QueryError, Window
from processors.core.query import Query
from processors.cql import parse_cql
from processors.cql.errors import CqlError
from processors.physical.fleet import FleetRunner
from processors.stages import mjoin_adaptive_caching as mac
from processors.stages import mjoin_stage
from processors.stages.eager_mjoin import EagerMJoinStage
from processors.stages.mjoin_stage import MJoinStage
from processors.stages.window_stage import WindowStage


@pytest.fixture
def small_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Statistics from a few tuples: every delta profiled, Bloom windows of 8 probes."""
    monkeypatch.setattr(mac, "MIN_PROFILE_P", 1.0)
    monkeypatch.setattr(mac, "BLOOM_WINDOW", 8)
    monkeypatch.setattr(mac, "MIN_OPEN", 2)


def adaptive_config(
    algorithm: str, interval: int, mb: float | None = None, metric: str = "tuples"
) -> OrderingConfig:
    return OrderingConfig(
        algorithm, profile_probability=0.3, min_profile_tuples=2, window_tuples=20,
        caching=True, cache_memory_mb=mb, cache_interval=interval, cache_window=2,
        cache_metric=metric,
    )  # fmt: skip


def run_random(
    seed: int, n: int, graph: str, algorithm: str, release_p: float, slice_size: int,
    interval: int, mb: float | None = None, free: bool = False, restart: bool = False,
    metric: str = "tuples",
) -> MJoinStage:  # fmt: skip
    """One random workload with adaptive caching; ``free``: cache probes and updates cost
    nothing, so that every cache with hits is worth using (many more caches placed)."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(20, 60 if n <= 3 else 40))
    domain = int(rng.integers(2, 5))
    streams = [raw_stream(rng, size, domain) for _ in range(n)]
    windows = [random_window(rng, unbounded=n <= 3) for _ in range(n)]
    preds = graph_predicates(graph, n, rng)
    join = MJoinStage(
        [f"s{i}" for i in range(n)], preds, adaptive_config(algorithm, interval, mb, metric)
    )
    expected = naive_join(
        [oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)], preds
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mjoin_stage, "EPOCH_SLICE", slice_size)
        if free:
            mp.setattr(mac.AdaptiveCaching, "_units", lambda self, stats: (0.0, 0.0))
        at = int(rng.integers(1, 6 * n)) if restart else None
        batches, join = feed(streams, windows, join, rng, release_p, at, restored)
    got = result_counter(batches, [["a", "b", "c"]] * n, [f"s{i}." for i in range(n)])
    assert got == expected, _diff(got, expected)
    assert join.caches.invalid_refs(join) == 0
    assert all(c.cache.unlinked == 0 for c in join.caches.placed)
    return join


def restored(join: MJoinStage) -> MJoinStage:
    """A worker restart: a fresh stage with the same config from ``join``'s snapshot (caches
    are not in snapshots: the new stage profiles and selects them again)."""
    copy = MJoinStage(join.names, join.graph.predicates, join.config)
    copy.load_snapshot(join.snapshot())
    assert not copy.caches.placed
    return copy


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(3, 4),
    graph=st.sampled_from(GRAPHS),
    algorithm=st.sampled_from(["fixed", "agreedy"]),
    release_p=st.sampled_from([1.0, 0.5, 0.1]),
    slice_size=st.sampled_from([3, 16_384]),
    interval=st.sampled_from([4, 16, 64]),
    free=st.booleans(),
    restart=st.booleans(),
    metric=st.sampled_from(["tuples", "time"]),
)
def test_adaptive_caching_equals_the_naive_join(
    small_windows: None, seed: int, n: int, graph: str, algorithm: str, release_p: float,
    slice_size: int, interval: int, free: bool, restart: bool, metric: str,
) -> None:  # fmt: skip
    """Also across a restart mid-stream (caches rebuilt from nothing after the restore), and
    under either cost metric (the time metric's Bloom horizon and timed regular passes)."""
    run_random(seed, n, graph, algorithm, release_p, slice_size, interval, free=free,
               restart=restart, metric=metric)  # fmt: skip


def test_random_runs_do_add_and_drop_caches(small_windows: None) -> None:
    """The differential runs are not vacuous: caches are placed and dropped at run time."""
    added = dropped = hits = 0
    for seed in range(30):
        join = run_random(seed, 3 + seed % 2, GRAPHS[seed % len(GRAPHS)],
                          ("fixed", "agreedy")[seed % 2], 0.5, 16_384, 8, free=True)  # fmt: skip
        entries = join.stats()["recent_cache_changes"]
        added += sum(e.get("action") == "add" for e in entries)
        dropped += sum(e.get("action") == "drop" for e in entries)
        hits += sum(c["hits"] for c in join.stats()["caches"].values())
    assert added >= 15 and dropped >= 5 and hits >= 100, (added, dropped, hits)


# -- Fig. 12: R(A) ⋈ S(A, B) ⋈ T(B) -------------------------------------------------------------
RATES = (0.2, 5.0, 0.25)  # R, S, T per time unit (T's rate a multiple of R's)
DOMAINS = ((1, 100, 1), (100, 50, 1), (50, 1, 1))  # R.b = S.a (A), S.b = T.a (B)


def fig12(
    config: OrderingConfig, units: int = 3200, burst_at: int | None = 1600, seed: int = 0,
    check_bytes: float | None = None,
) -> tuple[int, MJoinStage, list[list[str]]]:  # fmt: skip
    """Results, the join, and the caches used after each release."""
    rng = np.random.default_rng(seed)
    join = MJoinStage(["r", "s", "t"], [((0, "b"), (1, "a")), ((1, "b"), (2, "a"))], config)
    fronts = [WindowStage(Window("x", "range", 100)) for _ in range(3)]
    out, used = 0, []
    for start in range(0, units, 10):
        for i in range(3):
            rate = RATES[i] * (20 if i == 0 and burst_at is not None and start >= burst_at else 1)
            k = rng.poisson(rate * 10)
            ts = np.sort(rng.integers(start, start + 10, k)).astype(np.int64)
            cols = {
                c: rng.integers(0, d, k).astype(np.int64)
                for c, d in zip("abc", DOMAINS[i], strict=True)
            }
            for deltas in fronts[i].process(Batch.inserts(cols, ts)):
                join.push(i, deltas)
        out += sum(len(b) for b in join.release())
        if check_bytes is not None:
            assert join.caches.nbytes <= check_bytes
        if join.caches.adaptive is not None:
            used.append(sorted(join.caches.adaptive.stats(join)["used"]))
    out += sum(len(b) for b in join.flush())
    return out, join, used


FIG12 = OrderingConfig("agreedy", caching=True, cache_interval=2000, cache_metric="tuples")
RS_IN_T = "Δt: [s ⋈ r] on c1"  # T ⋈ (R ⋈ S): keyed by B
ST_IN_R = "Δr: [s ⋈ t] on c0"  # R ⋈ (T ⋈ S): keyed by A


def test_fig12_the_r_s_cache_then_after_a_burst_of_r_the_s_t_cache(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger=mac.__name__):
        got, join, used = fig12(FIG12)
    plain, _, _ = fig12(OrderingConfig("agreedy"))
    assert got == plain > 0
    half = len(used) // 2
    assert [RS_IN_T] in used[:half] and ST_IN_R not in sum(used[:half], [])
    assert used[-1] == [ST_IN_R] and RS_IN_T not in sum(used[half:][len(used) // 8 :], [])
    stats = join.stats()
    recent = stats["adaptive_caching"]["recent_changes"]
    assert [c["added"] for c in recent if c["added"]][:1] == [[RS_IN_T]]
    assert any(c["dropped"] == [RS_IN_T] for c in recent)
    assert recent[-1]["used"] == [ST_IN_R]
    actions = [(e["cache"], e["action"]) for e in stats["recent_cache_changes"]]
    assert actions[0][1] == "add" and ("r:0-1[s,t]", "add") in actions
    assert stats["cache_changes_total"] >= 3
    assert stats["caches"]["r:0-1[s,t]"]["hits"] > stats["caches"]["r:0-1[s,t]"]["misses"]
    assert any("caches changed" in r.message for r in caplog.records)


@pytest.mark.parametrize(("p", "cache_p", "used"), [(0.5, None, 0.5), (0.01, None, 0.05),
                                                     (0.5, 0.01, 0.01)])  # fmt: skip
def test_cache_profiling_has_its_own_probability(p: float, cache_p: float | None, used: float):
    """Appendix A's p_i: by default the larger of A-Greedy's p and 0.05; a setting of its own
    lets A-Greedy profile often (a rare drop seen soon) and the cache-free pass stay rare."""
    config = replace(FIG12, profile_probability=p, cache_profile_probability=cache_p)
    _, join, _ = fig12(config, units=200, burst_at=None)
    assert join.caches.adaptive is not None and join.caches.adaptive.p == used


def test_fig12_without_a_burst_keeps_the_r_s_cache() -> None:
    _, join, used = fig12(FIG12, units=2400, burst_at=None)
    assert used[-1] == [RS_IN_T]
    assert join.stats()["adaptive_caching"]["rounds"] >= 2


@pytest.mark.parametrize("mb", [0.0, 0.01, 0.03])
def test_a_memory_budget_is_never_exceeded(mb: float) -> None:
    config = FIG12.with_(cache_memory_mb=mb)
    got, join, used = fig12(config, units=2400, check_bytes=mb * 2**20)
    plain, _, _ = fig12(OrderingConfig("agreedy"), units=2400)
    assert got == plain
    assert join.stats()["adaptive_caching"]["budget_bytes"] == int(mb * 2**20)
    if mb == 0.0:
        assert not any(used) and join.caches.nbytes == 0


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 2**32 - 1), mb=st.sampled_from([0.0005, 0.002, 0.005]))
def test_random_runs_within_a_tiny_budget_equal_the_naive_join(
    small_windows: None, seed: int, mb: float
) -> None:
    join = run_random(seed, 3, "chain", "fixed", 0.5, 16_384, 8, mb)
    assert join.caches.nbytes <= mb * 2**20


# -- configuration ----------------------------------------------------------------------------
def test_caching_is_off_unless_enabled() -> None:
    assert not OrderingConfig().caches_on
    assert OrderingConfig(caching=True).caches_on
    assert OrderingConfig(cache_memory_mb=64).cache_budget_bytes == 64 * 2**20
    assert OrderingConfig(cache_memory_mb=64).caches_on
    _, join, _ = fig12(OrderingConfig("agreedy"), units=200)
    assert join.caches.adaptive is None and "adaptive_caching" not in join.stats()
    assert not join.caches.placed


@pytest.mark.parametrize(
    ("settings_", "words"),
    [
        ({"cache_memory_mb": -1}, "cache_memory_mb must be a non-negative number"),
        ({"caching": False, "cache_memory_mb": 4}, "caching=False"),
        ({"cache_memroy_mb": 4}, "unknown ordering setting(s) ['cache_memroy_mb']"),
        ({"caching": "yes"}, "caching must be True or False"),
        ({"cache_interval": 0}, "cache_interval must be at least 1"),
        ({"cache_metric": "cycles"}, "cache_metric must be 'time' or 'tuples'"),
        ({"cache_profile_probability": 0}, "cache_profile_probability must be in (0, 1]"),
        ({"cache_memory_mb": "64 MB"}, "cache_memory_mb must be a number"),
    ],
)
def test_configuration_errors_are_clear(settings_: dict, words: str) -> None:
    with pytest.raises(QueryError) as err:
        Query("q").adapt("agreedy", **settings_)
    assert words in str(err.value)
    if isinstance(settings_.get("cache_memory_mb", 0), int) and "caching" not in settings_:
        with pytest.raises(OrderingConfigError):
            OrderingConfig.from_mapping(settings_)


def test_adapt_carries_caching_through_the_plan_to_the_mjoin() -> None:
    plan = range_query({"r": 1, "s": 1}, {"r": 10, "s": 10}, "ordered")
    plan = plan.adapt("agreedy", caching=True, cache_memory_mb=2).build()
    assert plan.ordering_config.caches_on and plan.ordering_config.cache_memory_mb == 2
    assert plan.to_json()["caching"] == {"cache_memory_mb": 2, "cache_interval": 10_000,
                                         "cache_window": 10, "cache_metric": "tuples",
                                         "cache_profile_probability": None}  # fmt: skip
    assert range_query({"r": 1, "s": 1}, {"r": 10, "s": 10}).build().to_json()["caching"] is None
    joins = [s for c in FleetRunner(plan).chains.values() for s in c.stages
             if isinstance(s, MJoinStage)]  # fmt: skip
    assert joins and all(j.config.caches_on for j in joins)
    assert all(j.config.cache_budget_bytes == 2 * 2**20 for j in joins)


def test_the_eager_join_ignores_caching_with_a_note(caplog: pytest.LogCaptureFixture) -> None:
    plan = range_query({"r": 1, "s": 1}, {"r": 10, "s": 10}, "eager")
    plan = plan.adapt("agreedy", cache_memory_mb=2).build()
    with caplog.at_level(logging.INFO):
        joins = [s for c in FleetRunner(plan).chains.values() for s in c.stages
                 if isinstance(s, EagerMJoinStage)]  # fmt: skip
    assert joins and "not run by the eager join" in caplog.text
    assert all(j.caches.adaptive is None for j in joins)


JOIN_SQL = (
    "CREATE QUERY q WITH ({}) AS SELECT r.sensor_id FROM readings [ROWS 10] AS r, "
    "readings [ROWS 10] AS q WHERE r.site = q.site"
)


@pytest.mark.parametrize(
    ("setting", "mb"),
    [("cache_memory = '64 MB'", 64.0), ("cache_memory = '512 KB'", 0.5),
     ("cache_memory = 3", 3.0), ("adapt = 'agreedy', cache_memory = '1 GB'", 1024.0)],
)  # fmt: skip
def test_cql_cache_memory_enables_caching(setting: str, mb: float) -> None:
    plan = parse_cql(JOIN_SQL.format(setting), CATALOG).query().build()
    assert plan.ordering_config.caches_on and plan.ordering_config.cache_memory_mb == mb


@pytest.mark.parametrize("value", ["'64 parsecs'", "'-1 MB'", "'lots'"])
def test_cql_cache_memory_errors_name_the_setting(value: str) -> None:
    with pytest.raises(CqlError) as err:
        parse_cql(JOIN_SQL.format(f"cache_memory = {value}"), CATALOG).query().build()
    assert "expected a size such as '64 MB'" in err.value.reason


def test_a_join_order_change_drops_the_caches_it_breaks() -> None:
    """Sect. 4.5 step 5: ΔS probing T first breaks {R, S}'s prefix invariant, so the R ⋈ S
    cache in ΔT's pipeline goes at once, reported; the new candidate S ⋈ T starts profiled."""
    _, join, used = fig12(FIG12, units=1600, burst_at=None)
    assert used[-1] == [RS_IN_T] and join.caches.placed
    pipe = join.pipelines[1]
    order = [pipe.inputs.index(2), pipe.inputs.index(0)]  # T, then R
    join.reopts[1] = make_reoptimizer(pipe.size, OrderingConfig("fixed"), order, list(pipe.parent))
    join.caches.involved(join, 0)  # the next pipeline call
    assert not join.caches.placed
    stats = join.stats()
    assert "(Sect. 4.5 step 5)" in stats["adaptive_caching"]["recent_changes"][-1]["reason"]
    assert stats["adaptive_caching"]["recent_changes"][-1]["dropped"] == [RS_IN_T]
    assert stats["recent_cache_changes"][-1]["action"] == "drop"
    assert join.caches.adaptive is not None
    assert [c.label(join.names) for c in join.caches.adaptive.selector.cands] == [ST_IN_R]
    assert stats["adaptive_caching"]["profiled"] == 1


def test_a_cache_chosen_on_large_epochs_stays() -> None:
    """Epochs of thousands of deltas: a new cache's first batch misses on every key, but its
    segment is computed once per key, so the observed miss probability stays low and 4.5 a
    does not demote it (no add / drop thrashing)."""
    rng = np.random.default_rng(1)
    config = OrderingConfig("agreedy", profile_probability=0.1, caching=True)
    join = MJoinStage(["r", "s", "t"], [((0, "b"), (1, "a")), ((1, "b"), (2, "a"))], config)
    fronts = [WindowStage(Window("x", "range", 1000)) for _ in range(3)]
    rates, domains = (50.0, 1.0, 1.0), ((1, 200, 1), (200, 2500, 1), (2500, 1, 1))
    for start in range(0, 4000, 100):
        for i in range(3):
            k = rng.poisson(rates[i] * 100)
            ts = np.sort(rng.integers(start, start + 100, k)).astype(np.int64)
            cols = {
                c: rng.integers(0, d, k).astype(np.int64)
                for c, d in zip("abc", domains[i], strict=True)
            }
            for deltas in fronts[i].process(Batch.inserts(cols, ts)):
                join.push(i, deltas)
        join.release()
    stats = join.stats()
    assert stats["adaptive_caching"]["used"] == [ST_IN_R]
    assert stats["cache_changes_total"] == 1
    cache = stats["caches"]["r:0-1[s,t]"]
    assert cache["hits"] > 3 * cache["misses"]


def test_time_metric_prices_cache_work_at_the_cheapest_operator_until_measured() -> None:
    """Before any lookup or update has run, the time metric prices them at the cheapest
    operator's time per tuple in and out (a scan's would price a hash lookup as a scan); a
    first call of a few tuples moves the price only as far as its weight against the prior."""
    from processors.core.caching.estimators import WindowAverage
    from processors.core.caching.model import PipelineStats

    stats = [
        PipelineStats((1.0, 1.0, 1.0), (20_000.0, 100.0)),  # a scan, then an index probe
        PipelineStats((0.5, 0.0, 0.0), (300.0, 0.0)),
    ]
    assert mac.cheapest_per_tuple(stats) == pytest.approx(50.0)
    assert mac.cheapest_per_tuple([]) == 1.0
    spent, tuples = WindowAverage(8), WindowAverage(8)
    assert mac._per_tuple((spent, tuples), 50.0) == pytest.approx(50.0)
    spent.add(70_000.0)  # one call: 3 tuples in 70 us, mostly the call's overhead
    tuples.add(3.0)
    assert mac._per_tuple((spent, tuples), 50.0) == pytest.approx(
        (70_000 + 50 * mac.PRIOR_TUPLES) / (3 + mac.PRIOR_TUPLES)
    )


def test_time_metric_times_the_regular_pass_and_estimates_misses_over_a_horizon() -> None:
    """Under the time metric each operator's time per tuple comes from the regular pass (the
    profiled sample is too small a batch to time), the last operator's too (the pass's end
    hook), and the miss estimate remembers keys over BLOOM_HORIZON windows; the results are
    the plain MJoin's."""

    got, join, _ = fig12(replace(FIG12, cache_metric="time"), units=1200, burst_at=None)
    plain, _, _ = fig12(OrderingConfig("agreedy"), units=1200, burst_at=None)
    assert got == plain > 0
    ac = join.caches.adaptive
    assert ac is not None and ac.horizon == mac.BLOOM_HORIZON["time"] > 0
    assert all(b.horizon == ac.horizon for b in ac.blooms.values())
    timed = [[moved.count for _, moved in meters] for meters in ac.pass_units]
    assert any(counts[-1] > 0 for counts in timed) and all(counts[0] > 0 for counts in timed)
