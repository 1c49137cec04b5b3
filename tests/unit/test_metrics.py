"""/metrics (processors/runtime/metrics.py): a status body rendered in the Prometheus text
format and read back with prometheus_client's own parser: names, types, labels and values,
including the info-style orders, caches, scheduling and drop boxes."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from processors.runtime.metrics import render
from processors.runtime.stats import LATENCY_BUCKETS_S, AgentStats


def body() -> dict[str, Any]:
    sink = AgentStats("sink", "sink")
    sink.record(10, 10, 2_500_000_000, 2, 640, 320)
    for seconds in (0.004, 0.2, 0.2, 42.0):
        sink.record_latency(seconds)
    join = {
        "0": {
            "filter": {"kind": "filter", "order": ["hot", "dry"], "changes_total": 3},
            "mjoin": {
                "kind": "mjoin",
                "orders": {"a": ["b", "c"], "b": ["a", "c"]},
                "changes_total": 2,
                "caches": {"c:0-1[a,b]": {"hits": 7, "misses": 2, "bytes": 4096}},
            },
        }
    }
    return {
        "worker_id": "w1",
        "query": "q",
        "stats": {
            "agents": [
                {**sink.snapshot(), "backlog_tuples": 5, "backlog_bytes": 50},
                {"agent": "step", "stage": "mjoin", "tuples_in": 4, "plan": join},
            ]
        },
        "scheduling": {
            "policy": "chain",
            "plan_version": 4,
            "arbiter": {"agents": {"step": {"grants": 9}}, "priorities": {"step": 0.5}},
        },  # fmt: skip
        "shedding": {"active": True, "boxes": {"a": {"keep": 0.25, "kept": 3, "dropped": 9}}},
        "commit_lag": [
            {"topic": "in", "partition": 0, "high_watermark": 120, "committed": 100, "lag": 20},
            {"topic": "in", "partition": 1, "high_watermark": 7, "committed": 7, "lag": 0},
        ],
    }


def parsed() -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(render(body()).decode())}


def samples(name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for f in parsed().values() for s in f.samples if s.name == name]


def test_agent_counters_are_counters_in_base_units_with_worker_and_query_labels() -> None:
    families = parsed()
    assert families["streamon_agent_tuples_in"].type == "counter"
    assert families["streamon_agent_busy_seconds"].type == "counter"
    assert families["streamon_agent_backlog_tuples"].type == "gauge"
    (labels, value), _ = samples("streamon_agent_busy_seconds_total")
    assert labels == {"worker": "w1", "query": "q", "agent": "sink", "stage": "sink"}
    assert value == 2.5  # ns reported in seconds
    assert [v for _, v in samples("streamon_agent_input_bytes_total")] == [640, 0]
    assert [v for _, v in samples("streamon_agent_backlog_tuples")] == [5, 0]


def test_output_latency_is_a_cumulative_histogram() -> None:
    assert parsed()["streamon_agent_output_latency_seconds"].type == "histogram"
    buckets = {lab["le"]: v for lab, v in samples("streamon_agent_output_latency_seconds_bucket")}
    assert len(buckets) == len(LATENCY_BUCKETS_S) + 1
    assert buckets["0.005"] == 1 and buckets["0.1"] == 1 and buckets["0.25"] == 3
    assert buckets["30.0"] == 3 and buckets["+Inf"] == 4  # 42 s only in +Inf
    ((_, count),) = samples("streamon_agent_output_latency_seconds_count")
    ((_, total),) = samples("streamon_agent_output_latency_seconds_sum")
    assert count == 4 and abs(total - 42.404) < 1e-9


def test_orders_are_info_gauges_labelled_with_the_order_and_its_version() -> None:
    orders = {
        (lab["operator"], lab["pipeline"]): (lab["order"], lab["version"], v)
        for lab, v in samples("streamon_plan_order_info")
    }
    assert orders == {
        ("filter", ""): ('["hot", "dry"]', "3", 1.0),
        ("mjoin", "a"): ('["b", "c"]', "2", 1.0),
        ("mjoin", "b"): ('["a", "c"]', "2", 1.0),
    }
    changes = {lab["operator"]: v for lab, v in samples("streamon_plan_order_changes_total")}
    assert changes == {"filter": 3, "mjoin": 2}
    ((labels, hits),) = samples("streamon_cache_hits_total")
    assert hits == 7 and labels["cache"] == "c:0-1[a,b]" and labels["partition"] == "0"
    assert [v for _, v in samples("streamon_cache_bytes")] == [4096]


def test_scheduling_and_drop_boxes() -> None:
    ((labels, one),) = samples("streamon_scheduler_policy_info")
    assert labels["policy"] == "chain" and one == 1
    assert [v for _, v in samples("streamon_scheduler_plan_version")] == [4]
    assert [v for _, v in samples("streamon_scheduler_grants_total")] == [9]
    ((labels, priority),) = samples("streamon_scheduler_priority")
    assert labels["agent"] == "step" and priority == 0.5
    assert [v for _, v in samples("streamon_dropbox_keep_ratio")] == [0.25]
    assert [v for _, v in samples("streamon_dropbox_dropped_total")] == [9]
    assert [v for _, v in samples("streamon_shedding_active")] == [1]


def test_commit_lag_is_a_gauge_per_topic_and_partition() -> None:
    assert parsed()["streamon_consumer_commit_lag_messages"].type == "gauge"
    lags = {(lab["topic"], lab["partition"]): v
            for lab, v in samples("streamon_consumer_commit_lag_messages")}  # fmt: skip
    assert lags == {("in", "0"): 20.0, ("in", "1"): 0.0}
    ((labels, _), _) = samples("streamon_consumer_commit_lag_messages")
    assert labels["worker"] == "w1" and labels["query"] == "q"


def test_an_empty_body_renders() -> None:
    families = list(text_string_to_metric_families(render({}).decode()))
    assert {f.name for f in families} >= {"streamon_agent_tuples_in", "streamon_plan_order_info"}
