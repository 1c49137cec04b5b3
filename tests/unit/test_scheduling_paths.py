"""Multi-stream plans (Babcock et al., Sect. 4.3): query trees split into operator paths, the
sliding-window join's (t, s) of Sect. 4.3.1, and a join blocked while one input is empty."""

from __future__ import annotations

from fractions import Fraction as F

import pytest

from processors.core.scheduling import (
    OpNode,
    Stream,
    WindowJoin,
    chart_remaining_times,
    join_stats,
    make_policy,
    query_plan,
    simulate,
    split_paths,
    stats_and_rates,
    window_join_stats,
)


def fig3(rate_r=3, rate_s=1) -> OpNode:
    """Fig. 3: R -> pi -> join <- S, then sigma on the join's output."""
    pi = OpNode("pi", t=1, s=F(1, 2), inputs=(Stream("R", rate_r),))
    join = OpNode("join", inputs=(pi, Stream("S", rate_s)), join=WindowJoin((2, 4), (1, 5)))
    return OpNode("sigma", t=2, s=F(1, 10), inputs=(join,))


def test_fig3_query_splits_into_two_paths_sharing_the_join_and_sigma() -> None:
    assert split_paths(fig3()) == {"R": ["pi", "join", "sigma"], "S": ["join", "sigma"]}


def test_window_join_t_and_s() -> None:
    """Sect. 4.3.1: s = (l_R a_W(S) + l_S a_W(R)) / (l_R + l_S) and
    t = (l_R t_R + l_S t_S) / (l_R + l_S)."""
    assert window_join_stats(3, 1, 2, 4, 1, 5) == (2, F(5, 2))
    assert window_join_stats(1, 1, 2, 2, F(1, 3), F(1, 3)) == (F(1, 3), 2)
    # one input silent: the other's figures
    assert join_stats((0, 5), (7, 3), (2, 9)) == (9, 3)
    with pytest.raises(ValueError, match="all zero"):
        join_stats((0, 0), (1, 1), (1, 1))
    with pytest.raises(ValueError, match="one rate, alpha and time per input"):
        join_stats((1,), (1,), (1,))
    with pytest.raises(ValueError, match="semijoin selectivity"):
        join_stats((1, 1), (-1, 1), (1, 1))


def test_rates_are_derived_inductively() -> None:
    stats, rates = stats_and_rates(fig3(rate_r=3, rate_s=1))
    # R reaches the join through pi at 3/2 per unit time; S at 1
    t, s = join_stats((F(3, 2), 1), (2, 4), (1, 5))
    assert t == F(13, 5) and s == F(14, 5)  # (3/2 + 5) / (5/2), (3 + 4) / (5/2)
    assert stats == {"pi": (1, F(1, 2)), "join": (t, s), "sigma": (2, F(1, 10))}
    assert rates["R"] == 3 and rates["pi"] == F(3, 2)
    assert rates["join"] == F(7)  # l_R' a_W(S) + l_S a_W(R) = 3 + 4
    assert rates["sigma"] == F(7, 10)


def test_query_plan_of_several_queries() -> None:
    other = OpNode("f", t=3, s=F(1, 3), inputs=(Stream("T"),))
    plan = query_plan({"q1": fig3(), "q2": other}, latency_threshold={"q2": 50})
    assert plan.paths == {
        "q1/R": ["pi", "join", "sigma"],
        "q1/S": ["join", "sigma"],
        "q2/T": ["f"],
    }
    assert plan.queries() == ["q1", "q2"]
    assert plan.query_of_op("join") == "q1"
    assert plan.predecessors("join") == ["pi", None]
    assert plan.predecessors("sigma") == ["join"]
    assert plan.downstream("pi") == ["pi", "join", "sigma"]
    # the chart of q1/S: (0,1), (13/5, 14/5), (13/5 + 2 * 14/5, 0)
    assert plan.chart("q1/S") == [(0, 1), (F(13, 5), F(14, 5)), (F(41, 5), 0)]
    # the memory-unit remaining time: largest over the paths through an operator
    rem = chart_remaining_times(plan)
    r_chart = plan.chart("q1/R")
    assert rem["join"] == max(r_chart[-1][0] - r_chart[1][0], F(41, 5))
    assert rem["f"] == 3
    # Chain-Flush's default p_q is the paper's sum of per-tuple times (Sect. 5.2)
    assert plan.remaining("pi") == 1 + F(13, 5) + 2
    with pytest.raises(ValueError, match="appears in queries"):
        query_plan({"a": fig3(), "b": fig3()})
    with pytest.raises(ValueError, match="latency threshold for unknown query"):
        query_plan({"q2": other}, latency_threshold={"nope": 1})


