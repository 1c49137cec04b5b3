"""A-Caching's adaptive state machine (Sect. 4.5) with memory (Sect. 5), step by step.

Four inputs joined on A; ΔR0 probes 1 2 3, ΔR1 0 2 3, ΔR2 0 1 3, ΔR3 0 1 2. The candidates:
A = R0R1 in ΔR2, B = R0R1 in ΔR3 (shared with A), C = R0R1R2 in ΔR3 (holding B). Every operator
costs d c = 5.
"""

from __future__ import annotations

import pytest
from caching_helpers import equijoin
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.core.caching.adaptive import AdaptiveConfig, AdaptiveSelector, State
from processors.core.caching.candidates import Candidate, prefix_candidates, selection_candidates
from processors.core.caching.model import CacheEstimate, PipelineStats
from processors.core.joins.graph import JoinGraph

NAMES = ["r0", "r1", "r2", "r3"]
ORDERS = [(1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2)]
STATS = [PipelineStats(d=(1.0,) * 4, c=(5.0,) * 3) for _ in range(4)]


def setup(interval: int = 1000, budget: float = float("inf")):
    cands = prefix_candidates(equijoin(4), ORDERS).caches
    a, b, c = cands
    assert (a.pipeline, a.relations, b.pipeline, b.relations) == (2, (0, 1), 3, (0, 1))
    assert (c.pipeline, c.relations) == (3, (0, 1, 2))
    sel = AdaptiveSelector(cands, AdaptiveConfig(interval=interval, budget_bytes=budget))
    return sel, a, b, c


def est(cand: Candidate, benefit: float, cost: float, memory: float = 100.0) -> CacheEstimate:
    return CacheEstimate(5.0 * cand.length - benefit, benefit, cost, memory)


def ests(a, b, c, ca=6.0, cc=13.0, cost_ab=4.0, mem=100.0):
    """A and B save 6 each for a shared cost of 4 (net 8 together); C saves 13 for 2. The best
    is A with C (6 - 4 + 11 = 13): C hides B."""
    return {
        a.ident: est(a, ca, cost_ab, mem),
        b.ident: est(b, 6.0, cost_ab, mem),
        c.ident: est(c, cc, 2.0, mem),
    }


def idents(cs) -> set:
    return {c.ident for c in cs}


def test_first_selection_waits_for_observations() -> None:
    sel, a, b, c = setup()
    e = ests(a, b, c)
    assert all(s is State.PROFILED for s in sel.state.values())
    assert sel.advance(100, e, ready={a.ident, b.ident}, stats=STATS) == []
    (ch,) = sel.advance(10, e, ready=set(e), stats=STATS)
    assert idents(ch.added) == {a.ident, c.ident} and ch.dropped == ()
    assert ch.method == "greedy" and "re-selection" in ch.reason
    assert ch.at_tuple == 110
    assert idents(sel.used) == {a.ident, c.ident}
    assert sel.state[b.ident] is State.UNUSED
    assert sel.rounds == 1 and not sel.profiling


def test_negative_net_benefit_demotes_at_once() -> None:
    """4.5 a: C's benefit falls below its cost between rounds: it stops being used."""
    sel, a, b, c = setup()
    sel.advance(0, ests(a, b, c), ready=idents([a, b, c]), stats=STATS)
    (ch,) = sel.advance(10, ests(a, b, c, cc=1.0), ready=set(), stats=STATS)
    assert idents(ch.dropped) == {c.ident} and "4.5 a" in ch.reason
    assert sel.state[c.ident] is State.UNUSED and sel.state[a.ident] is State.USED
    # a shared cache is judged as one: A's 6 against the cost 7 goes too
    (ch,) = sel.advance(10, ests(a, b, c, cc=1.0, cost_ab=7.0), ready=set(), stats=STATS)
    assert idents(ch.dropped) == {a.ident}


def test_round_profiles_unused_and_hiding_caches() -> None:
    """4.5 b: after I tuples the unused B is profiled, and C (which holds B) with it; A keeps
    being used. With stable statistics (4.5 c) the offline algorithm does not run again and
    the previous choice comes back."""
    sel, a, b, c = setup(interval=1000)
    e = ests(a, b, c)
    sel.advance(0, e, ready=set(e), stats=STATS)
    assert sel.advance(999, e, ready=set(), stats=STATS) == []
    (ch,) = sel.advance(1, e, ready=set(), stats=STATS)
    assert idents(ch.dropped) == {c.ident} and "4.5 b" in ch.reason
    assert sel.state[b.ident] is State.PROFILED and sel.state[c.ident] is State.PROFILED
    assert sel.state[a.ident] is State.USED and sel.profiling
    (ch,) = sel.advance(5, e, ready=set(e), stats=STATS)
    assert idents(ch.added) == {c.ident} and "4.5 c" in ch.reason
    assert sel.rounds == 1
    assert sel.state[b.ident] is State.UNUSED


