"""Decoding the bench's input records (Avro single-object encoding: 2 marker bytes, an 8-byte
schema fingerprint, the body) with fastavro, as a Python peer would; the schema comes from
the spec file the bench writes (JSON)."""

from __future__ import annotations

import io
from typing import Any

import fastavro


def reader(schema: dict[str, Any]):
    parsed = fastavro.parse_schema(schema)
    read = fastavro.schemaless_reader

    def decode(value: bytes) -> dict[str, Any]:
        return read(io.BytesIO(value[10:]), parsed)  # type: ignore[return-value]

    return decode
