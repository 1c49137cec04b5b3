"""The schema path, `streamon schema fingerprint|register|check`, and fingerprints in errors.

The apache ``avro`` package (the reference implementation) is the oracle for fingerprints where
installed: every message must print the bytes it computes, which are the header's bytes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import avro.schema
import numpy as np
import pytest

from processors.cli import main
from topics.avro import (
    SchemaError,
    SchemaStore,
    encode_single_object,
    fingerprint,
    fingerprint_hex,
    load_schema,
    project_schemas_dir,
    schema_path,
    schemas_dir,
)
from topics.columnar import RecordCodec

NAMES = ["reading", "reading_v2", "packet", "stats", "control", "dead_letter"]
READING = {"sensor_id": 1, "ts": 2, "temperature": 3.0, "humidity": 4.0, "site": "s", "ok": True}
OTHER = {
    "type": "record",
    "name": "Other",
    "namespace": "t",
    "fields": [{"name": "a", "type": "int"}],
}


@pytest.fixture(autouse=True)
def isolated(no_local_settings: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMON_SCHEMAS", raising=False)


def _write(path: Path, schema: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema))
    return path


# -- fingerprints: one byte order everywhere, the reference implementation's -----------------


@pytest.mark.parametrize("name", NAMES)
def test_fingerprint_hex_is_what_apache_avro_computes_and_the_header_carries(name: str) -> None:
    schema = load_schema(name)
    text = (project_schemas_dir() / f"{name}.avsc").read_text()
    reference = avro.schema.parse(text).fingerprint("CRC-64-AVRO")
    assert isinstance(reference, bytes) and len(reference) == 8
    assert fingerprint_hex(fingerprint(schema)) == reference.hex()
    record = {"reading": READING}.get(name)
    if record is not None:
        assert encode_single_object(schema, record)[2:10] == reference


def test_unknown_fingerprint_errors_print_the_wire_bytes_and_where_they_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = encode_single_object(OTHER, {"a": 1})
    wire = message[2:10].hex()
    monkeypatch.setenv("STREAMON_SCHEMAS", str(tmp_path / "mine"))
    with pytest.raises(SchemaError) as exc:
        SchemaStore().by_fingerprint(fingerprint(OTHER))
    text = str(exc.value)
    assert f"unknown writer schema fingerprint {wire} (the 8 bytes after C3 01" in text
    assert str(tmp_path / "mine") in text and str(project_schemas_dir()) in text
    assert "STREAMON_SCHEMAS" in text and "streamon schema check FILE" in text
    # the bulk codec's dead-letter reasons say the same
    codec = RecordCodec(load_schema("reading"))
    result = codec.decode_many(message, np.array([0, len(message)]))
    assert result.errors[0][1] == text


# -- the schema path ------------------------------------------------------------------------------


def test_schema_path_order_and_load_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert schema_path() == [project_schemas_dir()]
    monkeypatch.setenv("STREAMON_SCHEMAS", os.pathsep.join([str(first), "", str(second)]))
    assert schema_path() == [first, second, project_schemas_dir()]
    assert schemas_dir() == first
    _write(second / "other.avsc", OTHER)
    assert load_schema("other") == OTHER
    shadow = {**OTHER, "fields": [{"name": "b", "type": "long"}]}
    _write(first / "other.avsc", shadow)
    assert load_schema("other") == shadow  # STREAMON_SCHEMAS is searched first, in order
    assert load_schema("reading")["name"] == "Reading"  # then the project's schemas/
    with pytest.raises(SchemaError, match="no schema 'nope'") as exc:
        load_schema("nope")
    for folder in (first, second, project_schemas_dir()):
        assert str(folder / "nope.avsc") in str(exc.value)


def test_store_finds_a_schema_added_while_it_runs(tmp_path: Path) -> None:
    store = SchemaStore(tmp_path, rescan_s=0.0)
    with pytest.raises(SchemaError, match=str(tmp_path)):
        store.by_fingerprint(fingerprint(OTHER))
    _write(tmp_path / "other.avsc", OTHER)
    assert store.by_fingerprint(fingerprint(OTHER)) == OTHER


def test_store_and_load_schema_ask_the_registry_last() -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient.new_client({"url": "mock://schema-path-test"})
    client.register_schema("t.Other", Schema(json.dumps(OTHER), "AVRO"))
    store = SchemaStore(load=False, registry=client, rescan_s=0.0)
    assert store.by_fingerprint(fingerprint(OTHER)) == OTHER
    assert load_schema("t.Other", registry=client) == OTHER
    with pytest.raises(SchemaError, match="subject 'nope'"):
        load_schema("nope", registry=client)


# -- streamon schema ------------------------------------------------------------------------------


def test_schema_fingerprint_command(capsys: pytest.CaptureFixture[str]) -> None:
    path = project_schemas_dir() / "reading.avsc"
    assert main(["schema", "fingerprint", str(path)]) == 0
    out = capsys.readouterr().out
    fp = fingerprint(load_schema("reading"))
    wire = fp.to_bytes(8, "little")
    assert f"fingerprint {wire.hex()}  " in out
    assert f"header      c3 01 {wire.hex(' ')}\n" in out
    assert f"integer     {fp}  " in out
    assert f"as a Java long: {int.from_bytes(wire, 'little', signed=True)})" in out


def test_schema_check_on_and_off_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schema", "check", str(project_schemas_dir() / "stats.avsc")]) == 0
    out = capsys.readouterr().out
    assert "valid Avro schema streamon.Stats" in out
    assert f"on the schema path: {project_schemas_dir() / 'stats.avsc'} (same fingerprint)" in out
    mine = _write(tmp_path / "mine" / "other.avsc", OTHER)
    assert main(["schema", "check", str(mine)]) == 1
    out = capsys.readouterr().out
    assert "not on the schema path" in out and "STREAMON_SCHEMAS" in out
    monkeypatch.setenv("STREAMON_SCHEMAS", str(mine.parent))
    assert main(["schema", "check", str(mine)]) == 0
    assert f"on the schema path: {mine}" in capsys.readouterr().out
    changed = _write(tmp_path / "changed" / "other.avsc", {**OTHER, "fields": []})
    assert main(["schema", "check", str(changed)]) == 1
    out = capsys.readouterr().out
    assert f"{mine} has the same name but fingerprint {fingerprint_hex(fingerprint(OTHER))}" in out


def test_schema_check_of_an_invalid_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _write(tmp_path / "bad.avsc", {"type": "record", "name": "B", "fields": [{"name": "x"}]})
    assert main(["schema", "check", str(bad)]) == 2
    assert "not a valid Avro schema" in capsys.readouterr().err
    assert main(["schema", "check", str(tmp_path / "missing.avsc")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_schema_register_needs_a_registry(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(project_schemas_dir() / "reading.avsc")
    assert main(["schema", "register", path]) == 2
    assert "no schema registry configured" in capsys.readouterr().err
    monkeypatch.setenv("STREAMON_SCHEMA_REGISTRY_URL", "mock://schema-register-test")
    assert main(["schema", "register", path, "--subject", "readings-value"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("registered streamon.examples.Reading as id ")
    assert "(subject readings-value)" in out
