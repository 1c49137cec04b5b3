"""Arrays and maps passed through the bulk codec, differential against the apache ``avro`` package.

Records with arrays and maps (nested, of records, enums, fixed, unions) are encoded by apache's
writer (simple blocks) or by hand in Java's style (several blocks, negative counts with byte
sizes); the bulk codec decodes them, writes them back, and apache reads the same records.
"""

from __future__ import annotations

import io
import json
import random
import time
from typing import Any

import avro.io
import avro.schema
import numpy as np
import pytest

from processors.core.batch import VarColumn, null_column
from processors.core.query import col
from processors.core.schema_derivation import parse_fields
from topics.avro import SchemaError, SchemaStore, flat_fields, single_object_header
from topics.avro_bounds import DecodeLimits
from topics.columnar import RecordCodec

PRIMS = ["null", "boolean", "int", "long", "float", "double", "string", "bytes"]


class Gen:
    """Random item types and values; named types get fresh names."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.n = rng, 0

    def name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    def type(self, depth: int) -> Any:
        r = self.rng.random()
        if depth >= 3 or r < 0.35:
            return self.rng.choice(PRIMS)
        if r < 0.45:
            return {"type": "enum", "name": self.name("E"), "symbols": ["A", "B", "C"]}
        if r < 0.5:
            return {"type": "fixed", "name": self.name("F"), "size": self.rng.randint(0, 4)}
        if r < 0.65:
            fields = [{"name": f"f{i}", "type": self.type(depth + 1)}
                      for i in range(self.rng.randint(0, 3))]  # fmt: skip
            return {"type": "record", "name": self.name("R"), "fields": fields}
        if r < 0.75:
            inner = self.type(depth + 1)
            return inner if isinstance(inner, list) or inner == "null" else ["null", inner]
        return self.collection(depth + 1)

    def collection(self, depth: int) -> dict:
        if self.rng.random() < 0.5:
            return {"type": "array", "items": self.type(depth)}
        return {"type": "map", "values": self.type(depth)}

    def value(self, t: Any) -> Any:
        rng = self.rng
        if isinstance(t, list):
            return None if rng.random() < 0.3 else self.value(t[1 - t.index("null")])
        kind = t["type"] if isinstance(t, dict) else t
        if kind == "null":
            return None
        if kind == "boolean":
            return rng.random() < 0.5
        if kind in ("int", "long"):
            bits = 31 if kind == "int" else 63
            return rng.choice([0, -1, 1, 2**bits - 1, -(2**bits), rng.randint(-1000, 1000)])
        if kind in ("float", "double"):
            return rng.choice([0.0, 1.5, -2.25, 1e10])
        if kind == "string":
            return rng.choice(["", "x", "héllo", "日本", "a" * 200])
        if kind == "bytes":
            return bytes(rng.randrange(256) for _ in range(rng.randint(0, 5)))
        if kind == "enum":
            return rng.choice(t["symbols"])
        if kind == "fixed":
            return bytes(rng.randrange(256) for _ in range(t["size"]))
        if kind == "record":
            return {f["name"]: self.value(f["type"]) for f in t["fields"]}
        n = rng.choice([0, 1, 2, 3, 7])
        if kind == "array":
            return [self.value(t["items"]) for _ in range(n)]
        return {f"k{i}": self.value(t["values"]) for i in range(n)}


def _zigzag(v: int) -> bytes:
    z, out = (v << 1) ^ (v >> 63), bytearray()
    z &= (1 << 64) - 1
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def apache_body(t: Any, v: Any) -> bytes:
    out = io.BytesIO()
    avro.io.DatumWriter(avro.schema.parse(json.dumps(t))).write(v, avro.io.BinaryEncoder(out))
    return out.getvalue()


def java_style(t: Any, v: Any, rng: random.Random, named: dict) -> bytes:
    """``v`` as Java writers may write it: collections in several blocks, negative counts."""
    if isinstance(t, str) and t in named:
        t = named[t]
    if isinstance(t, dict) and "name" in t:
        named[t["name"]] = t
    if isinstance(t, list):
        branch = t.index("null") if v is None else 1 - t.index("null")
        return _zigzag(branch) + java_style(t[branch], v, rng, named)
    kind = t["type"] if isinstance(t, dict) else t
    if kind == "record":
        return b"".join(java_style(f["type"], v[f["name"]], rng, named) for f in t["fields"])
    if kind not in ("array", "map"):
        return apache_body({**t, "name": t["name"]} if isinstance(t, dict) else t, v)
    items = (
        [java_style(t["items"], x, rng, named) for x in v] if kind == "array"
        else [apache_body("string", k) + java_style(t["values"], x, rng, named)
              for k, x in v.items()]
    )  # fmt: skip
    out = bytearray()
    while items:
        take = rng.randint(1, len(items))
        block, items = items[:take], items[take:]
        if rng.random() < 0.6:
            out += _zigzag(-take) + _zigzag(sum(map(len, block)))
        else:
            out += _zigzag(take)
        out += b"".join(block)
    return bytes(out + b"\x00")


def pack(msgs: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(msgs) + 1, np.int64)
    np.cumsum([len(m) for m in msgs], out=offsets[1:])
    return np.frombuffer(b"".join(msgs), np.uint8), offsets


def apache_read(schema: Any, body: bytes) -> Any:
    s = avro.schema.parse(json.dumps(schema))
    return avro.io.DatumReader(s, s).read(avro.io.BinaryDecoder(io.BytesIO(body)))


def random_schema(seed: int) -> tuple[dict, Gen]:
    gen = Gen(random.Random(seed))
    fields = [{"name": "id", "type": "long"}]
    for i in range(gen.rng.randint(1, 4)):
        t: Any = gen.collection(1)
        if gen.rng.random() < 0.3:
            t = ["null", t] if gen.rng.random() < 0.5 else [t, "null"]
        fields.append({"name": f"c{i}", "type": t})
    fields.append({"name": "tail", "type": "string"})
    return {"type": "record", "name": "Rec", "fields": fields}, gen


def messages(schema: dict, gen: Gen, n: int) -> tuple[list[dict], list[bytes]]:
    recs = [{f["name"]: gen.value(f["type"]) for f in schema["fields"]} for _ in range(n)]
    header = single_object_header(schema)
    msgs = [
        header + (apache_body(schema, r) if k % 2 else java_style(schema, r, gen.rng, {}))
        for k, r in enumerate(recs)
    ]
    return recs, msgs


@pytest.mark.parametrize("seed", range(25))
def test_round_trip_through_apache(seed: int) -> None:
    schema, gen = random_schema(seed)
    recs, msgs = messages(schema, gen, 30)
    codec = RecordCodec(schema)
    res = codec.decode_many(*pack(msgs))
    assert res.errors == []
    assert list(res.columns["id"]) == [r["id"] for r in recs]
    for f in flat_fields(schema):
        if f.type in ("array", "map"):
            col = res.columns[f.name]
            assert isinstance(col, VarColumn) and not col.utf8
            for j, r in enumerate(recs):
                if r[f.name] is None:
                    assert f.nullable and res.columns[null_column(f.name)][j]
                else:
                    assert apache_read(f.collection_schema, col.value(j)) == apache_read(
                        f.collection_schema, apache_body(f.collection_schema, r[f.name])
                    )
    out, offsets = codec.encode_many(res.columns, len(recs))
    got = [bytes(out[offsets[i] : offsets[i + 1]]) for i in range(len(recs))]
    assert got == msgs  # the block sequences as written, verbatim
    hl = len(codec.header)
    for m, g in zip(msgs, got, strict=True):
        assert apache_read(schema, g[hl:]) == apache_read(schema, m[hl:])


def test_columns_built_in_python_are_written_and_read_by_apache() -> None:
    schema, gen = random_schema(7)
    recs, _ = messages(schema, gen, 12)
    codec = RecordCodec(schema)
    cols: dict[str, Any] = {"id": np.array([r["id"] for r in recs], np.int64)}
    cols["tail"] = VarColumn.from_values([r["tail"] for r in recs])
    for f in flat_fields(schema):
        if f.type in ("array", "map"):
            vals = [r[f.name] for r in recs]
            cols[f.name] = [b"" if v is None else apache_body(f.collection_schema, v) for v in vals]
            if f.nullable:
                cols[null_column(f.name)] = np.array([v is None for v in vals])
    out, offsets = codec.encode_many(cols, len(recs))
    hl = len(codec.header)
    for i, r in enumerate(recs):
        body = bytes(out[offsets[i] + hl : offsets[i + 1]])
        assert apache_read(schema, body) == apache_read(schema, apache_body(schema, r))


SIMPLE = {
    "type": "record",
    "name": "S",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "xs", "type": {"type": "array", "items": "null"}},
        {"name": "m", "type": {"type": "map", "values": "long"}},
    ],
}


def test_huge_block_counts_are_errors_at_once() -> None:
    codec = RecordCodec(SIMPLE)
    header = codec.header
    bad = [
        header + b"\x02" + _zigzag(2**62) + b"\x00" * 40,  # 2**62 null items in 42 bytes
        header + b"\x02" + _zigzag(-(2**62)) + _zigzag(3) + b"\x00" * 40,
        header + b"\x02\x00" + _zigzag(2**62) + b"\x02k\x02",
        header + b"\x02\x00" + _zigzag(-(2**63)) + _zigzag(3) + b"\x02k\x02",  # can't negate
    ]
    good = header + b"\x02" + _zigzag(2) + b"\x00" + _zigzag(-1) + _zigzag(3) + b"\x02k\x04\x00"
    t0 = time.perf_counter()
    res = codec.decode_many(*pack([*bad, good]))
    assert time.perf_counter() - t0 < 1.0
    assert [i for i, _ in res.errors] == [0, 1, 2, 3]
    whys = [why for _, why in res.errors]
    assert all("block count exceeds the bytes left" in why for why in whys), whys
    assert "field 'xs'" in res.errors[0][1] and "field 'm'" in res.errors[2][1]
    assert list(res.good) == [4]
    nulls = header + b"\x02" + apache_body(SIMPLE["fields"][1]["type"], [None] * 50) + b"\x00"
    res = codec.decode_many(*pack([nulls]))  # an honest array of nulls: 50 items in 2 bytes
    assert res.errors == [] and res.columns["xs"].value(0) == nulls[len(header) + 1 : -1]
    assert apache_read(SIMPLE, good[len(header) :]) == {"id": 1, "xs": [None, None], "m": {"k": 2}}


def test_garbage_gives_per_record_errors_and_nothing_apache_cannot_read() -> None:
    schema, gen = random_schema(3)
    _, msgs = messages(schema, gen, 60)
    codec = RecordCodec(schema)
    hl = len(codec.header)
    rng = random.Random(1)
    mutated = []
    for m in msgs * 5:
        b = bytearray(m)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(hl, len(b))] = rng.randrange(256)
        mutated.append(bytes(b[: rng.randint(hl, len(b))] if rng.random() < 0.3 else b))
    res = codec.decode_many(*pack(mutated))
    assert len(res.good) + len(res.errors) == len(mutated) and res.errors
    out, offsets = codec.encode_many(res.columns, len(res.good))
    for k, i in enumerate(res.good.tolist()):
        assert bytes(out[offsets[k] : offsets[k + 1]]) == mutated[i]
        apache_read(schema, mutated[i][hl:])  # what the codec accepts, apache reads


NODE = {
    "type": "record",
    "name": "Outer",
    "fields": [
        {"name": "tree", "type": {"type": "array", "items": {
            "type": "record", "name": "Node", "fields": [
                {"name": "v", "type": "int"},
                {"name": "kids", "type": {"type": "array", "items": "Node"}}]}}},
    ],
}  # fmt: skip


def test_nesting_and_item_limits() -> None:
    def tree(depth: int) -> list:
        return [{"v": depth, "kids": tree(depth - 1) if depth else []}]

    msgs = [single_object_header(NODE) + apache_body(NODE, {"tree": tree(d)}) for d in (3, 40)]
    res = RecordCodec(NODE, limits=DecodeLimits(max_nesting=32)).decode_many(*pack(msgs))
    assert list(res.good) == [0] and res.errors[0][0] == 1
    assert "max_nesting" in res.errors[0][1]
    res = RecordCodec(NODE, limits=DecodeLimits(max_collection_items=5)).decode_many(*pack(msgs))
    assert list(res.good) == [0] and "max_collection_items" in res.errors[0][1]


def test_resolution_needs_the_same_collection_schema() -> None:
    other = json.loads(json.dumps(SIMPLE).replace('"long"', '"int"'))
    store = SchemaStore()
    store.add(other)
    codec = RecordCodec(SIMPLE, store=store)
    msg = single_object_header(other) + apache_body(other, {"id": 1, "xs": [], "m": {"a": 1}})
    res = codec.decode_many(*pack([msg]))
    assert len(res.good) == 0 and "field 'm'" in res.errors[0][1]
    assert "pass through" in res.errors[0][1]
    # a writer without the field: the reader's default, encoded
    reader = {**SIMPLE, "fields": [*SIMPLE["fields"], {"name": "extra", "default": ["a", "b"],
              "type": {"type": "array", "items": "string"}}]}  # fmt: skip
    codec = RecordCodec(reader, store=SchemaStore())
    codec.store.add(SIMPLE)
    res = codec.decode_many(*pack([single_object_header(SIMPLE) + msg[len(msg) - 4 :]]))
    msg = single_object_header(SIMPLE) + apache_body(SIMPLE, {"id": 1, "xs": [None], "m": {}})
    res = codec.decode_many(*pack([msg]))
    assert res.errors == []
    assert apache_read({"type": "array", "items": "string"}, res.columns["extra"].value(0)) == [
        "a", "b"]  # fmt: skip


def test_encode_refuses_bytes_that_are_not_the_collection() -> None:
    codec = RecordCodec(SIMPLE)
    cols = {"id": np.array([1, 2], np.int32), "xs": [b"\x00", b"\x00"], "m": [b"\x00", b"\x02"]}
    with pytest.raises(ValueError, match="'m' value 1"):
        codec.encode_many(cols, 2)


def test_unknown_item_types_are_refused() -> None:
    bad = {"type": "record", "name": "B", "fields": [
        {"name": "xs", "type": {"type": "array", "items": "Nope"}}]}  # fmt: skip
    with pytest.raises(SchemaError):
        flat_fields(bad)


def test_queries_take_arrays_and_maps_as_pass_through_fields() -> None:
    schema = {**SIMPLE, "fields": [*SIMPLE["fields"], {"name": "o", "type": [
        "null", {"type": "map", "values": {"type": "array", "items": "string"}}]}]}  # fmt: skip
    fields = {f.name: f for f in parse_fields("s", schema)}
    assert fields["xs"].type == "array" and fields["m"].type == "map"
    assert fields["o"].type == "map" and fields["o"].nullable
    assert fields["o"].avro == {"type": "map", "values": {"type": "array", "items": "string"}}


# -- in queries: passed through only ------------------------------------------------------------


def _collections_query() -> Any:
    from processors.core.query import Query

    schema = {
        "type": "record",
        "name": "Tagged",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "ts", "type": "long"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "attrs", "type": {"type": "map", "values": "long"}},
        ],
    }
    q = Query("tagged")
    q.stream("r", topic="r-in", schema=schema, key="id", timestamp="ts", partitions=1)
    q.stream("s", topic="s-in", schema=schema, key="id", timestamp="ts", partitions=1)
    return q


@pytest.mark.parametrize(
    "use",
    [
        lambda q: q.join("r.id", "s.id").where(col("r.tags") == "x"),
        lambda q: q.join("r.tags", "s.tags"),
        lambda q: q.join("r.id", "s.id").group_by("r.attrs").aggregate(n="count"),
        lambda q: q.join("r.id", "s.id").group_by("r.id").aggregate(n=("count", "r.tags")),
    ],
    ids=["filter", "join", "group_by", "aggregate"],
)
def test_arrays_and_maps_are_refused_anywhere_but_the_output(use: Any) -> None:
    from processors.core.plan import QueryError

    with pytest.raises(QueryError, match="arrays, maps and fixed can only be"):
        use(_collections_query().into("out")).build()


def test_arrays_and_maps_are_passed_through() -> None:
    q = _collections_query().join("r.id", "s.id").select("r.id", "r.tags", attrs="s.attrs")
    plan = q.into("out").build()
    assert [f["name"] for f in plan.output_schema["fields"]] == ["id", "tags", "attrs"]


FIXED_SCHEMA = {
    "type": "record",
    "name": "Signed",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ts", "type": "long"},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "spare", "type": ["null", "Digest"], "default": None},
    ],
}


def test_fixed_fields_are_passed_through_exactly() -> None:
    """A schema with fixed fields (one naming the other's type, one nullable) is accepted; a
    filter query passes them through, and apache avro reads the results back unchanged."""
    from processors.core.batch import Batch
    from processors.core.plan import QueryError
    from processors.core.query import Query
    from processors.physical.runner import QueryRunner

    rng = random.Random(3)
    records = [
        {"id": i, "ts": i, "digest": rng.randbytes(4),
         "spare": None if i % 3 == 0 else rng.randbytes(4)}
        for i in range(30)
    ]  # fmt: skip
    parsed = avro.schema.parse(json.dumps(FIXED_SCHEMA))
    bodies = []
    for rec in records:
        out = io.BytesIO()
        avro.io.DatumWriter(parsed).write(rec, avro.io.BinaryEncoder(out))
        bodies.append(out.getvalue())
    header = single_object_header(FIXED_SCHEMA)
    codec = RecordCodec(FIXED_SCHEMA, store=SchemaStore(load=False))
    decoded = codec.decode_many(*pack([header + b for b in bodies]))
    assert decoded.errors == []
    query = Query("fx").stream("r", topic="in", schema=FIXED_SCHEMA, timestamp="ts")
    plan = query.where(col("r.id") >= 10).into("out").build()
    batch = Batch.inserts(decoded.columns, np.asarray(decoded.columns["ts"], np.int64))
    (result,) = QueryRunner(plan).push("r", batch)
    buf, offsets = RecordCodec(plan.output_schema, store=SchemaStore(load=False)).encode_many(
        result.columns, len(result)
    )
    back = [apache_read(plan.output_schema, bytes(buf[offsets[i] + 10 : offsets[i + 1]]))
            for i in range(len(result))]  # fmt: skip
    assert back == records[10:]
    with pytest.raises(QueryError, match="arrays, maps and fixed can only be"):
        Query("fx2").stream("r", topic="in", schema=FIXED_SCHEMA).where(
            col("r.digest") == b"abcd"
        ).into("out").build()
