"""The single-processor simulator against the paper's worked examples (Babcock et al., Example 1
of Sect. 2.2, Example 2 of Sect. 5.3), against an independent unit-step oracle of the policies,
and Theorems 4.1 and 4.3 / Lemma 4.2 against an exhaustive clairvoyant search on small cases.

Accounting (the simulator's, fixed by Example 1): a "tuple" is a unit of memory that keeps its
size while an operator works on it and takes the operator's output size when the operator
finishes it (the progress chart is a step function, Sect. 3); memory at an integer time t counts
the arrivals at t and the work done in [0, t).
"""

from __future__ import annotations

import random
from fractions import Fraction as F

import pytest

from processors.core.scheduling import (
    chains,
    envelope_gaps,
    make_policy,
    plan_from_charts,
    simulate,
)

EXAMPLE1 = [(0, 1), (1, F(1, 5)), (2, 0)]
EXAMPLE2 = [(0, 1), (1, F(1, 10)), (99, F(1, 1000)), (100, 0)]


# -- Example 1 (Sect. 2.2) ----------------------------------------------------------------------


def test_example1_table_exactly() -> None:
    """The table of Example 1: a tuple at t = 0..6, none from 7 to 13; O1 takes 1 unit and
    keeps 0.2 of a tuple, O2 takes 1 unit for those 0.2 and ejects them."""
    plan = plan_from_charts({"p": EXAMPLE1})
    arrivals = {"p": list(range(7))}
    greedy = simulate(plan, "greedy", arrivals)
    fifo = simulate(plan, "fifo", arrivals)
    table = {
        0: (1, 1),
        1: (F(6, 5), F(6, 5)),
        2: (F(7, 5), 2),
        3: (F(8, 5), F(11, 5)),
        4: (F(9, 5), 3),
        5: (2, F(16, 5)),
        6: (F(11, 5), 4),
    }
    for t, (g, f) in table.items():
        assert greedy.memory_at(t) == g, t
        assert fifo.memory_at(t) == f, t
    # "after time t = 6, input queue sizes for both strategies decline until they reach 0
    # after time t = 13"
    for res in (greedy, fifo):
        after = [res.memory_at(t) for t in range(6, 15)]
        assert all(a >= b for a, b in zip(after, after[1:], strict=False))
        assert res.memory_at(13) > 0 and res.memory_at(14) == 0
    assert greedy.peak_memory == F(11, 5) and fifo.peak_memory == 4
    # with a memory threshold of 3 FIFO is infeasible and Greedy is not
    assert fifo.peak_memory > 3 >= greedy.peak_memory
    # Chain is Greedy here: each operator is its own chain
    chain = simulate(plan, "chain", arrivals)
    assert [chain.memory_at(t) for t in range(15)] == [greedy.memory_at(t) for t in range(15)]


# -- Example 2 (Sect. 5.3) ----------------------------------------------------------------------


def _example2(pattern: list[int]) -> dict[str, object]:
    plan = plan_from_charts({"p": EXAMPLE2})
    out = {}
    for name, policy in (
        ("chain", make_policy("chain", plan)),
        ("fifo", make_policy("fifo", plan)),
        ("mixed", make_policy("mixed", plan, gamma=F(1, 100))),
    ):
        out[name] = simulate(plan, policy, {"p": pattern})
    return out


