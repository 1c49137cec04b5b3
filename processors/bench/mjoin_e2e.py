"""End to end through Kafka: the network-monitoring join next to the pass-through pipeline.

The same number of packet records goes once into four router topics (the join query) and once
into one topic (the foundation's pass-through query), each run by a real worker on the
embedded broker. A run's rate is its input records over the time between its first and last
result record (produce timestamps), so worker start-up is left out, as in the other end-to-end
benchmarks. The join's result count is known beforehand by replaying the stored records
through the same stages in process, partition by partition.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.network_query import keyed, publish, query_plan, query_text, stored
from processors.commands.publish import publish_batch
from processors.core.batch import Batch
from processors.physical.runner import QueryRunner
from processors.workloads.network import NetworkWorkload, packet_schema
from topics.admin import ensure_topics, read_topic
from topics.specs import TopicSpec

PARTITIONS = 4
PASSTHROUGH = """\
from processors.core.query import Query
from processors.workloads.network import packet_schema
query = Query({name!r}).stream("p", topic={topic!r}, schema=packet_schema(), key="pid",
                                timestamp="ts", partitions={p}).into({result!r}, partitions={p})
"""


def _say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def expected_results(text: str, inputs: dict[int, list[Batch]]) -> int:
    plan = query_plan(text)
    total = 0
    for p, batches in inputs.items():
        stages = QueryRunner(plan, p)
        for i, batch in enumerate(batches):
            total += sum(len(b) for b in stages.push(f"r{i}", batch))
    return total


def run_query(
    bootstrap: str,
    state: Path,
    name: str,
    text: str,
    result: str,
    count: int,
    tuples: int,
    suffix: str = ".py",
) -> dict[str, Any]:
    """Run the query ``text`` (a ``suffix`` file: .py or .cql) until ``count`` results."""
    query_file = state / f"{name}{suffix}"
    query_file.write_text(text)
    worker = WorkerProcess(
        query_file, bootstrap=bootstrap, state_dir=state, worker_id=name, loglevel="warn"
    )
    started = time.monotonic()
    try:
        seen = wait_for_count(bootstrap, result, count, 900.0, [worker])
        wall = time.monotonic() - started
        if seen < count:
            raise RuntimeError(f"{name}: {seen} of {count} results; see {worker.log_path}")
        try:
            agents = {a["agent"]: a for a in worker.status()["stats"]["agents"]}
            busy = {a: round(s["busy_ns"] / tuples, 1) for a, s in agents.items()}
            plan = agents.get("mjoin", {}).get("plan")
        except OSError:
            busy, plan = {}, None
    finally:
        worker.stop()
    stamps = sorted(r.timestamp_ms for r in read_topic(bootstrap, result))
    span = max((stamps[-1] - stamps[0]) / 1000.0, 1e-3)
    return {
        "run": name, "results": len(stamps), "tuples_per_s": tuples / span, "span_s": span,
        "wall_s": wall, "busy_ns_per_tuple": busy, "mjoin_plan": plan,
    }  # fmt: skip


def network_vs_passthrough(
    bootstrap: str | None = None, packets_per_s: float = 2_000.0, duration_ms: int = 120_000
) -> dict[str, Any]:
    """``e2e_tuples_per_s`` of the join and ``passthrough_tuples_per_s``, same run."""
    with tempfile.TemporaryDirectory(prefix="streamon-bench-mjoin-") as tmp:
        if bootstrap is not None:
            return _measure(bootstrap, Path(tmp), packets_per_s, duration_ms)
        from processors.runtime.broker import start_broker, stop_broker

        broker = Path(tmp) / "broker"
        broker.mkdir()
        info = start_broker(broker)
        try:
            return _measure(info.bootstrap, Path(tmp), packets_per_s, duration_ms)
        finally:
            stop_broker(broker)


def _measure(bootstrap: str, state: Path, packets_per_s: float, duration_ms: int) -> dict:
    stem = f"bench-mjoin-{time.strftime('%H%M%S')}"
    workload = NetworkWorkload(packets_per_s=packets_per_s, duration_ms=duration_ms, seed=3)
    ensure_topics(bootstrap, [TopicSpec(f"{stem}.{r}", PARTITIONS) for r in workload.stream_names])
    text = query_text(stem, stem, f"{stem}.out", partitions=PARTITIONS, window_ms=10_000,
                      aggregate=False)  # fmt: skip
    tuples = 0
    everything = []
    for published, batches in publish(bootstrap, stem, workload):
        everything += [b for b in batches if len(b)]
        tuples = published
    count = expected_results(text, stored(bootstrap, stem, 4, PARTITIONS))
    _say(f"published {tuples:,} sightings on 4 router topics; {count:,} join results expected")
    join = run_query(
        bootstrap, state, f"{stem}-join", text, f"{stem}.out", count, tuples, suffix=".cql"
    )
    _say(f"join: {join['tuples_per_s']:,.0f} input tuples/s (span {join['span_s']:.2f} s)")

    topic = f"{stem}.all"
    ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS)])
    for batch in everything:
        publish_batch(bootstrap, topic, keyed(batch), packet_schema())
    p_text = PASSTHROUGH.format(name=f"{stem}-pt", topic=topic, p=PARTITIONS,
                                result=f"{stem}.pt.out")  # fmt: skip
    passthrough = run_query(
        bootstrap, state, f"{stem}-pt", p_text, f"{stem}.pt.out", tuples, tuples
    )
    _say(f"pass-through: {passthrough['tuples_per_s']:,.0f} tuples/s")
    return {
        "e2e_tuples_per_s": join["tuples_per_s"],
        "passthrough_tuples_per_s": passthrough["tuples_per_s"],
        "e2e_vs_passthrough": join["tuples_per_s"] / passthrough["tuples_per_s"],
        "e2e_tuples": tuples,
        "e2e_results": count,
        "runs": {"join": join, "passthrough": passthrough},
    }
