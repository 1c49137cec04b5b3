"""``streamon publish`` and ``streamon tail`` as a user runs them, on the real broker.

Oracle: fastavro (independent of streamon's bulk codec) decodes every published message; tail
must print exactly those records.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import fastavro

from topics.admin import read_topic
from topics.avro import fingerprint, load_schema

ROOT = Path(__file__).resolve().parents[2]
N = 60
BAD = {  # line number -> text
    7: '{"sensor_id": 7, "ts": "soon", "temperature": 1, "humidity": 2, "site": "", "ok": true}',
    30: "not json",
}


def _records() -> list[dict]:
    return [
        {"sensor_id": i % 9, "ts": 1_700_000_000_000 + i, "temperature": i / 8 - 3.0,
         "humidity": i * 0.5, "site": ["north", "lab-1", "süd"][i % 3], "ok": i % 4 != 0,
         "battery": None if i % 5 == 0 else i % 100 + 0.5}
        for i in range(N)
    ]  # fmt: skip


def _cli(bootstrap: str, tmp_path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "STREAMON_BOOTSTRAP": bootstrap,
           "STREAMON_STATE_DIR": str(tmp_path / "state")}  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "processors.cli", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def test_publish_then_tail_gives_back_exactly_the_records(
    bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    records = _records()
    lines, good = [], iter(records)
    for number in range(1, N + len(BAD) + 1):
        lines.append(BAD[number] if number in BAD else json.dumps(next(good)))
    data = tmp_path / "readings.jsonl"
    data.write_text("\n".join(lines) + "\n")

    proc = _cli(bootstrap, tmp_path, "publish", topic_name, "--schema", "reading", "--key",
                "sensor_id", "--partitions", "3", str(data))  # fmt: skip
    out, err = proc.communicate(timeout=120)
    errors = err.decode().splitlines()
    assert proc.returncode == 1, err.decode()  # some lines were skipped
    assert errors[1:3] == [
        f"{data}: line 7: field 'ts': expected a long (integer), got string \"soon\"",
        f"{data}: line 30: not valid JSON: Expecting value (column 1)",
    ], errors
    assert errors[0] == f"created topic {topic_name} with 3 partition(s)"
    assert f"published {N:,} records to {topic_name}" in errors[-1]
    assert errors[-1].endswith("skipped 2 bad lines"), errors[-1]

    # the oracle: fastavro reads every message body; the header names the schema's fingerprint
    schema = load_schema("reading")
    parsed = fastavro.parse_schema(schema)
    header = b"\xc3\x01" + fingerprint(schema).to_bytes(8, "little")
    stored = read_topic(bootstrap, topic_name)
    assert len(stored) == N
    decoded = {}
    for rec in stored:
        assert rec.value is not None and rec.value[:10] == header
        value = fastavro.schemaless_reader(io.BytesIO(rec.value[10:]), parsed, parsed)
        assert rec.key == value["sensor_id"].to_bytes(8, "big")  # type: ignore[index]
        decoded[(rec.partition, rec.offset)] = value
    assert sorted(decoded.values(), key=lambda r: r["ts"]) == records  # type: ignore[index]
    assert len({p for p, _ in decoded}) > 1  # keyed records spread over the partitions

    limit = N - 5
    started = time.monotonic()
    proc = _cli(bootstrap, tmp_path, "tail", topic_name, "--from-beginning", "--limit",
                str(limit))  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()
    first_line_s = time.monotonic() - started
    rest = proc.stdout.read()  # not communicate(): it would miss what readline buffered
    assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()  # type: ignore[union-attr]
    printed = [json.loads(x) for x in [first, *rest.splitlines()]]
    assert len(printed) == limit
    for row in printed:
        meta = (row.pop("_partition"), row.pop("_offset"))
        assert row.pop("_sign") == 1
        assert row == decoded[meta]
    # each partition from its start, in order
    by_part: dict[int, list[int]] = {}
    for p, o in sorted(decoded):
        by_part.setdefault(p, []).append(o)
    seen: dict[int, list[int]] = {}
    for row_meta in (json.loads(x) for x in [first, *rest.splitlines()]):
        seen.setdefault(row_meta["_partition"], []).append(row_meta["_offset"])
    for p, offsets in seen.items():
        assert offsets == by_part[p][: len(offsets)]
    print(f"tail --from-beginning: first line after {first_line_s:.3f} s (process start included)")
