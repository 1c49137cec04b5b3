"""Nullable fields end to end on the real broker through a real worker, against plain-Python
SQL over None (docs/windows-and-joins.md, "Nulls").

The records carry nullable long, double, string and enum fields (about 30% nulls) and a nested
record with a nullable field of its own; the writer schema with the nested record is found on
the worker's schema path, the query reads the records through a reader schema without it.

- a filter and a projection on nullable fields, no window (rows with a null compared column
  are dropped, the projected columns keep their nulls);
- a two-way RANGE-window join on a nullable key (2 co-partitioned partitions), grouped by a
  nullable enum and a nullable int, with count, count/sum/avg/min/max over a nullable long and
  max over a nullable double.

Each result topic's net relation (inserts minus deletes, by the sign header) must be exactly
the oracle's.
"""

from __future__ import annotations

import copy
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.publish import publish_batch
from processors.core.batch import Batch, VarColumn, null_column
from processors.physical.compiler import compile_plan
from processors.runtime.producer import SIGN_HEADER
from processors.runtime.worker import topic_specs
from topics.admin import ensure_topics, read_topic
from topics.avro import SchemaStore, decode_single_object

LEVELS = ["LOW", "MID", "HIGH"]
WORDS = ["ant", "bee", "cat"]
READER = {
    "type": "record",
    "name": "Event",
    "namespace": "test.nulls",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ts", "type": "long"},
        {"name": "k", "type": ["null", "long"], "default": None},
        {"name": "v", "type": ["null", "long"], "default": None},
        {"name": "x", "type": ["double", "null"]},
        {"name": "s", "type": ["null", "string"], "default": None},
        {"name": "level", "type": ["null", {"type": "enum", "name": "Level", "symbols": LEVELS}],
         "default": None},
        {"name": "g", "type": ["null", "int"], "default": None},
    ],
}  # fmt: skip
LOC = {
    "type": "record",
    "name": "Loc",
    "fields": [
        {"name": "zone", "type": ["null", "int"], "default": None},
        {"name": "depth", "type": "double"},
    ],
}
WRITER = copy.deepcopy(READER)
WRITER["fields"].append({"name": "loc", "type": LOC})
NULLABLE = ("k", "v", "x", "s", "level", "g")
RANGE_MS = 2_000  # even, like every data ts: no expiry falls on the (odd) end time
N = 3_000
PARTITIONS = 2


def events(seed: int, first_id: int) -> tuple[Batch, list[dict[str, Any]]]:
    """N events in ts order (even ts), ~30% nulls per nullable field, keyed by ``k`` (the
    join key, so both streams are co-partitioned); and the same as SQL rows (None = null)."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 3_000, N)).astype(np.int64) * 2
    nulls = {f: rng.random(N) < 0.3 for f in NULLABLE}
    values: dict[str, list[Any]] = {
        "k": rng.integers(0, 12, N).tolist(),
        "v": rng.integers(-50, 50, N).tolist(),
        "x": rng.integers(-20, 20, N).astype(np.float64).tolist(),
        "s": [WORDS[i] for i in rng.integers(0, 3, N).tolist()],
        "level": [LEVELS[i] for i in rng.integers(0, 3, N).tolist()],
        "g": rng.integers(0, 3, N).tolist(),
    }
    rows = []
    for i in range(N):
        row: dict[str, Any] = {"id": first_id + i, "ts": int(ts[i])}
        row.update({f: None if nulls[f][i] else values[f][i] for f in NULLABLE})
        rows.append(row)
    zone_null = rng.random(N) < 0.3
    loc = [{"zone": None if z else i % 5, "depth": i / 4} for i, z in enumerate(zone_null)]
    for row, place in zip(rows, loc, strict=True):
        row["loc"] = place
    return columns(rows), [{f: r[f] for f in r if f != "loc"} for r in rows]


def columns(rows: list[dict[str, Any]]) -> Batch:
    """SQL rows (None = null, ``loc`` a nested dict) as a batch: zero values where null plus
    the companion columns, the nested record as dotted columns."""
    cols: dict[str, Any] = {
        "id": np.array([r["id"] for r in rows], np.int64),
        "ts": np.array([r["ts"] for r in rows], np.int64),
    }
    zero: dict[str, Any] = {"k": 0, "v": 0, "x": 0.0, "s": "", "level": 0, "g": 0}
    dtype = {"k": np.int64, "v": np.int64, "x": np.float64, "level": np.int32, "g": np.int32}
    for f in NULLABLE:
        vals = [zero[f] if r[f] is None else r[f] for r in rows]
        if f == "level":
            vals = [v if isinstance(v, int) else LEVELS.index(v) for v in vals]
        cols[f] = VarColumn.from_values(vals) if f == "s" else np.array(vals, dtype[f])
        cols[null_column(f)] = np.array([r[f] is None for r in rows], np.bool_)
    zones = [r.get("loc", {}).get("zone") for r in rows]
    cols["loc.zone"] = np.array([z or 0 for z in zones], np.int32)
    cols[null_column("loc.zone")] = np.array([z is None for z in zones], np.bool_)
    cols["loc.depth"] = np.array([r.get("loc", {}).get("depth", 0.0) for r in rows], np.float64)
    keys = [b"" if r["k"] is None else str(r["k"]).encode() for r in rows]
    return Batch.inserts(cols, ts=cols["ts"], key=VarColumn.from_values(keys, utf8=False))


def plan_of(text: str) -> Any:
    scope: dict[str, Any] = {}
    exec(text, scope)  # noqa: S102 (the test's own query text)
    return scope["query"].build()


def net_result(bootstrap: str, topic: str, schema: dict) -> Counter:
    """The result topic's net relation: rows (sorted items) -> inserts minus deletes."""
    store = SchemaStore(load=False)
    store.add(schema)
    net: Counter = Counter()
    for record in read_topic(bootstrap, topic):
        row = decode_single_object(record.value, schema, store)
        sign = -1 if dict(record.headers).get(SIGN_HEADER) == b"-1" else 1
        net[tuple(sorted(row.items()))] += sign
    return Counter({k: v for k, v in net.items() if v})