@pytest.mark.parametrize(
    ("new_cc", "new_cost", "reruns"),
    [(11.0, 4.0, False), (10.0, 4.0, True), (13.0, 4.7, False), (13.0, 5.0, True)],
)
def test_rerun_only_beyond_p(new_cc: float, new_cost: float, reruns: bool) -> None:
    """4.5 c with p = 20%: C's benefit 13 -> 11 (-15%) or A and B's cost 4 -> 4.7 (+17.5%)
    keep the choice; 13 -> 10 (-23%) or 4 -> 5 (+25%) run the offline algorithm again."""
    sel, a, b, c = setup(interval=100)
    e = ests(a, b, c)
    sel.advance(0, e, ready=set(e), stats=STATS)
    e2 = ests(a, b, c, cc=new_cc, cost_ab=new_cost)
    sel.advance(100, e2, ready=set(e2), stats=STATS)
    assert sel.rounds == (2 if reruns else 1)
    assert idents(sel.used) == {a.ident, c.ident}


def test_rerun_changes_the_choice() -> None:
    """C's benefit drops to 5 (net 3): A and B together (net 8) now beat A with C (5)."""
    sel, a, b, c = setup(interval=100)
    e = ests(a, b, c)
    sel.advance(0, e, ready=set(e), stats=STATS)
    e2 = ests(a, b, c, cc=5.0)
    changes = sel.advance(100, e2, ready=set(e2), stats=STATS)
    assert [ch.reason.split(" (")[0] for ch in changes] == [
        "profiling a cache inside it",
        "re-selection",
    ]
    assert idents(sel.used) == {a.ident, b.ident}
    assert idents(changes[-1].added) == {b.ident}


def test_memory_budget() -> None:
    """Sect. 5: C (net 11 per 100 bytes) before A (net 2 per 100): 150 bytes fit C only; the
    budget raised to 250 adds A; lowered to 50 drops both."""
    sel, a, b, c = setup(budget=150.0)
    e = ests(a, b, c)
    (ch,) = sel.advance(0, e, ready=set(e), stats=STATS)
    assert idents(ch.after) == {c.ident} and idents(ch.refused) == {a.ident}
    assert "no memory for" in ch.describe(NAMES)
    ch = sel.set_budget(250.0, e)
    assert ch is not None and idents(ch.added) == {a.ident} and "memory" in ch.reason
    ch = sel.set_budget(50.0, e)
    assert ch is not None and idents(ch.dropped) == {a.ident, c.ident}
    assert sel.used == []


def test_order_change_drops_dependent_caches() -> None:
    """Step 5: ΔR0 now probes R2 first. R0R1 no longer satisfies the prefix invariant, so A
    goes although ΔR2 was not reordered; C (R0R1R2) stays a candidate and stays in use; the
    new candidate R0R2 in ΔR1 starts profiled."""
    sel, a, b, c = setup()
    e = ests(a, b, c)
    sel.advance(0, e, ready=set(e), stats=STATS)
    new_orders = [(2, 1, 3), *ORDERS[1:]]
    new = prefix_candidates(equijoin(4), new_orders).caches
    assert [(x.pipeline, x.relations) for x in new] == [(1, (0, 2)), (3, (0, 1, 2))]
    ch = sel.order_changed({0}, new)
    assert ch is not None and idents(ch.dropped) == {a.ident} and ch.added == ()
    assert "pipeline 0" in ch.reason
    assert sel.state[c.ident] is State.USED
    assert sel.state[new[0].ident] is State.PROFILED
    # a reordered pipeline loses its own caches even if they stay candidates
    ch = sel.order_changed({3}, new)
    assert ch is not None and idents(ch.dropped) == {c.ident}
    assert sel.state[c.ident] is State.PROFILED


def test_plan_change_reporting() -> None:
    sel, a, b, c = setup()
    e = ests(a, b, c)
    (ch,) = sel.advance(0, e, ready=set(e), stats=STATS)
    entry = ch.entry(NAMES)
    assert entry["added"] == ["Δr2: [r0 ⋈ r1] on c0", "Δr3: [r0 ⋈ r1 ⋈ r2] on c0"]
    assert entry["dropped"] == [] and entry["at_tuple"] == 0
    assert ch.describe(NAMES).startswith("caches changed after 0 tuples (re-selection")
    index = {x.ident: k for k, x in enumerate([a, b, c])}
    oc = ch.order_change(index)
    assert (oc.before, oc.after, oc.position) == ((), (0, 2), -1)


