"""Spark reads streamon topics: a real local Spark session (local[2]) against the real broker.

Oracles: the records the tests produce themselves (values, keys, partitions, timestamps, signs),
the broker's stored view of them read with a plain consumer and decoded by fastavro (not by the
bulk codec the data source uses), and Counters / numpy for the relation and the analytics.
"""

from __future__ import annotations

import io
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pytest
from confluent_kafka import Producer
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form

import spark_bridge as sb
from processors.commands.analyze import AnalyzeSpec, analyze
from processors.commands.publish import publish_batch
from processors.core.batch import Batch, VarColumn
from processors.runtime.producer import RecordProducer
from topics.admin import ensure_topics, high_watermarks, read_topic
from topics.avro import load_schema
from topics.specs import TopicSpec

ALL_TYPES = {
    "type": "record",
    "name": "SparkAllTypes",
    "namespace": "streamon.test",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "y", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "Hue", "symbols": ["RED", "GREEN", "BLUE"]}},
    ],
}
FIELDS = [f["name"] for f in ALL_TYPES["fields"]]
HUES = ["RED", "GREEN", "BLUE"]
PARTITIONS = 3
T0 = 1_750_000_000_000  # ms; timestamps the plain producer sets


@pytest.fixture(scope="module")
def spark() -> Any:
    session = sb.spark_session("local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


def _fastavro_message(schema: dict, record: dict) -> bytes:
    """Single-object encoding written with fastavro alone (independent of topics.avro)."""
    parsed = fastavro.parse_schema(json.loads(json.dumps(schema)))
    fp = fastavro_fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO")
    body = io.BytesIO()
    fastavro.schemaless_writer(body, parsed, record)
    return b"\xc3\x01" + bytes.fromhex(fp) + body.getvalue()


def _fastavro_read(schema: dict, value: bytes) -> dict:
    parsed = fastavro.parse_schema(json.loads(json.dumps(schema)))
    return fastavro.schemaless_reader(io.BytesIO(value[10:]), parsed, parsed)


def _record(rng: random.Random, i: int) -> dict:
    return {
        "b": rng.random() < 0.5,
        "i": rng.randint(-(2**31), 2**31 - 1),
        "l": rng.randint(-(2**63), 2**63 - 1),
        "f": float(np.float32(rng.uniform(-1e6, 1e6))),
        "d": rng.uniform(-1e9, 1e9),
        "s": rng.choice(["", "north", "ünïcødé ✓", "x" * 300]) + str(i),
        "y": bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12))),
        "e": rng.choice(HUES),
    }


def _ms(when: Any) -> int:
    return round(when.timestamp() * 1000)


def _row_key(row: dict) -> tuple:
    return tuple(row[f] for f in FIELDS)


def _spark_rows(df: Any) -> list[dict]:
    out = []
    for r in df.collect():
        d = r.asDict()
        d["y"] = bytes(d["y"])
        d["_key"] = None if d["_key"] is None else bytes(d["_key"])
        out.append(d)
    return out


def _produce_plain(bootstrap: str, topic: str, messages: list[tuple]) -> None:
    """(partition, key, value, timestamp_ms, headers) with a plain confluent-kafka producer."""
    failures: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for partition, key, value, ts, headers in messages:
        producer.produce(topic, value, key, partition=partition, timestamp=ts, headers=headers,
                         on_delivery=report)  # fmt: skip
    assert producer.flush(30) == 0 and not failures, failures