def test_trees_with_problems_are_named() -> None:
    with pytest.raises(ValueError, match="no inputs"):
        split_paths(OpNode("x", t=1, s=1))
    with pytest.raises(ValueError, match="two different nodes"):
        split_paths(
            OpNode(
                "j",
                inputs=(Stream("R"), OpNode("R", t=1, s=1, inputs=(Stream("S"),))),
                join=WindowJoin((1, 1), (1, 1)),
            )
        )
    with pytest.raises(ValueError, match="needs one of each per input"):
        split_paths(OpNode("j", inputs=(Stream("R"), Stream("S")), join=WindowJoin((1,), (1,))))
    with pytest.raises(ValueError, match="time"):
        split_paths(OpNode("x", t=0, s=1, inputs=(Stream("R"),)))


def _fig3_plan():
    plan = query_plan({"q": fig3()})
    plan.remaining_time = chart_remaining_times(plan)
    return plan


def test_join_is_blocked_while_one_input_is_empty() -> None:
    """R tuples wait at the join until S's first tuple arrives at 10, whatever the policy;
    then the join takes both inputs in timestamp order."""
    plan = _fig3_plan()
    for policy in ("chain", "fifo", "greedy", "round-robin"):
        res = simulate(plan, policy, {"q/R": [0, 1, 2], "q/S": [10]}, trace=True)
        join_runs = [t for t, op in res.trace if op == "join"]
        assert join_runs and min(join_runs) >= 10, policy
        assert any(op == "pi" and t < 10 for t, op in res.trace)
        assert res.stuck == 0 and len(res.out_time) == 4
        # the join's output order is the timestamp order across its inputs
        assert res.out_arrival == [0, 1, 2, 10], policy


def test_join_drains_once_the_other_input_has_ended() -> None:
    """S: one tuple at 1. R's tuples from 0 and 20: R0 and S1 go in timestamp order; R20 finds
    S empty but S has ended (no arrivals left, nothing upstream), so it is not blocked."""
    plan = _fig3_plan()
    res = simulate(plan, "chain", {"q/R": [0, 20], "q/S": [1]})
    assert res.stuck == 0 and res.out_arrival == [0, 1, 20]
    # with S still to come at 100, R20 waits for it
    res = simulate(plan, "chain", {"q/R": [0, 20], "q/S": [1, 100]}, trace=True)
    late = [t for t, op in res.trace if op == "join" and t > 30]
    assert late and min(late) >= 100
    # the run may be cut short: what is left is reported as stuck
    cut = simulate(plan, "chain", {"q/R": [0, 20], "q/S": [1, 100]}, until=50)
    assert cut.stuck == 1 and cut.end == 50


def test_join_waiting_only_for_older_tuples() -> None:
    """join_wait="older": with arrival timestamps nothing arriving later can be older, so the
    join goes on while S is empty unless an older S tuple is still upstream of it."""
    plan = _fig3_plan()
    res = simulate(plan, "chain", {"q/R": [0, 1, 2], "q/S": [10]}, trace=True, join_wait="older")
    assert min(t for t, op in res.trace if op == "join") < 10
    assert res.out_arrival == [0, 1, 2, 10]
    # S passes its own slow selection first: R's tuple from 1 must wait for S's from 0
    s_side = OpNode("sel_s", t=5, s=1, inputs=(Stream("S"),))
    pi = OpNode("pi", t=1, s=1, inputs=(Stream("R"),))
    join = OpNode("join", inputs=(pi, s_side), join=WindowJoin((1, 1), (1, 1)))
    plan2 = query_plan({"q": OpNode("out", t=1, s=1, inputs=(join,))})
    for policy in ("chain", "fifo", "greedy", "round-robin"):
        res = simulate(plan2, policy, {"q/R": [1], "q/S": [0]}, trace=True, join_wait="older")
        # S's tuple needs 5 units at sel_s from 0: the join cannot run before 5
        assert min(t for t, op in res.trace if op == "join") >= 5, policy
        assert res.out_arrival == [0, 1], policy
    with pytest.raises(ValueError, match="join_wait"):
        simulate(plan2, "chain", {}, join_wait="never")


def test_chain_flush_on_a_join_plan() -> None:
    plan = _fig3_plan()
    res = simulate(
        plan,
        make_policy("chain-flush", plan, latency_threshold=40),
        {"q/R": list(range(0, 30, 2)), "q/S": list(range(1, 30, 3))},
    )
    assert res.stuck == 0 and len(res.out_time) == 15 + 10
