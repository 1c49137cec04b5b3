"""``streamon explain QUERY --stats FILE [--json PATH]``: the cost-based plan choice (issue 17).

The query (a .cql, .py or built-in query, as ``streamon plan`` takes) is bound to the statistics
of a TOML file (:mod:`processors.core.cost.stats_file`), every plan shape is costed with Ayad and
Naughton's model, and the chosen plan is printed as a tree, then every plan considered, ranked.
"""

from __future__ import annotations

import json
from pathlib import Path

from processors.commands.queries import load_plan
from processors.core.cost.inputs import bind
from processors.core.cost.optimizer import optimize
from processors.core.cost.render import explain_json, explain_text
from processors.core.cost.stats_file import load_stats


def run_explain(
    query: str, stats: str, json_path: str | None = None, catalog: str | None = None
) -> str:
    """The EXPLAIN text (and the JSON written to ``json_path``); errors are QueryError or
    StatsError with the file and place."""
    plan = load_plan(query, catalog, require_into=False)
    figures = load_stats(stats)
    inputs = bind(plan, figures)
    streams = tuple(s.name for s in plan.streams)
    choice = optimize(inputs, streams)
    if json_path is not None:
        body = explain_json(plan.name, choice, inputs, figures.source)
        Path(json_path).write_text(json.dumps(body, indent=2) + "\n")
    return explain_text(plan.name, choice, inputs, figures.source)
