"""SQL null semantics end to end (docs/windows-and-joins.md, "Nulls"): nullable fields in the
query builder, filters below and above windows, a join on a nullable key, projection, GROUP BY
a nullable column and aggregates over one, each against a plain-Python oracle over None."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import fastavro
import numpy as np
import pytest
from oracle.naive import naive_window_deltas

from processors.core.batch import Batch, VarColumn, null_column
from processors.core.plan import QueryError
from processors.core.query import Query, col
from processors.physical.runner import QueryRunner

EVENT = {
    "type": "record",
    "name": "Event",
    "namespace": "test",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ts", "type": "long"},
        {"name": "k", "type": ["null", "long"], "default": None},
        {"name": "x", "type": ["double", "null"]},
        {"name": "s", "type": ["null", "string"], "default": None},
        {"name": "g", "type": ["null", "int"], "default": None},
        {"name": "v", "type": "double"},
    ],
}
NULLABLE = {"k": np.int64, "x": np.float64, "s": None, "g": np.int32}
WORDS = ("ant", "bee", "cat", "dog")


def events(n: int, seed: int, first_id: int, null_p: float = 0.3) -> Batch:
    """A batch of Event tuples with nulls in every nullable field (zero where null); ids
    count on from ``first_id`` and event time from ``6 * first_id``, so that the batches of
    a stream come in event-time order."""
    rng = np.random.default_rng(seed)
    cols: dict[str, Any] = {
        "id": np.arange(first_id, first_id + n, dtype=np.int64),
        "ts": 6 * (first_id % 1000) + np.cumsum(rng.integers(0, 6, n)).astype(np.int64),
    }
    for name, dtype in NULLABLE.items():
        nulls = rng.random(n) < null_p
        if dtype is None:
            words = [WORDS[i] for i in rng.integers(0, len(WORDS), n).tolist()]
            cols[name] = VarColumn.from_values(
                ["" if z else w for w, z in zip(words, nulls, strict=True)]
            )
        else:
            high = 4 if name in ("k", "g") else 3
            values = rng.integers(-high, high, n).astype(dtype)
            values[nulls] = 0
            cols[name] = values
        cols[null_column(name)] = nulls
    cols["v"] = rng.integers(-9, 9, n).astype(np.float64)
    return Batch.inserts(cols, ts=cols["ts"])


def sql_rows(batch: Batch) -> list[dict[str, Any]]:
    """A batch's tuples with None where the companion null column says null."""
    out = []
    for row in batch.rows():
        out.append(
            {
                c: None if row.get(null_column(c)) else v
                for c, v in row.items()
                if not c.endswith("?")
            }
        )
    return out


def net(batches: list[Batch]) -> Counter:
    """The live multiset of result rows (inserts minus deletes)."""
    total: Counter = Counter()
    for batch in batches:
        for row, sign in zip(sql_rows(batch), batch.sign.tolist(), strict=True):
            total[tuple(sorted(row.items()))] += sign
    return Counter({k: v for k, v in total.items() if v})


def live_rows(
    rows: list[dict], window: tuple[str, int] | None, keep: Callable[[dict], bool] = bool
) -> list[dict]:
    """The rows that pass ``keep`` in the window after all input and a flush (all rows that
    pass without a window). A ROWS window sees every row, the filter its deltas; a RANGE
    window sees the rows that pass (its event time moves with them)."""
    if window is None or window[0] == "range":
        rows = [r for r in rows if keep(r)]
    if window is None:
        return rows
    deltas, late = naive_window_deltas([dict(r, t=r["ts"]) for r in rows], *window, ts_field="t")
    assert not late
    live: Counter = Counter()
    for d in deltas:
        live[d["row"]["id"]] += d["sign"]
    by_id = {r["id"]: r for r in rows}
    return [by_id[i] for i, c in sorted(live.items()) if c and keep(by_id[i])]


def compare(op: str, consts: tuple) -> Callable[[Any], bool]:
    """The SQL comparison: unknown (dropped) when the value is null, whatever ``op``."""

    def keep(v: Any) -> bool:
        if v is None:
            return False
        if op == "in":
            return v in consts
        if op == "between":
            return consts[0] <= v <= consts[1]
        return {
            "<": v < consts[0],
            "<=": v <= consts[0],
            ">": v > consts[0],
            ">=": v >= consts[0],
            "==": v == consts[0],
            "!=": v != consts[0],
        }[op]

    return keep


