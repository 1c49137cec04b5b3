"""``streamon bench latency``'s queries: each builds, and its result carries the input times
the latency is measured from (the run itself is a benchmark, not a test)."""

from __future__ import annotations

from typing import Any

import pytest

from processors.bench.latency import NEWEST, QUERIES, query_text


@pytest.mark.parametrize("kind", sorted(QUERIES))
def test_each_latency_query_builds_and_shows_its_input_times(kind: str) -> None:
    scope: dict[str, Any] = {}
    exec(query_text(kind, f"lat-{kind}", "lat", "lat.out"), scope)  # noqa: S102 (our text)
    plan = scope["query"].build()
    fields = {f["name"]: f["type"] for f in plan.output_schema["fields"]}
    for name in NEWEST[kind]:
        assert name in fields, (kind, sorted(fields))