@st.composite
def walks(draw: st.DrawFn):
    """A random run: n-way equijoin, random orders, steps that advance with random estimates
    and readiness, reorder a pipeline, or change the budget."""
    n = draw(st.integers(3, 5))
    orders = [tuple(draw(st.permutations([r for r in range(n) if r != i]))) for i in range(n)]
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["advance", "advance", "advance", "reorder", "budget"]))
        if kind == "reorder":
            i = draw(st.integers(0, n - 1))
            steps.append((kind, i, tuple(draw(st.permutations(list(orders[i]))))))
        elif kind == "budget":
            steps.append((kind, float(draw(st.integers(0, 600))), None))
        else:
            steps.append((kind, draw(st.integers(0, 300)), draw(st.randoms(use_true_random=False))))
    return n, orders, float(draw(st.integers(0, 600))), steps


@settings(max_examples=80, deadline=None)
@given(walks())
def test_random_runs_keep_the_invariants(walk) -> None:
    """Whatever happens, the used caches are current candidates, never overlap, and their
    stored caches' memory stays within the budget."""
    n, orders, budget, steps = walk
    g = equijoin(n)
    stats = [PipelineStats(d=(1.0,) * n, c=(5.0,) * (n - 1)) for _ in range(n)]
    cands = prefix_candidates(g, orders).caches
    sel = AdaptiveSelector(cands, AdaptiveConfig(interval=200, budget_bytes=budget))
    memory: dict = {}

    def estimates(rng) -> dict:
        out = {}
        for c in sel.cands:
            memory.setdefault(c.ident, float(rng.randint(1, 200)))
            b = rng.uniform(-5, 5.0 * c.length)
            out[c.ident] = CacheEstimate(5.0 * c.length - b, b, rng.uniform(0, 10), memory[c.ident])
        return out

    for kind, x, y in steps:
        if kind == "reorder":
            orders = [*orders[:x], y, *orders[x + 1 :]]
            sel.order_changed({x}, prefix_candidates(g, orders).caches)
        elif kind == "budget":
            budget = x
            sel.set_budget(
                budget,
                {
                    c.ident: CacheEstimate(0, 1, 0, memory.setdefault(c.ident, 1.0))
                    for c in sel.cands
                },
            )
        else:
            e = estimates(y)
            ready = {c.ident for c in sel.cands if y.random() < 0.8}
            sel.advance(x, e, ready, stats)
        current = {c.ident for c in prefix_candidates(g, orders).caches}
        used = sel.used
        assert set(sel.state) == current
        assert all(a.ident in current for a in used)
        assert not any(a.overlaps(b) for k, a in enumerate(used) for b in used[k + 1 :])
        assert sum(memory[c.ident] for c in used) <= budget + 1e-9


def test_fig12_adaptive_with_globally_consistent_caches() -> None:
    """Fig. 12's query R(A) ⋈ S(A,B) ⋈ T(B): ΔR probes S then T, ΔS R then T, ΔT S then R.
    The candidates (m = 6): R⋈S in ΔT's pipeline, (S⋈T)⋈R in ΔR's and (R⋈T)⋈S in ΔS's. At
    first the R⋈S cache pays; under a burst of R the globally-consistent one in ΔR's does."""
    g = JoinGraph(3, [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))])
    cands = selection_candidates(g, [(1, 2), (0, 2), (1, 0)], global_m=6)
    assert [(c.pipeline, c.relations, c.kind) for c in cands] == [
        (2, (1, 0), "prefix"),
        (0, (1, 2), "global"),
        (1, (0, 2), "global"),
    ]
    rs_in_t, st_in_r, _ = cands
    stats = [PipelineStats(d=(1.0,) * 3, c=(5.0,) * 2) for _ in range(3)]
    sel = AdaptiveSelector(cands, AdaptiveConfig(interval=100, exhaustive_cap=6))

    def run(b_rs: float, b_st: float) -> list:
        e = {c.ident: est(c, 0.0, 1.0) for c in cands}
        e[rs_in_t.ident] = est(rs_in_t, b_rs, 1.0)
        e[st_in_r.ident] = est(st_in_r, b_st, 1.0)
        return sel.advance(100, e, ready=set(e), stats=stats)

    (ch,) = run(8.0, 0.5)
    assert ch.method == "exhaustive" and idents(ch.added) == {rs_in_t.ident}
    changes = run(0.5, 8.0)  # the burst: 4.5 a drops R⋈S, the round picks (S⋈T)⋈R
    assert idents(changes[0].dropped) == {rs_in_t.ident}
    assert idents(sel.used) == {st_in_r.ident}
