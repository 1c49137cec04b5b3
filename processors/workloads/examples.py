"""Example streams and queries used by the demo, the benchmarks and the tests."""

from __future__ import annotations

import numpy as np

from processors.core.batch import Batch, VarColumn, null_column
from processors.core.query import Query
from topics.avro import load_schema

SITES = ("north", "south", "east", "west", "lab-1", "lab-2")


def readings_passthrough(
    topic: str = "readings",
    result: str = "readings-out",
    partitions: int = 4,
    name: str = "readings",
) -> Query:
    """Every sensor reading, unchanged: the foundation's end-to-end pipeline."""
    query = Query(name)
    query.stream(
        "r",
        topic=topic,
        schema=load_schema("reading"),
        key="sensor_id",
        timestamp="ts",
        partitions=partitions,
    )
    query.into(result, partitions=partitions)
    return query


def reading_columns(n: int, seed: int = 0, start_ms: int = 1_700_000_000_000) -> Batch:
    """n deterministic sensor readings as a columnar batch (keys: the sensor id as 8 bytes)."""
    rng = np.random.default_rng(seed)
    sensor = rng.integers(0, 1000, n).astype(np.int64)
    ts = start_ms + np.arange(n, dtype=np.int64) * 10
    site_idx = rng.integers(0, len(SITES), n)
    encoded = [s.encode() for s in SITES]
    lengths = np.array([len(s) for s in encoded], np.int64)[site_idx]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(b"".join(encoded[i] for i in site_idx.tolist()), np.uint8).copy()
    columns = {
        "sensor_id": sensor,
        "ts": ts,
        "temperature": np.round(rng.normal(20.0, 8.0, n), 3),
        "humidity": rng.uniform(0, 100, n).astype(np.float32),
        "site": VarColumn(offsets, data),
        "ok": rng.random(n) > 0.05,
    }
    # a nullable field, null for about one reading in ten (its companion column says which)
    battery_null = rng.random(n) < 0.1
    columns["battery"] = np.where(battery_null, 0.0, rng.uniform(5, 100, n)).astype(np.float32)
    columns[null_column("battery")] = battery_null
    keys = sensor.astype(">i8").view(np.uint8)
    key_col = VarColumn(np.arange(0, 8 * n + 1, 8, dtype=np.int64), keys.copy(), utf8=False)
    return Batch.inserts(columns, ts=ts, key=key_col)
