"""Workers killed (SIGKILL) at random moments while they work through a backlog.

In exactly-once mode every result comes out once: the result topic holds exactly the oracle's
rows (an independent computation over the published records), none missing, none twice. In
at-least-once mode none is missing and the duplicates are counted (and reported).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
from faults_helpers import Publisher, kill_during, make_topics, result_rows, settle, write_query

FILTER_QUERY = """\
from processors.core.query import Query, col
from topics.avro import load_schema
query = Query({name!r})
query.stream("r", topic={topic!r}, schema=load_schema("reading"), key="sensor_id",
             timestamp="ts", partitions=2)
query.where(col("r.temperature") > 20.0, col("r.ok") == True)
query.select("r.ts", "r.sensor_id")
query.into({result!r}, partitions=2)
query.processing_guarantee({guarantee!r})
"""


def filter_oracle(batches) -> Counter:
    rows: Counter = Counter()
    for batch in batches:
        c = batch.columns
        keep = (c["temperature"] > 20.0) & c["ok"]
        for ts, sensor in zip(c["ts"][keep].tolist(), c["sensor_id"][keep].tolist(), strict=True):
            rows[(ts, sensor)] += 1
    return rows


def run_filter(bootstrap: str, tmp_path: Path, name: str, guarantee: str, seed: int):
    topic, result = f"{name}.in", f"{name}.out"
    text = FILTER_QUERY.format(name=name, topic=topic, result=result, guarantee=guarantee)
    path, plan = write_query(tmp_path, text)
    make_topics(bootstrap, plan)
    with Publisher(bootstrap, topic) as publisher:
        last, logs = kill_during(tmp_path, bootstrap, path, result, 3, seed)
    want = filter_oracle(publisher.batches)
    try:
        settle(bootstrap, result, sum(want.values()), [last])
        got = result_rows(bootstrap, result, plan.output_schema, ("ts", "sensor_id"))
    finally:
        last.stop()
    return got, want, "\n".join(logs) + "\n" + last.log_tail(60)


def test_filter_query_is_exact_through_random_sigkills(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    got, want, log = run_filter(bootstrap, tmp_path, topic_name, "exactly_once", seed=11)
    missing = want - got
    repeated = got - want
    assert not missing and not repeated, (
        f"{sum(missing.values())} missing, {sum(repeated.values())} repeated\n{log[-5000:]}"
    )
    assert np.all(np.array(list(got.values())) == 1)


def test_filter_query_loses_nothing_at_least_once_and_counts_its_repeats(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    got, want, log = run_filter(bootstrap, tmp_path, topic_name, "at_least_once", seed=11)
    missing = want - got
    assert not missing, f"{sum(missing.values())} missing\n{log[-5000:]}"
    repeated = sum((got - want).values())
    print(f"at-least-once, 3 SIGKILLs: {repeated} of {sum(want.values())} results repeated")
