"""``streamon experiment chain-live``: scheduling policies on real agents, topics and a broker.

The paper's progress charts (Babcock et al., Sect. 6.1) become queries of synthetic operators
(``Query.operator``: a chosen CPU cost per tuple and selectivity), run by one worker on the
embedded broker, fed by a generator that publishes a steady stream with bursts in real time.
For each policy the same arrivals are replayed; a monitor samples the worker's status page and
computes the data queued in front of every agent (bytes written to its input minus bytes it has
processed: the input topic for the ingest agent, the internal topic before each stage), and the
result topic gives every output tuple's latency (its Kafka timestamp minus its arrival time,
which travels in the record). The results are also checked exactly: every tuple the operators'
selection hashes keep is in the result topic once.

A calibration run first measures the pipeline's capacity with FIFO and steady input, so that the
bursts can be set between what FIFO can absorb and what Chain's first chain can (the regime in
which the paper's Figs. 6-7 show Chain's advantage).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from processors.core.batch import VarColumn
from processors.core.scheduling.progress import chart_from_points
from processors.stages.synthetic_stage import copies

log = logging.getLogger(__name__)

#: Sect. 6.1.1's four-operator chart: a fast, selective third operator hidden behind a slow one
FOUR_OPERATORS = [(0, 1.0), (400, 0.9), (2000, 0.88), (2200, 0.1), (4000, 0.0)]
#: real microseconds per tuple for one unit of the chart's time axis (the paper's "tuple" is a
#: page of 100 tuples, its times are in microseconds)
TIME_SCALE = 0.01
SCHEMA = "reading"  # sensor_id carries the sequence number, ts the arrival time in ms

QUERY_TEMPLATE = """\
from processors.core.query import Query
from topics.avro import load_schema

query = Query({name!r})
query.stream("r", topic={topic!r}, schema=load_schema("reading"), key="sensor_id",
             timestamp="ts", partitions=1)
{operators}
query.schedule({policy!r}, **{settings!r})
query.into({result!r}, partitions=1)
"""


def chart_operators(
    points: list[tuple[float, float]], time_scale: float = TIME_SCALE
) -> list[tuple[float, float]]:
    """(cost in µs per tuple received, selectivity) of each operator of a progress chart.

    The chart's last operator ejects its output (size 0); here it keeps every tuple (s = 1) so
    that the results can be checked, and the sink after it does the ejecting.
    """
    pts = chart_from_points(points)
    ops = []
    for (t0, s0), (t1, s1) in zip(pts, pts[1:], strict=False):
        cost = (t1 - t0) / s0 * time_scale
        ops.append((cost, s1 / s0 if s1 > 0 else 1.0))
    return ops


def query_source(
    name: str, topic: str, result: str, ops: list[tuple[float, float]], policy: str,
    settings: dict[str, Any],
) -> str:  # fmt: skip
    lines = [
        f"query.operator('op{i + 1}', cost_us={cost!r}, selectivity={sel!r}, key='r.sensor_id')"
        for i, (cost, sel) in enumerate(ops)
    ]
    return QUERY_TEMPLATE.format(
        name=name, topic=topic, result=result, operators="\n".join(lines), policy=policy,
        settings=settings,
    )  # fmt: skip


def expected_results(n: int, ops: list[tuple[float, float]]) -> np.ndarray:
    """How many times each sequence number 0..n-1 comes out (the operators' hash rule)."""
    counts = np.ones(n, np.int64)
    for i, (_, sel) in enumerate(ops):
        name = f"op{i + 1}"
        keep = np.fromiter((copies(k, name, sel) for k in range(n)), np.int64, count=n)
        counts *= keep
    return counts


@dataclass
class Schedule:
    """Arrival offsets (seconds from the run's start) and what they describe."""

    offsets: np.ndarray
    base_rate: float
    bursts: list[tuple[float, float, float]]
    duration: float


@dataclass
class RunResult:
    policy: str
    settings: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)
    latencies: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    results: int = 0
    expected: int = 0
    missing: int = 0
    duplicates: int = 0
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def peak_bytes(self) -> int:
        return max((s["queued_bytes"] for s in self.samples), default=0)

    @property
    def peak_latency_ms(self) -> float:
        return float(self.latencies[:, 1].max()) if len(self.latencies) else 0.0


class Generator(threading.Thread):
    """Publishes pre-encoded records when their arrival time comes (Kafka timestamp = arrival)."""

    def __init__(self, bootstrap: str, topic: str, schedule: Schedule, start: float) -> None:
        super().__init__(name="chain-live-generator", daemon=True)
        from confluent_kafka import Producer

        from topics.avro import load_schema
        from topics.columnar import RecordCodec

        n = len(schedule.offsets)
        self.arrival_ms = (start * 1000 + schedule.offsets * 1000).astype(np.int64)
        rng = np.random.default_rng(7)
        columns = {
            "sensor_id": np.arange(n, dtype=np.int64),
            "ts": self.arrival_ms,
            "temperature": rng.normal(20, 5, n),
            "humidity": rng.uniform(10, 90, n).astype(np.float32),
            "site": VarColumn(np.arange(n + 1, dtype=np.int64) * 3,
                              np.frombuffer(b"lab" * n, np.uint8)),  # fmt: skip
            "ok": np.ones(n, np.bool_),
        }
        buf, offs = RecordCodec(load_schema(SCHEMA)).encode_many(columns, n)
        raw = buf.tobytes()
        bounds = offs.tolist()
        self.values = [raw[bounds[i] : bounds[i + 1]] for i in range(n)]
        self.sizes = np.diff(offs)
        self.topic = topic
        self.start_time = start
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2,
                                  "queue.buffering.max.messages": 2_000_000})  # fmt: skip
        self.sent = 0
        self.sent_bytes = 0
        self.done = threading.Event()

    def run(self) -> None:
        produce = self.producer.produce
        n = len(self.values)
        i = 0
        while i < n:
            now_ms = time.time() * 1000
            due = int(np.searchsorted(self.arrival_ms, now_ms, side="right"))
            while i < due:
                produce(self.topic, self.values[i], timestamp=int(self.arrival_ms[i]))
                self.sent_bytes += int(self.sizes[i])
                i += 1
                self.sent = i
            self.producer.poll(0)
            if i < n:
                time.sleep(min(0.002, max((self.arrival_ms[i] - now_ms) / 1000, 0)))
        self.producer.flush(30)
        self.done.set()