FILTERS = [
    (lambda: col("e.x") < 1.0, "x", compare("<", (1.0,))),
    (lambda: col("e.x") <= 1.0, "x", compare("<=", (1.0,))),
    (lambda: col("e.x") > 1.0, "x", compare(">", (1.0,))),
    (lambda: col("e.x") >= 1.0, "x", compare(">=", (1.0,))),
    (lambda: col("e.x") == 0.0, "x", compare("==", (0.0,))),
    (lambda: col("e.x") != 0.0, "x", compare("!=", (0.0,))),
    (lambda: col("e.x").isin([0.0, 1.0, 5.0]), "x", compare("in", (0.0, 1.0, 5.0))),
    (lambda: col("e.x").between(-2.0, 4.0), "x", compare("between", (-2.0, 4.0))),
    (lambda: col("e.k") == 0, "k", compare("==", (0,))),
    (lambda: col("e.s") == "bee", "s", compare("==", ("bee",))),
    (lambda: col("e.s") != "bee", "s", compare("!=", ("bee",))),
    (lambda: col("e.s").isin(["ant", "cat"]), "s", compare("in", ("ant", "cat"))),
    (lambda: col("e.g").is_null(), "g", lambda v: v is None),
    (lambda: col("e.g").is_not_null(), "g", lambda v: v is not None),
]
WINDOWS = [None, ("rows", 40), ("range", 90)]


def run(q: Query, batches: dict[str, list[Batch]]) -> list[Batch]:
    runner = QueryRunner(q.build())
    out: list[Batch] = []
    rounds = max(len(b) for b in batches.values())
    for i in range(rounds):
        for stream, items in batches.items():
            if i < len(items):
                out += runner.push(stream, items[i])
    out += runner.flush()
    assert runner.take_dead_letters() == []
    return out


def event_query(window: tuple[str, int] | None, name: str = "nulls") -> Query:
    q = Query(name).stream("e", topic="events", schema=EVENT, timestamp="ts", partitions=1)
    if window is not None:
        q.window("e", **({"rows": window[1]} if window[0] == "rows" else {"range_ms": window[1]}))
    return q.into(f"{name}-out")


@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: "none" if w is None else w[0])
@pytest.mark.parametrize("case", range(len(FILTERS)))
def test_filters_drop_nulls_below_and_above_windows(case: int, window: Any) -> None:
    make, field, keep = FILTERS[case]
    batches = [events(40, 10 * case + i, 40 * i) for i in range(6)]
    out = run(event_query(window).where(make()), {"e": batches})
    rows = [r for b in batches for r in sql_rows(b)]
    expected = live_rows(rows, window, lambda r: keep(r[field]))
    assert expected, "the case should keep some rows"
    assert net(out) == Counter(tuple(sorted(r.items())) for r in expected)


def test_implicit_not_null_filters_follow_the_placement_rule() -> None:
    plan = event_query(("rows", 5)).where(col("e.x") > 1.0, col("e.v") > 0.0).build()
    assert [str(f) for f in plan.filters] == ["e.x > 1.0", "e.v > 0.0", "e.x IS NOT NULL"]
    assert {f.placement for f in plan.filters} == {"above_window"}
    plan = event_query(("range", 5)).where(col("e.x") > 1.0, col("e.x") < 9.0).build()
    assert [str(f) for f in plan.filters] == ["e.x > 1.0", "e.x < 9.0", "e.x IS NOT NULL"]
    assert {f.placement for f in plan.filters} == {"below_window"}
    plan = event_query(None).where(col("e.x").is_not_null(), col("e.x") > 1.0).build()
    assert [str(f) for f in plan.filters] == ["e.x IS NOT NULL", "e.x > 1.0"]
    plan = event_query(None).where(col("e.v") > 0.0, col("e.id").is_not_null()).build()
    assert [str(f) for f in plan.filters] == ["e.v > 0.0"]  # never null: always true


def two_streams(r_window: tuple[str, int] | None, s_window: tuple[str, int] | None) -> Query:
    q = Query("nulljoin")
    for name, window in (("r", r_window), ("s", s_window)):
        q.stream(name, topic=f"{name}-in", schema=EVENT, timestamp="ts", partitions=1)
        if window is not None:
            kind, size = window
            q.window(name, **({"rows": size} if kind == "rows" else {"range_ms": size}))
    return q.join("r.k", "s.k").into("nulljoin-out")


