"""``streamon schema fingerprint|register|check FILE``: a schema file as readers will see it.

Fingerprints print the way streamon's errors print them (:func:`topics.avro.fingerprint_hex`:
the 8 bytes after ``C3 01`` in wire order, as fastavro, the apache ``avro`` package and Java's
``SchemaNormalization`` give them), so a fingerprint from a dead letter can be matched by eye.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from processors.runtime.config import ConfigError, Settings
from topics.avro import (
    SchemaError,
    fingerprint,
    fingerprint_hex,
    load_schema,
    schema_name,
    schema_path,
    single_object_header,
)

Say = Callable[[str], None]

NO_REGISTRY = (
    "no schema registry configured: set STREAMON_SCHEMA_REGISTRY_URL (for example "
    "http://localhost:8081) or schema_registry_url in streamon.toml"
)


def reference_parse(text: str) -> str:
    """Parse with the apache ``avro`` package (the reference implementation) if installed,
    else fastavro; returns which one checked, raises SchemaError saying why it is invalid."""
    try:
        import avro.schema
    except ImportError:
        import fastavro

        try:
            fastavro.parse_schema(json.loads(text))
        except Exception as exc:  # fastavro raises several types for bad schemas
            raise SchemaError(f"not a valid Avro schema (fastavro): {exc}") from exc
        return f"fastavro {fastavro.__version__}"
    try:
        avro.schema.parse(text)
    except Exception as exc:  # SchemaParseException, JSON errors, ...
        raise SchemaError(f"not a valid Avro schema (apache avro): {exc}") from exc
    from importlib.metadata import version

    return f"apache avro {version('avro')}"


def fingerprint_lines(schema: dict) -> list[str]:
    """The fingerprint as header bytes (what errors print) and as integers."""
    fp = fingerprint(schema)
    signed = fp - (1 << 64) if fp >= 1 << 63 else fp
    return [
        f"fingerprint {fingerprint_hex(fp)}  (CRC-64-AVRO; the 8 bytes after C3 01, wire order)",
        f"header      {single_object_header(schema).hex(' ')}",
        f"integer     {fp}  (the 8 bytes read little-endian, unsigned; as a Java long: {signed})",
    ]


def find_on_path(schema: dict) -> tuple[Path | None, list[Path]]:
    """(a file on the schema path with the same fingerprint, same-named files that differ)."""
    fp, name = fingerprint(schema), schema_name(schema)
    differ: list[Path] = []
    for directory in schema_path():
        for path in sorted(directory.glob("*.avsc")) if directory.is_dir() else []:
            try:
                other = load_schema(str(path))
            except SchemaError:
                continue
            if fingerprint(other) == fp:
                return path, differ
            if schema_name(other) == name:
                differ.append(path)
    return None, differ


def _registry(settings: Settings) -> Any:
    if not settings.schema_registry_url:
        raise ConfigError(NO_REGISTRY)
    from topics.avro import RegistryCodec

    return RegistryCodec(settings.schema_registry_url)


def run_fingerprint(file: str, say: Say = print) -> int:
    schema = load_schema(file)
    say(f"schema      {schema_name(schema)} ({file})")
    for line in fingerprint_lines(schema):
        say(line)
    return 0


def run_register(file: str, settings: Settings, subject: str | None, say: Say = print) -> int:
    codec = _registry(settings)
    schema = load_schema(file)
    codec.subject = subject
    sid = codec.schema_id(schema)
    say(
        f"registered {schema_name(schema)} as id {sid} (subject {subject or schema_name(schema)}) "
        f"in {settings.schema_registry_url}"
    )
    return 0


def run_check(file: str, settings: Settings, say: Say = print) -> int:
    """0: valid and on the schema path; 1: valid but not found there; 2 (raised): invalid."""
    path = Path(file)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SchemaError(f"cannot read {file}: {exc.strerror or exc}") from exc
    checker = reference_parse(text)
    schema = load_schema(str(path))
    say(f"{file}: valid Avro schema {schema_name(schema)} (checked with {checker})")
    say(fingerprint_lines(schema)[0])
    found, differ = find_on_path(schema)
    folders = ", ".join(str(d) for d in schema_path())
    if found is not None:
        say(f"on the schema path: {found} (same fingerprint)")
    else:
        say(f"not on the schema path ({folders})")
        for other in differ:
            fp = fingerprint_hex(fingerprint(load_schema(str(other))))
            say(f"  {other} has the same name but fingerprint {fp}")
        say("  readers of single-object messages written with it will not find it: copy the")
        say("  file into one of those folders, or add its folder to STREAMON_SCHEMAS")
    if settings.schema_registry_url:
        codec = _registry(settings)
        codec.auto_register = False
        try:
            sid = codec.schema_id(schema)
        except Exception as exc:  # not registered, or the registry is unreachable
            say(f"registry {settings.schema_registry_url}: not found ({exc})")
        else:
            say(f"registry {settings.schema_registry_url}: id {sid}")
    return 0 if found is not None else 1
