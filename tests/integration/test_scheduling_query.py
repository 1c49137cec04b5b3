"""Operator scheduling on the real broker with a real Faust worker.

A query of three synthetic operators (a slow one, a fast and very selective one, a slow last
one) runs under Chain. The test publishes a burst, then checks:

- the result topic holds exactly the tuples the operators keep (oracle: tests/oracle/synthetic,
  written from the operators' definition), counted exactly;
- the scheduler agent measured the operators and published a plan: the status page shows Chain's
  priorities (the slow first operator shares the fast selective one's chain, the last operator
  ranks below), and the stats topic carries the priority change as an event;
- a POLICY record on the control topic (what ``streamon control policy`` sends) switches the
  worker to Chain-Flush at run time; a second burst is again exact, and no agent starved (every
  agent was granted turns).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import numpy as np
from broker_helpers import stats_records
from oracle.synthetic import surviving

from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.publish import publish_batch
from processors.core.batch import Batch, VarColumn
from processors.runtime.control import publish_policy
from topics.admin import ensure_topics, read_topic
from topics.avro import SchemaStore, decode_single_object, load_schema
from topics.specs import TopicSpec

# the first seconds' statistics include loading compiled kernels (tens of µs per tuple of ingest
# and sink at first): costs are set so that Chain's chains come out the same either way
OPERATORS = [("slow", 30.0, 0.9), ("sieve", 2.0, 0.1), ("tail", 300.0, 1.0)]
BURST = 4_000
QUERY = """\
from processors.core.query import Query
from topics.avro import load_schema
query = Query({name!r})
query.stream("r", topic={topic!r}, schema=load_schema("reading"), key="sensor_id",
             timestamp="ts", partitions=1)
{operators}
query.schedule("chain", quantum_ms=5)
query.into({result!r}, partitions=1)
"""


def burst(first_id: int, n: int) -> Batch:
    """Readings with unique sensor ids first_id..first_id+n-1 (the operators' key)."""
    ids = np.arange(first_id, first_id + n, dtype=np.int64)
    site = b"lab"
    columns = {
        "sensor_id": ids,
        "ts": 1_700_000_000_000 + ids,
        "temperature": np.full(n, 20.0),
        "humidity": np.full(n, 50.0, np.float32),
        "site": VarColumn(np.arange(n + 1, dtype=np.int64) * 3, np.frombuffer(site * n, np.uint8)),
        "ok": np.ones(n, np.bool_),
    }
    return Batch(columns, np.ones(n, np.int8), columns["ts"].copy())


def result_ids(bootstrap: str, topic: str) -> Counter:
    schema, store = load_schema("reading"), SchemaStore()
    return Counter(
        decode_single_object(r.value, schema, store)["sensor_id"]
        for r in read_topic(bootstrap, topic)
    )


def wait_status(worker: WorkerProcess, check, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = worker.status()
        if check(status) or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


def test_chain_schedules_a_live_query_exactly_and_the_policy_changes_at_run_time(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    name, topic, result = topic_name.replace("-", "_"), f"{topic_name}.in", f"{topic_name}.out"
    ensure_topics(bootstrap, [TopicSpec(topic, 1)])
    lines = [
        f"query.operator({op!r}, cost_us={cost}, selectivity={sel}, key='r.sensor_id')"
        for op, cost, sel in OPERATORS
    ]
    query_file = tmp_path / "query.py"
    query_file.write_text(
        QUERY.format(name=name, topic=topic, result=result, operators="\n".join(lines))
    )
    worker = WorkerProcess(
        query_file, bootstrap=bootstrap, state_dir=tmp_path / "state", worker_id="w1"
    )
    schema = load_schema("reading")
    rules = [(op, sel) for op, _, sel in OPERATORS]
    try:
        publish_batch(bootstrap, topic, burst(0, BURST), schema)
        expected = Counter(surviving(list(range(BURST)), rules))
        total = sum(expected.values())
        assert wait_for_count(bootstrap, result, total, timeout=120, workers=[worker]) == total
        assert result_ids(bootstrap, result) == expected

        def chain_formed(status: dict) -> bool:
            prio = status["scheduling"]["arbiter"].get("priorities", {})
            return len(prio) == 5 and prio["op.slow"] == prio["op.sieve"] > prio["op.tail"]

        # the first plan may come before every agent has been measured: wait for the measured one
        status = wait_status(worker, chain_formed)
        scheduling = status["scheduling"]
        assert scheduling["policy"] == "chain"
        priorities = scheduling["arbiter"]["priorities"]
        assert set(priorities) == {"ingest.r", "op.slow", "op.sieve", "op.tail", "sink"}
        # Chain: the slow operator is worth running for the sieve behind it (one chain); the
        # expensive last operator, which removes nothing, ranks below that chain
        assert priorities["op.slow"] == priorities["op.sieve"] > priorities["op.tail"]
        assert scheduling["arbiter"]["decisions"] > 0

        publish_policy(bootstrap, name, "chain-flush", {"latency_ms": 800.0}, issuer="test")
        status = wait_status(worker, lambda s: s["scheduling"]["policy"] == "chain-flush")
        assert status["scheduling"]["arbiter"]["policy"] == "chain-flush"
        assert status["scheduling"]["config"]["latency_ms"] == 800.0

        publish_batch(bootstrap, topic, burst(BURST, BURST), schema)
        expected += Counter(surviving(list(range(BURST, 2 * BURST)), rules))
        total = sum(expected.values())
        assert wait_for_count(bootstrap, result, total, timeout=120, workers=[worker]) == total
        assert result_ids(bootstrap, result) == expected

        agents = worker.status()["scheduling"]["arbiter"]["agents"]
        assert all(agents[a]["grants"] > 0 for a in priorities), agents  # nobody starved

        # `streamon control policy QUERY query`: back to the query file's schedule()
        assert publish_policy(bootstrap, name, "query", {}, issuer="test") is None
        status = wait_status(worker, lambda s: s["scheduling"]["policy"] == "chain")
        assert status["scheduling"]["config"]["latency_ms"] is None
        time.sleep(1.5)  # the next Stats record carries the switch as an event
    finally:
        assert worker.stop() == 0, worker.log_tail()

    events = [
        event
        for record in stats_records(bootstrap, name, agent="scheduler")
        for event in json.loads(record["events"])
    ]
    assert any(e["kind"] == "priorities" and e["policy"] == "chain" for e in events), events
    switch = [e for e in events if e["kind"] == "policy"]
    assert [(e["from"]["policy"], e["to"]["policy"], e["issuer"]) for e in switch] == [
        ("chain", "chain-flush", "test"),
        ("chain-flush", "chain", "test"),
    ]
