"""Avro schemas and one-record-per-message framing for external topics.

External topics carry one Avro record per Kafka message, framed one of two ways:

* **single-object encoding** (default, no registry): ``C3 01``, the 8-byte little-endian
  CRC-64-AVRO fingerprint of the writer schema's parsing canonical form, then the binary body.
  Readers find the writer schema by fingerprint in a :class:`SchemaStore`.
* **Confluent wire format** (when a schema registry is configured): byte ``0``, the 4-byte
  big-endian registry schema id, then the body; :class:`RegistryCodec` talks to the registry.

fastavro does the schema parsing, canonical forms, fingerprints and per-record encoding here;
the bulk columnar path lives in :mod:`topics.columnar`. Fingerprints are handled as unsigned
64-bit ints: the value whose little-endian bytes appear in the single-object header.
"""

from __future__ import annotations

import io
import json
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError
from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form

SINGLE_OBJECT_MARKER = b"\xc3\x01"
SINGLE_OBJECT_HEADER_LEN = 10
CONFLUENT_MAGIC = 0
CONFLUENT_HEADER_LEN = 5


class SchemaError(ValueError):
    """A schema is invalid, unknown, unsupported, or cannot be resolved; the text names it."""


def schemas_dir() -> Path:
    """Where streamon's .avsc files live: $STREAMON_SCHEMAS, else the repository's schemas/."""
    env = os.environ.get("STREAMON_SCHEMAS")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "schemas"


def schema_name(schema: dict) -> str:
    """Full name of a named schema (namespace.name), for messages and lookups."""
    name = str(schema.get("name", "?"))
    ns = schema.get("namespace")
    return name if "." in name or not ns else f"{ns}.{name}"


_parse_lock = threading.Lock()
_parsed_cache: dict[str, tuple[dict, int]] = {}


def _key(schema: dict) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def _parse(schema: dict) -> tuple[dict, int]:
    """fastavro-parsed schema and fingerprint, cached: parse_schema is too slow per message."""
    k = _key(schema)
    hit = _parsed_cache.get(k)
    if hit is not None:
        return hit
    try:
        parsed = fastavro.parse_schema(schema)
    except Exception as exc:  # fastavro raises several types for bad schemas
        raise SchemaError(f"invalid Avro schema {schema_name(schema)}: {exc}") from exc
    hexfp = _fastavro_fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO")
    entry = (parsed, int.from_bytes(bytes.fromhex(hexfp), "little"))
    with _parse_lock:
        _parsed_cache[k] = entry
    return entry


def parsed_schema(schema: dict) -> dict:
    """The fastavro-parsed form (for schemaless_reader/writer), validated and cached."""
    return _parse(schema)[0]


def fingerprint(schema: dict) -> int:
    """CRC-64-AVRO fingerprint of the schema's canonical form, as an unsigned int."""
    return _parse(schema)[1]


def load_schema(name_or_path: str) -> dict:
    """A schema by short name ("reading", "reading_v2") from :func:`schemas_dir`, or by path."""
    p = Path(name_or_path)
    if not (p.suffix == ".avsc" or os.sep in name_or_path or p.is_file()):
        p = schemas_dir() / f"{name_or_path}.avsc"
    try:
        schema = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise SchemaError(f"no schema {name_or_path!r} (looked for {p})") from exc
    except json.JSONDecodeError as exc:
        raise SchemaError(f"schema file {p} is not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise SchemaError(f"schema file {p} does not hold a named schema")
    _parse(schema)
    return schema


class SchemaStore:
    """Writer schemas by fingerprint: every .avsc in a directory plus any added at run time."""

    def __init__(self, directory: Path | None = None, load: bool = True) -> None:
        self._by_fp: dict[int, dict] = {}
        self._lock = threading.Lock()
        if load:
            d = directory or schemas_dir()
            for path in sorted(d.glob("*.avsc")) if d.is_dir() else []:
                self.add(load_schema(str(path)))

    def add(self, schema: dict) -> int:
        """Register a writer schema; returns its unsigned 64-bit fingerprint."""
        fp = fingerprint(schema)
        with self._lock:
            self._by_fp.setdefault(fp, schema)
        return fp

    def by_fingerprint(self, fp: int) -> dict:
        """The schema with this fingerprint (signed or unsigned 64-bit int accepted)."""
        schema = self._by_fp.get(int(fp) & 0xFFFFFFFFFFFFFFFF)
        if schema is None:
            raise SchemaError(f"unknown writer schema fingerprint 0x{int(fp) & (2**64 - 1):016x}")
        return schema

    def __contains__(self, fp: object) -> bool:
        return isinstance(fp, int) and (fp & 0xFFFFFFFFFFFFFFFF) in self._by_fp

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._by_fp))

    def __len__(self) -> int:
        return len(self._by_fp)


