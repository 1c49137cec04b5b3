"""Plain helpers and data several unit test files share (imported as ``from helpers import ...``;
pyproject's pythonpath puts tests/ on sys.path). Fixtures live in tests/conftest.py."""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from fractions import Fraction as F
from types import SimpleNamespace
from typing import Any

import fastavro
import numpy as np

from processors.core.batch import Batch, VarColumn

# Babcock et al., Sect. 5.3: the progress chart on which Mixed clips Chain's envelope
MIXED_CHART = [(0, 1), (1000, F(3, 10)), (1990, F(1, 5)), (3490, F(1, 10)), (5490, 0)]


def within(measured: float, expected: float, samples: int, sigmas: float = 5.0) -> bool:
    """Whether a measured frequency is within ``sigmas`` standard errors of ``expected``."""
    err = math.sqrt(max(expected * (1 - expected), 1e-12) / samples)
    return abs(measured - expected) <= sigmas * err


def avro_body(schema: dict, record: dict) -> bytes:
    """A record's schemaless Avro body written by fastavro, the independent oracle."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def reading_batch(n: int, seed: int, start: int, sensors: int = 12, step: int = 8) -> Batch:
    """``n`` random readings (the ``reading`` schema's fields, a fifth of the batteries null)
    with sensor ids below ``sensors`` and event times rising by up to ``step`` ms from
    ``start``: keys recur, so joins and groups have work."""
    rng = np.random.default_rng(seed)
    site = rng.integers(0, 3, n)
    data = np.frombuffer("".join("abc"[i] for i in site.tolist()).encode(), np.uint8).copy()
    columns = {
        "sensor_id": rng.integers(0, sensors, n).astype(np.int64),
        "ts": start + np.cumsum(rng.integers(0, step, n)).astype(np.int64),
        "temperature": np.round(rng.normal(20, 5, n), 2),
        "humidity": rng.uniform(0, 100, n).astype(np.float32),
        "site": VarColumn(np.arange(n + 1, dtype=np.int64), data),
        "ok": rng.random(n) > 0.3,
        "battery": rng.uniform(0, 1, n).astype(np.float32),
        "battery?": rng.random(n) < 0.2,  # null there
    }
    return Batch.inserts(columns, ts=columns["ts"])


class FakeApp:
    """The part of a Faust app agents use: topics, agents (kept by name, to be run by hand),
    rebalance signals that never fire, commit hooks."""

    def __init__(self) -> None:
        self.agents: dict[str, Callable] = {}
        self.on_partitions_assigned = SimpleNamespace(connect=lambda handler: None)
        self.on_partitions_revoked = SimpleNamespace(connect=lambda handler: None)
        self.flush_hooks: list[Callable] = []

    def topic(self, *names: str, **kwargs: Any) -> str:
        return names[0]

    def agent(self, source: str, name: str) -> Callable:
        def register(fn: Callable) -> Callable:
            self.agents[name] = fn
            return fn

        return register


def signed_result_rows(bootstrap: str, topic: str, schema: dict, fields: tuple[str, ...]) -> Any:
    """Counter of (sign, the ``fields`` of a result record) over ``topic``'s records, each
    decoded with the query's result ``schema`` (a delete has the sign header)."""
    from collections import Counter

    from processors.runtime.producer import SIGN_HEADER
    from topics.admin import read_topic
    from topics.avro import SchemaStore, decode_single_object

    store = SchemaStore(load=False)
    store.add(schema)
    out: Counter = Counter()
    for record in read_topic(bootstrap, topic):
        row = decode_single_object(record.value, schema, store)
        sign = -1 if dict(record.headers).get(SIGN_HEADER) == b"-1" else 1
        out[(sign, *(row[f] for f in fields))] += 1
    return out