def test_example2_pattern1_chain_and_fifo_latencies() -> None:
    """Pattern 1: tuple i (1..100) at 99 i; each needs 100 units.

    Chain takes every arriving tuple through the first segment at once, then through the
    second (slope 99/98000) while it waits for the next; the third segment (slope 1/1000, one
    unit per tuple) only runs after the last arrival. So tuple i leaves at 9999 + i: latency
    9999 - 98 i, max 9901 (tuple 1), mean 5050 ("about 5000"); when tuple 100 arrives 99
    tuples of size 1/1000 wait: max memory 1 + 99/1000 = 1.099.

    FIFO: tuple i runs from 100 i - 1 to 100 i + 99, latency 99 + i: max 199, mean 149.5
    ("150").

    Mixed(0.01) (segments 2 and 3 merged, FIFO inside): tuple i < 100 leaves at 100 (i + 1)
    (its second part is interrupted once, for one unit, by tuple i + 1's first segment), tuple
    100 at 10099: max 199, mean 150.49 ("150").
    """
    res = _example2([99 * i for i in range(1, 101)])
    chain, fifo, mixed = res["chain"], res["fifo"], res["mixed"]
    assert chain.peak_memory == F(1099, 1000)
    assert chain.max_latency == 9901
    assert chain.mean_latency == 5050
    assert chain.latencies == [9999 - 98 * i for i in range(1, 101)]
    assert fifo.latencies == [99 + i for i in range(1, 101)]
    assert fifo.max_latency == 199 and fifo.mean_latency == F(1495, 10)
    assert mixed.latencies == [100 + i for i in range(1, 100)] + [199]
    assert mixed.max_latency == 199 and mixed.mean_latency == F(15049, 100)


def test_example2_pattern1_fifo_and_mixed_memory_is_not_the_papers_2() -> None:
    """The paper gives FIFO and Mixed a max memory of 2 for pattern 1. Not reproducible under
    any accounting that also gives Chain 1.099: when tuple i + 1 arrives (at 99 i + 99) FIFO
    has had tuple i for 100 - i >= 1 units, so tuple i is past the first operator (size 0.1)
    and no third tuple is present (tuple i + 2 arrives after tuple i leaves for i < 99). Two
    tuples of size 1 never coexist: the peak is 1 + 0.1 = 1.1 with the step chart (with the
    size falling linearly along the envelope it is lower still). Counting each tuple as 1 until
    it leaves would give FIFO 2 but Chain 100. Mixed is the same (its second part is FIFO)."""
    res = _example2([99 * i for i in range(1, 101)])
    assert res["fifo"].peak_memory == F(11, 10)
    assert res["mixed"].peak_memory == F(11, 10)


def test_example2_pattern2() -> None:
    """Pattern 2: tuple i (1..10) at 10 i.

    Reproduced: the max memories (Chain 1.9, Mixed 1.9; FIFO 9.1 against the paper's 9: at time
    100 FIFO holds nine whole tuples and tuple 1, 90 units in, with size 0.1), FIFO's and Mixed's
    max latency 910.

    Not reproduced, and why:
    - FIFO's mean latency: tuple i leaves at 10 + 100 i (no idle time from 10 on), latency
      10 + 90 i, mean 505, not 550 (the paper's digits look transposed).
    - Mixed's mean latency: tuple 1 leaves at 119 (it got the 81 units between arrivals before
      100, then 18 more after tuple 10's first unit), tuple i at 20 + 99 i, latency 20 + 89 i,
      mean 509.5, not 595.
    - Chain: the paper gives Chain Mixed's figures (mean 595, max 910), but Chain defers the
      third segment (slope 1/1000 < 99/98000) behind every second segment, exactly as in
      pattern 1 (that is what makes 9901 there): all ten tuples leave in [1001, 1010], tuple i
      at 1000 + i, latency 1000 - 9 i: max 991, mean 950.5. Giving Chain 910 would need the
      second and third segments merged, i.e. Mixed.
    """
    res = _example2([10 * i for i in range(1, 11)])
    chain, fifo, mixed = res["chain"], res["fifo"], res["mixed"]
    assert chain.peak_memory == F(19, 10) and mixed.peak_memory == F(19, 10)
    assert fifo.peak_memory == F(91, 10)
    assert fifo.latencies == [10 + 90 * i for i in range(1, 11)]
    assert fifo.max_latency == 910 and fifo.mean_latency == 505
    assert mixed.latencies == [20 + 89 * i for i in range(1, 11)]
    assert mixed.max_latency == 910 and mixed.mean_latency == F(1019, 2)
    assert chain.latencies == [1000 - 9 * i for i in range(1, 11)]
    assert chain.max_latency == 991 and chain.mean_latency == F(1901, 2)


# -- an independent unit-step oracle of the policies ---------------------------------------------


