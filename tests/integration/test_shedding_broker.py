"""Drop boxes on the real broker (issue 18): what a worker keeps is exactly what the box's hash
says, a worker killed while shedding is replaced by one that keeps the same records, and a
shed join's results are exactly the join of the kept records (precision 1.0: each one a result
of the exact join).

The shares are set as an operator would (``streamon control shed``: a DROP_RATES control
record) before the input is produced; the oracle applies the same box to each stored record's
partition and offset (processors/runtime/shedding.py), then filters or joins naively.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import signed_result_rows
from integration.test_routing_broker import oracle_join, packets, produce, stored

from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.queries import load_plan
from processors.runtime.control import publish_shed
from processors.runtime.shedding import DropBox
from topics.admin import ensure_topics
from topics.specs import TopicSpec

FILTER = """\
CREATE STREAM p WITH (schema = 'packet', topic = '{topic}', timestamp = 'ts', partitions = 2);
CREATE QUERY "{name}" INTO '{result}' AS
SELECT p.dst, p.size FROM p WHERE p.size > 500;
"""
JOIN = """\
CREATE STREAM a WITH (schema = 'packet', topic = '{a}', key = 'pid', timestamp = 'ts',
                      partitions = 2);
CREATE STREAM b WITH (schema = 'packet', topic = '{b}', key = 'pid', timestamp = 'ts',
                      partitions = 2);
