"""A streamon worker on workloads ``join3`` and ``netmon`` of ``streamon bench peers``, on the
broker: the like-for-like figure next to Quix Streams (which only reads Kafka).

The same tuples go into one topic per input on a private embedded broker, as the demo's router
records (``RouterPacket``: pid, size, ts; join3's k travels as pid and its id as size), keyed
by the join key so that the topics are co-partitioned. A worker runs the RANGE join as CQL (the
demo's text, one projected row per joined tuple) into a result topic; its rate is the input
records over the time between its first and last result record (produce timestamps), as in
``e2e_filters``, and the results are read back for the count and checksum.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from processors.bench import peers_data as D
from processors.bench.peers_run import figures, run_worker_until, scratch_broker

PARTITIONS = 4
#: how long a partition with no new records holds back the join's event time (the query
#: option; the demo's 3 s would end every run with a 3 s wait for the inputs' last tuples)
IDLE_TIMEOUT_MS = 300


def join_query(workload: str, prefix: str, result: str, range_ms: int) -> str:
    """The CQL of the workload's join: every input a RouterPacket stream, RANGE windows, the
    ids (join3: s_i's id is r_i.size) or r0's pid and size as the result row."""
    from processors.commands.network_query import QUERY, STREAM
    from processors.workloads.network import packet_schema

    n = 3 if workload == "join3" else 4
    names = [f"r{i}" for i in range(n)]
    schema = packet_schema()
    record = f"{schema['namespace']}.{schema['name']}"
    streams = "".join(STREAM.format(r=r, prefix=prefix, partitions=PARTITIONS, record=record,
                                    size_null=" NOT NULL") for r in names)  # fmt: skip
    if workload == "join3":
        output = ", ".join(f"{r}.size AS id{i}" for i, r in enumerate(names))
    else:
        output = "r0.pid, r0.size"
    return streams + QUERY.format(
        name=f"{prefix}-q", result=result, partitions=PARTITIONS, p=0.01, window_tuples=1000,
        idle_timeout_ms=IDLE_TIMEOUT_MS, output=output,
        windows=", ".join(f"{r} [RANGE {range_ms} MS]" for r in names),
        joins=" AND ".join(f"r0.pid = {r}.pid" for r in names[1:]),
    )  # fmt: skip


def as_packets(workload: str, cols: dict[str, np.ndarray]) -> Any:
    """One input's tuples as a keyed RouterPacket batch."""
    from processors.commands.network_query import keyed
    from processors.core.batch import Batch

    if workload == "join3":
        data = {"pid": cols["k"], "size": cols["id"], "ts": cols["ts"]}
    else:
        data = {c: cols[c] for c in ("pid", "size", "ts")}
    return keyed(Batch.inserts({k: np.asarray(v, np.int64) for k, v in data.items()}, data["ts"]))


def result_answer(workload: str, rows: list[dict[str, Any]]) -> tuple[int, int, int]:
    """Count, checksum (as peers_data's) and r0's total size of decoded result rows."""
    if workload == "join3":
        ids = [np.array([r[f"id{i}"] for r in rows], np.int64) for i in range(3)]
        return len(rows), D.join_checksum(ids) % D.MOD if rows else 0, 0
    pid = np.array([r["pid"] for r in rows], np.int64)
    size = np.array([r["size"] for r in rows], np.int64)
    return len(rows), D.netmon_checksum(pid, size) % D.MOD, int(size.sum())


def run_streamon_join(workload: str, inputs: list[dict[str, np.ndarray]], range_ms: int,
                      expected: int, timeout: float) -> dict[str, Any]:  # fmt: skip
    """Publish, run one worker until ``expected`` results, read them back; see the module doc."""
    from processors.commands.network_query import query_plan
    from processors.commands.publish import publish_batch
    from processors.runtime.producer import SIGN_HEADER
    from processors.workloads.network import packet_schema
    from topics.admin import ensure_topics, read_topic
    from topics.avro import SchemaStore, decode_single_object
    from topics.specs import TopicSpec

    records = sum(len(c["ts"]) for c in inputs)
    with scratch_broker("streamon-peers-joins-") as (info, tmp):
        state = tmp / "state"
        state.mkdir()
        bootstrap, prefix = info.bootstrap, f"peers-{workload}-{time.strftime('%H%M%S')}"
        out = f"{prefix}.out"
        ensure_topics(bootstrap, [TopicSpec(f"{prefix}.r{i}", PARTITIONS)
                                  for i in range(len(inputs))])  # fmt: skip
        for i, cols in enumerate(inputs):
            publish_batch(bootstrap, f"{prefix}.r{i}", as_packets(workload, cols),
                          packet_schema())  # fmt: skip
        text = join_query(workload, prefix, out, range_ms)
        query = state / f"{prefix}.cql"
        query.write_text(text)
        # settled: the retractions (and inserts) still on their way are read back too
        launched, sampler = run_worker_until(query, bootstrap, state, prefix, out, expected,
                                             timeout, settle_s=3.0)  # fmt: skip
        schema, store = query_plan(text).output_schema, SchemaStore(load=False)
        store.add(schema)
        got = [r for r in read_topic(bootstrap, out)
               if (SIGN_HEADER, b"-1") not in r.headers]  # fmt: skip
        rows = [decode_single_object(r.value or b"", schema, store) for r in got]
    stamps = [r.timestamp_ms / 1000 for r in got]
    t0, t1 = min(stamps), max(stamps)
    count, checksum, total = result_answer(workload, rows)
    result = {"records": records, "count": count, "checksum": checksum, "t0": t0, "t1": t1,
              "on_broker": True}  # fmt: skip
    if workload == "netmon":
        result["extra"] = [total]
    result.update(figures(records, t0, t1, sampler, launched, t0))
    return result