@pytest.fixture(scope="module")
def known_topic(bootstrap: str) -> tuple[str, Counter]:
    """A 3-partition topic: 600 records by streamon's bulk publisher (keyed, murmur2), 90 by a
    plain producer (explicit partitions and timestamps, some without keys, three deletes).
    Returns the topic and the multiset of (record, key, sign) that was produced."""
    topic = f"it-spark-known-{random.getrandbits(32):08x}"
    ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS)])
    rng = random.Random(6)
    produced: Counter = Counter()
    bulk = [_record(rng, i) for i in range(600)]
    keys = [str(i % 37).encode() for i in range(600)]
    columns = {
        "b": np.array([r["b"] for r in bulk]),
        "i": np.array([r["i"] for r in bulk], np.int32),
        "l": np.array([r["l"] for r in bulk], np.int64),
        "f": np.array([r["f"] for r in bulk], np.float32),
        "d": np.array([r["d"] for r in bulk], np.float64),
        "s": VarColumn.from_values([r["s"] for r in bulk]),
        "y": VarColumn.from_values([r["y"] for r in bulk], utf8=False),
        "e": np.array([HUES.index(r["e"]) for r in bulk], np.int32),
    }
    batch = Batch.inserts(columns, key=VarColumn.from_values(keys, utf8=False))
    publish_batch(bootstrap, topic, batch, ALL_TYPES)
    produced.update((_row_key(r), k, 1) for r, k in zip(bulk, keys, strict=True))
    plain = []
    for i in range(90):
        rec = _record(rng, 1000 + i)
        key = None if i % 3 == 0 else f"plain-{i}".encode()
        sign = -1 if i in (10, 50, 80) else 1
        headers = [("streamon.sign", b"-1")] if sign < 0 else [("other", b"x")] if i == 7 else []
        plain.append((i % PARTITIONS, key, _fastavro_message(ALL_TYPES, rec), T0 + i, headers))
        produced[(_row_key(rec), key, sign)] += 1
    _produce_plain(bootstrap, topic, plain)
    return topic, produced


def test_a_known_topic_reads_back_with_exactly_its_rows_and_values(
    spark: Any, bootstrap: str, known_topic: tuple[str, Counter]
) -> None:
    topic, produced = known_topic
    df = sb.read_topic(spark, topic, bootstrap, schema=ALL_TYPES)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("b", "boolean"), ("i", "int"), ("l", "bigint"), ("f", "float"), ("d", "double"),
        ("s", "string"), ("y", "binary"), ("e", "string"), ("_topic", "string"),
        ("_partition", "int"), ("_offset", "bigint"), ("_timestamp", "timestamp"),
        ("_sign", "tinyint"), ("_key", "binary"),
    ]  # fmt: skip
    rows = _spark_rows(df)
    assert len(rows) == sum(produced.values()) == 690
    assert Counter((_row_key(r), r["_key"], r["_sign"]) for r in rows) == produced
    # metadata against the broker's stored view (plain consumer, fastavro decoding)
    stored = read_topic(bootstrap, topic)
    by_position = {(r["_partition"], r["_offset"]): r for r in rows}
    assert len(by_position) == len(stored) == 690
    for rec in stored:
        row = by_position[(rec.partition, rec.offset)]
        assert row["_topic"] == topic
        assert _row_key(row) == _row_key(_fastavro_read(ALL_TYPES, rec.value))
        assert row["_key"] == rec.key
        assert _ms(row["_timestamp"]) == rec.timestamp_ms
        assert row["_sign"] == (-1 if ("streamon.sign", b"-1") in rec.headers else 1)
    # without a schema option, the writer schema of the first record is found by fingerprint
    # in schemas/ (none there for this test schema): the error says so
    with pytest.raises(Exception, match="pass the reader schema as option schema"):
        sb.read_topic(spark, topic, bootstrap)


def test_an_offset_range_reads_exactly_that_range(
    spark: Any, bootstrap: str, known_topic: tuple[str, Counter]
) -> None:
    topic, _ = known_topic
    ends = high_watermarks(bootstrap, topic)
    starting, ending = {0: 5, 2: 0}, {0: 37, 2: 4}
    df = sb.read_topic(spark, topic, bootstrap, schema=ALL_TYPES, partitions=[0, 2],
                       starting=starting, ending=ending)  # fmt: skip
    got = sorted((r["_partition"], r["_offset"], _row_key(r)) for r in _spark_rows(df))
    want = sorted(
        (r.partition, r.offset, _row_key(_fastavro_read(ALL_TYPES, r.value)))
        for r in read_topic(bootstrap, topic)
        if r.partition in starting and starting[r.partition] <= r.offset < ending[r.partition]
    )
    assert got == want and len(got) == 32 + 4
    # start only: to the end offset of the partition, taken when the DataFrame is loaded
    tail = sb.read_topic(spark, topic, bootstrap, schema=ALL_TYPES, partitions=[1],
                         starting={1: ends[1] - 3})  # fmt: skip
    assert sorted(r["_offset"] for r in _spark_rows(tail)) == [ends[1] - 3, ends[1] - 2,
                                                               ends[1] - 1]  # fmt: skip
    with pytest.raises(Exception, match="past its end offset"):
        sb.read_topic(spark, topic, bootstrap, schema=ALL_TYPES, ending={0: ends[0] + 1})
    with pytest.raises(Exception, match="no partitions \\[7\\]"):
        sb.read_topic(spark, topic, bootstrap, schema=ALL_TYPES, partitions=[7])


