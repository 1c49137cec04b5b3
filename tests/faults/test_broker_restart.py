"""The embedded broker keeps its data in memory only: restarted, it comes back on the same port
(``broker start`` takes its last port again) but without any topic. A worker that finds its
topics gone says so and stops (exit 69), instead of a stream of errors."""

from __future__ import annotations

import time
from pathlib import Path

from faults_helpers import FILTER_QUERY, make_topics, publish, start, write_query

from processors.commands.launcher import wait_for_count
from processors.runtime.broker import start_broker, stop_broker
from processors.runtime.topics_watch import EXIT_TOPICS_GONE
from processors.workloads.examples import reading_columns


def test_a_restarted_embedded_broker_keeps_its_port_and_the_worker_stops_saying_why(
    tmp_path: Path, topic_name: str
) -> None:
    state = tmp_path / "broker"
    broker = start_broker(state)
    try:
        topic, result = f"{topic_name}.in", f"{topic_name}.out"
        text = FILTER_QUERY.format(
            name=topic_name, topic=topic, result=result, guarantee="at_least_once"
        )
        path, plan = write_query(tmp_path, text)
        make_topics(broker.bootstrap, plan)
        publish(broker.bootstrap, topic, reading_columns(2_000, seed=1))
        worker = start(tmp_path, broker.bootstrap, path, 1)
        try:
            wait_for_count(broker.bootstrap, result, 1, 60, [worker])
            stop_broker(state)
            again = start_broker(state)
            assert again.port == broker.port  # the last port, taken again
            deadline = time.monotonic() + 60
            while worker.running and time.monotonic() < deadline:
                time.sleep(0.5)
            code = worker.proc.wait(timeout=5)
        finally:
            worker.stop()
        log = worker.log_path.read_text(errors="replace")
        assert code == EXIT_TOPICS_GONE, log[-3000:]
        assert "are gone from the broker" in log and "in memory" in log, log[-3000:]
    finally:
        stop_broker(state)
