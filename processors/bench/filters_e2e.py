"""End to end through Kafka: a filter query's pipeline next to the pass-through pipeline.

Same run, same broker, same input topic: the foundation's pass-through query (ingest ->
pass-through -> sink) and a query with ``filters`` conjunctive filters (ingest -> adaptive
filter stage -> sink), each run by a real worker process over the records published once.
A run's rate is its input tuples over the time between its first and last result record
(produce timestamps), so worker start-up and the group join are left out, as in
``streamon bench ingest``; the wall time from worker start to the last result is reported too.

The default filters pass most tuples (4 filters: about 75%), so that the comparison shows what
the filter stage costs rather than what the sink saves on dropped tuples.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from processors.bench.ingest import PARTITIONS, _say
from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.publish import publish_batch
from processors.core.batch import Batch
from processors.workloads.examples import reading_columns
from topics.admin import ensure_topics, read_topic
from topics.avro import load_schema
from topics.specs import TopicSpec

#: (where() text, numpy oracle) of the benchmark's filters, in declaration order
FILTERS: tuple[tuple[str, Any], ...] = (
    ('col("r.temperature") > 5.0', lambda c: c["temperature"] > 5.0),
    ('col("r.humidity") < 90.0', lambda c: c["humidity"] < 90.0),
    ('col("r.sensor_id") >= 100', lambda c: c["sensor_id"] >= 100),
    ('col("r.ok") == True', lambda c: c["ok"]),
    ('col("r.humidity") > 5.0', lambda c: c["humidity"] > 5.0),
    ('col("r.temperature") < 40.0', lambda c: c["temperature"] < 40.0),
    ('col("r.sensor_id") < 950', lambda c: c["sensor_id"] < 950),
    ('col("r.temperature") != 20.0', lambda c: c["temperature"] != 20.0),
)

#: filters every generated reading passes: the stage's cost with the sink's work unchanged
FILTERS_PASS_ALL: tuple[tuple[str, Any], ...] = (
    ('col("r.temperature") > -1000.0', lambda c: c["temperature"] > -1000.0),
    ('col("r.humidity") >= 0.0', lambda c: c["humidity"] >= 0.0),
    ('col("r.sensor_id") >= 0', lambda c: c["sensor_id"] >= 0),
    ('col("r.site") != "nowhere"', lambda c: np.ones(len(c["sensor_id"]), dtype=bool)),
    ('col("r.temperature") < 1000.0', lambda c: c["temperature"] < 1000.0),
    ('col("r.humidity") <= 100.0', lambda c: c["humidity"] <= 100.0),
    ('col("r.sensor_id") < 1000', lambda c: c["sensor_id"] < 1000),
    ('col("r.ts") > 0', lambda c: c["ts"] > 0),
)

QUERY = """\
from processors.core.query import col
from processors.workloads.examples import readings_passthrough
query = readings_passthrough(topic={topic!r}, result={result!r}, name={name!r}, partitions={p})
"""
FILTER_LINES = "query.where({filters})\nquery.adapt({adapt})\n"


Filters = tuple[tuple[str, Any], ...]


def chosen_filters(filters: int, pass_all: bool = False) -> Filters:
    """The first ``filters`` benchmark filters (of FILTERS_PASS_ALL with ``pass_all``)."""
    table = FILTERS_PASS_ALL if pass_all else FILTERS
    if not 1 <= filters <= len(table):
        raise ValueError(f"filters must be 1..{len(table)}, got {filters}")
    return table[:filters]


def expected_count(batch: Batch, filters: Filters) -> int:
    """How many of ``batch``'s tuples pass every one of ``filters`` (numpy)."""
    mask = np.ones(len(batch), dtype=bool)
    for _, passes in filters:
        mask &= passes(batch.columns)
    return int(mask.sum())


def query_text(
    topic: str, result: str, name: str, filters: Filters, adapt: dict[str, Any] | None = None
) -> str:
    """The query file of a run: pass-through without ``filters``, else the filter query."""
    text = QUERY.format(topic=topic, result=result, name=name, p=PARTITIONS)
    if filters:
        settings = ", ".join(f"{k}={v!r}" for k, v in (adapt or {}).items())
        where = ", ".join(f for f, _ in filters)
        text += FILTER_LINES.format(filters=where, adapt=settings)
    return text