def single_object_header(schema: dict) -> bytes:
    return SINGLE_OBJECT_MARKER + fingerprint(schema).to_bytes(8, "little")


def _body(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed_schema(schema), record)
    return out.getvalue()


def decode_body(body: bytes, writer: dict, reader: dict) -> dict:
    """One Avro binary body written with ``writer``, resolved to ``reader`` by fastavro."""
    src = io.BytesIO(body)
    try:
        rec = fastavro.schemaless_reader(src, parsed_schema(writer), parsed_schema(reader))
    except SchemaResolutionError as exc:
        raise SchemaError(
            f"cannot read {schema_name(writer)} as {schema_name(reader)}: {exc}"
        ) from exc
    except Exception as exc:  # truncated data, bad utf-8, ... (fastavro raises many types)
        raise ValueError(f"cannot decode {schema_name(writer)} record: {exc!r}") from exc
    if src.tell() != len(body):
        raise ValueError(f"trailing bytes: {len(body) - src.tell()} after the record")
    return rec  # type: ignore[return-value]


def encode_single_object(schema: dict, record: dict) -> bytes:
    """One record as an Avro single-object encoded message."""
    return single_object_header(schema) + _body(schema, record)


def decode_single_object(data: bytes, reader_schema: dict, store: SchemaStore) -> dict:
    """One single-object message, read with the writer schema its header names, as reader_schema."""
    if len(data) < SINGLE_OBJECT_HEADER_LEN or data[:2] != SINGLE_OBJECT_MARKER:
        raise ValueError(f"not single-object encoded (marker {bytes(data[:2])!r})")
    writer = store.by_fingerprint(int.from_bytes(data[2:10], "little"))
    return decode_body(bytes(data[10:]), writer, reader_schema)


def confluent_header(schema_id: int) -> bytes:
    return struct.pack(">BI", CONFLUENT_MAGIC, schema_id)


class RegistryCodec:
    """Confluent wire format, with ids from a Confluent schema registry.

    The registry side (registration, id lookup) goes through confluent_kafka's
    ``SchemaRegistryClient`` (a ``mock://`` URL gives its in-process mock); framing and bodies are
    ours, byte-identical to confluent_kafka's AvroSerializer, so bulk decoding can skip the
    per-record deserializer. ``subject`` defaults to the record's full name (RecordNameStrategy);
    pass ``"<topic>-value"`` for the TopicNameStrategy that confluent's serializers use.
    """

    def __init__(self, registry: Any, subject: str | None = None, auto_register: bool = True):
        if isinstance(registry, str | dict):
            from confluent_kafka.schema_registry import SchemaRegistryClient

            conf = {"url": registry} if isinstance(registry, str) else registry
            registry = SchemaRegistryClient.new_client(conf)
        self.client = registry
        self.subject = subject
        self.auto_register = auto_register
        self._ids: dict[str, int] = {}
        self._schemas: dict[int, dict] = {}

    def schema_id(self, schema: dict) -> int:
        """Registry id of a writer schema (registered on first use when auto_register)."""
        k = _key(schema)
        sid = self._ids.get(k)
        if sid is None:
            from confluent_kafka.schema_registry import Schema

            _parse(schema)
            subject = self.subject or schema_name(schema)
            sr_schema = Schema(json.dumps(schema), "AVRO")
            if self.auto_register:
                sid = int(self.client.register_schema(subject, sr_schema))
            else:
                sid = int(self.client.lookup_schema(subject, sr_schema).schema_id)
            self._ids[k] = sid
            self._schemas[sid] = schema
        return sid

    def writer_schema(self, schema_id: int) -> dict:
        """Schema for a registry id; SchemaError if the registry does not know it."""
        schema = self._schemas.get(schema_id)
        if schema is None:
            try:
                schema = json.loads(self.client.get_schema(schema_id).schema_str)
            except Exception as exc:
                # only "not found" condemns the records; an unreachable registry must propagate
                # (the caller retries) rather than send good input to the dead-letter topic
                if getattr(exc, "http_status_code", None) != 404:
                    raise
                raise SchemaError(f"unknown schema id {schema_id} in registry: {exc}") from exc
            _parse(schema)
            self._schemas[schema_id] = schema
        return schema

    def header(self, schema: dict) -> bytes:
        return confluent_header(self.schema_id(schema))

    def encode(self, schema: dict, record: dict) -> bytes:
        return self.header(schema) + _body(schema, record)

    def decode(self, data: bytes, reader_schema: dict) -> dict:
        if len(data) < CONFLUENT_HEADER_LEN or data[0] != CONFLUENT_MAGIC:
            raise ValueError(f"not Confluent wire format (magic {bytes(data[:1])!r})")
        writer = self.writer_schema(int.from_bytes(data[1:5], "big"))
        return decode_body(bytes(data[5:]), writer, reader_schema)


