"""Each scheduling policy's choices on small hand cases (Babcock et al., Sect. 4.1, 4.2, 5.2,
5.3), through ``choose(now, ready)`` as the runtime's arbiter calls it and in the simulator."""

from __future__ import annotations

import json
import math
from fractions import Fraction as F

import pytest
from helpers import MIXED_CHART

from processors.core.scheduling import (
    POLICIES,
    ReadyOperator,
    SchedulingPlan,
    make_policy,
    plan_from_charts,
    simulate,
)


def R(op: str, head: float, queued: float = 1) -> ReadyOperator:
    return ReadyOperator(op, head, queued)


def _abc_plan() -> SchedulingPlan:
    """One path a -> b -> c; chart (0,1), (2,1/2), (5/2,1/8), (3,0).

    Chain: from (0,1) the derivatives are 1/4, 7/20, 1/3: chain {a, b} of slope 7/20, then
    {c} of slope (1/8)/(1/2) = 1/4. Greedy: a (1 - 1/2)/2 = 1/4, b (1 - 1/4)/1 = 3/4,
    c (1 - 0)/4 = 1/4 (the last operator ejects its output)."""
    plan = SchedulingPlan(
        paths={"p": ["a", "b", "c"]},
        stats={"a": (2, F(1, 2)), "b": (1, F(1, 4)), "c": (4, 1)},
    )
    plan.validate()
    return plan


def test_chain_and_greedy_priorities_on_a_hand_chart() -> None:
    plan = _abc_plan()
    assert plan.chart("p") == [(0, 1), (2, F(1, 2)), (F(5, 2), F(1, 8)), (3, 0)]
    chain = make_policy("chain", plan)
    greedy = make_policy("greedy", plan)
    assert chain.priorities() == {"a": 0.35, "b": 0.35, "c": 0.25}
    assert greedy.priorities() == {"a": 0.25, "b": 0.75, "c": 0.25}
    # a newer tuple at a against an older one at c: Chain takes the steeper chain ...
    assert chain.choose(0, [R("a", 5), R("c", 1)]) == "a"
    # ... Greedy sees a tie (1/4 each) and takes the older head
    assert greedy.choose(0, [R("a", 5), R("c", 1)]) == "c"
    assert greedy.choose(0, [R("a", 5), R("b", 3), R("c", 1)]) == "b"
    # within a chain the oldest tuple first (Sect. 4.1)
    assert chain.choose(0, [R("a", 5), R("b", 3)]) == "b"
    assert chain.choose(0, [R("a", 2), R("b", 3)]) == "a"
    assert chain.choose(0, []) is None
    d = chain.describe()
    assert d["policy"] == "chain"
    assert d["chains"] == {"p": [{"ops": ["a", "b"], "slope": 0.35}, {"ops": ["c"], "slope": 0.25}]}
    json.dumps(d)


def test_ties_between_heads_that_arrived_together_go_downstream() -> None:
    plan = _abc_plan()
    # same chain, same arrival: the tuple further along goes on (Proposition 2)
    assert make_policy("chain", plan).choose(0, [R("a", 1), R("b", 1)]) == "b"
    # FIFO finishes a tuple before starting the next, even at equal arrival times
    assert make_policy("fifo", plan).choose(0, [R("a", 1), R("c", 1), R("b", 1)]) == "c"


def test_fifo_takes_the_oldest_head() -> None:
    fifo = make_policy("fifo", _abc_plan())
    assert fifo.choose(0, [R("a", 3), R("b", 2), R("c", 7)]) == "b"
    assert fifo.priorities() == {}
    with pytest.raises(ValueError, match="not in the scheduling plan"):
        fifo.choose(0, [R("zz", 1)])


def test_round_robin_cycles_over_ready_operators() -> None:
    rr = make_policy("round-robin", _abc_plan())
    all3 = [R("a", 1), R("b", 2), R("c", 3)]
    assert [rr.choose(t, all3) for t in range(6)] == ["a", "b", "c", "a", "b", "c"]
    # b not ready: skipped, the cycle goes on from the last one chosen
    ac = [R("a", 1), R("c", 3)]
    assert [rr.choose(t, ac) for t in range(6, 10)] == ["a", "c", "a", "c"]
    assert rr.next_decision() is None