def run_query(
    bootstrap: str, state_dir: Path, topic: str, run: str, filters: Filters, count: int,
    tuples: int,
    adapt: dict[str, Any] | None = None, timeout: float = 600.0,
) -> dict[str, Any]:  # fmt: skip
    """One worker runs one query over ``topic`` until its result topic holds ``count`` records."""
    result = f"{run}.out"
    query_file = state_dir / "bench" / f"{run}.py"
    query_file.parent.mkdir(parents=True, exist_ok=True)
    query_file.write_text(query_text(topic, result, run, filters, adapt))
    started = time.monotonic()
    worker = WorkerProcess(
        query_file, bootstrap=bootstrap, state_dir=state_dir, worker_id=run, loglevel="warn"
    )
    detail: dict[str, Any] = {}
    try:
        seen = wait_for_count(bootstrap, result, count, timeout, workers=[worker])
        wall = time.monotonic() - started
        if seen < count:
            raise RuntimeError(f"{run} delivered {seen} of {count}; see {worker.log_path}")
        try:
            agents = {a["agent"]: a for a in worker.status()["stats"]["agents"]}
            stage = agents.get("filter") or agents.get("passthrough") or {}
            busy = sum(a["busy_ns"] for a in agents.values())
            detail = {
                "busy_us_per_tuple": busy / tuples / 1e3,  # all agents, Faust overhead excluded
                "stage_busy_us_per_tuple": stage.get("busy_ns", 0) / tuples / 1e3,
                "stage_tuples_per_event": stage.get("tuples_in", 0)
                / max(stage.get("batches", 0), 1),
                "plan": stage.get("plan"),
            }
        except OSError:  # no status endpoint: rates only
            pass
    finally:
        worker.stop()
    stamps = sorted(r.timestamp_ms for r in read_topic(bootstrap, result))
    if len(stamps) != count:
        raise RuntimeError(f"{run}: {len(stamps)} results, {count} expected")
    span = max((stamps[-1] - stamps[0]) / 1000.0, 1e-3)
    return {"run": run, "filters": len(filters), "results": count, "tuples_per_s": tuples / span,
            "span_s": span, "wall_s": wall, **detail}  # fmt: skip


def agent_vs_passthrough(
    bootstrap: str | None,
    tuples: int = 500_000,
    filters: int = 4,
    repeats: int = 3,
    adapt: dict[str, Any] | None = None,
    state_dir: Path | None = None,
    seed: int = 11,
    pass_all: bool = False,
) -> dict[str, Any]:
    """Rates of the pass-through and the filter pipelines over the same records, end to end.

    ``bootstrap`` None starts a private embedded broker for the run (stopped afterwards).
    Runs alternate (P F, then F P, ...) ``repeats`` times; rates are medians (end-to-end rates
    vary by +-30% from run to run on a 2-core machine, the worker's busy time much less).
    Returns ``passthrough_tuples_per_s``, ``filter_tuples_per_s``, ``agent_vs_passthrough``
    (their ratio), the worker's and the stage's busy µs per input tuple of each kind (medians;
    Faust's per-event overhead is not in them) and the details of each run. ``pass_all``
    uses filters that every tuple passes, so both pipelines write the same results and the
    ratio is the filter stage's cost alone.
    """
    chosen = chosen_filters(filters, pass_all)
    with tempfile.TemporaryDirectory(prefix="streamon-bench-filters-") as tmp:
        state = Path(state_dir) if state_dir is not None else Path(tmp)
        if bootstrap is not None:
            return _measure(bootstrap, state, tuples, chosen, repeats, adapt, seed)
        from processors.runtime.broker import start_broker, stop_broker

        broker_dir = Path(tmp) / "broker"
        broker_dir.mkdir()
        info = start_broker(broker_dir)
        try:
            return _measure(info.bootstrap, state, tuples, chosen, repeats, adapt, seed)
        finally:
            stop_broker(broker_dir)


def _measure(
    bootstrap: str, state_dir: Path, tuples: int, filters: Filters, repeats: int,
    adapt: dict[str, Any] | None, seed: int,
) -> dict[str, Any]:  # fmt: skip
    stem = f"bench-filters-{time.strftime('%Y%m%d-%H%M%S')}"
    topic = f"{stem}.readings"
    ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS)])
    batch = reading_columns(tuples, seed=seed)
    passing = expected_count(batch, filters)
    _say(f"broker {bootstrap}; publishing {tuples} readings to {topic}")
    publish_batch(bootstrap, topic, batch, load_schema("reading"))
    _say(f"{len(filters)} filters pass {passing} of {tuples} ({passing / tuples:.1%})")

    runs: dict[str, list[dict[str, Any]]] = {"passthrough": [], "filter": []}
    for i in range(repeats):
        order = ("passthrough", "filter") if i % 2 == 0 else ("filter", "passthrough")
        for kind in order:
            chosen = () if kind == "passthrough" else filters
            count = tuples if kind == "passthrough" else passing
            res = run_query(bootstrap, state_dir, topic, f"{stem}-{kind}-{i}", chosen, count,
                            tuples, adapt)  # fmt: skip
            runs[kind].append(res)
            _say(f"{kind} run {i}: {res['tuples_per_s']:,.0f} tuples/s "
                 f"(span {res['span_s']:.2f} s, wall {res['wall_s']:.1f} s)")  # fmt: skip
    passthrough = statistics.median(r["tuples_per_s"] for r in runs["passthrough"])
    filtered = statistics.median(r["tuples_per_s"] for r in runs["filter"])
    results = {
        "passthrough_tuples_per_s": passthrough,
        "filter_tuples_per_s": filtered,
        "agent_vs_passthrough": filtered / passthrough,
        **{
            f"{kind}_{key}": statistics.median(r[key] for r in runs[kind])
            for kind in runs
            for key in ("busy_us_per_tuple", "stage_busy_us_per_tuple")
            if all(key in r for r in runs[kind])
        },  # fmt: skip
        "tuples": tuples,
        "filters": len(filters),
        "filter_texts": [f for f, _ in filters],
        "filter_results": passing,
        "runs": runs,
    }
    _say(f"pass-through {passthrough:,.0f} tuples/s; {len(filters)} filters "
         f"{filtered:,.0f} tuples/s; "
         f"ratio {filtered / passthrough:.2f}")  # fmt: skip
    return results
