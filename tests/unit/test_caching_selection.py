"""Offline cache selection (Theorem 4.1, Appendix B's greedy, exhaustive search) and memory
allocation (Sect. 5) against exact oracles: brute force over every subset."""

from __future__ import annotations

import itertools
import math

import pytest
from caching_helpers import FIG5, R, equijoin, names, random_orders
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from processors.core.caching.allocation import allocate, allocate_caches
from processors.core.caching.candidates import groups_of, prefix_candidates
from processors.core.caching.model import CacheEstimate, PipelineStats
from processors.core.caching.selection import (
    Problem,
    Slot,
    exhaustive,
    greedy,
    optimal_forest,
    problem_of,
    select,
)
from processors.core.joins.graph import JoinGraph

FLOATS = st.integers(0, 40).map(float)


def harmonic(m: int) -> float:
    return sum(1 / k for k in range(1, m + 1))


def independent_total(problem: Problem, chosen: tuple[int, ...]) -> float:
    """Appendix B's objective recomputed from scratch: proc of the chosen caches, each used
    group's cost once, and d c of every operator no chosen cache covers."""
    covered = {(problem.caches[k].pipeline, p) for k in chosen for p in _span(problem, k)}
    lone = sum(
        v
        for i, row in enumerate(problem.op_cost)
        for p, v in enumerate(row)
        if (i, p) not in covered
    )
    groups = {problem.caches[k].group for k in chosen}
    return (
        lone
        + sum(problem.caches[k].proc for k in chosen)
        + sum(problem.group_cost[g] for g in groups)
    )


def _span(problem: Problem, k: int) -> range:
    return range(problem.caches[k].start, problem.caches[k].end + 1)


def brute_best_net(problem: Problem) -> float:
    """The oracle: every subset of caches, the overlapping ones skipped."""
    best = 0.0
    m = len(problem.caches)
    for r in range(1, m + 1):
        for subset in itertools.combinations(range(m), r):
            if problem.feasible(subset):
                best = max(best, problem.net(subset))
    return best


@st.composite
def real_problems(draw: st.DrawFn, shared: bool = True, max_caches: int = 12) -> Problem:
    """Candidates of pipeline orders of an n-way equijoin, random costs."""
    n = draw(st.integers(3, 6))
    orders = draw(random_orders(n))
    cands = prefix_candidates(equijoin(n), orders).caches
    assume(len(cands) <= max_caches)
    op_cost = tuple(tuple(draw(FLOATS) for _ in range(n - 1)) for _ in range(n))
    if shared:
        groups, group_of = groups_of(cands)
    else:
        groups, group_of = tuple((k,) for k in range(len(cands))), tuple(range(len(cands)))
    caches = tuple(
        Slot(c.pipeline, c.start, c.end, group_of[k], draw(FLOATS)) for k, c in enumerate(cands)
    )
    return Problem(op_cost, caches, tuple(draw(FLOATS) for _ in groups))


@st.composite
def laminar_problems(draw: st.DrawFn) -> Problem:
    """Random nested-or-disjoint intervals on 1-3 pipelines of up to 7 operators, unshared."""
    pipes = draw(st.integers(1, 3))
    lengths = [draw(st.integers(1, 7)) for _ in range(pipes)]
    slots: list[Slot] = []
    for i, length in enumerate(lengths):
        for _ in range(draw(st.integers(0, 6))):
            s = draw(st.integers(0, length - 1))
            e = draw(st.integers(s, length - 1))
            new = Slot(i, s, e, len(slots), draw(FLOATS))
            if all(
                not new.overlaps(o)
                or (o.start <= s and e <= o.end)
                or (s <= o.start and o.end <= e)
                for o in slots
            ) and all((o.pipeline, o.start, o.end) != (i, s, e) for o in slots):
                slots.append(new)
    op_cost = tuple(tuple(draw(FLOATS) for _ in range(length)) for length in lengths)
    return Problem(op_cost, tuple(slots), tuple(draw(FLOATS) for _ in slots))


@settings(max_examples=150, deadline=None)
@given(st.one_of(real_problems(shared=False), laminar_problems()))
def test_recursion_equals_exhaustive_without_sharing(problem: Problem) -> None:
    """Theorem 4.1 / 4.2: without shared caches the bottom-up recursion is optimal."""
    got = optimal_forest(problem)
    assert problem.feasible(got)
    want = brute_best_net(problem)
    assert problem.net(got) == pytest.approx(want)
    assert problem.net(exhaustive(problem)) == pytest.approx(want)
    assert select(problem).method == "recursion"