def test_round_robin_with_a_quantum_keeps_an_operator_for_its_time_unit() -> None:
    rr = make_policy("round-robin", _abc_plan(), quantum=10)
    ab = [R("a", 1), R("b", 2)]
    assert rr.choose(0, ab) == "a"
    assert rr.next_decision() == 10
    assert rr.choose(4, ab) == "a"  # an event inside the quantum: a keeps the processor
    assert rr.choose(10, ab) == "b"  # the quantum is over
    assert rr.choose(12, [R("a", 1)]) == "a"  # b's queue emptied: its turn ends early
    assert rr.next_decision() == 22
    with pytest.raises(ValueError, match="quantum"):
        make_policy("round-robin", _abc_plan(), quantum=0)


def test_round_robin_time_slices_in_the_simulator() -> None:
    # two paths of one 4-unit operator each, both backlogged from 0: slices of 1 alternate
    plan = plan_from_charts({"x": [(0, 1), (4, 0)], "y": [(0, 1), (4, 0)]})
    res = simulate(
        plan, make_policy("round-robin", plan, quantum=1), {"x": [0], "y": [0]}, trace=True
    )
    assert [op for _, op in res.trace] == ["x.0", "y.0"] * 4
    assert res.out_time == [7, 8]


def test_mixed_clips_the_tail_segments_into_one_fifo_segment() -> None:
    plan = plan_from_charts({"p": MIXED_CHART})
    chain = make_policy("chain", plan)
    m1 = make_policy("mixed", plan, gamma=F(1, 10000))
    m2 = make_policy("mixed", plan, gamma=F(2, 10000))
    # operators 2 and 3: Chain prefers the steeper third; Mixed(0.0001) merged them: oldest
    two = [R("p.2", 5), R("p.3", 1)]
    assert chain.choose(0, two) == "p.2"
    assert m1.choose(0, two) == "p.3"
    # operator 1 stays above the merged segment in Mixed(0.0001), not in Mixed(0.0002)
    one_three = [R("p.1", 9), R("p.3", 1)]
    assert chain.choose(0, one_three) == "p.1"
    assert m1.choose(0, one_three) == "p.1"
    assert m2.choose(0, one_three) == "p.3"
    assert m1.priorities()["p.2"] == m1.priorities()["p.3"] == float(F(1, 17500))
    with pytest.raises(ValueError, match="gamma"):
        make_policy("mixed", plan)
    with pytest.raises(ValueError, match="gamma"):
        make_policy("mixed", plan, gamma=-1)


def test_chain_flush_switches_to_flush_mode_exactly_at_the_deadline() -> None:
    """Q's entries (q, t_h, r_q, p_q): p.1's queue holds a tuple from time 0 with p_q = 1 (the
    chart's remaining time), r_q = 5: flush when now + 1 >= 0 + 5, i.e. from now = 4."""
    plan = plan_from_charts({"p": [(0, 1), (1, F(1, 5)), (2, 0)]}, latency_threshold={"p": 5})
    cf = make_policy("chain-flush", plan)
    ready = [R("p.0", 10), R("p.1", 0)]
    assert cf.choose(F(39, 10), ready) == "p.0"  # Chain: the steeper first operator
    assert cf.next_decision() == 4  # when the head of p.1 comes due
    assert cf.flushes == 0
    assert cf.choose(4, ready) == "p.1"  # now + p_q = t_h + r_q: flush
    assert cf.flushes == 1 and cf.next_decision() is None
    # the flushed tuple has left; p.1's next head (from 10) is not due: back to Chain
    assert cf.choose(5, [R("p.0", 10), R("p.1", 10)]) == "p.0"
    assert cf.next_decision() == 13  # p.0's head: 10 + 5 - 2
    d = cf.describe()
    assert d["latency_threshold"] == {"p": 5.0} and d["flushes"] == 1
    json.dumps(d)


