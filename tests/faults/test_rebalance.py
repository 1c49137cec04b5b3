"""Workers leave and join while input flows: 2 -> 1 -> 2 workers on a GROUP BY in exactly-once
mode. Each hand-over commits the revoked units (state, positions and outputs together) and the
new owner restores them: the result is exactly the oracle's, every update once."""

from __future__ import annotations

import time
from pathlib import Path

from faults_helpers import (
    AGGREGATE_QUERY,
    Publisher,
    aggregate_oracle,
    make_topics,
    result_rows,
    result_updates,
    start,
    wait_until,
    write_query,
)

from processors.commands.launcher import wait_for_count


def test_two_one_two_workers_under_load_give_exact_results(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    topic, result = f"{topic_name}.in", f"{topic_name}.out"
    path, plan = write_query(
        tmp_path, AGGREGATE_QUERY.format(name=topic_name, topic=topic, result=result, window="")
    )
    make_topics(bootstrap, plan)
    fields = ("site", "n", "total")
    workers = [start(tmp_path, bootstrap, path, 1), start(tmp_path, bootstrap, path, 2)]
    try:
        with Publisher(bootstrap, topic) as publisher:

            def grows(by: int = 4) -> None:
                before = wait_for_count(bootstrap, result, 0, 1)
                seen = wait_for_count(bootstrap, result, before + by, 60, workers)
                assert seen >= before + by, "\n".join(w.log_tail(30) for w in workers)

            grows()
            assert workers[1].stop() == 0, workers[1].log_tail(40)  # 2 -> 1
            workers = workers[:1]
            time.sleep(8.0)  # the group settles on one worker; input keeps coming
            grows()
            workers.append(start(tmp_path, bootstrap, path, 3))  # 1 -> 2
            time.sleep(10.0)
            grows()
        want = aggregate_oracle(publisher.batches)
        wait_until(
            lambda: +result_rows(bootstrap, result, plan.output_schema, fields) == want,
            120,
            workers,
        )
        time.sleep(2.0)
        inserted, deleted = result_updates(bootstrap, result, plan.output_schema, fields)
    finally:
        codes = [w.stop() for w in workers]
    log = "\n".join(w.log_tail(40) for w in workers)
    assert codes == [0, 0], log[-5000:]
    assert inserted - deleted == want, log[-5000:]
    assert max(inserted.values()) == 1 and max(deleted.values(), default=1) == 1, log[-5000:]
