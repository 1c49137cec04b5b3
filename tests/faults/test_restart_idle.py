"""A worker restarted where one input partition has nothing new to read.

The stream step's event-time merge waits for every input partition's watermark or its idle
mark. Ingest judges a partition idle once it is read to its end; a restarted worker that had
read nothing of a partition since its assignment never judged it so (it knew no position), and
the other partition's newer tuples waited in the merge for ever: a windowed GROUP BY's last
results never came. Both guarantees, the result exact.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from faults_helpers import (
    AGGREGATE_QUERY,
    aggregate_oracle,
    make_topics,
    publish,
    result_rows,
    start,
    write_query,
)

from processors.kernels.routing import kafka_partitions
from processors.workloads.examples import reading_columns

WINDOW = 'query.window("r", range_ms=10**13)'


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_a_partition_with_nothing_to_read_after_a_restart_goes_idle(
    bootstrap: str, tmp_path: Path, topic_name: str, guarantee: str
) -> None:
    topic, result = f"{topic_name}.in", f"{topic_name}.out"
    text = AGGREGATE_QUERY.format(name=topic_name, topic=topic, result=result, window=WINDOW)
    text = text.replace('"exactly_once"', repr(guarantee))
    path, plan = write_query(tmp_path, text)
    make_topics(bootstrap, plan)
    fields = ("site", "n", "total")
    first = reading_columns(4_000, seed=1)
    later = reading_columns(4_000, seed=2, start_ms=1_800_000_000_000)
    later = later.take(np.flatnonzero(kafka_partitions(later.key, 2) == 0))  # partition 0 only
    worker = start(tmp_path, bootstrap, path, 1)
    try:
        publish(bootstrap, topic, first)
        want = aggregate_oracle([first])
        deadline = time.monotonic() + 90
        while +result_rows(bootstrap, result, plan.output_schema, fields) != want:
            assert worker.running and time.monotonic() < deadline, worker.log_tail(40)
            time.sleep(0.5)
    finally:
        assert worker.stop() == 0, worker.log_tail(40)
    publish(bootstrap, topic, later)  # only partition 0 gets more, later in event time
    want = aggregate_oracle([first, later])
    worker = start(tmp_path, bootstrap, path, 2)
    try:
        deadline = time.monotonic() + 60
        while (net := +result_rows(bootstrap, result, plan.output_schema, fields)) != want:
            assert worker.running, worker.log_tail(40)
            assert time.monotonic() < deadline, f"{sorted(net)} != {sorted(want)}\n" + (
                worker.log_tail(40)
            )
            time.sleep(0.5)
    finally:
        assert worker.stop() == 0, worker.log_tail(40)
