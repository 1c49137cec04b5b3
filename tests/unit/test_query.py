"""Query API: valid queries build the expected plan; every invalid one names its culprit."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import fastavro
import pytest

from processors.core.plan import ColumnRef
from processors.core.query import Query, QueryError, col

LEVEL = {"type": "enum", "name": "Level", "symbols": ["LOW", "HIGH"]}
READING = {
    "type": "record",
    "name": "Reading",
    "namespace": "demo",
    "fields": [
        {"name": "sensor_id", "type": "long"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "site", "type": "string"},
        {"name": "temperature", "type": "double"},
        {"name": "humidity", "type": "float"},
        {"name": "ok", "type": "boolean"},
        {"name": "level", "type": LEVEL},
        {"name": "raw", "type": "bytes"},
        {"name": "count", "type": "int"},
    ],
}
SITE = {
    "type": "record",
    "name": "Site",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "region", "type": "string"},
        {"name": "sensor_id", "type": "long"},
    ],
}
OWNER = {
    "type": "record",
    "name": "Owner",
    "fields": [{"name": "region", "type": "string"}, {"name": "owner", "type": "string"}],
}


def readings(q: Query | None = None, **kw) -> Query:
    q = q or Query("sensor-alerts")
    args = {"key": "sensor_id", "timestamp": "ts", "partitions": 4} | kw
    return q.stream("r", topic="readings", schema=READING, **args)


def two(**kw) -> Query:
    return readings(**kw).stream("s", topic="sites", schema=SITE)


def test_the_example_query() -> None:
    q = two()
    q.window("r", rows=1000)
    q.where(
        col("r.temperature") > 30.0,
        col("r.site").isin({"b", "a"}),
        col("r.humidity").between(0.1, 0.9),
        col("s.region") == "north",
    )
    q.join("r.site", "s.name")
    q.select("r.sensor_id", "r.temperature", "s.region")
    plan = q.into("alerts", partitions=4).build()

    r, s = plan.streams
    assert (r.name, r.topic, r.key, r.timestamp, r.partitions) == (
        "r",
        "readings",
        "sensor_id",
        "ts",
        4,
    )
    assert r.schema == READING and s.partitions is None and s.timestamp is None
    assert str(plan.windows["r"]) == "r [ROWS 1000]" and "s" not in plan.windows
    assert [str(f) for f in plan.filters] == [
        "r.temperature > 30.0",
        "r.site IN ('a', 'b')",
        "r.humidity BETWEEN 0.1 AND 0.9",
        "s.region == 'north'",
    ]
    # ROWS windows do not commute with selections: r's filters stay above the window.
    assert [f.placement for f in plan.filters] == ["above_window"] * 3 + ["below_window"]
    assert plan.filters_on("r", "below_window") == ()
    assert [str(j) for j in plan.joins] == ["r.site = s.name"]
    assert plan.join_key == (ColumnRef("r", "site"), ColumnRef("s", "name"))
    assert [(c.name, str(c.source), c.type) for c in plan.output] == [
        ("sensor_id", "r.sensor_id", "long"),
        ("temperature", "r.temperature", "double"),
        ("region", "s.region", "string"),
    ]
    assert plan.output_schema["fields"] == [
        {"name": "sensor_id", "type": "long"},
        {"name": "temperature", "type": "double"},
        {"name": "region", "type": "string"},
    ]
    assert plan.output_schema["name"] == "sensor_alerts"
    fastavro.parse_schema(plan.output_schema)
    assert (plan.result_topic, plan.result_partitions) == ("alerts", 4)
    assert not plan.is_passthrough
    doc = json.loads(json.dumps(plan.to_json()))
    assert doc["streams"][0]["window"] == "r [ROWS 1000]"
    assert doc["filters"][0]["placement"] == "above_window"
    assert doc["join_key"] == ["r.site", "s.name"]


def test_passthrough_keeps_the_input_schema() -> None:
    plan = readings().into("copy").build()
    assert plan.is_passthrough
    assert plan.output_schema == READING and plan.output_schema is not READING
    assert [c.name for c in plan.output] == [f["name"] for f in READING["fields"]]
    assert plan.windows == {} and plan.filters == () and plan.joins == ()


def test_filters_or_windows_keep_the_schema_but_not_passthrough() -> None:
    plan = readings().window("r", range_ms=600_000).where(col("r.count") >= 2).into("o").build()
    assert not plan.is_passthrough and plan.output_schema == READING
    assert plan.filters[0].placement == "below_window"  # RANGE commutes with selection
    assert plan.filters[0].values == (2,)


def test_partitioned_rows_window() -> None:
    q = readings().window("r", rows=10, partition_by=["site"]).where(col("r.ok") == True)  # noqa: E712
    plan = q.into("o").build()
    assert plan.windows["r"].partition_by == ("site",)
    assert str(plan.windows["r"]) == "r [PARTITION BY site ROWS 10]"
    assert plan.filters[0].placement == "above_window"


def test_projection_of_one_stream_with_rename() -> None:
    plan = readings().select("r.site", heat="r.temperature", lvl="r.level").into("o").build()
    assert not plan.is_passthrough
    assert plan.output_schema["fields"] == [
        {"name": "site", "type": "string"},
        {"name": "heat", "type": "double"},
        {"name": "lvl", "type": LEVEL},
    ]


def test_default_output_prefixes_clashing_names() -> None:
    plan = two().join("r.sensor_id", "s.sensor_id").into("o").build()
    names = [c.name for c in plan.output]
    assert "r_sensor_id" in names and "s_sensor_id" in names and "sensor_id" not in names
    assert "temperature" in names and "region" in names
    fastavro.parse_schema(plan.output_schema)


def test_self_join_under_two_names_defines_the_enum_once() -> None:
    q = readings().stream("r2", topic="readings", schema=READING)
    plan = q.join("r.sensor_id", "r2.sensor_id").into("pairs").build()
    types = [f["type"] for f in plan.output_schema["fields"] if f["name"].endswith("level")]
    assert types == [LEVEL, "Level"]
    fastavro.parse_schema(plan.output_schema)


def test_join_key_is_the_class_shared_by_all_streams() -> None:
    q = two().stream("t", topic="owners", schema=OWNER)
    plan = q.join("r.site", "s.name").join("s.region", "t.region").into("o").build()
    assert plan.join_key is None  # no single column class reaches r, s and t
    q = two().stream("t", topic="owners", schema=OWNER)
    plan = q.join("r.site", "s.name").join("t.owner", "r.site").into("o").build()
    assert plan.join_key == (
        ColumnRef("r", "site"),
        ColumnRef("s", "name"),
        ColumnRef("t", "owner"),
    )


def test_enum_filters_and_bytes_constants() -> None:
    q = readings().where(col("r.level").isin(["HIGH"]), col("r.raw") != b"\x00")
    plan = q.into("o").build()
    assert plan.filters[0].values == ("HIGH",)
    assert plan.to_json()["filters"][1]["values"] == ["0x00"]


def test_named_enum_reference_inside_one_schema() -> None:
    schema = copy.deepcopy(READING)
    schema["fields"] += [
        {"name": "prev_level", "type": "Level"},
        {"name": "next_level", "type": "demo.Level"},
    ]
    plan = readings().stream("x", topic="x", schema=schema).join("r.site", "x.site")
    plan = plan.select(a="x.prev_level", b="x.next_level").into("o").build()
    assert [c.type for c in plan.output] == ["enum", "enum"]
    assert [f["type"] for f in plan.output_schema["fields"]] == [LEVEL, "Level"]


def bad_schema(field_type: object) -> dict:
    return {"type": "record", "name": "Bad", "fields": [{"name": "note", "type": field_type}]}


def stream_with(schema: object) -> Query:
    return Query("q").stream("x", topic="t", schema=schema)  # type: ignore[arg-type]


CASES: list[tuple[str, Callable[[], object], str]] = [
    ("empty query", lambda: Query("q").into("o").build(), "query 'q' declares no stream"),
    ("duplicate stream", lambda: readings(readings()), "stream 'r' is declared twice"),
    ("bad stream name", lambda: Query("q").stream("r.x", topic="t", schema=SITE), "'r.x'"),
    ("not a record", lambda: stream_with({"type": "string"}), "stream 'x': schema must be"),
    (
        "bad avro",
        lambda: stream_with(bad_schema("nosuch")),
        "stream 'x': invalid Avro schema (UnknownType: nosuch)",
    ),
    (
        "union",
        lambda: stream_with(bad_schema(["null", "string", "int"])),
        "field 'note': type a union",
    ),
    (
        "nullable record",
        lambda: stream_with(
            bad_schema(
                ["null", {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}]
            )  # fmt: skip
        ),
        "a nullable record is not supported",
    ),
    ("key missing", lambda: readings(key="nope"), "stream 'r': key field 'nope' not in schema"),
    (
        "key type",
        lambda: readings(key="temperature"),
        "key field 'temperature' is double, it must be one of bytes, enum, int",
    ),
    ("ts missing", lambda: readings(timestamp="when"), "timestamp field 'when' not in schema"),
    ("ts type", lambda: readings(timestamp="site"), "timestamp field 'site' is string"),
    ("ts float", lambda: readings(timestamp="humidity"), "timestamp field 'humidity' is float"),
    ("stream partitions", lambda: readings(partitions=0), "stream 'r': partitions must be"),
    ("bool partitions", lambda: readings(partitions=True), "stream 'r': partitions must be"),
    (
        "unknown stream",
        lambda: readings().where(col("x.a") > 1).into("o").build(),
        "filter x.a > 1: unknown stream 'x' in x.a (streams: r)",
    ),
    (
        "unknown field",
        lambda: readings().where(col("r.nope") > 1).into("o").build(),
        "stream 'r' has no field 'nope'",
    ),
    ("bad ref", lambda: col("temperature"), "'temperature' must look like 'stream.field'"),
    (
        "string vs number",
        lambda: readings().where(col("r.site") > 3).into("o").build(),
        "field r.site is string but 3 is int",
    ),
    (
        "number vs string",
        lambda: readings().where(col("r.temperature") == "hot").into("o").build(),
        "field r.temperature is double but 'hot' is str",
    ),
    (
        "bool vs number",
        lambda: readings().where(col("r.ok") == 1).into("o").build(),
        "field r.ok is boolean but 1 is int",
    ),
    (
        "number vs bool",
        lambda: readings().where(col("r.count") != True).into("o").build(),  # noqa: E712
        "field r.count is int but True is bool",
    ),
    (
        "ordering on enum",
        lambda: readings().where(col("r.level") > "LOW").into("o").build(),
        "> is not defined on enum field r.level",
    ),
    (
        "unknown symbol",
        lambda: readings().where(col("r.level") == "MID").into("o").build(),
        "'MID' is not a symbol of enum field r.level",
    ),
    (
        "between reversed",
        lambda: readings().where(col("r.humidity").between(0.9, 0.1)).into("o").build(),
        "r.humidity BETWEEN 0.9 AND 0.1: low bound 0.9 is above high bound 0.1",
    ),
    ("empty isin", lambda: col("r.site").isin(set()), "r.site IN (): the set is empty"),
    ("chained", lambda: 0.1 < col("r.humidity") < 0.9, "r.humidity used as a truth value"),
    ("not a filter", lambda: readings().where("r.x > 1"), "where() takes filters"),  # type: ignore[arg-type]
    ("rows 0", lambda: readings().window("r", rows=0), "window on stream 'r': rows size"),
    ("range < 0", lambda: readings().window("r", range_ms=-5), "window on stream 'r': range size"),
    ("rows float", lambda: readings().window("r", rows=1.5), "rows size must be a positive int"),  # type: ignore[arg-type]
    (
        "rows and range",
        lambda: readings().window("r", rows=5, range_ms=5),
        "window on stream 'r': give rows= or range_ms=, not both",
    ),
    (
        "no size",
        lambda: readings().window("r"),
        "window on stream 'r': give rows= (ROWS n) or range_ms=",
    ),
    (
        "two windows",
        lambda: readings().window("r", rows=5).window("r", rows=6),
        "stream 'r' already has a window: r [ROWS 5]",
    ),
    (
        "partitioned range",
        lambda: readings().window("r", range_ms=5, partition_by="site"),
        "window on stream 'r': PARTITION BY needs a ROWS window",
    ),
    (
        "range without timestamp",
        lambda: two().window("s", range_ms=1000).join("r.site", "s.name").into("o").build(),
        "stream 's' declares no timestamp field",
    ),
    (
        "window on unknown stream",
        lambda: readings().window("x", rows=5).into("o").build(),
        "window x [ROWS 5]: unknown stream 'x'",
    ),
    (
        "partition_by unknown",
        lambda: readings().window("r", rows=5, partition_by=["zone"]).into("o").build(),
        "PARTITION BY: stream 'r' has no field 'zone'",
    ),
    (
        "join types",
        lambda: two().join("r.site", "s.sensor_id").into("o").build(),
        "join r.site = s.sensor_id: incompatible types string and long",
    ),
    (
        "join int with double",
        lambda: two().join("r.temperature", "s.sensor_id").into("o").build(),
        "incompatible types double and long",
    ),
    (
        "join unknown field",
        lambda: two().join("r.site", "s.nope").into("o").build(),
        "join r.site = s.nope: stream 's' has no field 'nope'",
    ),
    (
        "self join same field",
        lambda: readings().join("r.site", "r.site").into("o").build(),
        "joins stream 'r' with itself on the same field",
    ),
    (
        "self join one stream",
        lambda: readings().join("r.site", "r.raw").into("o").build(),
        "joins stream 'r' with itself on two of its fields",
    ),
    (
        "join twice",
        lambda: two().join("r.site", "s.name").join("s.name", "r.site").into("o").build(),
        "join s.name = r.site: declared twice",
    ),
    ("no join", lambda: two().into("o").build(), "reads streams r, s but declares no join"),
    (
        "disconnected",
        lambda: (
            two()
            .stream("t", topic="owners", schema=OWNER)
            .stream("u", topic="owners", schema=OWNER)
            .join("r.site", "s.name")
            .join("t.region", "u.region")
            .into("o")
            .build()
        ),
        "streams not connected by joins: {r, s} | {t, u}",
    ),
    ("no result", lambda: readings().build(), "query 'sensor-alerts' has no result topic"),
    (
        "result is input",
        lambda: readings().into("readings").build(),
        "result topic 'readings' collides with input topic of stream 'r'",
    ),
    (
        "result collides",
        lambda: Query("q").stream("x", topic="a.b", schema=SITE).into("a_b").build(),
        "result topic 'a_b' collides with input topic of stream 'x' ('a.b')",
    ),
    ("result partitions", lambda: readings().into("o", partitions=0), "result topic 'o': part"),
    ("into twice", lambda: readings().into("o").into("p"), "result topic is already 'o'"),
    ("select unknown", lambda: readings().select("r.nope").into("o").build(), "field 'nope'"),
    ("select empty", lambda: readings().select(), "select() needs at least one column"),
    (
        "select clash",
        lambda: (
            two().join("r.site", "s.name").select("s.region", region="r.site").into("o").build()
        ),
        "output field 'region' would come from both s.region and r.site",
    ),
    (
        "select twice",
        lambda: readings().select("r.site").select("r.ok"),
        "select() is given twice",
    ),
]


@pytest.mark.parametrize(("build", "culprit"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_queries_name_the_culprit(build: Callable[[], object], culprit: str) -> None:
    with pytest.raises(QueryError) as info:
        build()
    assert culprit in str(info.value)


@pytest.mark.parametrize("topic", ["", ".", "..", "has space", "ü", "a/b", "x" * 250, 5])
def test_invalid_topic_names(topic: object) -> None:
    with pytest.raises(QueryError, match="invalid Kafka topic name"):
        Query("q").stream("x", topic=topic, schema=SITE)  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="result topic: invalid Kafka topic name"):
        readings().into(topic)  # type: ignore[arg-type]


def test_longest_valid_topic_name() -> None:
    assert readings().into("x" * 249).build().result_topic == "x" * 249


def test_micro_second_timestamps_are_rejected() -> None:
    schema = {
        "type": "record",
        "name": "M",
        "fields": [{"name": "t", "type": {"type": "long", "logicalType": "timestamp-micros"}}],
    }
    with pytest.raises(QueryError, match="timestamp field 't' is timestamp-micros"):
        Query("q").stream("m", topic="m", schema=schema, timestamp="t")


def test_one_list_of_aggregate_functions_and_of_scheduling_policies() -> None:
    """The builder, the aggregate stage and the CLI read the same lists of names."""
    from processors.cli import build_parser
    from processors.core.plan import AGGREGATE_FUNCS
    from processors.core.scheduling.config import POLICY_NAMES
    from processors.core.scheduling.policies import POLICIES
    from processors.stages import aggregate_stage

    assert aggregate_stage.FUNCS is AGGREGATE_FUNCS
    assert AGGREGATE_FUNCS == ("count", "sum", "avg", "min", "max")
    assert (*POLICIES, "off") == POLICY_NAMES
    parser = build_parser()
    for name in (*POLICY_NAMES, "query"):
        assert parser.parse_args(["control", "policy", "q", name]).policy == name
    for name in POLICY_NAMES:
        settings = {"latency_ms": 5.0} if name == "chain-flush" else {}
        settings |= {"gamma": 1.0} if name == "mixed" else {}
        q = Query("q").stream("r", topic="readings", schema=READING).into("out")
        assert q.schedule(name, **settings).build().scheduling_config.policy == name