@pytest.fixture(scope="module")
def signed_topic(bootstrap: str) -> tuple[str, Counter, list[tuple[int, int, int, float]]]:
    """A result-like topic of readings written as the sink writes them: inserts, and deletes
    of earlier rows with a sign header. Returns the topic, the expected net relation and the
    (sensor, sign, ts, temperature) changes in order."""
    topic = f"it-spark-signed-{random.getrandbits(32):08x}"
    ensure_topics(bootstrap, [TopicSpec(topic, 2)])
    schema = load_schema("reading")
    rng = random.Random(11)
    live: list[tuple] = []
    net: Counter = Counter()
    changes = []
    rows, signs = [], []
    for _ in range(1500):
        if live and rng.random() < 0.35:
            row = live.pop(rng.randrange(len(live)))
            sign = -1
        else:
            # a small domain, so equal rows (multiplicity > 1) occur
            row = (rng.randrange(20), T0 + rng.randrange(50) * 1000, float(rng.randrange(5)),
                   0.5, rng.choice(["a", "b"]), True)  # fmt: skip
            live.append(row)
            sign = 1
        net[row] += sign
        rows.append(row)
        signs.append(sign)
        changes.append((row[0], sign, row[1], row[2]))
    cols = list(zip(*rows, strict=True))
    batch = Batch(
        {
            "sensor_id": np.array(cols[0], np.int64),
            "ts": np.array(cols[1], np.int64),
            "temperature": np.array(cols[2], np.float64),
            "humidity": np.array(cols[3], np.float32),
            "site": VarColumn.from_values(list(cols[4])),
            "ok": np.array(cols[5], np.bool_),
        },
        np.array(signs, np.int8),
        np.array(cols[1], np.int64),
    )
    from topics.columnar import RecordCodec

    buf, offsets = RecordCodec(schema).encode_many(batch.columns, len(batch))
    producer = RecordProducer(bootstrap)
    try:  # one partition keeps the order (deletes after their inserts); the sink's own call
        producer.produce_many(topic, buf, offsets, partition=1, signs=batch.sign)
    finally:
        producer.close()
    return topic, +net, changes


def test_the_net_relation_of_a_signed_stream_is_inserts_minus_deletes(
    spark: Any, bootstrap: str, signed_topic: tuple
) -> None:
    topic, expected, _ = signed_topic
    df = sb.read_topic(spark, topic, bootstrap, schema="reading")
    net = sb.net_relation(df)
    cols = ["sensor_id", "ts", "temperature", "humidity", "site", "ok"]
    counted = {tuple(r[c] for c in cols): r["_count"] for r in net.collect()}
    assert counted == dict(expected)
    assert max(expected.values()) > 1  # the multiset case is exercised
    expanded = Counter(tuple(r[c] for c in cols) for r in sb.expand(net).collect())
    assert expanded == expected
    # a range that starts after some inserts has rows with negative counts: expand refuses
    partial = sb.read_topic(spark, topic, bootstrap, schema="reading", starting={1: 700})
    with pytest.raises(Exception, match="more deletes than inserts"):
        sb.expand(sb.net_relation(partial)).collect()