@pytest.mark.parametrize(
    "windows",
    [(("rows", 20), ("range", 90)), (("range", 60), None), (None, None)],
    ids=["rows-range", "range-none", "none-none"],
)
def test_join_on_a_nullable_key_never_matches_nulls(windows: Any) -> None:
    q = two_streams(*windows).select(rid="r.id", sid="s.id", rk="r.k", sx="s.x", ss="s.s")
    plan = q.build()
    checks = {(f.stream, str(f), f.placement) for f in plan.filters}
    placements = ["above_window" if w and w[0] == "rows" else "below_window" for w in windows]
    assert checks == {
        ("r", "r.k IS NOT NULL", placements[0]),
        ("s", "s.k IS NOT NULL", placements[1]),
    }
    r = [events(30, 100 + i, 1000 + 30 * i) for i in range(5)]
    s = [events(30, 200 + i, 2000 + 30 * i) for i in range(5)]
    out = run(q, {"r": r, "s": s})
    r_rows = [x for b in r for x in sql_rows(b)]
    assert any(x["k"] is None for x in r_rows)
    r_live = live_rows(r_rows, windows[0], lambda x: x["k"] is not None)
    s_live = live_rows(
        [x for b in s for x in sql_rows(b)], windows[1], lambda x: x["k"] is not None
    )
    expected: Counter = Counter()
    for a in r_live:
        for b in s_live:
            if a["k"] is not None and b["k"] is not None and a["k"] == b["k"]:
                row = {"rid": a["id"], "sid": b["id"], "rk": a["k"], "sx": b["x"], "ss": b["s"]}
                expected[tuple(sorted(row.items()))] += 1
    assert expected
    assert any(dict(k)["sx"] is None for k in expected)  # nulls pass through the projection
    assert net(out) == expected
    fields = {f["name"]: f for f in plan.output_schema["fields"]}
    assert fields["sx"] == {"name": "sx", "type": ["null", "double"], "default": None}
    assert fields["rid"] == {"name": "rid", "type": "long"}
    fastavro.parse_schema(plan.output_schema)


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


AGGS = {
    "n": ("count", None),
    "cx": ("count", "x"),
    "sx": ("sum", "x"),
    "ax": ("avg", "x"),
    "lo": ("min", "x"),
    "hi": ("max", "x"),
    "sk": ("sum", "k"),
    "mk": ("max", "k"),
    "cs": ("count", "s"),
    "cv": ("count", "v"),
}


@pytest.mark.parametrize("window", [("rows", 15), ("range", 40), None], ids=str)
@pytest.mark.parametrize("null_p", [0.3, 0.8])
def test_group_by_a_nullable_column_with_aggregates_over_nulls(window: Any, null_p: float) -> None:
    q = event_query(window, "nullagg").group_by("e.g")
    q.aggregate(**{name: (f, None if c is None else f"e.{c}") for name, (f, c) in AGGS.items()})
    plan = q.build()
    batches = [events(30, 300 + i, 30 * i, null_p) for i in range(8)]
    out = run(q, {"e": batches})
    groups: dict[Any, list[dict]] = {}
    for row in live_rows([x for b in batches for x in sql_rows(b)], window):
        groups.setdefault(row["g"], []).append(row)
    expected: Counter = Counter()
    for g, rows in groups.items():
        result: dict[str, Any] = {"g": g}
        for name, (func, column) in AGGS.items():
            if column is None:
                result[name] = len(rows)
            else:
                result[name] = sql_aggregate(func, [r[column] for r in rows])
        expected[tuple(sorted(result.items()))] += 1
    assert None in groups  # the null group
    if null_p > 0.5:  # some group then lacks values of x: its sum, avg, min, max are null
        assert any(dict(k)["sx"] is None for k in expected)
    got = net(out)
    assert _approx(got) == _approx(expected)
    types = {f["name"]: f["type"] for f in plan.output_schema["fields"]}
    assert types["g"] == ["null", "int"] and types["n"] == "long" and types["cx"] == "long"
    assert types["ax"] == ["null", "double"] and types["sk"] == ["null", "long"]
    assert types["lo"] == ["null", "double"] and types["mk"] == ["null", "long"]
    fastavro.parse_schema(plan.output_schema)


def _approx(rows: Counter) -> Counter:
    """Averages rounded (sums of integers are exact; their quotient may round differently)."""
    return Counter(
        {
            tuple((c, round(v, 9) if isinstance(v, float) and not math.isnan(v) else v)
                  for c, v in k): n
            for k, n in rows.items()
        }
    )  # fmt: skip


