"""``streamon explain QUERY (--stats FILE | --measured) [--json PATH]``: the cost-based plan
choice (issue 17).

The query (a .cql, .py or built-in query, as ``streamon plan`` takes) is bound to statistics,
from a TOML file (:mod:`processors.core.cost.stats_file`) or measured by the workers that ran
it (their records on the stats topic, :mod:`processors.core.cost.measured`); every plan shape
is costed with Ayad and Naughton's model, and the chosen plan is printed as a tree, then every
plan considered, ranked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from processors.commands.queries import load_plan
from processors.core.cost.inputs import bind
from processors.core.cost.measured import measured_stats
from processors.core.cost.optimizer import optimize
from processors.core.cost.render import explain_json, explain_text
from processors.core.cost.stats_file import PlanStats, StatsError, load_stats

#: where workers publish their statistics (processors.runtime.worker.STATS_TOPIC)
STATS_TOPIC = "streamon.stats"


def stats_records(bootstrap: str, topic: str = STATS_TOPIC) -> list[dict[str, Any]]:
    """Every statistics record on ``topic``, decoded (a record that does not decode is
    skipped: the topic is shared by every query and version)."""
    from topics.admin import read_topic
    from topics.avro import SchemaStore, decode_single_object, load_schema

    schema, store, out = load_schema("stats"), SchemaStore(), []
    for record in read_topic(bootstrap, topic):
        try:
            out.append(decode_single_object(record.value, schema, store))
        except Exception:  # noqa: BLE001 (another writer's record: not ours to read)
            continue
    return out


def run_explain(
    query: str,
    stats: str | None = None,
    json_path: str | None = None,
    catalog: str | None = None,
    records: list[dict[str, Any]] | None = None,
) -> str:
    """The EXPLAIN text (and the JSON written to ``json_path``), with the statistics of the
    file ``stats`` or measured in ``records``; errors are QueryError or StatsError with the
    file and place."""
    plan = load_plan(query, catalog, require_into=False)
    if stats is not None:
        figures: PlanStats = load_stats(stats)
    elif records is not None:
        figures = measured_stats(plan, records, f"the stats topic ({len(records)} records)")
    else:
        raise StatsError("explain needs --stats FILE or --measured")
    inputs = bind(plan, figures)
    choice = optimize(inputs, tuple(s.name for s in plan.streams))
    if json_path is not None:
        body = explain_json(plan.name, choice, inputs, figures.source)
        Path(json_path).write_text(json.dumps(body, indent=2) + "\n")
    return explain_text(plan.name, choice, inputs, figures.source)