@settings(max_examples=150, deadline=None)
@given(real_problems(shared=True))
def test_greedy_feasible_and_within_log_bound(problem: Problem) -> None:
    """Appendix B: the greedy's caches never overlap, and its total cost is within H(m) of
    the optimum, m the number of operators (the set-cover argument of Theorem 4.3)."""
    got = greedy(problem)
    assert problem.feasible(got)
    total = problem.total_cost(got)
    assert total == pytest.approx(independent_total(problem, got))
    best = exhaustive(problem)
    assert problem.net(best) == pytest.approx(brute_best_net(problem))
    opt = problem.total_cost(best)
    assert opt <= total + 1e-9
    assert total <= harmonic(problem.n_operators) * opt + 1e-9


@st.composite
def easy_problems(draw: st.DrawFn) -> Problem:
    """Disjoint unshared caches, each either cheaper per operator than every operator it
    covers or dearer than all of them together: the greedy's order is then the optimum's."""
    pipes = draw(st.integers(1, 3))
    op_cost, slots = [], []
    for i in range(pipes):
        row = [float(draw(st.integers(1, 30))) for _ in range(draw(st.integers(2, 7)))]
        op_cost.append(tuple(row))
        cuts = sorted(draw(st.sets(st.integers(0, len(row)), max_size=4)) | {0, len(row)})
        for s, e in zip(cuts, cuts[1:], strict=False):
            if e - s >= 2 and draw(st.booleans()):
                seg = row[s:e]
                proc = (
                    min(seg) * (e - s) * draw(st.floats(0, 1))
                    if draw(st.booleans())
                    else sum(seg) + 1 + draw(FLOATS)
                )
                slots.append(Slot(i, s, e - 1, len(slots), proc))
    return Problem(tuple(op_cost), tuple(slots), tuple(0.0 for _ in slots))


@settings(max_examples=100, deadline=None)
@given(easy_problems())
def test_greedy_exact_on_easy_instances(problem: Problem) -> None:
    got = greedy(problem)
    assert problem.net(got) == pytest.approx(brute_best_net(problem))


def test_greedy_can_miss_the_optimum() -> None:
    """One cache over operators of cost 1 and 10, proc 10.5: the greedy takes the cheap
    operator alone first (rate 1 < 5.25), then the other (10 < 10.5); the optimum caches."""
    p = Problem(((1.0, 10.0),), (Slot(0, 0, 1, 0, 10.5),), (0.0,))
    assert greedy(p) == ()
    assert p.total_cost(greedy(p)) == 11.0
    assert exhaustive(p) == optimal_forest(p) == (0,)
    assert p.total_cost((0,)) == 10.5
    assert harmonic(2) * 10.5 >= 11.0


def fig5_problem(member_proc: float, group_cost: float) -> tuple[list, Problem]:
    """Fig. 5(a) with every operator at d c = 5: the R1R2 caches (ΔR3, ΔR4, ΔR6) save 10
    each for proc ``member_proc``, the rest save nothing and cost 1."""
    cands = list(prefix_candidates(equijoin(6), FIG5).caches)
    stats = [PipelineStats(d=(1.0,) * 6, c=(5.0,) * 5) for _ in range(6)]
    ests = []
    for c in cands:
        work = 5.0 * c.length
        if c.members == names("R1", "R2"):
            ests.append(CacheEstimate(member_proc, work - member_proc, group_cost, 100.0))
        else:
            ests.append(CacheEstimate(work, 0.0, 1.0, 100.0))
    return cands, problem_of(cands, ests, stats)


def test_fig5_sharing_pays_the_cost_once() -> None:
    """Each R1R2 cache's benefit (4) is below its cost (10), but the three share it: 12 - 10.
    The recursion (blind to sharing) caches nothing; the greedy and the optimum share."""
    cands, p = fig5_problem(member_proc=6.0, group_cost=10.0)
    r1r2 = tuple(k for k, c in enumerate(cands) if c.members == names("R1", "R2"))
    assert sorted(cands[k].pipeline for k in r1r2) == [R["R3"], R["R4"], R["R6"]]
    assert optimal_forest(p) == ()
    assert exhaustive(p) == greedy(p) == r1r2
    assert p.net(r1r2) == pytest.approx(2.0)
    sel = select(p)
    assert (sel.method, sel.chosen, sel.net) == ("greedy", r1r2, pytest.approx(2.0))
    # sharing no longer pays at group cost 13: nothing is cached
    _, p2 = fig5_problem(member_proc=6.0, group_cost=13.0)
    assert exhaustive(p2) == greedy(p2) == ()


def test_select_dispatch_and_cap() -> None:
    cands, p = fig5_problem(6.0, 10.0)
    assert select(p, exhaustive_cap=len(cands)).method == "exhaustive"
    with pytest.raises(ValueError):
        exhaustive(p, cap=3)
    crossing = Problem(((1.0, 1.0, 1.0),), (Slot(0, 0, 1, 0, 0.5), Slot(0, 1, 2, 1, 0.1)), (0, 0))
    assert not crossing.laminar
    with pytest.raises(ValueError):
        optimal_forest(crossing)
    assert select(crossing).method == "greedy"
    assert select(crossing, exhaustive_cap=6).chosen == (1,)
    assert crossing.feasible(greedy(crossing))


