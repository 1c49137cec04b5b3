"""A CQL query on the real broker (issue 17): a 2-way RANGE join with a GROUP BY, written as a
.cql file whose streams come from a catalog file (`streamon worker q.cql --catalog c.cql`), run
by a real worker. Its final groups equal the naive oracle's over the whole streams, as the
broker stored them; then `streamon explain --measured` costs the query with what the worker
measured (the stats topic): both streams' rates, and the join's selectivity close to the one
the data has (uniform pids)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from integration.test_routing_broker import RANGE_MS, oracle_join, packets, produce, stored

from processors.commands.explain import run_explain, stats_records
from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.queries import load_plan
from processors.core.cost.measured import measured_stats
from processors.runtime.producer import SIGN_HEADER
from topics.admin import ensure_topics, read_topic
from topics.avro import SchemaStore, decode_single_object
from topics.specs import TopicSpec

CATALOG = """\
-- two packet streams; the producers key them by pid
CREATE STREAM left_packets WITH (schema = 'packet', topic = '{a}', key = 'pid',
                                 timestamp = 'ts', partitions = 2);
CREATE STREAM right_packets WITH (schema = 'packet', topic = '{b}', key = 'pid',
                                  timestamp = 'ts', partitions = 2);
"""
QUERY = """\
SELECT a.src, count(*) AS n, sum(b.size) AS total
FROM left_packets [RANGE {seconds} SECONDS] AS a
JOIN right_packets [RANGE {ms} MS] AS b ON a.pid = b.pid
GROUP BY a.src
INTO '{result}' PARTITIONS 2;
"""


def final_groups(pairs: Counter) -> set[tuple[int, int, int]]:
    """(a.src, count, sum of b.size) of the join relation left at the end (net of deletes)."""
    n: Counter = Counter()
    total: Counter = Counter()
    for (sign, (a, b)), count in pairs.items():
        src, size = dict(a)["src"], dict(b)["size"]
        n[src] += sign * count
        total[src] += sign * count * size
    return {(src, n[src], total[src]) for src in n if n[src]}


def test_a_cql_join_with_group_by_gives_the_oracles_groups(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    a, b, result = f"{topic_name}.a", f"{topic_name}.b", f"{topic_name}.out"
    ensure_topics(bootstrap, [TopicSpec(a, 2), TopicSpec(b, 2)])
    produce(bootstrap, a, packets(1, 3_000, 120), None, keyed=True)
    produce(bootstrap, b, packets(2, 3_000, 120), None, keyed=True)
    want = final_groups(oracle_join(stored(bootstrap, a), stored(bootstrap, b)))
    assert len(want) > 10

    catalog = tmp_path / "streams.cql"
    catalog.write_text(CATALOG.format(a=a, b=b))
    query = tmp_path / "per_src.cql"
    query.write_text(QUERY.format(seconds=RANGE_MS // 1000, ms=RANGE_MS, result=result))
    schema = load_plan(str(query), str(catalog)).output_schema
    worker = WorkerProcess(query, bootstrap=bootstrap, state_dir=tmp_path / "state",
                           worker_id="cql-1", extra_args=["--catalog", str(catalog)])  # fmt: skip
    try:
        wait_for_count(bootstrap, result, len(want), 120.0, [worker])
        settled = -1
        while (seen := wait_for_count(bootstrap, result, 10**12, 5.0, [worker])) != settled:
            settled = seen  # no new result for 5 s: past the idle timeout (3 s)
    finally:
        assert worker.stop() == 0, worker.log_tail(60)
    net: Counter = Counter()
    store = SchemaStore(load=False)
    store.add(schema)
    for record in read_topic(bootstrap, result):
        row = decode_single_object(record.value, schema, store)
        sign = -1 if dict(record.headers).get(SIGN_HEADER) == b"-1" else 1
        net[(row["src"], row["n"], row["total"])] += sign
    got = {k for k, v in net.items() if v}
    assert all(net[k] == 1 for k in got)
    assert got == want, (len(got - want), len(want - got), worker.log_tail(40))

    records = stats_records(bootstrap)
    out = tmp_path / "plans.json"
    text = run_explain(str(query), json_path=str(out), catalog=str(catalog), records=records)
    body = json.loads(out.read_text())
    assert body["plans"] and "chosen:" in text, text
    mjoin = next(p for p in body["plans"] if p["shape"] == "mjoin" or p["order"] == ["a", "b"])
    inputs = mjoin["operators"]["children"]
    assert all(child["output_per_s"] > 0 for child in inputs), text
    f = measured_stats(load_plan(str(query), str(catalog)), records, "t").selectivity
    pids = 120  # packets(..., 120): uniform pids in both streams
    assert 0.5 / pids < f["a.pid = b.pid"] < 2.0 / pids, f