def test_chain_flush_runs_the_virtual_segment_to_the_output() -> None:
    """In flush mode the head tuple goes through every operator to the output, although newer
    tuples wait at steeper operators; then Chain resumes."""
    pts = [(0, 1), (1, F(1, 2)), (2, F(1, 4)), (10, 0)]  # chains {0}, {1}, {2}
    plan = plan_from_charts({"p": pts}, latency_threshold={"p": 12})
    cf = make_policy("chain-flush", plan)
    # the tuple at p.1 arrived at 0: p_q = 9, due at 0 + 12 - 9 = 3
    assert cf.choose(2, [R("p.0", 5), R("p.1", 0)]) == "p.0"
    assert cf.choose(3, [R("p.0", 5), R("p.1", 0)]) == "p.1"
    # it moved on to p.2 (the flatter chain): flush mode keeps it going
    assert cf.choose(4, [R("p.0", 5), R("p.2", 0)]) == "p.2"
    assert cf.choose(5, [R("p.0", 5), R("p.2", 0)]) == "p.2"
    # it left: Chain again (the tuple from 5 at p.0 is due only at 5 + 12 - 10 = 7)
    assert cf.choose(6, [R("p.0", 5)]) == "p.0"
    assert cf.flushes == 1


def test_chain_flush_setting_overrides_the_plans_thresholds() -> None:
    plan = plan_from_charts({"p": [(0, 1), (1, F(1, 5)), (2, 0)]})
    assert make_policy("chain-flush", plan).thresholds() == {"p": math.inf}
    cf = make_policy("chain-flush", plan, latency_threshold=3)
    assert cf.thresholds() == {"p": 3}
    assert cf.choose(2, [R("p.0", 10), R("p.1", 0)]) == "p.1"  # 2 + 1 >= 0 + 3
    with pytest.raises(ValueError, match="latency_threshold"):
        make_policy("chain-flush", plan, latency_threshold=0)


def test_no_starvation_under_chain_flush() -> None:
    """A hot path keeps the processor busy (one tuple per 2 units, 2 units of work each, both
    of its chains steeper than the cold path's). Chain never runs the cold tuple while hot
    tuples keep coming; Chain-Flush flushes it when its deadline comes (threshold 100: due at
    100 - 20 = 80, out at 100)."""
    charts = {"hot": [(0, 1), (1, F(1, 10)), (2, 0)], "cold": [(0, 1), (10, F(9, 10)), (20, 0)]}
    plan = plan_from_charts(charts)
    arrivals = {"hot": list(range(0, 2000, 2)), "cold": [0]}
    chain = simulate(plan, "chain", arrivals, until=1000)
    cold = list(plan.paths).index("cold")
    assert cold not in chain.out_path  # starved for the whole run
    cf = simulate(plan, make_policy("chain-flush", plan, latency_threshold=100), arrivals)
    lat = cf.latencies
    cold_lat = [lat[i] for i, p in enumerate(cf.out_path) if p == cold]
    assert cold_lat == [100]
    assert cf.stuck == 0 and len(cf.out_time) == 1001  # every tuple ran
    # the hot tuples held back by the flush stay within the threshold too
    assert max(lat) <= 100


def test_shared_operator_takes_the_largest_priority_of_its_chains() -> None:
    plan = SchedulingPlan(
        paths={"r": ["pi", "join", "sigma"], "s": ["join", "sigma"]},
        stats={"pi": (10, F(1, 2)), "join": (1, 2), "sigma": (1, F(1, 10))},
    )
    plan.validate()
    chain = make_policy("chain", plan)
    # path r: (0,1), (10,1/2), (21/2,1), (23/2,0): one chain of slope 2/23
    # path s: (0,1), (1,2), (3,0): one chain of slope 1/3
    assert chain.priorities() == {"pi": float(F(2, 23)), "join": 1 / 3, "sigma": 1 / 3}


def test_make_policy_names_and_settings() -> None:
    plan = _abc_plan()
    assert set(POLICIES) == {"chain", "chain-flush", "mixed", "fifo", "round-robin", "greedy"}
    assert make_policy("Round_Robin", plan).name == "round-robin"
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("lifo", plan)
    with pytest.raises(ValueError, match="unknown setting 'gamma'"):
        make_policy("chain", plan, gamma=1)


def test_update_recomputes_priorities_from_new_statistics() -> None:
    plan = _abc_plan()
    chain = make_policy("chain", plan)
    assert chain.choose(0, [R("a", 5), R("c", 1)]) == "a"
    # c becomes cheap: chart (0,1), (2,1/2), (5/2,1/8), (5/2 + 1/80, 0): c's chain is steepest
    new = SchedulingPlan(paths=plan.paths, stats={**plan.stats, "c": (F(1, 10), 1)})
    chain.update(new)
    assert chain.choose(0, [R("a", 5), R("c", 1)]) == "c"
