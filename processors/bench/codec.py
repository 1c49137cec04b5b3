"""``streamon bench codec``: bulk Avro decode/encode against fastavro record by record."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import Any

import fastavro
import numpy as np

from processors.workloads.examples import reading_columns
from topics.avro import load_schema, parsed_schema
from topics.columnar import RecordCodec


def _best_rate(work: Callable[[], Any], n: int, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return n / best


def measure_codec(records: int = 100_000) -> dict[str, float]:
    """Records/s for the numba bulk codec and for fastavro's per-record reader and writer."""
    schema = load_schema("reading")
    codec = RecordCodec(schema)
    batch = reading_columns(records, seed=1)
    buf, offsets = codec.encode_many(batch.columns, len(batch))
    codec.decode_many(buf, offsets)  # compile / load the kernels first
    rows = batch.rows()
    parsed = parsed_schema(schema)
    header = 10  # single-object marker + fingerprint
    values = [buf[offsets[i] : offsets[i + 1]].tobytes() for i in range(len(rows))]

    def fastavro_decode() -> None:
        for value in values:
            fastavro.schemaless_reader(io.BytesIO(value[header:]), parsed, parsed)

    def fastavro_encode() -> None:
        out = io.BytesIO()
        for row in rows:
            fastavro.schemaless_writer(out, parsed, row)

    results = {
        "bulk_decode_per_s": _best_rate(lambda: codec.decode_many(buf, offsets), records),
        "bulk_encode_per_s": _best_rate(lambda: codec.encode_many(batch.columns, records), records),
        "fastavro_decode_per_s": _best_rate(fastavro_decode, records, repeat=2),
        "fastavro_encode_per_s": _best_rate(fastavro_encode, records, repeat=2),
        "bytes_per_record": float(np.mean(np.diff(offsets))),
    }
    for key, value in results.items():
        print(f"{key:<24}{value:>16,.0f}")
    return results
