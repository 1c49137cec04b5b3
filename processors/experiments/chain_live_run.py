"""One policy's live run for ``streamon experiment chain-live``: a generator thread publishing
the schedule, a worker with the policy, the queued bytes polled from its status page, the
results' latencies; and the calibration of the machine's capacity.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from processors.core.batch import VarColumn
from processors.experiments.chain_live_setup import (
    SCHEMA,
    LiveSetup,
    RunResult,
    expected_results,
    query_source,
)

log = logging.getLogger(__name__)


class Generator(threading.Thread):
    """Publishes pre-encoded records when their arrival time comes (Kafka timestamp = arrival)."""

    def __init__(
        self, bootstrap: str, topic: str, offsets: np.ndarray, start: float, payload_bytes: int
    ) -> None:
        super().__init__(name="chain-live-generator", daemon=True)
        from confluent_kafka import Producer

        from processors.runtime.kafka_security import client_config
        from topics.avro import load_schema
        from topics.columnar import RecordCodec

        n = len(offsets)
        self.arrival_ms = (start * 1000 + np.asarray(offsets) * 1000).astype(np.int64)
        rng = np.random.default_rng(7)
        site = b"lab-" + b"x" * max(payload_bytes - 4, 0)
        columns = {
            "sensor_id": np.arange(n, dtype=np.int64),
            "ts": self.arrival_ms,
            "temperature": rng.normal(20, 5, n),
            "humidity": rng.uniform(10, 90, n).astype(np.float32),
            "site": VarColumn(
                np.arange(n + 1, dtype=np.int64) * len(site), np.frombuffer(site * n, np.uint8)
            ),  # fmt: skip
            "ok": np.ones(n, np.bool_),
        }
        buf, offs = RecordCodec(load_schema(SCHEMA)).encode_many(columns, n)
        raw = buf.tobytes()
        bounds = offs.tolist()
        self.values = [raw[bounds[i] : bounds[i + 1]] for i in range(n)]
        self.sizes = np.diff(offs)
        self.topic = topic
        self.producer = Producer(client_config({  # the process's security settings too
            "bootstrap.servers": bootstrap, "linger.ms": 2,
            "queue.buffering.max.messages": 2_000_000,
        }))  # fmt: skip
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
        if not a.get("topic") or name == "scheduler":
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
        "per_agent_tuples": {k: t for k, (_, t) in per_agent.items()},
    }


def run_policy(
    bootstrap: str,
    state_dir: Path,
    policy: str,
    settings: dict[str, Any],
    ops: list[tuple[float, float]],
    offsets: np.ndarray,
    setup: LiveSetup,
    *,
    settle_s: float = 120.0,
) -> RunResult:
    """One worker running the operators under ``policy``, fed ``offsets``; sampled until the
    last result is out, then checked against the operators' selection rule."""
    from processors.commands.launcher import WorkerProcess
    from processors.commands.queries import load_plan
    from processors.physical.compiler import compile_plan
    from processors.runtime.worker import topic_specs
    from topics.admin import ensure_topics, read_topic

    run_id = f"chainlive-{policy}-{uuid.uuid4().hex[:6]}"
    topic, result = f"{run_id}-in", f"{run_id}-out"
    query_file = state_dir / f"{run_id}.py"
    settings = {"quantum_ms": setup.quantum_ms, **settings}
    query_file.write_text(query_source(run_id.replace("-", "_"), topic, result, ops, policy,
                                       settings))  # fmt: skip
    ensure_topics(bootstrap, topic_specs(compile_plan(load_plan(str(query_file)))))
    worker = WorkerProcess(query_file, bootstrap=bootstrap, state_dir=state_dir,
                           worker_id=run_id, loglevel="warn")  # fmt: skip
    out = RunResult(policy, settings)
    n = len(offsets)
    try:
        _wait_ready(worker)
        start = time.time() + 0.5
        generator = Generator(bootstrap, topic, offsets, start, setup.payload_bytes)
        generator.start()
        deadline = start + float(offsets[-1] if n else 0) + settle_s
        while time.time() < deadline:
            time.sleep(setup.sample_every_s)
            status = worker.status(timeout=30)
            sample = queued(status, generator.sent_bytes, generator.sent)
            sample["t"] = time.time() - start
            out.samples.append(sample)
            ingest = _agent(status, "ingest.r")
            drained = sample["queued_tuples"] == 0 and ingest["tuples_in"] >= n
            if generator.done.is_set() and drained:
                out.drained_s = sample["t"]
                break
        out.status = worker.status(timeout=30)
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


def _agent(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(a for a in status["stats"]["agents"] if a["agent"] == name)


def _wait_ready(worker: Any, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not worker.running:
            raise RuntimeError(f"worker exited:\n{worker.log_tail()}")
        try:
            status = worker.status()
            if any(t.startswith("chainlive") for t in status.get("assignment", [])):
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


def calibrate(
    bootstrap: str, state_dir: Path, ops: list[tuple[float, float]], setup: LiveSetup
) -> dict[str, float]:
    """The pipeline's capacity in tuples per second: a block of records published at once,
    drained by the worker under FIFO, divided by the time from the first to the last result."""
    cost_us = cost_per_input_tuple_us(ops)
    n = int(max(4.0 / (cost_us * 1e-6), 500))  # about four seconds of work
    offsets = np.zeros(n)
    run = run_policy(bootstrap, state_dir, "fifo", {}, ops, offsets, setup)
    if run.missing or run.duplicates or not len(run.latencies):
        raise RuntimeError(
            f"calibration run lost or repeated results: {run.missing} missing, "
            f"{run.duplicates} duplicated"
        )
    drain_s = float(run.latencies[:, 0].max() - max(run.latencies[:, 0].min(), 0.0))
    first_out = float(run.latencies[:, 0].min())
    capacity = n / max(drain_s + first_out, 1e-3)
    return {
        "records": n,
        "drain_s": drain_s + first_out,
        "capacity_per_s": capacity,
        "configured_cost_us": cost_us,
        "configured_capacity_per_s": 1e6 / cost_us,
    }


def cost_per_input_tuple_us(ops: list[tuple[float, float]]) -> float:
    total, reaching = 0.0, 1.0
    for cost, sel in ops:
        total += cost * reaching
        reaching *= sel
    return total


# -- the experiment ------------------------------------------------------------------------------

POLICY_RUNS: list[tuple[str, dict[str, Any]]] = [
    ("fifo", {}),
    ("greedy", {}),
    ("round-robin", {}),
    ("chain", {}),
]
