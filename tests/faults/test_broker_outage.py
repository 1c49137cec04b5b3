"""The broker goes away for a while (every connection reset, new ones refused: a TCP proxy
between the clients and the broker is cut) and comes back: the worker rides it out, logs a
warning every few seconds rather than thousands, and the results are exact (exactly-once)."""

from __future__ import annotations

import time
from pathlib import Path

from faults_helpers import (
    FILTER_QUERY,
    filter_oracle,
    make_topics,
    publish,
    result_rows,
    settle,
    start,
    write_query,
)
from tcp_proxy import CuttableProxy

from processors.commands.launcher import wait_for_count
from processors.runtime.broker import free_port, start_broker, stop_broker
from processors.workloads.examples import reading_columns

CUT_S = 60.0


def test_a_broker_away_for_a_minute_is_ridden_out_with_exact_results(
    tmp_path: Path, topic_name: str
) -> None:
    proxy_port = free_port()
    broker = start_broker(tmp_path / "broker", advertised_port=proxy_port)
    proxy = CuttableProxy(proxy_port, broker.port)
    bootstrap = f"127.0.0.1:{proxy_port}"
    try:
        topic, result = f"{topic_name}.in", f"{topic_name}.out"
        text = FILTER_QUERY.format(
            name=topic_name, topic=topic, result=result, guarantee="exactly_once"
        )
        path, plan = write_query(tmp_path, text)
        make_topics(bootstrap, plan)
        batches = [reading_columns(150_000, seed=1), reading_columns(50_000, seed=2,
                                                                   start_ms=10**12)]  # fmt: skip
        publish(bootstrap, topic, batches[0])
        worker = start(tmp_path, bootstrap, path, 1)
        try:
            wait_for_count(bootstrap, result, 1_000, 120, [worker])
            proxy.cut()  # mid-flight: results are being written
            time.sleep(CUT_S)
            assert worker.running, worker.log_tail(40)
            proxy.restore()
            publish(bootstrap, topic, batches[1])
            want = filter_oracle(batches)
            settle(bootstrap, result, sum(want.values()), [worker])
            got = result_rows(bootstrap, result, plan.output_schema, ("ts", "sensor_id"))
            assert worker.running, worker.log_tail(40)
        finally:
            worker.stop()
        log = worker.log_path.read_text(errors="replace")
        missing, repeated = want - got, +(got - want)
        assert not missing and not repeated, (
            f"{sum(missing.values())} missing, {sum(repeated.values())} repeated\n{log[-5000:]}"
        )
        lines = log.count("\n")
        assert lines < 400, f"{lines} log lines for a {CUT_S:.0f} s outage\n{log[-5000:]}"
        print(f"broker away {CUT_S:.0f} s: exact results, {lines} log lines in all")
    finally:
        proxy.close()
        stop_broker(tmp_path / "broker")
