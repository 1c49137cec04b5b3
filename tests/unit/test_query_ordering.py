"""Query.adapt(): a query's filter-ordering settings, validated, on the plan and in its JSON."""

from __future__ import annotations

import json

import pytest

from processors.core.ordering.config import OrderingConfig
from processors.core.query import Query, QueryError, col
from processors.workloads.examples import readings_passthrough


def filtered(n: int = 3) -> Query:
    q = readings_passthrough()
    preds = [col("r.temperature") > 20.0, col("r.humidity") < 50.0, col("r.sensor_id") >= 100]
    return q.where(*preds[:n])


def test_without_adapt_the_plan_has_no_ordering_and_shows_the_defaults() -> None:
    plan = filtered().build()
    assert plan.ordering is None
    assert plan.ordering_config == OrderingConfig()
    assert plan.to_json()["ordering"] == OrderingConfig().to_json()


def test_a_plan_without_filters_shows_no_ordering() -> None:
    assert readings_passthrough().build().to_json()["ordering"] is None


def test_adapt_stores_the_settings_on_the_plan() -> None:
    plan = (
        filtered()
        .adapt("agreedy", profile_probability=0.5, window_tuples=200, min_profile_tuples=20)
        .build()
    )
    expected = OrderingConfig(
        algorithm="agreedy", profile_probability=0.5, window_tuples=200, min_profile_tuples=20
    )
    assert plan.ordering == expected
    shown = json.loads(json.dumps(plan.to_json()))["ordering"]
    assert shown == expected.to_json()
    assert (shown["profile_probability"], shown["window_tuples"]) == (0.5, 200)


@pytest.mark.parametrize("algorithm", ["agreedy", "sweep", "independent", "localswaps", "fixed"])
def test_every_algorithm_with_its_table_1_defaults(algorithm: str) -> None:
    plan = filtered().adapt(algorithm).build()
    assert plan.ordering == OrderingConfig(algorithm=algorithm)  # type: ignore[arg-type]
    assert plan.to_json()["ordering"]["algorithm"] == algorithm


def test_adapt_accepts_every_setting() -> None:
    plan = (
        filtered(2)
        .adapt(
            algorithm="sweep",
            profile_probability=0.1,
            window_tuples=300,
            window_ms=5_000,
            alpha=0.5,
            min_profile_tuples=10,
            costs=[1, 2.5],
            cost_samples=8,
            seed=7,
        )
        .build()
    )
    assert plan.ordering is not None
    assert plan.ordering.costs == (1.0, 2.5) and plan.ordering.window_ms == 5_000
    assert plan.ordering.seed == 7 and plan.ordering.cost_samples == 8


def test_adapt_leaves_the_rest_of_the_plan_alone() -> None:
    plain, adapted = filtered().build(), filtered().adapt(profile_probability=0.2).build()
    a, b = plain.to_json(), adapted.to_json()
    a.pop("ordering"), b.pop("ordering")
    assert a == b
    assert adapted.is_passthrough is False


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"algorithm": "greedy"}, "unknown ordering algorithm 'greedy'"),
        ({"profile_probability": 1.5}, "profile_probability"),
        ({"profile_probability": "0.5"}, "profile_probability must be a number"),
        ({"profile_probability": True}, "profile_probability must be a number"),
        ({"window_tuples": 0}, "window_tuples"),
        ({"window_tuples": 20.5}, "window_tuples must be an int"),
        ({"window_ms": -1}, "window_ms"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": None}, "alpha must be a number, got None"),
        ({"min_profile_tuples": 0}, "min_profile_tuples"),
        ({"cost_samples": 0}, "cost_samples"),
        ({"seed": "x"}, "seed must be an int"),
        ({"costs": "12"}, "costs must be a sequence of numbers"),
        ({"costs": [1.0, -1.0, 2.0]}, "costs must all be positive"),
        ({"window": 100}, "unknown ordering setting(s) ['window']"),
        ({"p": 0.1}, "unknown ordering setting(s) ['p']"),
    ],
)
def test_a_bad_setting_is_a_query_error_naming_it(settings: dict, named: str) -> None:
    with pytest.raises(QueryError) as exc:
        filtered().adapt(**settings)
    assert str(exc.value).startswith("adapt(): ")
    assert named in str(exc.value)


def test_adapt_twice_is_an_error() -> None:
    q = filtered().adapt()
    with pytest.raises(QueryError, match=r"adapt\(\) is given twice"):
        q.adapt("sweep")


def test_adapt_without_filters_fails_at_build() -> None:
    q = readings_passthrough().adapt(profile_probability=0.5)
    with pytest.raises(QueryError, match="has no filters or joins to order"):
        q.build()


def test_costs_need_one_per_filter() -> None:
    with pytest.raises(QueryError, match="costs gives 2 costs but stream 'r' has 3 filters"):
        filtered(3).adapt(costs=[1.0, 2.0]).build()
    assert filtered(2).adapt(costs=[1.0, 2.0]).build().ordering is not None


def test_plan_command_shows_the_ordering(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from processors.cli import main

    path = tmp_path / "q.py"
    path.write_text(
        "from processors.core.query import col\n"
        "from processors.workloads.examples import readings_passthrough\n"
        "query = readings_passthrough().where(col('r.temperature') > 20.0)\n"
        "query.adapt('independent', window_tuples=250)\n"
    )
    assert main(["plan", str(path)]) == 0
    shown = json.loads(capsys.readouterr().out)["ordering"]
    assert shown["algorithm"] == "independent" and shown["window_tuples"] == 250
    assert shown["profile_probability"] == 0.005  # the paper's default for Independent


def test_the_ordering_algorithms_are_the_reoptimizer_registry() -> None:
    from processors.core.ordering.config import algorithms
    from processors.core.ordering.reoptimizers import REOPTIMIZERS

    assert algorithms() == tuple(REOPTIMIZERS)
    for name in REOPTIMIZERS:
        assert filtered().adapt(name).build().ordering_config.algorithm == name
