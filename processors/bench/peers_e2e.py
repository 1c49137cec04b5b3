"""Workload ``e2e_filters`` of ``streamon bench peers``: the 8 filters from an input topic to a
result topic on a private embedded broker, by a streamon worker, a Quix Streams app and a plain
Faust agent, one after another on the same records (Avro single-object encoding, 4 partitions).

Every system's rate is its input records over the time between its first and its last result
record (the results' produce timestamps; Quix is told to stamp results with the processing time,
as it would otherwise keep the input's), so start-up and the group join are left out and
reported as ``startup_s`` (launch to first result). Plain Faust handles a few thousand records
a second, so it reads its own topic holding the first ``faust_records`` records of the same
data, and its answer is checked against the oracle of that prefix.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from processors.bench import peers_data as D
from processors.bench.ingest import PARTITIONS
from processors.bench.peers_run import figures, run_program, run_worker_until, scratch_broker
from processors.bench.peers_venv import PROGRAMS

QUERY = """\
from processors.core.query import col
from processors.workloads.examples import readings_passthrough
query = readings_passthrough(topic={topic!r}, result={result!r}, name={name!r}, partitions={p})
query.where({where})
query.adapt()
"""


def _say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def answer(bootstrap: str, topic: str) -> dict[str, Any]:
    """Count, checksum and first/last produce time (epoch s) of a result topic's records."""
    from topics.admin import read_topic
    from topics.avro import SchemaStore, decode_single_object, load_schema

    schema, store = load_schema("reading"), SchemaStore(load=False)
    store.add(schema)
    records = read_topic(bootstrap, topic)
    checksum, stamps = 0, []
    for r in records:
        value = decode_single_object(r.value or b"", schema, store)
        checksum += (value["ts"] * 31 + value["sensor_id"]) % D.MOD
        stamps.append(r.timestamp_ms)
    first = min(stamps) / 1000 if stamps else 0.0
    last = max(stamps) / 1000 if stamps else 0.0
    return {"count": len(records), "checksum": checksum % D.MOD, "t0": first, "t1": last,
            "t_ready": first}  # fmt: skip


def run_streamon(bootstrap: str, state: Path, topic: str, records: int, count: int,
                 timeout: float) -> dict[str, Any]:  # fmt: skip
    """One streamon worker runs the filter query until its result topic holds ``count``."""
    run = f"peers-streamon-{time.strftime('%H%M%S')}"
    out = f"{run}.out"
    query = state / f"{run}.py"
    query.write_text(QUERY.format(topic=topic, result=out, name=run, p=PARTITIONS,
                                  where=D.streamon_where()))  # fmt: skip
    launched, sampler = run_worker_until(query, bootstrap, state, run, out, count, timeout)
    got = answer(bootstrap, out)
    result = {"records": records, **got}
    result.update(figures(records, got["t0"], got["t1"], sampler, launched, got["t0"]))
    return result


def run_peer(program: str, peer_py: Path | None, bootstrap: str, work: Path, topic: str,
             records: int, timeout: float) -> dict[str, Any]:  # fmt: skip
    """A peer program (quix_filters.py, faust_filters.py) over ``records`` records of ``topic``."""
    if peer_py is None:
        raise RuntimeError("no peer virtualenv")
    from topics.admin import ensure_topics
    from topics.avro import load_schema
    from topics.specs import TopicSpec

    name = f"peers-{program.split('_')[0]}-{time.strftime('%H%M%S')}"
    out = f"{name}.out"
    ensure_topics(bootstrap, [TopicSpec(out, PARTITIONS)])
    spec = {"bootstrap": bootstrap, "topic": topic, "out": out, "group": name,
            "records": records, "filters": [list(f) for f in D.FILTERS],
            "schema": load_schema("reading")}  # fmt: skip
    path = work / f"{name}.json"
    path.write_text(json.dumps(spec))
    launched = time.time()

    def window(reported: dict[str, Any]) -> dict[str, Any]:
        got = answer(bootstrap, out)
        got["startup_s"] = got["t0"] - launched
        return got

    argv = [str(peer_py), str(PROGRAMS / program), str(path)]
    result = run_program(argv, timeout, work / f"{name}.log", window=window)
    result["startup_s"] = max(result["t0"] - launched, 0.0)
    return result


def run_e2e_filters(work: Path, peer_py: Path | None, records: int, faust_records: int,
                    timeout: float) -> dict[str, Any]:  # fmt: skip
    """The three systems on one fresh broker; see the module docstring."""
    from processors.bench.peers import attempt
    from processors.commands.publish import publish_batch
    from topics.admin import ensure_topics
    from topics.avro import load_schema
    from topics.specs import TopicSpec

    batch = D.filters_batch(records)
    faust_records = min(faust_records, records)
    mask = D.filter_mask(batch)
    c = batch.columns
    oracle = (int(mask.sum()), D.reading_checksum(c["ts"][mask], c["sensor_id"][mask]))
    pm = mask[:faust_records]
    prefix = (int(pm.sum()), D.reading_checksum(c["ts"][:faust_records][pm],
                                                c["sensor_id"][:faust_records][pm]))  # fmt: skip
    with scratch_broker("streamon-peers-broker-") as (info, tmp):
        state = tmp / "state"
        state.mkdir()
        bootstrap = info.bootstrap
        topic, ftopic = "peers.readings", "peers.readings-prefix"
        ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS), TopicSpec(ftopic, PARTITIONS)])
        _say(f"broker {bootstrap}: publishing {records:,} readings ({faust_records:,} "
             f"to {ftopic} for plain Faust); {oracle[0]:,} pass the filters")  # fmt: skip
        publish_batch(bootstrap, topic, batch, load_schema("reading"))
        publish_batch(bootstrap, ftopic, batch.slice(0, faust_records), load_schema("reading"))
        del batch, c, mask
        systems = {
            "streamon": attempt("streamon", lambda: run_streamon(
                bootstrap, state, topic, records, oracle[0], timeout)),
            "quix": attempt("quix", lambda: run_peer(
                "quix_filters.py", peer_py, bootstrap, work, topic, records, timeout)),
            "faust": attempt("faust", lambda: run_peer(
                "faust_filters.py", peer_py, bootstrap, work, ftopic, faust_records,
                timeout)),
        }  # fmt: skip
    if "error" not in systems["faust"]:
        systems["faust"]["oracle"] = list(prefix)
    return {"systems": systems, "oracle": oracle, "records": records,
            "faust_records": faust_records, "faust_oracle": list(prefix)}  # fmt: skip