def test_problem_validation() -> None:
    with pytest.raises(ValueError):
        Problem(((1.0,),), (Slot(0, 0, 1, 0, 1.0),), (0.0,))
    with pytest.raises(ValueError):
        Problem(((1.0, 1.0),), (Slot(0, 0, 1, 0, -1.0),), (0.0,))


# -- memory allocation (Sect. 5) ------------------------------------------------------------


def knapsack(nets: list[float], mem: list[float], budget: float) -> float:
    best = 0.0
    for r in range(len(nets) + 1):
        for s in itertools.combinations(range(len(nets)), r):
            if sum(mem[k] for k in s) <= budget:
                best = max(best, sum(nets[k] for k in s))
    return best


ITEMS = st.lists(
    st.tuples(st.integers(-5, 50).map(float), st.integers(1, 40).map(float)), max_size=9
)


@settings(max_examples=200, deadline=None)
@given(ITEMS, st.integers(0, 120).map(float))
def test_allocation_within_budget_and_greedy_bounds(items, budget: float) -> None:
    nets = [n for n, _ in items]
    mem = [m for _, m in items]
    a = allocate(nets, mem, budget)
    assert sorted(a.granted + a.refused) == list(range(len(items)))
    assert a.used_bytes == pytest.approx(sum(mem[k] for k in a.granted))
    assert a.used_bytes <= budget
    left = budget - a.used_bytes
    # a positive item left out did not fit even in what remains at the end
    assert all(nets[k] <= 0 or mem[k] > left for k in a.refused)
    prios = [nets[k] / mem[k] for k in a.granted]
    assert prios == sorted(prios, reverse=True)
    value = sum(nets[k] for k in a.granted)
    positive = [n for n in nets if n > 0]
    opt = knapsack(nets, mem, budget)
    # the fractional knapsack bound: greedy by density loses at most one item's value
    assert value <= opt + 1e-9
    assert value >= opt - max(positive, default=0.0) - 1e-9
    if sum(m for n, m in items if n > 0) <= budget:
        assert value == pytest.approx(opt)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-5, 50).map(float), max_size=9), st.integers(0, 10))
def test_allocation_equal_sizes_is_optimal(nets: list[float], fits: int) -> None:
    """With equal memories priority order is value order: the greedy is the knapsack optimum."""
    mem = [8.0] * len(nets)
    a = allocate(nets, mem, 8.0 * fits)
    assert sum(nets[k] for k in a.granted) == pytest.approx(knapsack(nets, mem, 8.0 * fits))


def test_allocation_by_hand() -> None:
    """Priorities 2, 1.5, 1, 0.5: 100 bytes fit the first (10) and third (60), the second (40)
    does not fit after them... in priority order: 10 (2.0), 40 (1.5), 60 (1.0) is skipped."""
    a = allocate([20.0, 60.0, 60.0, 5.0], [10.0, 40.0, 60.0, 10.0], 100.0)
    assert a.granted == (0, 1, 3)
    assert a.refused == (2,)
    assert a.used_bytes == 60.0
    assert allocate([1.0], [1.0], 0.0).granted == ()


def test_shared_cache_allocated_as_one() -> None:
    """R1R2's three members are one stored cache: net 3 * 4 - 10, memory 3 * 100."""
    cands = list(prefix_candidates(equijoin(6), FIG5).caches)
    r1r2 = [k for k, c in enumerate(cands) if c.members == names("R1", "R2")]
    ests = [CacheEstimate(6.0, 4.0, 10.0, 100.0) for _ in cands]
    kept, dropped, used = allocate_caches(cands, r1r2, ests, 300.0)
    assert (kept, dropped, used) == (tuple(r1r2), (), 300.0)
    kept, dropped, used = allocate_caches(cands, r1r2, ests, 299.0)
    assert (kept, dropped, used) == ((), tuple(r1r2), 0.0)


def test_three_way_graph_problem_of() -> None:
    """problem_of: operator costs d c, proc from the estimates, group cost shared."""
    g = JoinGraph(3, [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))])
    cands = prefix_candidates(g, [(1, 2), (2, 0), (1, 0)]).caches
    stats = [
        PipelineStats(d=(10.0, 20.0, 5.0), c=(1.0, 2.0)),
        PipelineStats(d=(4.0, 8.0, 1.0), c=(1.0, 1.0)),
        PipelineStats(d=(6.0, 3.0, 2.0), c=(1.0, 1.0)),
    ]
    p = problem_of(cands, [CacheEstimate(15.25, 34.75, 2.75, 3200.0)], stats)
    assert p.op_cost == ((10.0, 40.0), (4.0, 8.0), (6.0, 3.0))
    assert p.benefit(0) == pytest.approx(34.75)
    assert p.net((0,)) == pytest.approx(32.0)
    assert math.isclose(p.total_cost((0,)), 71.0 - 32.0)
