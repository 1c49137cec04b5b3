"""The network-monitoring query of Example 1 on Kafka: topics, query text, publishing, counting.

Four routers' packet streams, keyed by packet id (so co-partitioned), 10-minute (by default)
RANGE windows, joined on pid. ``aggregate=True`` asks Example 1's question, the total size of
the packets every router saw; otherwise each joined sighting is a result record. With
``nullable_size`` the size field is ``["null", "long"]``: the sum ignores null sizes, an
aggregate ``sized`` counts the joined sightings with a size, a projection passes them through.
Used by ``streamon demo`` and ``streamon bench mjoin``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from processors.core.batch import Batch, VarColumn, null_column
from processors.core.plan import LogicalPlan
from processors.cql import parse_cql
from processors.runtime.producer import RecordProducer
from processors.workloads.network import (
    NetworkWorkload,
    NetworkWorkloadRun,
    network_schemas,
    packet_schema,
)
from topics.admin import read_topic
from topics.avro import SchemaStore, decode_single_object
from topics.columnar import RecordCodec

STREAM = """\
CREATE STREAM {r} (pid BIGINT NOT NULL, size BIGINT{size_null}, ts BIGINT NOT NULL)
  WITH (topic = '{prefix}.{r}', key = 'pid', timestamp = 'ts', partitions = {partitions},
        record = '{record}');
"""
QUERY = """\
CREATE QUERY "{name}" INTO '{result}' PARTITIONS {partitions}
  WITH (adapt = 'agreedy', adapt_profile_probability = {p}, adapt_window_tuples = {window_tuples},
        idle_timeout_ms = {idle_timeout_ms})
AS SELECT {output}
FROM {windows}
WHERE {joins};
"""
AGGREGATE = "sum(r0.size) AS total_bytes, count(*) AS packets%s"
SIZED = ", count(r0.size) AS sized"  # with nullable sizes: the joined sightings with a size


def query_text(
    name: str, prefix: str, result: str, routers: int = 4, partitions: int = 4,
    window_ms: int = 600_000, aggregate: bool = True, p: float = 0.01, window_tuples: int = 1000,
    nullable_size: bool = False, idle_timeout_ms: int = 3_000,
) -> str:  # fmt: skip
    """The query as CQL (a .cql file; :func:`query_plan` builds it): the routers' streams, then
    the join on pid of their RANGE windows, Example 1's sum or each joined sighting."""
    names = [f"r{i}" for i in range(routers)]
    schema = packet_schema()  # the record name the publisher writes (its fingerprint)
    record = f"{schema['namespace']}.{schema['name']}"
    streams = "".join(
        STREAM.format(r=r, prefix=prefix, partitions=partitions, record=record,
                      size_null="" if nullable_size else " NOT NULL")
        for r in names
    )  # fmt: skip
    if aggregate:
        output = AGGREGATE % (SIZED if nullable_size else "")
    else:
        output = ", ".join(["r0.pid", "r0.size", "r0.ts AS first_ts",
                            *(f"{r}.ts AS {r}_ts" for r in names[1:])])  # fmt: skip
    return streams + QUERY.format(
        name=name, result=result, partitions=partitions, p=p, window_tuples=window_tuples,
        idle_timeout_ms=idle_timeout_ms, output=output,
        windows=", ".join(f"{r} [RANGE {window_ms} MS]" for r in names),
        joins=" AND ".join(f"r0.pid = {r}.pid" for r in names[1:]),
    )  # fmt: skip


def query_plan(text: str) -> LogicalPlan:
    """The plan of a :func:`query_text` query."""
    return parse_cql(text).query().build()


def keyed(batch: Batch) -> Batch:
    """The batch with its pids as Kafka keys, so that every router's topic is partitioned alike."""
    pids = batch.columns["pid"]
    raw = np.char.encode(pids.astype(str), "ascii")  # type: ignore[union-attr]
    batch.key = VarColumn.from_values(list(raw), utf8=False)
    return batch


def publish(
    bootstrap: str, prefix: str, workload: NetworkWorkload, span_ms: int = 10_000
) -> Iterator[tuple[int, list[Batch]]]:
    """Publish the workload span by span, with one producer; yields (tuples so far, the span's
    batches) once the span is sent."""
    run = NetworkWorkloadRun(workload)
    codec = RecordCodec(network_schemas(workload)[workload.stream_names[0]])
    producer = RecordProducer(bootstrap)
    total = 0
    try:
        while not run.done:
            batches = run.next_batches(span_ms)
            for name, batch in zip(workload.stream_names, batches, strict=True):
                if len(batch):
                    keyed(batch)
                    buf, offsets = codec.encode_many(batch.columns, len(batch))
                    producer.produce_many(f"{prefix}.{name}", buf, offsets, keys=batch.key)
                    total += len(batch)
            producer.flush_blocking()
            yield total, batches
    finally:
        producer.close()


def stored(
    bootstrap: str, prefix: str, routers: int, partitions: int, nullable_size: bool = False
) -> dict[int, list[Batch]]:
    """Per partition, each router's records as the broker holds them (to replay in process)."""
    schema, store = packet_schema(nullable_size=nullable_size), SchemaStore(load=False)
    store.add(schema)
    out: dict[int, list[Batch]] = {}
    for i in range(routers):
        rows: dict[int, list[dict]] = {p: [] for p in range(partitions)}
        for record in read_topic(bootstrap, f"{prefix}.r{i}"):
            rows[record.partition].append(decode_single_object(record.value, schema, store))
        for p, recs in rows.items():
            cols: dict[str, np.ndarray] = {}
            for f in ("pid", "size", "ts"):
                cols[f] = np.array([r[f] or 0 for r in recs], dtype=np.int64)
                if f == "size" and nullable_size:  # in the order the ingest codec decodes
                    cols[null_column(f)] = np.array([r[f] is None for r in recs], np.bool_)
            out.setdefault(p, []).append(Batch.inserts(cols, cols["ts"]))
    return out
