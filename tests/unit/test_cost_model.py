"""Ayad and Naughton's cost model and optimizer (processors/core/cost), in process.

- Example 1 (Sect. 3.3) from its .cql file and statistics file: the three binary plans' buffers,
  tuples handled and utilizations as the paper prints them, and the feasibility verdicts at 0.5,
  4 and 5 ms per tuple. Plan (c)'s utilization is 0.45 (900 tuples/s at 0.5 ms), where the
  paper's text says 50% (docs/cost-model.md).
- Observation 1 as a property: every plan of a random query outputs eq. 5's rate and its root
  window is eq. 6's, whatever its shape.
- Sect. 5.2's drop boxes against an exhaustive oracle (the optimum of a continuous knapsack lies
  at a vertex with at most one fractional share).
- The plans enumerated: every binary tree once (3, 15, 105 for 3, 4, 5 streams).
- The statistics file: what it lacks is named, ready to paste.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.commands.explain import run_explain
from processors.commands.queries import load_plan
from processors.core.cost.inputs import CostInputs, JoinEdge, StreamInput, bind
from processors.core.cost.model import evaluate
from processors.core.cost.optimizer import optimize
from processors.core.cost.shapes import Shape, shapes, trees
from processors.core.cost.shedding import approximate
from processors.core.cost.stats_file import StatsError, load_stats, parse_stats
from processors.cql import parse_cql

CQL = Path(__file__).parents[2] / "processors" / "workloads" / "cql"
EXAMPLE1, STATS1 = CQL / "an_example1.cql", CQL / "an_example1.toml"


def example1(join_cost_ms: float) -> CostInputs:
    inputs = bind(load_plan(str(EXAMPLE1), require_into=False), load_stats(STATS1))
    return inputs.with_join_cost(join_cost_ms / 1000)


def by_order(inputs: CostInputs) -> dict[str, object]:
    return {str(r.cost.shape.order()): r for r in optimize(inputs).plans}


def test_example_one_buffers_tuples_and_utilization_as_the_paper_gives_them() -> None:
    plans = by_order(example1(0.5))
    a, b, c = plans["['A', 'B', 'C']"], plans["['B', 'C', 'A']"], plans["['A', 'C', 'B']"]
    assert [p.cost.memory_tuples for p in (a, b, c)] == [80, 50, 130]
    assert [p.cost.tuples_per_s for p in (a, b, c)] == [250, 280, 900]
    assert [p.cost.utilization for p in (a, b)] == pytest.approx([0.125, 0.14])
    assert c.cost.utilization == pytest.approx(0.45)  # the paper's text: 50%
    assert all(p.cost.feasible for p in (a, b, c))
    assert a.chosen and {p.cost.output_per_s for p in plans.values()} == {1000.0}
    mjoin = plans["mjoin"]  # not in the paper: one MJoin holds only the three windows
    assert mjoin.cost.memory_tuples == 30 and mjoin.cost.tuples_per_s == 330


def test_example_one_at_4_ms_only_plan_a_is_feasible_and_at_5_ms_none_is() -> None:
    at4 = by_order(example1(4))
    assert {o for o, r in at4.items() if r.cost.feasible} == {"['A', 'B', 'C']"}
    assert at4["['A', 'B', 'C']"].chosen
    at5 = optimize(example1(5))
    assert not any(r.cost.feasible for r in at5.plans) and not at5.feasible
    # infeasible: the chosen plan is the one whose drop boxes keep the most output (Sect. 5)
    assert at5.chosen.throughput == max(r.throughput for r in at5.plans)


def test_explain_writes_every_plan_with_the_issue_keys(tmp_path: Path) -> None:
    out = tmp_path / "plans.json"
    text = run_explain(str(EXAMPLE1), str(STATS1), str(out))
    body = json.loads(out.read_text())
    keys = {"order", "shape", "buffer_tuples", "tuples_per_s", "utilization", "output_per_s",
            "feasible", "chosen"}  # fmt: skip
    assert all(keys <= set(p) for p in body["plans"])
    assert [p["chosen"] for p in body["plans"]].count(True) == 1
    assert body["plans"][0]["order"] == ["A", "B", "C"] and body["plans"][0]["chosen"]
    assert "chosen: (A ⋈ B) ⋈ C" in text and "utilization 0.125" in text
    assert "run it with join_tree = '(A, B), C'" in text


def test_every_plan_explain_lists_runs_as_its_join_tree_says() -> None:
    """Each binary plan's ``join_tree`` is a setting the query takes, for the same tree; the
    worker's live view marks the plan it runs (here plan (c), a Cartesian product)."""
    from processors.core.cost.live import _runs
    from processors.core.cost.render import plan_json
    from processors.core.join_tree import parse_join_tree, unordered
    from processors.core.query import Query

    text = EXAMPLE1.read_text()
    for r in optimize(example1(0.5)).plans:
        entry = plan_json(r)
        assert entry["executable"] == (r.cost.shape.filters_at == "inputs")
        if entry["shape"] == "mjoin":
            assert entry["join_tree"] is None
            continue
        shape_tree = r.cost.shape.join_tree()
        assert shape_tree is not None
        head = f"CREATE QUERY q WITH (join_tree = '{entry['join_tree']}') AS SELECT A.a"
        cql = text.replace("SELECT A.a", head)
        plan = Query.from_cql(cql).build()
        assert plan.join_tree is not None and unordered(plan.join_tree) == unordered(shape_tree)
        assert _runs(plan, entry) == entry["executable"]
        assert unordered(parse_join_tree(entry["join_tree"])) == unordered(shape_tree)


