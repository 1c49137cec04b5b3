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
import time
from collections.abc import Iterator
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


ENV_SCHEMAS = "STREAMON_SCHEMAS"


def project_schemas_dir() -> Path:
    """streamon's own schemas/ folder (stats, control, dead letters, the examples)."""
    return Path(__file__).resolve().parents[1] / "schemas"


def schema_path() -> list[Path]:
    """Folders searched for .avsc files, in order: each of $STREAMON_SCHEMAS (os.pathsep
    separated), then the project's schemas/. A configured registry is searched after these."""
    extra = [Path(d).expanduser() for d in os.environ.get(ENV_SCHEMAS, "").split(os.pathsep)]
    out: list[Path] = []
    for d in [*(d for d in extra if str(d).strip() and str(d) != "."), project_schemas_dir()]:
        if d not in out:
            out.append(d)
    return out


def schemas_dir() -> Path:
    """The first folder of the schema path: $STREAMON_SCHEMAS's first, else schemas/."""
    return schema_path()[0]


def fingerprint_hex(fp: int) -> str:
    """A fingerprint as every streamon message prints it: the hex of the 8 bytes that follow
    ``C3 01`` in a single-object header, in wire order (CRC-64-AVRO is little-endian). This is
    what fastavro's ``fingerprint``, the apache ``avro`` package's ``Schema.fingerprint()`` and
    Java's ``SchemaNormalization.parsingFingerprint("CRC-64-AVRO", s)`` give as bytes."""
    return (int(fp) & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little").hex()


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


def _is_path(name_or_path: str) -> bool:
    p = Path(name_or_path)
    return p.suffix == ".avsc" or os.sep in name_or_path or p.is_file()


def _read_schema_file(p: Path) -> dict:
    try:
        schema = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise SchemaError(f"schema file {p} is not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise SchemaError(f"schema file {p} does not hold a named schema")
    _parse(schema)
    return schema


def _registry_client(registry: Any) -> Any:
    if isinstance(registry, str | dict):
        from confluent_kafka.schema_registry import SchemaRegistryClient

        return SchemaRegistryClient.new_client(
            {"url": registry} if isinstance(registry, str) else registry
        )
    return registry.client if isinstance(registry, RegistryCodec) else registry


def _registry_name(registry: Any) -> str:
    if isinstance(registry, str):
        return registry
    return "the schema registry"


def load_schema(name_or_path: str, registry: Any = None) -> dict:
    """A schema by path, or by short name ("reading") from the first folder of
    :func:`schema_path` that has ``NAME.avsc``, then (with ``registry``: a URL, client or
    :class:`RegistryCodec`) the latest version of the registry subject NAME."""
    if _is_path(name_or_path):
        p = Path(name_or_path)
        try:
            return _read_schema_file(p)
        except FileNotFoundError as exc:
            raise SchemaError(f"no schema {name_or_path!r} (looked for {p})") from exc
    looked = [d / f"{name_or_path}.avsc" for d in schema_path()]
    for p in looked:
        if p.is_file():
            return _read_schema_file(p)
    where = ", ".join(str(p) for p in looked)
    if registry is not None:
        try:
            found = _registry_client(registry).get_latest_version(name_or_path)
        except Exception as exc:  # not found, or unreachable: both end the search here
            where += f", and subject {name_or_path!r} in {_registry_name(registry)} ({exc})"
        else:
            schema = json.loads(found.schema.schema_str)
            _parse(schema)
            return schema
    raise SchemaError(
        f"no schema {name_or_path!r} (looked for {where}; {ENV_SCHEMAS} adds folders)"
    )


class SchemaStore:
    """Writer schemas by fingerprint: every .avsc on the schema path, plus any added at run time.

    A fingerprint it does not know makes it rescan the folders (a schema file added while a
    worker runs is found without a restart; at most once per ``rescan_s``), then ask
    ``registry`` if given (every version of every subject, fingerprinted once).
    """

    def __init__(
        self,
        directory: Path | None = None,
        load: bool = True,
        registry: Any = None,
        rescan_s: float = 5.0,
    ) -> None:
        self._by_fp: dict[int, dict] = {}
        self._lock = threading.Lock()
        self._dirs: list[Path] = ([directory] if directory else schema_path()) if load else []
        self._registry = registry
        self._registry_seen: set[tuple[str, int]] = set()
        self._rescan_s = rescan_s
        self._scanned_at = 0.0
        self._scan(first=True)

    def _scan(self, first: bool = False) -> None:
        self._scanned_at = time.monotonic()
        for d in self._dirs:
            for path in sorted(d.glob("*.avsc")) if d.is_dir() else []:
                try:
                    self.add(_read_schema_file(path))
                except (OSError, SchemaError):
                    if first:  # a broken file is an error at start; later, a file half-written
                        raise

    def _ask_registry(self) -> None:
        client = _registry_client(self._registry)
        for subject in client.get_subjects():
            for version in client.get_versions(subject):
                if (subject, version) in self._registry_seen:
                    continue
                found = client.get_version(subject, version)
                self.add(json.loads(found.schema.schema_str))
                self._registry_seen.add((subject, version))

    def add(self, schema: dict) -> int:
        """Register a writer schema; returns its unsigned 64-bit fingerprint."""
        fp = fingerprint(schema)
        with self._lock:
            self._by_fp.setdefault(fp, schema)
        return fp

    def by_fingerprint(self, fp: int) -> dict:
        """The schema with this fingerprint (signed or unsigned 64-bit int accepted)."""
        fp = int(fp) & 0xFFFFFFFFFFFFFFFF
        schema = self._by_fp.get(fp)
        if schema is None and time.monotonic() - self._scanned_at >= self._rescan_s:
            self._scan()
            if self._registry is not None:
                self._ask_registry()
            schema = self._by_fp.get(fp)
        if schema is None:
            raise SchemaError(self.unknown_message(fp))
        return schema

    def unknown_message(self, fp: int) -> str:
        """Why a fingerprint is unknown: where the store looked, and how to add the schema."""
        where = [str(d) for d in self._dirs]
        if self._registry is not None:
            where.append(_registry_name(self._registry))
        head = f"unknown writer schema fingerprint {fingerprint_hex(fp)} (the 8 bytes after C3 01"
        if not where:
            return f"{head}; this reader knows only the schemas it was given)"
        return (
            f"{head}; looked in {', '.join(where)}): put the writer's .avsc in one of those "
            f"folders or in a folder named by {ENV_SCHEMAS}; `streamon schema check FILE` "
            "confirms it is found"
        )

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


# --- flat record layouts: in topics.avro_layout, importable from here as before ------------

_LAYOUT_NAMES = frozenset(
    ("PRIMITIVE_TYPES", "NESTED_SEP", "PROMOTIONS", "FlatField", "Resolution", "flat_fields",
     "resolve_flat")
)  # fmt: skip


def __getattr__(name: str) -> Any:
    """The flat layout names, loaded on first use (topics.avro_layout imports this module)."""
    if name in _LAYOUT_NAMES:
        from topics import avro_layout

        return getattr(avro_layout, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
