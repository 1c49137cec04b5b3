"""``streamon demo``: the foundation's pipeline end to end on the embedded broker.

Publishes sensor readings (and two malformed messages), runs a worker for the pass-through
query, waits for every record to come out, checks that nothing was lost or duplicated, and
prints what the worker reported.
"""

from __future__ import annotations

import os
import time
from collections import Counter

from processors.runtime.config import load_settings, resolve_bootstrap
from processors.runtime.launcher import WorkerProcess, wait_for_count
from processors.runtime.publish import publish_batch, publish_raw
from processors.runtime.worker import DEAD_LETTER_TOPIC
from processors.workloads.examples import reading_columns
from topics.admin import ensure_topics, read_topic
from topics.avro import SchemaStore, decode_single_object, load_schema
from topics.specs import TopicSpec

QUERY_TEMPLATE = """\
from processors.workloads.examples import readings_passthrough
query = readings_passthrough(topic={topic!r}, result={result!r}, name={name!r}, partitions=4)
"""


def _say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def run_demo(records: int = 20_000) -> int:
    settings = load_settings()
    bootstrap = resolve_bootstrap(settings)
    _say(f"broker: {bootstrap}")
    run = time.strftime("%Y%m%d-%H%M%S")
    name, topic, result = f"demo-{run}", f"demo-{run}.readings", f"demo-{run}.readings-out"
    ensure_topics(bootstrap, [TopicSpec(topic, 4), TopicSpec(result, 4)])
    batch = reading_columns(records, seed=7)
    publish_batch(bootstrap, topic, batch, load_schema("reading"))
    publish_raw(bootstrap, topic, [b"not avro at all", b"\xc3\x01garbage"])
    _say(f"published {records} Avro readings and 2 malformed messages to {topic}")

    query_file = settings.state_dir / "demo" / f"{name}.py"
    query_file.parent.mkdir(parents=True, exist_ok=True)
    query_file.write_text(QUERY_TEMPLATE.format(topic=topic, result=result, name=name))
    worker = WorkerProcess(
        query_file, bootstrap=bootstrap, state_dir=settings.state_dir,
        worker_id=f"demo-worker-{os.getpid()}",
    )  # fmt: skip
    _say(f"started worker {worker.worker_id} (log: {worker.log_path})")
    try:
        started = time.monotonic()
        seen = wait_for_count(bootstrap, result, records, timeout=180, workers=[worker])
        elapsed = time.monotonic() - started
        _say(f"{seen} of {records} records reached {result} in {elapsed:.1f}s (incl. start-up)")
        time.sleep(1.5)  # one stats interval, so the status shows the final counts
        try:
            for agent in worker.status()["stats"]["agents"]:
                _say(
                    f"agent {agent['agent']:>11}: in {agent['tuples_in']}, "
                    f"out {agent['tuples_out']}, batches {agent['batches']}, "
                    f"busy {agent['busy_ns'] / 1e6:.1f} ms, dead letters {agent['dead_letters']}, "
                    f"backlog {agent['backlog_tuples']}"
                )
        except (OSError, KeyError, ValueError) as exc:
            _say(f"status endpoint not reachable: {exc}")
    finally:
        worker.stop()

    inputs = Counter(r.value for r in read_topic(bootstrap, topic))
    outputs = Counter(r.value for r in read_topic(bootstrap, result))
    lost = sum((inputs - outputs).values()) - 2  # the two malformed ones are not results
    duplicated = sum((outputs - inputs).values())
    store, dl_schema = SchemaStore(), load_schema("dead_letter")
    letters = [
        letter
        for letter in (
            decode_single_object(r.value, dl_schema, store)
            for r in read_topic(bootstrap, DEAD_LETTER_TOPIC)
        )
        if letter["source_topic"] == topic
    ]
    _say(
        f"check: {sum(outputs.values())} out for {records} valid in; "
        f"lost {lost}, extra {duplicated}"
    )
    for letter in letters:
        _say(
            f"dead letter {letter['source_topic']}[{letter['partition']}]@{letter['offset']}: "
            f"{letter['reason']}"
        )
    ok = seen >= records and lost == 0 and duplicated == 0 and len(letters) == 2
    _say("OK" if ok else "FAILED")
    _say("the embedded broker keeps running for the next command; `streamon broker stop` stops it")
    return 0 if ok else 1