def queued(status: dict[str, Any], generated_bytes: int, generated: int) -> dict[str, Any]:
    """Data waiting in front of each agent: what its input received minus what it processed.

    The ingest agent's input is the input topic (what the generator wrote); every other agent's
    is the topic its predecessor writes (that agent's bytes out).
    """
    agents = {a["agent"]: a for a in status["stats"]["agents"]}
    by_topic = {a["out_topic"]: a for a in agents.values() if a.get("out_topic")}
    per_agent: dict[str, tuple[int, int]] = {}
    for name, a in agents.items():
        if not a.get("topic"):
            continue
        upstream = by_topic.get(a["topic"])
        if upstream is None:  # reads the input topic
            in_bytes, in_tuples = generated_bytes, generated
        else:
            in_bytes, in_tuples = upstream["bytes_out"], upstream["tuples_out"]
        per_agent[name] = (max(in_bytes - a["bytes_in"], 0), max(in_tuples - a["tuples_in"], 0))
    return {
        "queued_bytes": sum(b for b, _ in per_agent.values()),
        "queued_tuples": sum(t for _, t in per_agent.values()),
        "per_agent_bytes": {k: b for k, (b, _) in per_agent.items()},
    }


def run_policy(
    bootstrap: str,
    state_dir: Path,
    policy: str,
    settings: dict[str, Any],
    ops: list[tuple[float, float]],
    schedule: Schedule,
    sample_every_s: float = 0.1,
    warmup_s: float = 0.0,
) -> RunResult:
    """One worker running the operators under ``policy``, fed ``schedule``; sampled until done."""
    from processors.runtime.launcher import WorkerProcess
    from topics.admin import read_topic

    run_id = f"chainlive-{policy}-{uuid.uuid4().hex[:6]}"
    topic, result = f"{run_id}-in", f"{run_id}-out"
    query_file = state_dir / f"{run_id}.py"
    query_file.write_text(query_source(run_id.replace("-", "_"), topic, result, ops, policy,
                                       settings))  # fmt: skip
    from processors.runtime.queries import load_plan
    from processors.runtime.worker import plan_pipeline
    from topics.admin import ensure_topics

    ensure_topics(bootstrap, plan_pipeline(load_plan(str(query_file))).specs)
    worker = WorkerProcess(query_file, bootstrap=bootstrap, state_dir=state_dir,
                           worker_id=run_id, loglevel="warn")  # fmt: skip
    out = RunResult(policy, settings)
    try:
        _wait_ready(worker)
        start = time.time() + 0.5
        generator = Generator(bootstrap, topic, schedule, start)
        generator.start()
        n = len(schedule.offsets)
        deadline = start + schedule.duration + 120
        while time.time() < deadline:
            time.sleep(sample_every_s)
            status = worker.status()
            sample = queued(status, generator.sent_bytes, generator.sent)
            sample["t"] = time.time() - start
            out.samples.append(sample)
            sink = next(a for a in status["stats"]["agents"] if a["agent"] == "sink")
            if generator.done.is_set() and sample["queued_tuples"] == 0 and sink["tuples_in"]:
                ingest = next(a for a in status["stats"]["agents"] if a["agent"] == "ingest.r")
                if ingest["tuples_in"] >= n:
                    break
        out.status = worker.status()
        records = read_topic(bootstrap, result)
        out.latencies, seen = _latencies(records, start)
        expected = expected_results(n, ops)
        out.expected = int(expected.sum())
        out.results = len(records)
        got = np.bincount(seen, minlength=n)[:n] if len(seen) else np.zeros(n, np.int64)
        out.missing = int(np.maximum(expected - got, 0).sum())
        out.duplicates = int(np.maximum(got - expected, 0).sum())
    finally:
        worker.stop()
    return out


def _wait_ready(worker: Any, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not worker.running:
            raise RuntimeError(f"worker exited:\n{worker.log_tail()}")
        try:
            status = worker.status()
            if any(t.startswith("streamon.") for t in status.get("assignment", [])):
                return
        except Exception:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"worker not ready after {timeout}s:\n{worker.log_tail()}")


def _latencies(records: list[Any], start: float) -> tuple[np.ndarray, np.ndarray]:
    """(output time since start, latency ms) per result record, and the sequence numbers."""
    from topics.avro import SchemaStore, decode_single_object, load_schema

    schema, store = load_schema(SCHEMA), SchemaStore()
    rows = []
    seqs = []
    for r in records:
        rec = decode_single_object(r.value, schema, store)
        rows.append((r.timestamp_ms / 1000 - start, r.timestamp_ms - rec["ts"]))
        seqs.append(rec["sensor_id"])
    return np.array(rows, np.float64).reshape(-1, 2), np.array(seqs, np.int64)