def test_key_aggregates_over_a_time_range_are_signed(
    spark: Any, bootstrap: str, signed_topic: tuple
) -> None:
    topic, _, changes = signed_topic
    df = sb.read_topic(spark, topic, bootstrap, schema="reading")
    since, until = T0 + 10_000, T0 + 30_000
    table = sb.key_aggregates(df, ["sensor_id"], ["temperature"], since=since, until=until,
                              time_column="ts")  # fmt: skip
    want: dict[int, list] = {}
    for sensor, sign, ts, temp in changes:
        if since <= ts < until:
            w = want.setdefault(sensor, [0, 0, 0, 0.0])
            w[0 if sign > 0 else 1] += 1
            w[2] += sign
            w[3] += sign * temp
    got = {r["sensor_id"]: [r["inserts"], r["deletes"], r["count"], r["sum_temperature"]]
           for r in table.collect()}  # fmt: skip
    assert got == want
    # no key: one row over the whole range, every numeric field summed (net)
    (total,) = sb.key_aggregates(df, [], since=since, until=until, time_column="ts").collect()
    assert total["count"] == sum(w[2] for w in want.values())
    assert total["sum_temperature"] == sum(w[3] for w in want.values())
    assert total["sum_sensor_id"] == sum(s * sign for s, sign, ts, _ in changes
                                         if since <= ts < until)  # fmt: skip


STATS_BASE = dict(
    worker_id="w1", query="q1", stage="sink", agent="sink", scope="AGENT", partition=-1,
    partitions="[0]", window_start_ms=0, window_end_ms=0, tuples_in=0, tuples_out=0, batches=0,
    busy_ns=1, backlog_tuples=0, backlog_bytes=0, latency_ms_avg=0.0, latency_ms_max=0.0,
    plan="{}", events="[]",
)  # fmt: skip


@pytest.fixture(scope="module")
def stats_topic(bootstrap: str) -> tuple[str, list[dict]]:
    topic = f"it-spark-stats-{random.getrandbits(32):08x}"
    ensure_topics(bootstrap, [TopicSpec(topic, 1)])
    rng = random.Random(3)
    records = []
    for s in range(40):
        batches = rng.randrange(0, 6)
        avg = rng.uniform(1, 50) if batches else 0.0
        records.append(dict(STATS_BASE, window_end_ms=T0 + 1000 * s, batches=batches,
                            tuples_out=10 * batches, latency_ms_avg=avg,
                            latency_ms_max=avg * 1.5))  # fmt: skip
    join = {
        "partition": 2,
        "pipeline": "r1",
        "at_delta": 900,
        "time_ms": T0 + 5500,
        "from": ["r2", "r3"],
        "to": ["r3", "r2"],
        "position": 0,
        "reason": "violation",
    }
    filt = {
        "partition": 0,
        "at_tuple": 1200,
        "time_ms": T0 + 2500,
        "from": ["f0", "f1"],
        "to": ["f1", "f0"],
        "position": 0,
        "reason": "violation",
    }
    prio = {
        "kind": "priorities",
        "time_ms": T0 + 9100,
        "policy": "chain",
        "from": [["a"]],
        "to": [["b"], ["a"]],
        "plan_version": 2,
    }
    records += [
        dict(STATS_BASE, agent="mjoin", stage="mjoin", window_end_ms=T0 + 6000,
             events=json.dumps([join])),
        dict(STATS_BASE, agent="filter", stage="filter", window_end_ms=T0 + 3000,
             events=json.dumps([filt, {"partition": 1, "unreported": 4}])),
        dict(STATS_BASE, agent="scheduler", stage="scheduler", window_end_ms=T0 + 10_000,
             events=json.dumps([prio])),
        dict(STATS_BASE, query="other", batches=3, latency_ms_avg=999.0, latency_ms_max=999.0,
             events=json.dumps([filt])),
    ]  # fmt: skip
    schema = load_schema("stats")
    _produce_plain(bootstrap, topic, [(0, None, _fastavro_message(schema, r), T0, [])
                                      for r in records])  # fmt: skip
    return topic, records