# --- flat record layouts for the bulk codec -------------------------------------------------

PRIMITIVE_TYPES = ("boolean", "int", "long", "float", "double", "string", "bytes")


@dataclass(frozen=True, slots=True)
class FlatField:
    """One field of a flat record: its Avro type reduced to what the bulk kernels handle."""

    name: str
    type: str  # one of PRIMITIVE_TYPES or "enum"
    symbols: tuple[str, ...] = ()  # enum symbols
    enum_name: str = ""
    enum_default: str | None = None  # the enum's own default symbol (schema evolution)
    has_default: bool = False
    default: Any = None
    aliases: tuple[str, ...] = ()


def _field_type(rec: str, fname: str, t: Any, enums: dict[str, dict]) -> tuple[str, dict | None]:
    if isinstance(t, dict) and t.get("type") == "enum":
        enums[str(t["name"]).rsplit(".", 1)[-1]] = t
        return "enum", t
    base = t.get("type") if isinstance(t, dict) else t  # logical types ride on their base type
    if isinstance(base, str) and base in PRIMITIVE_TYPES:
        return base, None
    if isinstance(t, str) and t.rsplit(".", 1)[-1] in enums:  # reference to an enum defined above
        return "enum", enums[t.rsplit(".", 1)[-1]]
    raise SchemaError(
        f"schema {rec}: field '{fname}' has unsupported type {json.dumps(t)} "
        f"(bulk codec supports {', '.join(PRIMITIVE_TYPES)}, enum)"
    )


def flat_fields(schema: dict) -> list[FlatField]:
    """Fields of a flat record schema; SchemaError naming the field for anything unsupported."""
    _parse(schema)
    rec = schema_name(schema)
    if schema.get("type") != "record":
        raise SchemaError(f"schema {rec}: top level must be a record, not {schema.get('type')!r}")
    enums: dict[str, dict] = {}
    out: list[FlatField] = []
    for f in schema["fields"]:
        kind, enum = _field_type(rec, f["name"], f["type"], enums)
        out.append(
            FlatField(
                name=f["name"],
                type=kind,
                symbols=tuple(enum["symbols"]) if enum else (),
                enum_name=str(enum["name"]).rsplit(".", 1)[-1] if enum else "",
                enum_default=enum.get("default") if enum else None,
                has_default="default" in f,
                default=f.get("default"),
                aliases=tuple(f.get("aliases", ())),
            )
        )
    return out


PROMOTIONS = {
    ("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
    ("float", "double"), ("string", "bytes"), ("bytes", "string"),
}  # fmt: skip


@dataclass
class Resolution:
    """How each reader field is filled from one writer schema (the Avro resolution rules)."""

    writer_fields: list[FlatField] | None  # None: the writer is not flat (bulk kernels can't read)
    sources: list[int]  # per reader field: writer field index, or -1 to use the reader's default
    enum_maps: list[list[int] | None]  # per reader field: writer symbol -> reader index, -1 unknown
    error: str | None = None  # the schemas do not resolve: no record of this writer can be read


def resolve_flat(writer: dict, reader: dict, rfields: list[FlatField]) -> Resolution:
    """Match a writer schema to a flat reader schema, once per writer."""
    try:
        wfields: list[FlatField] | None = flat_fields(writer)
    except SchemaError:
        wfields = None
    res = Resolution(wfields, [], [])
    problems: list[str] = []
    wname, rname = schema_name(writer), schema_name(reader)
    names = {rname, rname.rsplit(".", 1)[-1], *reader.get("aliases", ())}
    if wname not in names and wname.rsplit(".", 1)[-1] not in names:
        problems.append(f"writer schema {wname} does not match reader schema {rname}")
    index = {f.name: i for i, f in enumerate(wfields or ())}
    for rf in rfields:
        w = next((index[a] for a in (rf.name, *rf.aliases) if a in index), -1)
        res.sources.append(w)
        res.enum_maps.append(None)
        if wfields is None:
            continue
        if w < 0:
            if not rf.has_default:
                problems.append(
                    f"reader field '{rf.name}' has no default and is missing in {wname}"
                )
            continue
        wf = wfields[w]
        if wf.type == "enum" and rf.type == "enum":
            if wf.enum_name != rf.enum_name:
                problems.append(f"field '{rf.name}': enum {wf.enum_name} is not {rf.enum_name}")
            pos = {sym: i for i, sym in enumerate(rf.symbols)}
            dflt = pos.get(rf.enum_default, -1) if rf.enum_default is not None else -1
            res.enum_maps[-1] = [pos.get(sym, dflt) for sym in wf.symbols]
        elif wf.type != rf.type and (wf.type, rf.type) not in PROMOTIONS:
            problems.append(f"field '{rf.name}': writer type {wf.type} cannot be read as {rf.type}")
    res.error = problems[0] if problems else None
    return res