def _random_inputs(draw: st.DrawFn, n: int) -> CostInputs:
    names = [f"S{i}" for i in range(n)]
    streams = {
        s: StreamInput(s, draw(st.floats(0.5, 100)), float(draw(st.integers(1, 50))), "ROWS", True)
        for s in names
    }
    pairs = [(a, b) for a, b in itertools.combinations(names, 2) if draw(st.booleans())]
    edges = [  # each on its own columns: independent predicates, as eq. 5 assumes
        JoinEdge(a, b, f"{a}.k{i} = {b}.k{i}", draw(st.floats(0.01, 1)), i)
        for i, (a, b) in enumerate(pairs)
    ]
    return CostInputs(streams, tuple(edges), 0.001, 0.001, 1.0)


@st.composite
def random_inputs(draw: st.DrawFn) -> CostInputs:
    return _random_inputs(draw, draw(st.integers(2, 5)))


@settings(max_examples=40, deadline=None)
@given(random_inputs())
def test_every_plan_outputs_eq5s_rate_and_eq6s_window(inputs: CostInputs) -> None:
    names = list(inputs.streams)
    f = math.prod(e.selectivity for e in inputs.joins)
    w = {s: inputs.streams[s].window for s in names}
    rate = f * sum(
        inputs.streams[k].rate * math.prod(w[i] for i in names if i != k) for k in names
    )  # eq. 5
    window = f * math.prod(w.values())  # eq. 6
    for shape in shapes(names, with_filters=False):
        cost = evaluate(shape, inputs)
        assert cost.output_per_s == pytest.approx(rate, rel=1e-9)
        assert cost.root.window == pytest.approx(window, rel=1e-9)


def _vertex_oracle(shape: Shape, inputs: CostInputs) -> float:
    """The best output over the vertices of {0 <= x <= 1, cost(x) <= capacity}: each stream
    kept whole, dropped, or the one whose share fills the budget."""
    names = shape.streams
    unit = {s: evaluate(shape, inputs, {o: float(o == s) for o in names}) for s in names}
    best = 0.0
    for fixed in itertools.product((0.0, 1.0), repeat=len(names)):
        keep = dict(zip(names, fixed, strict=True))
        used = sum(unit[s].cost_per_s * keep[s] for s in names)
        if used > inputs.capacity + 1e-12:
            continue
        value = sum(unit[s].output_per_s * keep[s] for s in names)
        best = max(best, value)
        for s in names:  # one fractional share on top
            if keep[s] == 0.0 and unit[s].cost_per_s > 0:
                x = min(1.0, (inputs.capacity - used) / unit[s].cost_per_s)
                best = max(best, value + x * unit[s].output_per_s)
    return best