def test_latency_distribution_and_plan_change_timeline_from_stats(
    spark: Any, bootstrap: str, stats_topic: tuple[str, list[dict]]
) -> None:
    topic, records = stats_topic
    stats = sb.read_topic(spark, topic, bootstrap)  # schema found by fingerprint: stats.avsc
    sinks = [r for r in records if r["query"] == "q1" and r["agent"] == "sink" and r["batches"]]
    avgs = np.array([r["latency_ms_avg"] for r in sinks])
    weights = np.array([r["batches"] for r in sinks])
    (row,) = sb.latency_distribution(stats, "q1").collect()
    assert row["windows"] == len(sinks) and row["batches"] == weights.sum()
    assert row["tuples_out"] == 10 * weights.sum()
    assert row["mean_ms"] == pytest.approx(float((avgs * weights).sum() / weights.sum()))
    for q, name in ((50, "p50_ms"), (90, "p90_ms"), (99, "p99_ms")):
        assert row[name] == pytest.approx(float(np.percentile(avgs, q)))
    assert row["max_ms"] == pytest.approx(max(r["latency_ms_max"] for r in sinks))
    changes = sb.plan_changes(stats, "q1").collect()
    assert [(c["kind"], c["agent"], c["partition"], c["subject"], c["at"]) for c in changes] == [
        ("filter_order", "filter", 0, "filter", 1200),
        ("unreported", "filter", 1, "filter", None),
        ("join_order", "mjoin", 2, "r1", 900),
        ("priorities", "scheduler", None, "scheduler", None),
    ]
    assert json.loads(changes[2]["from"]) == ["r2", "r3"]
    assert json.loads(changes[2]["event"])["reason"] == "violation"
    assert _ms(changes[0]["time"]) == T0 + 2500
    assert _ms(changes[1]["time"]) == T0 + 3000  # no time_ms: the report's


def test_undecodable_records_are_counted_and_skipped_or_fail_the_read(
    spark: Any, bootstrap: str
) -> None:
    topic = f"it-spark-bad-{random.getrandbits(32):08x}"
    ensure_topics(bootstrap, [TopicSpec(topic, 1)])
    schema = load_schema("reading")
    rng = random.Random(1)
    good = [(rng.randrange(100), T0 + i, 1.5 * i, 0.25, "lab", True) for i in range(20)]
    fields = ["sensor_id", "ts", "temperature", "humidity", "site", "ok"]
    values = [_fastavro_message(schema, dict(zip(fields, g, strict=True))) for g in good]
    unknown = b"\xc3\x01" + b"\x01" * 8 + values[0][10:]  # a writer schema nobody knows
    bad = {
        3: b"not avro at all",
        8: values[8][:-3],  # truncated
        12: unknown,
        15: None,  # a tombstone
    }
    messages, expected = [], []
    for i, value in enumerate(values):
        if i in bad:
            messages.append((0, None, bad[i], T0 + i, []))
        elif i == 17:
            messages.append((0, None, value, T0 + i, [("streamon.sign", b"maybe")]))
        else:
            messages.append((0, None, value, T0 + i, []))
            expected.append(good[i])
    _produce_plain(bootstrap, topic, messages)
    sb.clear_skipped_records(spark)
    df = sb.read_topic(spark, topic, bootstrap, schema="reading", on_bad_record="skip")
    got = [tuple(r[f] for f in fields) for r in df.orderBy("_offset").collect()]
    assert got == expected
    assert df.count() == len(expected)  # a second action does not count the skips twice
    report = sb.skipped_records(spark, topic)
    assert report.total == 5
    ((offset3, reason3), (offset8, reason8), (offset12, reason12), (offset15, reason15),
     (offset17, reason17)) = report.ranges[0].samples  # fmt: skip
    assert (offset3, offset8, offset12, offset15, offset17) == (3, 8, 12, 15, 17)
    assert "not single-object encoded" in reason3
    assert "truncated" in reason8 or "past the end" in reason8
    assert "unknown writer schema fingerprint" in reason12
    assert "null value" in reason15
    assert "streamon.sign" in reason17
    assert f"{topic}[0]" in str(report)
    failing = sb.read_topic(spark, topic, bootstrap, schema="reading")  # onBadRecord=fail
    with pytest.raises(Exception, match=rf"record does not decode: {topic}\[0\] offset 3: not"):
        failing.collect()