def run_query(
    bootstrap: str, tmp_path: Path, text: str, inputs: dict[str, list[Batch]], want: Counter
) -> tuple[Counter, str]:
    """Write the query, start a worker (the writer schema on its schema path), publish the
    inputs, and poll the result topic until its net relation equals ``want`` (or 120 s)."""
    path = tmp_path / "query.py"
    path.write_text(text)
    plan = plan_of(text)
    ensure_topics(bootstrap, topic_specs(compile_plan(plan)))
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "event_with_loc.avsc").write_text(json.dumps(WRITER))
    worker = WorkerProcess(
        path, bootstrap=bootstrap, state_dir=tmp_path / "state", worker_id="w-nulls",
        env={"STREAMON_SCHEMAS": str(schemas)},
    )  # fmt: skip
    got: Counter = Counter()
    try:
        for topic, batches in inputs.items():
            for batch in batches:
                publish_batch(bootstrap, topic, batch, WRITER)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            wait_for_count(bootstrap, plan.result_topic, 1, 2.0, [worker])
            got = net_result(bootstrap, plan.result_topic, plan.output_schema)
            if got == want:
                break
            time.sleep(1.0)
        log = worker.log_tail(80)
    finally:
        worker.stop()
    return got, log


FILTER_QUERY = """\
import json
from processors.core.query import Query, col
READER = json.loads({reader!r})
query = Query({name!r})
query.stream("e", topic={topic!r}, schema=READER, key="k", timestamp="ts", partitions=2)
query.where(col("e.x") >= -5.0, col("e.s") != "bee")
query.select("e.id", "e.k", "e.x", "e.s", "e.level", value="e.v")
query.into({result!r}, partitions=1)
"""