def _step_size(pts, p):
    """Size of a unit with progress p (step chart): s_i on [t_i, t_{i+1})."""
    for i in range(len(pts) - 1):
        if pts[i][0] <= p < pts[i + 1][0]:
            return pts[i][1]
    return 0


def _op_at(pts, p) -> int:
    for i in range(len(pts) - 1):
        if pts[i][0] <= p < pts[i + 1][0]:
            return i
    raise AssertionError(p)


def _fluid_size(env_pts, p):
    """Size along the lower envelope (the lower envelope simulation P', Sect. 4.1)."""
    for (t0, s0), (t1, s1) in zip(env_pts, env_pts[1:], strict=False):
        if t0 <= p < t1:
            return s0 - (s0 - s1) * F(p - t0, t1 - t0)
    return 0


def _oracle(charts, arrivals, rule: str, horizon: int):
    """Unit-step schedule of the tuples themselves, as Sect. 4.1/4.2 state the rules: every
    step, Chain runs the tuple on the steepest envelope segment, Greedy the tuple whose
    operator has the largest (1 - s')/t', FIFO the oldest; ties to the earliest arrival, then
    the tuple with fewer operators left, then the first path. Returns per time step the
    tuples' (path, progress) after the arrivals at t and t steps of work."""
    paths = list(charts)
    prio = {}
    for k, path in enumerate(paths):
        pts = charts[path]
        if rule == "chain":
            segs = chains(pts)
            per_op = [s.slope for s in segs for _ in s.ops]
        elif rule == "greedy":
            per_op = [
                (pts[i][1] - pts[i + 1][1]) / F(pts[i + 1][0] - pts[i][0])
                for i in range(len(pts) - 1)
            ]
        else:
            per_op = [0] * (len(pts) - 1)
        prio[k] = per_op
    live = []  # [arrival, index, path, progress]
    arr = sorted((t, paths.index(p)) for p in paths for t in arrivals.get(p, []))
    ai = 0
    states = []
    for t in range(horizon + 1):
        while ai < len(arr) and arr[ai][0] == t:
            live.append([t, ai, arr[ai][1], 0])
            ai += 1
        states.append(sorted((u[2], u[3]) for u in live))
        if not live:
            continue

        def key(u):
            pts = charts[paths[u[2]]]
            i = _op_at(pts, u[3])
            ops_left = len(pts) - 1 - i
            return (-prio[u[2]][i], u[0], ops_left, u[2], -u[3], u[1])

        u = min(live, key=key)
        u[3] += 1
        if u[3] == charts[paths[u[2]]][-1][0]:
            live.remove(u)
    return states


def _size_tables(charts):
    """Per path, the size at each progress value: step chart and lower-envelope (fluid)."""
    step, fluid = [], []
    for pts in charts.values():
        env = [pts[i] for i in _envelope_indexes(pts)]
        step.append([_step_size(pts, p) for p in range(pts[-1][0] + 1)])
        fluid.append([_fluid_size(env, p) for p in range(pts[-1][0] + 1)])
    return step, fluid


def _memory(charts, state, fluid=False, tables=None):
    step, flu = tables or _size_tables(charts)
    sizes = flu if fluid else step
    return sum((sizes[k][p] for k, p in state), F(0))


def _envelope_indexes(pts):
    segs = chains(pts)
    return [s.first_op for s in segs] + [len(pts) - 1]


def _random_case(rng: random.Random, n_paths: int, max_ops: int, max_time: int, n_tuples: int):
    charts = {}
    for k in range(n_paths):
        m = rng.randint(1, max_ops)
        t, s, pts = 0, F(1), [(0, F(1))]
        for i in range(m):
            t += rng.randint(1, max_time)
            s = F(0) if i == m - 1 else s * F(rng.randint(0, 10), 10)
            if s == 0 and i < m - 1:
                s = F(1, 20)
            pts.append((t, s))
        charts[f"q{k}"] = pts
    arrivals = {p: [] for p in charts}
    for _ in range(n_tuples):
        arrivals[rng.choice(list(charts))].append(rng.randint(0, 4))
    for p in arrivals:
        arrivals[p].sort()
    return charts, arrivals


