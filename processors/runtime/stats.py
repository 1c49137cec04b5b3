"""Per-agent statistics: counted in the agents, published to the stats topic, served as JSON.

Counters are plain integers bumped once per batch, so they cost nothing per tuple. Every
reporting interval each agent's counters since the last report become one ``streamon.Stats``
record; the same figures (cumulative) feed the worker's status endpoint.
"""

from __future__ import annotations

import bisect
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from topics.avro import encode_single_object, load_schema

STATS_SCHEMA = "stats"
#: Stats records a worker keeps for its status page (a minute of reports of a few agents)
RECENT_RECORDS = 600
#: upper bounds (seconds) of the output latency histogram's buckets (/metrics); +Inf follows
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class AgentStats:
    """Counters of one agent (one stage over all partitions this worker holds)."""

    agent: str
    stage: str
    topic: str = ""
    tuples_in: int = 0
    tuples_out: int = 0
    batches: int = 0
    busy_ns: int = 0
    dead_letters: int = 0
    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    out_topic: str = ""
    #: moving average of the processing time per input tuple (0 until the first batch)
    ns_per_tuple: float = 0.0
    #: output latency (arrival of the oldest input tuple to output), sinks only: sum, count, max
    latency_s_sum: float = 0.0
    latency_n: int = 0
    latency_s_max: float = 0.0
    latency_s_window_max: float = 0.0  # since the last Stats record
    #: outputs per latency bucket (LATENCY_BUCKETS_S, then +Inf), not cumulative
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    #: next offset to process, per input partition (for backlog = high watermark - position)
    positions: dict[int, int] = field(default_factory=dict)
    #: agents that read several topics (an MJoin): next offset per (topic, partition), which
    #: the backlog is computed from (``positions`` alone would mix the topics' offsets)
    topic_positions: dict[tuple[str, int], int] = field(default_factory=dict)
    plan: Callable[[], dict[str, Any]] = dict
    events: list[dict[str, Any]] = field(default_factory=list)
    #: plan changes made since its previous call (for example filter order changes)
    new_events: Callable[[], list[dict[str, Any]]] = list
    #: the query's memory limit in this worker (stateful agents; None: not shown)
    memory: Callable[[], dict[str, Any]] | None = None

    def record(
        self, n_in: int, n_out: int, busy_ns: int, messages: int, nbytes: int, bytes_out: int = 0
    ) -> None:
        """Count one processed input batch (``messages`` Kafka messages of ``nbytes``)."""
        self.batches += 1
        self.tuples_in += n_in
        self.tuples_out += n_out
        self.busy_ns += busy_ns
        self.messages_in += messages
        self.bytes_in += nbytes
        self.bytes_out += bytes_out
        if n_in > 0:  # recent cost per tuple: sizes the agent's turns under an arbiter
            sample = busy_ns / n_in
            previous = self.ns_per_tuple
            self.ns_per_tuple = sample if previous <= 0 else 0.8 * previous + 0.2 * sample

    def record_latency(self, seconds: float) -> None:
        """An output left ``seconds`` after the oldest input tuple it came from arrived."""
        self.latency_s_sum += seconds
        self.latency_n += 1
        self.latency_s_max = max(self.latency_s_max, seconds)
        self.latency_s_window_max = max(self.latency_s_window_max, seconds)
        self.latency_buckets[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1

    def backlog(self, pending_messages: int) -> tuple[int, int]:
        """Estimated (tuples, bytes) in ``pending_messages`` not yet processed input messages."""
        if not self.messages_in:
            return 0, 0
        return (
            pending_messages * self.tuples_in // self.messages_in,
            pending_messages * self.bytes_in // self.messages_in,
        )

    def snapshot(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "stage": self.stage,
            "tuples_in": self.tuples_in,
            "tuples_out": self.tuples_out,
            "batches": self.batches,
            "busy_ns": self.busy_ns,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "topic": self.topic,
            "out_topic": self.out_topic,
            "dead_letters": self.dead_letters,
            "latency_ms_avg": 1000 * self.latency_s_sum / self.latency_n if self.latency_n else 0.0,
            "latency_ms_max": 1000 * self.latency_s_max,
            "latency_s_sum": self.latency_s_sum,
            "latency_buckets": list(self.latency_buckets),
            "messages_in": self.messages_in,
            "positions": dict(self.positions),
            "plan": self.plan(),
            **({} if self.memory is None else {"memory": self.memory()}),
        }


class StatsBoard:
    """All agents of one worker; turns counter deltas into Stats records."""

    def __init__(self, worker_id: str, query: str) -> None:
        self.worker_id = worker_id
        self.query = query
        self.agents: dict[str, AgentStats] = {}
        self._last: dict[str, dict[str, int]] = {}
        self._last_latency_sum: dict[str, float] = {}
        self._last_report_ms = int(time.time() * 1000)
        self._schema = load_schema(STATS_SCHEMA)
        #: the latest reported records, decoded (the status page's cost model reads them)
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_RECORDS)
        #: called with each record as it is reported (a shedding controller on this worker
        #: reads its own statistics without waiting for the stats topic)
        self.observers: list[Callable[[dict[str, Any]], None]] = []

    def agent(
        self, agent: str, stage: str, plan: Callable[[], dict[str, Any]] = dict
    ) -> AgentStats:
        stats = self.agents.setdefault(agent, AgentStats(agent, stage, plan=plan))
        return stats

    def snapshot(self, backlog: Callable[[AgentStats], tuple[int, int]]) -> dict[str, Any]:
        agents = []
        for stats in self.agents.values():
            snap = stats.snapshot()
            snap["backlog_tuples"], snap["backlog_bytes"] = backlog(stats)
            agents.append(snap)
        return {"worker_id": self.worker_id, "query": self.query, "agents": agents}

    def report(self, backlog: Callable[[AgentStats], tuple[int, int]]) -> list[bytes]:
        """One encoded Stats record per agent for the interval since the previous report."""
        now_ms = int(time.time() * 1000)
        records = []
        for name, stats in self.agents.items():
            last = self._last.get(name, {})
            current = {
                "tuples_in": stats.tuples_in,
                "tuples_out": stats.tuples_out,
                "batches": stats.batches,
                "busy_ns": stats.busy_ns,
                "bytes_in": stats.bytes_in,
                "bytes_out": stats.bytes_out,
                "latency_n": stats.latency_n,
            }
            latency_sum = stats.latency_s_sum - self._last_latency_sum.get(name, 0.0)
            self._last_latency_sum[name] = stats.latency_s_sum
            self._last[name] = current
            backlog_tuples, backlog_bytes = backlog(stats)
            events, stats.events = stats.events + stats.new_events(), []
            record = {
                "worker_id": self.worker_id,
                "query": self.query,
                "stage": stats.stage,
                "agent": name,
                "scope": "AGENT",
                "partition": -1,
                "partitions": json.dumps(sorted(stats.positions)),
                "window_start_ms": self._last_report_ms,
                "window_end_ms": now_ms,
                **{k: v - last.get(k, 0) for k, v in current.items() if k != "latency_n"},
                "topic": stats.topic,
                "out_topic": stats.out_topic,
                "latency_ms_avg": _average_ms(
                    latency_sum, current["latency_n"] - last.get("latency_n", 0)
                ),
                "latency_ms_max": 1000 * stats.latency_s_window_max,
                "backlog_tuples": backlog_tuples,
                "backlog_bytes": backlog_bytes,
                "plan": json.dumps(stats.plan()),
                "events": json.dumps(events),
            }
            stats.latency_s_window_max = 0.0
            self.recent.append(record)
            for observe in self.observers:
                observe(record)
            records.append(encode_single_object(self._schema, record))
        self._last_report_ms = now_ms
        return records


def _average_ms(total_s: float, count: int) -> float:
    return 1000 * total_s / count if count > 0 else 0.0
