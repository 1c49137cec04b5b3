"""``streamon bench latency``'s queries: each builds, and its result carries the input times
the latency is measured from (the run itself is a benchmark, not a test)."""

from __future__ import annotations

from typing import Any

import pytest

from processors.bench.latency import (
    BURST_PER_MS,
    JOIN_WINDOW_MS,
    NEWEST,
    QUERIES,
    query_text,
    recurring_keys,
)


@pytest.mark.parametrize("kind", sorted(QUERIES))
def test_each_latency_query_builds_and_shows_its_input_times(kind: str) -> None:
    scope: dict[str, Any] = {}
    exec(query_text(kind, f"lat-{kind}", "lat", "lat.out"), scope)  # noqa: S102 (our text)
    plan = scope["query"].build()
    fields = {f["name"]: f["type"] for f in plan.output_schema["fields"]}
    for name in NEWEST[kind]:
        assert name in fields, (kind, sorted(fields))


def test_the_capacity_burst_and_the_paced_records_meet_as_many_partners() -> None:
    """The burst's keys recur per window per stream as the paced records' do (about once), so
    the join's capacity is measured on the work whose latency it sets the rate for: an
    arrival meets about one tuple of each other stream in either phase."""
    streams = 3
    for rate in (BURST_PER_MS * 1000, 30_000, 123_654):
        per_window_per_stream = rate / streams * JOIN_WINDOW_MS / 1000
        assert recurring_keys(rate, streams) == pytest.approx(per_window_per_stream, abs=1)
    assert recurring_keys(1, streams) == 10  # a floor: a handful of keys, not one