@settings(max_examples=30, deadline=None)
@given(random_inputs(), st.floats(0.0005, 0.05))
def test_drop_boxes_reach_the_exhaustive_optimum(inputs: CostInputs, cost_s: float) -> None:
    inputs = inputs.with_join_cost(cost_s)
    for shape in shapes(list(inputs.streams), with_filters=False):
        got = approximate(shape, inputs)
        kept = evaluate(shape, inputs, got.keep)
        assert kept.cost_per_s <= inputs.capacity * (1 + 1e-9)
        assert got.output_per_s == pytest.approx(kept.output_per_s, rel=1e-9, abs=1e-9)
        assert got.output_per_s == pytest.approx(_vertex_oracle(shape, inputs), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(("n", "count"), [(1, 1), (2, 1), (3, 3), (4, 15), (5, 105)])
def test_every_binary_tree_is_listed_once(n: int, count: int) -> None:
    found = [t.text() for t in trees([f"S{i}" for i in range(n)])]
    assert len(found) == count == len(set(found))


def test_a_range_window_holds_rate_times_its_span_and_no_window_is_unbounded() -> None:
    script = parse_cql(
        "CREATE STREAM r (k BIGINT NOT NULL, ts BIGINT NOT NULL) WITH (topic='r', "
        "timestamp='ts'); SELECT r.k FROM r [RANGE 2 MINUTES];"
    )
    stats = parse_stats({"capacity": 1, "join_cost_ms": 1, "streams": {"r": {"rate": 50}}})
    assert bind(script.query().build(), stats).streams["r"].window == 50 * 120
    assert math.isinf(bind(load_plan("readings"), stats).streams["r"].window)


def test_missing_figures_are_listed_ready_to_paste() -> None:
    plan = load_plan(str(EXAMPLE1), require_into=False)
    stats = parse_stats({"capacity": 1, "join_cost_ms": 1, "streams": {"A": {"rate": 1}}})
    with pytest.raises(StatsError) as err:
        bind(plan, stats)
    text = str(err.value)
    for line in ("[streams.B] rate = ...", "[streams.C] rate = ...", '"A.a = B.a" = ...'):
        assert line in text, text


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"join_cost_ms": 1, "streams": {"A": {"rate": 1}}}, "missing 'capacity'"),
        ({"capacity": 0, "join_cost_ms": 1, "streams": {"A": {"rate": 1}}}, "capacity: must be"),
        ({"capacity": 1, "join_cost_ms": "x", "streams": {}}, "join_cost_ms: expected a number"),
        ({"capacity": 1, "join_cost_ms": 1, "streams": {"A": {}}}, "missing rate"),
        ({"capacity": 1, "join_cost_ms": 1, "streams": {"A": {"rate": 1, "speed": 2}}},
         "unknown key(s) speed"),
        ({"capacity": 1, "join_cost_ms": 1, "streams": {"A": {"rate": 1}},
          "selectivity": {"A.a = B.a": 2}}, "must be at most 1"),
        ({"capacity": 1, "join_cost_ms": 1, "streams": {"A": {"rate": 1}}, "cpu": 2},
         "unknown key(s) cpu"),
    ],
)  # fmt: skip
def test_a_bad_statistics_table_names_the_key(table: dict, message: str) -> None:
    with pytest.raises(StatsError, match=None) as err:
        parse_stats(table, "s.toml")
    assert message in str(err.value) and str(err.value).startswith("s.toml"), str(err.value)


def test_a_toml_syntax_error_names_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "s.toml"
    bad.write_text("capacity = 1\njoin_cost_ms = = 2\n")
    with pytest.raises(StatsError, match=r"s\.toml: not valid TOML: .*line 2"):
        load_stats(bad)


def test_equalities_on_one_key_count_once_whatever_the_tree() -> None:
    """A star of equalities on one key (the demo's r0.pid = ri.pid): joining r1 with r2 is a
    join on pid (implied), and every tree outputs eq. 5 with one factor per equality."""
    declare = "CREATE STREAM r{0} (pid BIGINT NOT NULL, ts BIGINT NOT NULL) WITH (topic='{0}', "
    script = parse_cql(
        "".join(declare.format(i) + "timestamp='ts');" for i in range(3))
        + "SELECT r0.pid FROM r0 [ROWS 20], r1 [ROWS 30], r2 [ROWS 40] "
        "WHERE r0.pid = r1.pid AND r0.pid = r2.pid;"
    )
    stats = parse_stats({"capacity": 1, "join_cost_ms": 1, "streams": {
        "r0": {"rate": 5}, "r1": {"rate": 7}, "r2": {"rate": 11}},
        "selectivity": {"r0.pid = r1.pid": 0.1, "r0.pid = r2.pid": 0.1}})  # fmt: skip
    inputs = bind(script.query().build(), stats)
    assert inputs.selectivity_between(frozenset({"r1"}), frozenset({"r2"})) == 0.1
    assert inputs.selectivity_between(frozenset({"r1", "r2"}), frozenset({"r0"})) == 0.1
    eq5 = 0.01 * (5 * 30 * 40 + 7 * 20 * 40 + 11 * 20 * 30)
    for shape in shapes(("r0", "r1", "r2"), with_filters=False):
        assert evaluate(shape, inputs).output_per_s == pytest.approx(eq5), shape.text()
