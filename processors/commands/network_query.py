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

QUERY = """\
from processors.core.query import Query
from processors.workloads.network import packet_schema
query = Query({name!r})
for r in {routers!r}:
    query.stream(r, topic={prefix!r} + "." + r, schema=packet_schema(nullable_size={nullable}),
                 key="pid", timestamp="ts", partitions={partitions})
    query.window(r, range_ms={window_ms})
for r in {routers!r}[1:]:
    query.join("r0.pid", r + ".pid")
{output}
query.adapt("agreedy", profile_probability={p}, window_tuples={window_tuples})
query.idle_timeout({idle_timeout_ms})
query.into({result!r}, partitions={partitions})
"""
AGGREGATE = 'query.aggregate(total_bytes=("sum", "r0.size"), packets="count"%s)'
SIZED = ', sized=("count", "r0.size")'  # with nullable sizes: the joined sightings with a size
SELECT = (
    'query.select("r0.pid", "r0.size", first_ts="r0.ts", **{r + "_ts": r + ".ts" for r in %r[1:]})'
)


def query_text(
    name: str, prefix: str, result: str, routers: int = 4, partitions: int = 4,
    window_ms: int = 600_000, aggregate: bool = True, p: float = 0.01, window_tuples: int = 1000,
    nullable_size: bool = False, idle_timeout_ms: int = 3_000,
) -> str:  # fmt: skip
    names = [f"r{i}" for i in range(routers)]
    output = AGGREGATE % (SIZED if nullable_size else "") if aggregate else SELECT % (names,)
    return QUERY.format(
        name=name, routers=names, prefix=prefix, partitions=partitions, window_ms=window_ms,
        output=output, result=result, p=p, window_tuples=window_tuples, nullable=nullable_size,
        idle_timeout_ms=idle_timeout_ms,
    )  # fmt: skip


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