CREATE QUERY "{name}" INTO '{result}' WITH (idle_timeout_ms = 1500) AS
SELECT a.dst AS a_dst, b.dst AS b_dst FROM a [RANGE 2 SECONDS], b [RANGE 2 SECONDS]
WHERE a.pid = b.pid;
"""


def kept(query: str, stream: str, topic: str, keep: float, records: list) -> list:
    """The stored records (partition, offset, record) the drop box keeps."""
    box = DropBox(query, stream, topic)
    box.set(keep)
    out = []
    for partition in sorted({p for p, _, _ in records}):
        mine = [r for r in records if r[0] == partition]
        mask = box.mask(partition, np.array([o for _, o, _ in mine], np.int64))
        out += [r for r, k in zip(mine, mask.tolist(), strict=True) if k]
    return out


def wait_keeping(worker: WorkerProcess, stream: str, keep: float, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            box = worker.status()["shedding"]["boxes"][stream]
            if box["keep"] == keep:
                return
        except (OSError, KeyError, ValueError):
            pass
        assert worker.running, worker.log_tail()
        assert time.monotonic() < deadline, (
            f"the worker did not apply the shares\n{worker.log_tail()}"
        )
        time.sleep(0.3)


def test_a_worker_keeps_what_the_box_says_and_its_replacement_the_same(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    topic, result, name = f"{topic_name}.in", f"{topic_name}.out", f"{topic_name}-shed"
    ensure_topics(bootstrap, [TopicSpec(topic, 2)])
    query = tmp_path / "q.cql"
    query.write_text(FILTER.format(topic=topic, name=name, result=result))
    plan = load_plan(str(query))
    publish_shed(bootstrap, plan.name, {"p": 0.4}, "test", issuer="test")
    worker = WorkerProcess(query, bootstrap=bootstrap, state_dir=tmp_path / "s1", worker_id="w1")
    replacement = None
    try:
        wait_keeping(worker, "p", 0.4)
        produce(bootstrap, topic, packets(1, 6_000, 100), None, keyed=False)
        records = stored(bootstrap, topic)
        want = {
            r["dst"] for _, _, r in kept(plan.name, "p", topic, 0.4, records) if r["size"] > 500
        }
        assert 1_400 < len(want) < 1_900  # 0.4 of the 4,100 or so above 500
        wait_for_count(bootstrap, result, len(want) // 3, 60.0, [worker])
        worker.kill()  # mid-stream: the replacement reads again from the last commit
        replacement = WorkerProcess(query, bootstrap=bootstrap, state_dir=tmp_path / "s2",
                                    worker_id="w2")  # fmt: skip
        replacement.wait_holding([topic], 2)  # (the first may have written every result)
        wait_for_count(bootstrap, result, len(want), 90.0, [replacement])
        time.sleep(2.0)
    finally:
        codes = [w.stop() for w in (worker, replacement) if w is not None]
    assert codes[-1] == 0, replacement.log_tail() if replacement else ""
    got = signed_result_rows(bootstrap, result, plan.output_schema, ("dst",))
    assert {dst for (_, dst) in got} == want  # repeats after the kill allowed, nothing else


@pytest.mark.parametrize("after_s", [1.5, 2.2])
def test_a_worker_stopped_while_it_starts_exits_as_from_a_graceful_stop(
    bootstrap: str, tmp_path: Path, topic_name: str, after_s: float
) -> None:
    """SIGTERM while the worker still imports and sets up (1.5 s after the launch: it once died
    of the signal, status -15, before Faust's handler was in place) and while it joins its
    consumer group for the first time (2.2 s: Faust's stop then crashed it with SIGSEGV in
    about one run of twenty; it now exits at once, having read nothing): status 0."""
    topic, result, name = f"{topic_name}.in", f"{topic_name}.out", f"{topic_name}-early"
    ensure_topics(bootstrap, [TopicSpec(topic, 2)])
    query = tmp_path / "q.cql"
    query.write_text(FILTER.format(topic=topic, name=name, result=result))
    worker = WorkerProcess(query, bootstrap=bootstrap, state_dir=tmp_path / "s", worker_id="w1")
    time.sleep(after_s)
    assert worker.stop() == 0, worker.log_tail()


def test_a_shed_join_gives_exactly_the_join_of_the_kept_records(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    a, b, result = f"{topic_name}.a", f"{topic_name}.b", f"{topic_name}.out"
    ensure_topics(bootstrap, [TopicSpec(a, 2), TopicSpec(b, 2)])
    query = tmp_path / "join.cql"
    query.write_text(JOIN.format(a=a, b=b, name=f"{topic_name}-j", result=result))
    plan = load_plan(str(query))
    shares = {"a": 0.5, "b": 0.7}
    publish_shed(bootstrap, plan.name, shares, "test", issuer="test")
    worker = WorkerProcess(query, bootstrap=bootstrap, state_dir=tmp_path / "s", worker_id="j1")
    try:
        wait_keeping(worker, "a", 0.5)
        produce(bootstrap, a, packets(1, 2_000, 60), None, keyed=True)
        produce(bootstrap, b, packets(2, 2_000, 60), None, keyed=True)
        in_a, in_b = stored(bootstrap, a), stored(bootstrap, b)
        exact = oracle_join(in_a, in_b)
        shed = oracle_join(kept(plan.name, "a", a, 0.5, in_a), kept(plan.name, "b", b, 0.7, in_b))
        want = Counter({(s, pa["dst"], pb["dst"]): n for (s, (ka, kb)), n in shed.items()
                        for pa, pb in [(dict(ka), dict(kb))]})  # fmt: skip
        assert sum(want.values()) > 500
        wait_for_count(bootstrap, result, sum(want.values()), 90.0, [worker])
        time.sleep(3.0)  # nothing more comes
        status = worker.status()["shedding"]
    finally:
        code = worker.stop()
    assert code == 0, worker.log_tail()
    got = signed_result_rows(bootstrap, result, plan.output_schema, ("a_dst", "b_dst"))
    assert got == want
    exact_pairs = {(dict(ka)["dst"], dict(kb)["dst"]) for (s, (ka, kb)) in exact if s > 0}
    assert {(x, y) for (s, x, y) in got if s > 0} <= exact_pairs  # precision 1.0
    assert status["active"] and status["reason"] == "test"
    assert status["boxes"]["a"]["dropped"] > 0 and status["boxes"]["b"]["keep"] == 0.7
