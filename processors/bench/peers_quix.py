"""Quix Streams on workloads ``join3`` and ``netmon`` of ``streamon bench peers``, on the broker.

Quix Streams only reads Kafka, so for the join workloads it gets a private embedded broker: the
same tuples the other systems read (the CSV files written for Flink) go into one topic per
input (processors/bench/peer_programs/quix_joins.py, phase ``produce``: not measured), then the
Quix app joins them (phase ``run``) and counts its results in process. Its rate is the input
records over the time from its first to its last input record (both in its process), so it
includes Kafka reads but no result writes; streamon's figure on the same row is in process.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from processors.bench.peers_run import run_program, scratch_broker
from processors.bench.peers_venv import PROGRAMS

PARTITIONS = 4


def _say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def quix_spec(workload: str, tables: list[dict[str, Any]], bootstrap: str, range_ms: int,
              records: int, state_dir: Path) -> dict[str, Any]:  # fmt: skip
    """The spec of quix_joins.py: one topic per input table, keyed on the join key."""
    key = "k" if workload == "join3" else "pid"
    stamp = time.strftime("%H%M%S")
    inputs = [{"topic": f"peers.{workload}.{t['name']}.{stamp}", "csv": t["path"],
               "columns": [c for c, _ in t["columns"]], "key": key} for t in tables]  # fmt: skip
    return {"kind": workload, "bootstrap": bootstrap, "group": f"peers-quix-{workload}-{stamp}",
            "partitions": PARTITIONS, "inputs": inputs, "range_ms": range_ms,
            "records": records, "state_dir": str(state_dir)}  # fmt: skip


def run_quix_join(workload: str, tables: list[dict[str, Any]], range_ms: int, records: int,
                  peer_py: Path | None, work: Path, timeout: float) -> dict[str, Any]:  # fmt: skip
    """Produce the inputs to a fresh broker, then run and measure the Quix app."""
    if peer_py is None:
        raise RuntimeError("no peer virtualenv")
    from topics.admin import ensure_topics
    from topics.specs import TopicSpec

    with scratch_broker("streamon-peers-quix-") as (info, tmp):
        state = tmp / "quix-state"
        spec = quix_spec(workload, tables, info.bootstrap, range_ms, records, state)
        ensure_topics(info.bootstrap, [TopicSpec(s["topic"], PARTITIONS)
                                       for s in spec["inputs"]])  # fmt: skip
        program = str(PROGRAMS / "quix_joins.py")
        path = work / f"quix-{workload}.json"
        path.write_text(json.dumps({**spec, "phase": "produce"}))
        _say(f"  quix: producing {records:,} tuples to {info.bootstrap}")
        with (work / f"quix-{workload}-produce.log").open("w") as log:
            subprocess.run([str(peer_py), program, str(path)], check=True, stdout=log,
                           stderr=subprocess.STDOUT, timeout=timeout)  # fmt: skip
        path.write_text(json.dumps({**spec, "phase": "run"}))
        return run_program([str(peer_py), program, str(path)], timeout,
                           work / f"quix-{workload}.log")  # fmt: skip