def test_streamon_analyze_prints_and_writes_the_tables(
    spark: Any, bootstrap: str, signed_topic: tuple, stats_topic: tuple, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    topic, expected, _ = signed_topic
    spec = AnalyzeSpec(topic=topic, schema="reading", query_name="q1", keys=["site"],
                       stats_topic=stats_topic[0], out=tmp_path / "out")  # fmt: skip
    lines: list[str] = []
    result = analyze(spark, spec, bootstrap, say=lines.append)
    assert result.net_rows == len(expected) and result.net_total == sum(expected.values())
    assert result.records == 1500 and result.inserts - result.deletes == sum(expected.values())
    by_site = dict(zip(result.aggregates["site"], result.aggregates["count"], strict=True))
    assert by_site == {s: sum(n for row, n in expected.items() if row[4] == s) for s in "ab"}
    assert int(result.latency["windows"].iloc[0]) > 0
    assert list(result.changes["kind"]) == ["filter_order", "unreported", "join_order",
                                            "priorities"]  # fmt: skip
    assert any("net relation" in line for line in lines)
    names = {p.name for p in result.written}
    assert {"net_relation", "key_aggregates.parquet", "key_aggregates.csv", "latency.csv",
            "plan_changes.parquet", "latency.png", "plan_changes.png",
            "key_aggregates.png"} <= names  # fmt: skip
    assert all(p.exists() for p in result.written)
    assert spark.read.parquet(str(tmp_path / "out" / "net_relation")).count() == len(expected)


NULLABLE = {
    "type": "record", "name": "SparkNullable", "namespace": "streamon.test",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "s", "type": ["null", "string"]},
        {"name": "h", "type": ["null", {"type": "fixed", "name": "Tag4", "size": 4}]},
        {"name": "loc", "type": {"type": "record", "name": "Where", "fields": [
            {"name": "lat", "type": ["null", "double"]}, {"name": "n", "type": "int"}]}},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "amt", "type": ["null", {"type": "bytes", "logicalType": "decimal",
                                          "precision": 9, "scale": 2}]},
    ],
}  # fmt: skip


def test_nullable_nested_fixed_and_logical_fields_read_through_spark(
    spark: Any, bootstrap: str
) -> None:
    import datetime as dt
    import decimal

    topic = f"it-spark-nulls-{random.getrandbits(32):08x}"
    ensure_topics(bootstrap, [TopicSpec(topic, 1)])
    rng = random.Random(14)
    recs = []
    for i in range(200):
        null = rng.random() < 0.3
        recs.append({
            "id": i, "s": None if null else f"s{i}", "h": None if null else bytes([i % 256] * 4),
            "loc": {"lat": None if rng.random() < 0.3 else i / 4, "n": i},
            "day": None if null else dt.date(2020, 1, 1) + dt.timedelta(days=i),
            "ts": None if null else dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
            + dt.timedelta(milliseconds=i * 1001),
            "amt": None if null else decimal.Decimal(i * 7 - 300) / 100,
        })  # fmt: skip
    values = [_fastavro_message(NULLABLE, r) for r in recs]
    _produce_plain(bootstrap, topic, [(0, None, v, T0 + i, []) for i, v in enumerate(values)])
    df = sb.read_topic(spark, topic, bootstrap, schema=NULLABLE)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields][:7] == [
        ("id", "bigint"), ("s", "string"), ("h", "binary"), ("loc", "struct<lat:double,n:int>"),
        ("day", "date"), ("ts", "timestamp"), ("amt", "decimal(9,2)"),
    ]  # fmt: skip
    got = {}
    for row in df.collect():
        d = row.asDict(recursive=True)
        d["h"] = None if d["h"] is None else bytes(d["h"])
        d["ts"] = None if d["ts"] is None else _ms(d["ts"])
        got[d["id"]] = {k: d[k] for k in NULLABLE_NAMES}
    want = {}
    for v in values:  # the oracle: fastavro's reading of the stored bytes
        r = _fastavro_read(NULLABLE, v)
        r["ts"] = None if r["ts"] is None else _ms(r["ts"])
        want[r["id"]] = r
    assert got == want
    nulls = sum(r["loc"]["lat"] is None for r in recs)
    assert df.filter("loc.lat IS NULL").count() == nulls  # a struct field in Spark SQL
    assert df.filter("s IS NULL").count() == sum(r["s"] is None for r in recs)


NULLABLE_NAMES = [f["name"] for f in NULLABLE["fields"]]