def test_group_by_over_a_join_keeps_the_null_group() -> None:
    q = two_streams(("range", 60), None).group_by("s.g")
    q.aggregate(n="count", hi=("max", "r.x"), a=("avg", "s.x"))
    r = [events(30, 600 + i, 1000 + 30 * i) for i in range(4)]
    s = [events(30, 700 + i, 2000 + 30 * i) for i in range(4)]
    out = run(q, {"r": r, "s": s})
    r_live = live_rows(
        [x for b in r for x in sql_rows(b)], ("range", 60), lambda x: x["k"] is not None
    )
    s_live = [x for b in s for x in sql_rows(b) if x["k"] is not None]
    groups: dict[Any, list[tuple[dict, dict]]] = {}
    for a in r_live:
        for b in s_live:
            if a["k"] == b["k"]:
                groups.setdefault(b["g"], []).append((a, b))
    expected = Counter(
        tuple(
            sorted(
                {
                    "g": g,
                    "n": len(pairs),
                    "hi": sql_aggregate("max", [a["x"] for a, _ in pairs]),
                    "a": sql_aggregate("avg", [b["x"] for _, b in pairs]),
                }.items()
            )
        )
        for g, pairs in groups.items()
    )
    assert None in groups
    assert _approx(net(out)) == _approx(expected)


def test_aggregate_snapshot_keeps_null_groups() -> None:
    q = event_query(("rows", 10), "nullsnap").group_by("e.g").aggregate(lo=("min", "e.x"))
    plan = q.build()
    first, whole = QueryRunner(plan), QueryRunner(plan)
    batches = [events(20, 500 + i, 20 * i, 0.5) for i in range(6)]
    for batch in batches[:3]:
        first.push("e", batch)
        whole.push("e", batch)
    second = QueryRunner(plan)
    for name, chain in first.chains.items():
        second.chains[name].load_snapshot(chain.snapshot())
    a = [b for batch in batches[3:] for b in second.push("e", batch)]
    b = [b for batch in batches[3:] for b in whole.push("e", batch)]
    assert len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b, strict=True))


def test_nullable_fields_in_the_builder() -> None:
    plan = event_query(None).build()
    info = {f.name: f for f in plan.streams[0].fields}
    assert (info["k"].type, info["k"].nullable) == ("long", True)
    assert (info["x"].type, info["x"].nullable) == ("double", True)
    assert (info["v"].type, info["v"].nullable) == ("double", False)
    assert plan.output_schema == EVENT  # one stream without projection: the input schema
    assert plan.to_json()["streams"][0]["nullable"] == ["k", "x", "s", "g"]
    enum = {"type": "enum", "name": "Level", "symbols": ["LOW", "HIGH"]}
    schema = {
        "type": "record",
        "name": "L",
        "fields": [{"name": "a", "type": ["null", enum]}, {"name": "b", "type": ["Level", "null"]}],
    }
    q = Query("en").stream("l", topic="l", schema=schema).where(col("l.b") == "HIGH")
    plan = q.select("l.a", "l.b").into("en-out").build()
    assert [(f.type, f.nullable) for f in plan.streams[0].fields] == [("enum", True)] * 2
    assert plan.output_schema["fields"][1] == {
        "name": "b",
        "type": ["null", "Level"],
        "default": None,
    }
    fastavro.parse_schema(plan.output_schema)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: event_query(None).where(col("e.v").is_null()).build(), "e.v is not nullable"),
        (
            lambda: Query("q").stream("e", topic="t", schema=EVENT, timestamp="k"),
            "timestamp field 'k' is nullable",
        ),
        (
            lambda: (
                Query("q")
                .stream("e", topic="t", schema=EVENT)
                .window("e", rows=3, partition_by="k")
                .into("o")
                .build()
            ),
            "PARTITION BY a nullable field (e.k) is not yet supported",
        ),
        (
            lambda: Query("q").stream(
                "e",
                topic="t",
                schema={
                    "type": "record",
                    "name": "U",
                    "fields": [{"name": "u", "type": ["null", "int", "string"]}],
                },
            ),
            "field 'u': type a union is not supported",
        ),
        (
            lambda: (
                Query("q")
                .stream(
                    "e",
                    topic="t",
                    schema={
                        "type": "record",
                        "name": "U",
                        "fields": [
                            {
                                "name": "u",
                                "type": ["null", {"type": "fixed", "name": "F", "size": 2}],
                            }
                        ],  # fmt: skip
                    },
                )
                .where(col("e.u").is_null())
                .into("o")
                .build()
            ),
            "field e.u is a(n) fixed; arrays, maps and fixed can only be passed through",
        ),
    ],
)
def test_what_is_refused(build: Callable[[], Any], message: str) -> None:
    with pytest.raises(QueryError, match=re.escape(message)):
        build()
