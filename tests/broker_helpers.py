"""Helpers the integration tests share that read what a worker wrote to the broker."""

from __future__ import annotations

from processors.runtime.worker import STATS_TOPIC
from topics.admin import read_topic
from topics.avro import SchemaStore, decode_single_object, load_schema


def stats_records(bootstrap: str, query: str, agent: str | None = None) -> list[dict]:
    """The Stats records of one query (of one agent if given), decoded, as read_topic reads them."""
    schema, store = load_schema("stats"), SchemaStore()
    decoded = (
        decode_single_object(r.value, schema, store) for r in read_topic(bootstrap, STATS_TOPIC)
    )
    return [s for s in decoded if s["query"] == query and (agent is None or s["agent"] == agent)]
