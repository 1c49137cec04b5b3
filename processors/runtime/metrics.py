"""``/metrics``: a worker's figures in the Prometheus text format, with ``prometheus-client``.

The worker already keeps every figure for its status page (``/streamon/status``: per agent
counters, each stage's plan with its orders and caches, the scheduler, the drop boxes), so the
metrics are made from that same body at scrape time (a custom collector): nothing is counted
twice and nothing is added to the hot path. Names follow Prometheus conventions: a
``streamon_`` prefix, base units (seconds, bytes), ``_total`` on counters, and ``worker`` and
``query`` labels on every series. The current filter and join orders are info-style gauges
(value 1) labelled with the order and its version (the stage's count of order changes), so a
dashboard shows the order in force and a change as a new series; an order is a JSON list of
names (predicates hold ``>`` and commas). The commit lag of each partition a worker holds is
its fetch high watermark (the broker's own figure, which tansu's ListOffsets gets wrong) minus
the group's committed offset.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from processors.runtime.stats import LATENCY_BUCKETS_S

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BASE = ("worker", "query")
AGENT = (*BASE, "agent", "stage")
PART = (*AGENT, "partition", "operator")

#: per agent counters of the status body: (metric, its field, scale to base units, help)
AGENT_COUNTERS = (
    ("tuples_in", "tuples_in", 1.0, "tuples the agent took in"),
    ("tuples_out", "tuples_out", 1.0, "tuples the agent passed on or wrote"),
    ("batches", "batches", 1.0, "input batches processed"),
    ("messages_in", "messages_in", 1.0, "Kafka messages read"),
    ("busy_seconds", "busy_ns", 1e-9, "processor time spent in the agent's turns"),
    ("input_bytes", "bytes_in", 1.0, "bytes of the messages read"),
    ("output_bytes", "bytes_out", 1.0, "bytes written"),
    ("dead_letters", "dead_letters", 1.0, "records sent to the dead-letter topic"),
)


def render(body: Mapping[str, Any]) -> bytes:
    """The Prometheus text exposition of one status body (``/streamon/status``'s)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StatusCollector(body))
    return generate_latest(registry)


class _StatusCollector(Collector):
    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body

    def collect(self) -> Iterator[Metric]:
        yield from families(self.body)


def families(body: Mapping[str, Any]) -> list[Metric]:
    """Every metric family of a status body (see the module docstring)."""
    base = [str(body.get("worker_id", "")), str(body.get("query", ""))]
    out: list[Metric] = [*_agents(base, body), *_plans(base, body)]
    out += _scheduling(base, body.get("scheduling") or {})
    out += _shedding(base, body.get("shedding") or {})
    out.append(_commit_lag(base, body.get("commit_lag") or []))
    return out


def _agents(base: list[str], body: Mapping[str, Any]) -> list[Metric]:
    agents = (body.get("stats") or {}).get("agents", [])
    counters = {
        name: CounterMetricFamily(f"streamon_agent_{name}", text, labels=AGENT)
        for name, _, _, text in AGENT_COUNTERS
    }
    backlog = GaugeMetricFamily("streamon_agent_backlog_tuples", "tuples waiting before the "
                                "agent (from fetch high watermarks)", labels=AGENT)  # fmt: skip
    backlog_bytes = GaugeMetricFamily("streamon_agent_backlog_bytes", "bytes waiting before "
                                      "the agent", labels=AGENT)  # fmt: skip
    latency = HistogramMetricFamily(
        "streamon_agent_output_latency_seconds",
        "from the arrival of the oldest input tuple of an output to its write",
        labels=AGENT,
    )
    for a in agents:
        labels = [*base, str(a.get("agent", "")), str(a.get("stage", ""))]
        for name, field, scale, _ in AGENT_COUNTERS:
            counters[name].add_metric(labels, float(a.get(field, 0)) * scale)
        backlog.add_metric(labels, float(a.get("backlog_tuples", 0)))
        backlog_bytes.add_metric(labels, float(a.get("backlog_bytes", 0)))
        counts = a.get("latency_buckets")
        if counts:
            running, buckets = 0, []
            for bound, n in zip((*LATENCY_BUCKETS_S, float("inf")), counts, strict=True):
                running += int(n)
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
            latency.add_metric(labels, buckets, sum_value=float(a.get("latency_s_sum", 0.0)))
    return [*counters.values(), backlog, backlog_bytes, latency]


def _plans(base: list[str], body: Mapping[str, Any]) -> list[Metric]:
    """Each stage's plan, per partition: orders in force, their changes, subresult caches."""
    order = GaugeMetricFamily(
        "streamon_plan_order_info",
        "the order in force (1): a filter chain's predicates, or a join pipeline's inputs, "
        "as a JSON list; version is the stage's count of order changes",
        labels=(*PART, "pipeline", "order", "version"),
    )
    changes = CounterMetricFamily("streamon_plan_order_changes", "order changes made",
                                  labels=PART)  # fmt: skip
    hits = CounterMetricFamily("streamon_cache_hits", "subresult cache probes that hit",
                               labels=(*PART, "cache"))  # fmt: skip
    misses = CounterMetricFamily("streamon_cache_misses", "subresult cache probes that "
                                 "missed", labels=(*PART, "cache"))  # fmt: skip
    cache_bytes = GaugeMetricFamily("streamon_cache_bytes", "memory held by a subresult cache",
                                    labels=(*PART, "cache"))  # fmt: skip
    for a in (body.get("stats") or {}).get("agents", []):
        agent = [*base, str(a.get("agent", "")), str(a.get("stage", ""))]
        plan = a.get("plan") or {}
        for partition, unit in plan.items() if isinstance(plan, dict) else ():
            if not isinstance(unit, dict):
                continue
            for operator, stats in _operators(unit):
                labels = [*agent, str(partition), operator]
                version = str(stats.get("changes_total", 0))
                if isinstance(stats.get("order"), list):  # a filter chain
                    order.add_metric([*labels, "", json.dumps(stats["order"]), version], 1)
                for pipeline, inputs in (stats.get("orders") or {}).items():  # an MJoin
                    order.add_metric([*labels, str(pipeline), json.dumps(inputs), version], 1)
                if isinstance(stats.get("changes_total"), int):
                    changes.add_metric(labels, float(stats["changes_total"]))
                for cache, c in (stats.get("caches") or {}).items():
                    hits.add_metric([*labels, str(cache)], float(c.get("hits", 0)))
                    misses.add_metric([*labels, str(cache)], float(c.get("misses", 0)))
                    cache_bytes.add_metric([*labels, str(cache)], float(c.get("bytes", 0)))
    return [order, changes, hits, misses, cache_bytes]


def _operators(unit: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(operator, stats) of one partition's unit: a stage's own or a chain's, by stage."""
    if "kind" in unit:
        return [(str(unit["kind"]), unit)]
    return [(str(k), v) for k, v in unit.items() if isinstance(v, dict)]


def _scheduling(base: list[str], s: Mapping[str, Any]) -> list[Metric]:
    policy = GaugeMetricFamily("streamon_scheduler_policy_info", "the scheduling policy in "
                               "force (1)", labels=(*BASE, "policy"))  # fmt: skip
    version = GaugeMetricFamily("streamon_scheduler_plan_version", "version of the scheduling "
                                "plan (priorities) in force", labels=BASE)  # fmt: skip
    grants = CounterMetricFamily("streamon_scheduler_grants", "turns granted to an agent",
                                 labels=(*BASE, "agent"))  # fmt: skip
    priority = GaugeMetricFamily("streamon_scheduler_priority", "an agent's priority under the "
                                 "policy in force (Chain: its lower-envelope slope; higher runs "
                                 "first)", labels=(*BASE, "agent"))  # fmt: skip
    if s:
        policy.add_metric([*base, str(s.get("policy", ""))], 1)
        version.add_metric(base, float(s.get("plan_version") or 0))
        arbiter = s.get("arbiter") or {}
        for agent, a in (arbiter.get("agents") or {}).items():
            grants.add_metric([*base, str(agent)], float(a.get("grants", 0)))
        for agent, value in (arbiter.get("priorities") or {}).items():
            if isinstance(value, int | float):
                priority.add_metric([*base, str(agent)], float(value))
    return [policy, version, grants, priority]


def _shedding(base: list[str], s: Mapping[str, Any]) -> list[Metric]:
    keep = GaugeMetricFamily("streamon_dropbox_keep_ratio", "share of an input's records its "
                             "drop box keeps", labels=(*BASE, "stream"))  # fmt: skip
    kept = CounterMetricFamily("streamon_dropbox_kept", "records a drop box kept",
                               labels=(*BASE, "stream"))  # fmt: skip
    dropped = CounterMetricFamily("streamon_dropbox_dropped", "records a drop box dropped",
                                  labels=(*BASE, "stream"))  # fmt: skip
    active = GaugeMetricFamily("streamon_shedding_active", "1 while drop boxes drop",
                               labels=BASE)  # fmt: skip
    if s:
        active.add_metric(base, 1.0 if s.get("active") else 0.0)
        for stream, box in (s.get("boxes") or {}).items():
            keep.add_metric([*base, str(stream)], float(box.get("keep", 1.0)))
            kept.add_metric([*base, str(stream)], float(box.get("kept", 0)))
            dropped.add_metric([*base, str(stream)], float(box.get("dropped", 0)))
    return [keep, kept, dropped, active]


def _commit_lag(base: list[str], lags: list[Mapping[str, Any]]) -> Metric:
    lag = GaugeMetricFamily(
        "streamon_consumer_commit_lag_messages",
        "messages of a partition the worker holds past the group's committed offset (fetch high "
        "watermark minus committed offset)",
        labels=(*BASE, "topic", "partition"),
    )
    for entry in lags:
        labels = [*base, str(entry.get("topic", "")), str(entry.get("partition", ""))]
        lag.add_metric(labels, float(entry.get("lag", 0)))
    return lag