def test_filter_and_projection_on_nullable_fields(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    batch, rows = events(seed=1, first_id=0)
    keep: Callable[[dict], bool] = lambda r: (  # noqa: E731 (SQL: null compares unknown)
        r["x"] is not None and r["x"] >= -5.0 and r["s"] is not None and r["s"] != "bee"
    )
    want = Counter(
        tuple(sorted({"id": r["id"], "k": r["k"], "x": r["x"], "s": r["s"],
                      "level": r["level"], "value": r["v"]}.items()))
        for r in rows if keep(r)
    )  # fmt: skip
    assert any(dict(k)["value"] is None for k in want) and any(dict(k)["k"] is None for k in want)
    text = FILTER_QUERY.format(name=topic_name, topic=f"{topic_name}.in",
                               result=f"{topic_name}.out", reader=json.dumps(READER))  # fmt: skip
    got, log = run_query(bootstrap, tmp_path, text, {f"{topic_name}.in": [batch]}, want)
    assert got == want, log[-4000:]


JOIN_QUERY = """\
import json
from processors.core.query import Query
READER = json.loads({reader!r})
query = Query({name!r})
for s in ("r", "s"):
    query.stream(s, topic={prefix!r} + "." + s, schema=READER, key="k", timestamp="ts",
                 partitions={p})
    query.window(s, range_ms={range_ms})
query.join("r.k", "s.k")
query.group_by("s.level", "r.g").aggregate(
    n="count", cv=("count", "r.v"), sv=("sum", "r.v"), av=("avg", "r.v"), lo=("min", "r.v"),
    hi=("max", "r.v"), hx=("max", "s.x"))
query.into({result!r}, partitions=1)
"""


def tail(first_key: int, end: int) -> tuple[Batch, list[dict[str, Any]]]:
    """Records at the (odd) end time whose keys match nothing: they move every partition's
    event time past the data, so that the MJoin releases all its deltas before ``end``."""
    rows = [
        {"id": 10**6 + i, "ts": end, "k": first_key - i, "v": None, "x": None, "s": None,
         "level": None, "g": None}
        for i in range(16)
    ]  # fmt: skip
    return columns(rows), rows


def sql_aggregate(func: str, values: list[Any]) -> Any:
    vals = [v for v in values if v is not None]
    if func == "count":
        return len(vals)
    if not vals:
        return None
    if func == "sum":
        return sum(vals)
    if func == "avg":
        return sum(vals) / len(vals)
    return min(vals) if func == "min" else max(vals)


def join_oracle(r_rows: list[dict], s_rows: list[dict], end: int) -> Counter:
    """GROUP BY over the join of the RANGE windows' contents at time ``end`` (ts in
    (end - RANGE_MS, end]), null keys matching nothing."""
    live = [[x for x in rows if end - RANGE_MS < x["ts"] <= end] for rows in (r_rows, s_rows)]
    groups: dict[tuple, list[tuple[dict, dict]]] = {}
    for a in live[0]:
        for b in live[1]:
            if a["k"] is not None and b["k"] is not None and a["k"] == b["k"]:
                groups.setdefault((b["level"], a["g"]), []).append((a, b))
    want: Counter = Counter()
    for (level, g), pairs in groups.items():
        vs = [a["v"] for a, _ in pairs]
        row = {"level": level, "g": g, "n": len(pairs), "cv": sql_aggregate("count", vs),
               "sv": sql_aggregate("sum", vs), "av": sql_aggregate("avg", vs),
               "lo": sql_aggregate("min", vs), "hi": sql_aggregate("max", vs),
               "hx": sql_aggregate("max", [b["x"] for _, b in pairs])}  # fmt: skip
        want[tuple(sorted(row.items()))] += 1
    return want


def test_range_join_on_a_nullable_key_grouped_by_nullable_columns(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    (r_batch, r_rows), (s_batch, s_rows) = events(seed=2, first_id=0), events(seed=3, first_id=N)
    end = max(x["ts"] for x in r_rows + s_rows) + 1
    (r_tail, r_tail_rows), (s_tail, s_tail_rows) = tail(-1, end), tail(-101, end)
    want = join_oracle(r_rows + r_tail_rows, s_rows + s_tail_rows, end)
    keys = [dict(k) for k in want]
    assert any(k["level"] is None for k in keys) and any(k["g"] is None for k in keys)
    assert any(k["sv"] is None for k in keys) or any(k["cv"] < k["n"] for k in keys)
    prefix = topic_name
    text = JOIN_QUERY.format(name=topic_name, prefix=prefix, p=PARTITIONS, range_ms=RANGE_MS,
                             result=f"{prefix}.out", reader=json.dumps(READER))  # fmt: skip
    inputs = {f"{prefix}.r": [r_batch, r_tail], f"{prefix}.s": [s_batch, s_tail]}
    got, log = run_query(bootstrap, tmp_path, text, inputs, want)
    for topic in inputs:  # the end time reached every partition of every input
        reached = {
            r.partition for r in read_topic(bootstrap, topic) if (r.key or b"").startswith(b"-")
        }
        assert reached == set(range(PARTITIONS)), topic
    assert got == want, log[-4000:]
