"""The ``streamon`` command: argument parsing, ``plan`` output and errors, and query loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from processors.cli import _bench, _broker, _demo, _plan, _worker, build_parser, main
from processors.commands.queries import load_plan
from processors.core.query import LogicalPlan, QueryError
from processors.workloads.examples import readings_passthrough

QUERY_HEAD = """
from processors.core.query import Query, col
from topics.avro import load_schema

query = Query("bad-query")
query.stream("r", topic="readings", schema=load_schema("reading"), key="sensor_id", timestamp="ts")
query.into("readings-alerts")
"""


@pytest.fixture(autouse=True)
def isolated(no_local_settings: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No streamon.toml or environment settings leak in; state goes to a temp dir."""
    monkeypatch.setenv("STREAMON_STATE_DIR", str(no_local_settings / "state"))


def write_query(tmp_path: Path, body: str, name: str = "q.py") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


# -- parser ------------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["start", "stop", "status"])
def test_broker_actions(action: str) -> None:
    args = build_parser().parse_args(["broker", action, "--port", "9999"])
    assert (args.command, args.action, args.port, args.func) == ("broker", action, 9999, _broker)
    assert build_parser().parse_args(["broker", action]).port is None


def test_worker_arguments() -> None:
    args = build_parser().parse_args(["worker", "readings"])
    assert (args.query, args.id, args.web_port, args.loglevel) == ("readings", None, 0, "info")
    assert args.func is _worker
    args = build_parser().parse_args(
        ["worker", "q.py", "--id", "w1", "--web-port", "7000", "--loglevel", "debug"]
    )
    assert (args.query, args.id, args.web_port, args.loglevel) == ("q.py", "w1", 7000, "debug")