@pytest.mark.parametrize("rule", ["chain", "greedy", "fifo"])
def test_simulator_matches_the_unit_step_oracle(rule: str) -> None:
    rng = random.Random({"chain": 1, "greedy": 2, "fifo": 3}[rule])
    for _ in range(150):
        charts, arrivals = _random_case(rng, rng.randint(1, 3), 4, 4, rng.randint(1, 8))
        horizon = 5 + sum(c[-1][0] for c in charts.values()) * 8
        plan = plan_from_charts(charts)
        res = simulate(plan, rule, arrivals)
        states = _oracle(charts, arrivals, rule, horizon)
        tables = _size_tables(charts)
        for t in range(horizon + 1):
            assert res.memory_at(t) == _memory(charts, states[t], tables=tables), t


# -- Theorems 4.1 and 4.3 against an exhaustive clairvoyant search --------------------------------


def _clairvoyant(charts, arrivals, horizon: int):
    """Per time step, the least memory any schedule can have (step chart) and the least along
    the lower envelopes (fluid), over every unit-step schedule: each step, any one tuple in the
    system (or none) gets one unit. States are multisets of (path, progress)."""
    paths = list(charts)
    ends = [charts[p][-1][0] for p in paths]
    arr = {}
    for p in paths:
        for t in arrivals[p]:
            arr.setdefault(t, []).append((paths.index(p), 0))
    states = {()}
    best_step, best_fluid = [], []
    tables = _size_tables(charts)
    for t in range(horizon + 1):
        if t in arr:
            states = {tuple(sorted(s + tuple(arr[t]))) for s in states}
        best_step.append(min(_memory(charts, s, tables=tables) for s in states))
        best_fluid.append(min(_memory(charts, s, fluid=True, tables=tables) for s in states))
        nxt = set()
        for s in states:
            nxt.add(s)  # idle
            for j in set(range(len(s))):
                k, p = s[j]
                moved = list(s[:j] + s[j + 1 :])
                if p + 1 < ends[k]:
                    moved.append((k, p + 1))
                nxt.add(tuple(sorted(moved)))
        states = nxt
        assert len(states) < 200_000
    return best_step, best_fluid


@pytest.mark.slow  # 3.4-3.7 s measured
def test_chain_is_within_one_unit_per_path_of_the_clairvoyant_optimum_at_every_step() -> None:
    """Theorem 4.3 (selectivities <= 1): at every time Chain's memory is at most the least
    memory any schedule, even one knowing the arrivals, can have then, plus the number of
    paths. Also Theorem 4.1 (measured along the lower envelopes Chain is optimal at every
    step) and Lemma 4.2 (actual minus envelope memory of Chain <= sum of the deltas)."""
    rng = random.Random(43)
    worst = 0
    for _ in range(60):
        n = rng.randint(1, 2)
        charts, arrivals = _random_case(rng, n, 3, 3, rng.randint(2, 5))
        # every tuple has left by then, whatever the schedule (no idling while work waits)
        horizon = 5 + sum(charts[p][-1][0] * len(a) for p, a in arrivals.items())
        plan = plan_from_charts(charts)
        res = simulate(plan, "chain", arrivals)
        chain_states = _oracle(charts, arrivals, "chain", horizon)
        opt_step, opt_fluid = _clairvoyant(charts, arrivals, horizon)
        deltas = sum(sum(envelope_gaps(c)) for c in charts.values())
        assert deltas <= n
        tables = _size_tables(charts)
        for t in range(horizon + 1):
            actual = res.memory_at(t)
            fluid = _memory(charts, chain_states[t], fluid=True, tables=tables)
            assert actual == _memory(charts, chain_states[t], tables=tables)
            assert fluid == opt_fluid[t], (t, charts, arrivals)  # Theorem 4.1
            assert actual - fluid <= deltas  # Lemma 4.2
            assert actual <= opt_step[t] + n, (t, charts, arrivals)  # Theorem 4.3
            worst = max(worst, actual - opt_step[t])
    assert worst > 0  # the cases are not all trivial: Chain is sometimes above the optimum