def test_plan_demo_bench_arguments() -> None:
    parser = build_parser()
    plan = parser.parse_args(["plan", "pkg.mod:query"])
    assert (plan.command, plan.query, plan.func) == ("plan", "pkg.mod:query", _plan)
    demo = parser.parse_args(["demo"])
    assert (demo.records, demo.func) == (20_000, _demo)
    assert parser.parse_args(["demo", "--records", "5"]).records == 5
    for what in ("ingest", "envelope"):
        bench = parser.parse_args(["bench", what, "--json", "out/r.json"])
        assert (bench.what, bench.json, bench.records, bench.func) == (
            what,
            "out/r.json",
            None,  # each bench has its own default (ingest 500,000; spark 1,000,000)
            _bench,
        )
    assert parser.parse_args(["bench", "ingest"]).json is None


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["broker"],
        ["broker", "restart"],
        ["worker"],
        ["plan"],
        ["bench", "sparkle"],
        ["bench", "ingest", "--records", "many"],
        ["worker", "q", "--loglevel", "loud"],
        ["nonsense"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert "usage: streamon" in capsys.readouterr().err


# -- plan ----------------------------------------------------------------------------------------


def test_plan_builtin_prints_the_plan_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "readings"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == readings_passthrough().build().to_json()
    assert printed["name"] == "readings" and printed["passthrough"] is True
    assert [s["topic"] for s in printed["streams"]] == ["readings"]
    assert printed["streams"][0]["key"] == "sensor_id"
    assert printed["output"]["topic"] == "readings-out"
    assert list(printed["output"]["columns"]) == [
        "sensor_id",
        "ts",
        "temperature",
        "humidity",
        "site",
        "ok",
        "battery",
    ]


def test_plan_of_a_file_prints_its_filters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_query(tmp_path, QUERY_HEAD + 'query.where(col("r.temperature") > 30.0)\n')
    assert main(["plan", str(path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["name"] == "bad-query" and printed["passthrough"] is False
    assert [(f["column"], f["op"], f["values"]) for f in printed["filters"]] == [
        ("temperature", ">", [30.0])
    ]


def test_plan_with_unknown_field_returns_2_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_query(tmp_path, QUERY_HEAD + 'query.where(col("r.pressure") > 1.0)\n')
    assert main(["plan", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("streamon: QueryError: ")
    assert "stream 'r' has no field 'pressure'" in err
    assert "temperature" in err  # the known fields are listed


def test_plan_with_wrongly_typed_constant_returns_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_query(tmp_path, QUERY_HEAD + 'query.where(col("r.site") > 3)\n')
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("streamon: QueryError: ") and "r.site" in err


def test_plan_unknown_query_returns_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "no_such_query"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "streamon: QueryError: unknown query 'no_such_query': give a .py file, module:attr, "
        "or one of readings\n"
    )


def test_plan_missing_file_returns_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(tmp_path / "missing.py")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_broker_status_when_none_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["broker", "status"]) == 1
    assert capsys.readouterr().out == "not running\n"


def test_config_error_returns_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("session_timeout_s = -1\n")
    monkeypatch.setenv("STREAMON_CONFIG", str(config))
    assert main(["broker", "status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("streamon: ") and "session_timeout_s" in err


# -- load_plan -----------------------------------------------------------------------------------


def test_load_plan_module_attr_callable_query_and_plan() -> None:
    expected = readings_passthrough().build()
    from_callable = load_plan("processors.workloads.examples:readings_passthrough")
    assert isinstance(from_callable, LogicalPlan) and from_callable == expected
    assert load_plan("readings") == expected


def test_load_plan_module_attr_errors() -> None:
    with pytest.raises(QueryError, match=r"processors.workloads.examples:SITES is a tuple"):
        load_plan("processors.workloads.examples:SITES")
    with pytest.raises(QueryError, match=r"cannot load query processors.workloads.examples:nope"):
        load_plan("processors.workloads.examples:nope")
    with pytest.raises(QueryError, match=r"cannot load query no_such_pkg_xyz:query"):
        load_plan("no_such_pkg_xyz:query")


def test_load_plan_file_defining_plan(tmp_path: Path) -> None:
    path = write_query(
        tmp_path,
        "from processors.workloads.examples import readings_passthrough\n"
        "plan = readings_passthrough(name='from-file').build()\n",
    )
    plan = load_plan(str(path))
    assert plan.name == "from-file"
    assert plan == readings_passthrough(name="from-file").build()


def test_load_plan_file_defining_neither(tmp_path: Path) -> None:
    path = write_query(tmp_path, "x = 1\n")
    with pytest.raises(QueryError, match=r"defines neither 'query' nor 'plan'") as exc:
        load_plan(str(path))
    assert str(path) in str(exc.value)


def test_load_plan_file_defining_something_else(tmp_path: Path) -> None:
    path = write_query(tmp_path, "query = 42\n")
    with pytest.raises(QueryError, match=r"is a int, not a Query or LogicalPlan"):
        load_plan(str(path))


# -- the command line as a newcomer meets it (issue 14) --------------------------------------------


def test_top_level_help_describes_the_main_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "The ``streamon`` command" not in out
    assert "adaptive stream processor" in out
    for command in ("broker start|status|stop", "plan QUERY", "worker QUERY", "demo",
                    "analyze QUERY", "schema check|fingerprint|register FILE"):  # fmt: skip
        assert command in out, command


def test_experiment_help_lists_every_experiment(capsys: pytest.CaptureFixture[str]) -> None:
    from processors.experiments import LIVE_EXPERIMENTS, all_experiments

    with pytest.raises(SystemExit) as exc:
        main(["experiment", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    names = [*all_experiments(), *LIVE_EXPERIMENTS]
    assert len(names) > 10
    listed = set(out.replace(",", " ").split())
    assert set(names) <= listed, set(names) - listed
    assert out.index("fig9,") < out.index("fig10,")  # natural order
    # the experiments are imported only for help: parsing alone stays fast
    assert build_parser().parse_args(["experiment", "fig9"]).name == "fig9"


def test_analyze_without_arguments_fails_before_spark(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    import processors.runtime.config as config

    def no_broker(*_: object, **__: object) -> str:
        raise AssertionError("the broker (and Spark) must not be reached on an argument error")

    monkeypatch.setattr(config, "resolve_bootstrap", no_broker)
    started = time.monotonic()
    assert main(["analyze"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("streamon: ValueError: analyze needs a QUERY")
    assert "--topic" in err
    assert main(["analyze", "no_such_query"]) == 2
    assert "unknown query 'no_such_query'" in capsys.readouterr().err
    assert main(["analyze", "readings", "--since", "yesterday"]) == 2
    assert "--since: not a time: 'yesterday'" in capsys.readouterr().err
    assert main(["analyze", "readings", "--limit", "0"]) == 2
    assert "--limit must be a positive" in capsys.readouterr().err
    assert time.monotonic() - started < 5.0


def test_plan_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """`streamon plan q.py | head -1`: no BrokenPipeError traceback; status 141 (as `seq`)."""
    import subprocess
    import sys

    values = "{f'site-{i:05d}' for i in range(20000)}"  # a plan of about 700 kB
    path = write_query(tmp_path, QUERY_HEAD + f'query.where(col("r.site").isin({values}))\n')
    script = f'"{sys.executable}" -m processors.cli plan "{path}" | head -1; '
    done = subprocess.run(
        ["bash", "-c", script + 'echo "${PIPESTATUS[0]}"'], capture_output=True, text=True,
        timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.stdout == "{\n141\n"
    assert done.stderr == ""


def test_broker_status_from_a_subfolder_uses_the_project_state_dir(
    no_local_settings: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from processors.runtime.config import find_project, load_settings

    monkeypatch.delenv("STREAMON_STATE_DIR")
    project = no_local_settings / "project"
    (project / ".streamon").mkdir(parents=True)
    deep = project / "src" / "pkg"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert find_project() == project
    assert load_settings({}).state_dir == project / ".streamon"
    assert main(["broker", "status"]) == 1
    out, err = capsys.readouterr()
    assert out == "not running\n"
    assert str(project / ".streamon") in err
    # a streamon.toml up the tree is the project's config file, its state_dir relative to it
    (project / "streamon.toml").write_text('state_dir = "run"\nbootstrap = "k:1"\n')
    settings = load_settings({})
    assert (settings.state_dir, settings.bootstrap) == (project / "run", "k:1")
    # with no project up the tree, the default stays ./.streamon
    other = no_local_settings / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    assert find_project() is None
    assert load_settings({}).state_dir == other / ".streamon"


def test_demo_prints_best_and_live_orders_by_name() -> None:
    from processors.commands.demo import format_orders, named_orders

    best = named_orders(["r0", "r1", "r2"], [(1, 2), (0, 2), (1, 0)])
    assert best == {"r0": ["r1", "r2"], "r1": ["r0", "r2"], "r2": ["r1", "r0"]}
    assert format_orders(best) == "r0: r1 > r2; r1: r0 > r2; r2: r1 > r0"
    assert format_orders(None) == "(none yet)"


def test_schema_arguments() -> None:
    from processors.cli import _schema

    args = build_parser().parse_args(["schema", "check", "x.avsc"])
    assert (args.action, args.file, args.subject, args.func) == ("check", "x.avsc", None, _schema)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["schema", "validate", "x.avsc"])
