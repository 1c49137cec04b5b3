"""The memory limit (processors/runtime/backpressure.py) over real stage chains, in process: the
consumer is a recorder of what is held back and let go.

A 2-way join whose input s is slow: r's deltas wait in the MJoin (they cannot be joined before
s has shown their time). Over the limit, r's partition is held back and s is not (pausing the
input waited for would stop the join for good); once s catches up and r's deltas are joined,
r is let go. Each pause and release is an event of the agent that reads the input.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from test_state_snapshots import readings

from processors.core.query import Query
from processors.physical.runner import QueryRunner
from processors.runtime.backpressure import MemoryLimit
from processors.runtime.partitions import Held
from topics.avro import load_schema


class Consumer:
    def __init__(self) -> None:
        self.held: set[tuple[str, int]] = set()
        self.calls: list[tuple[str, list[tuple[str, int]]]] = []

    def hold_back(self, tps) -> None:
        pairs = sorted((tp.topic, tp.partition) for tp in tps)
        self.held.update(pairs)
        self.calls.append(("hold", pairs))

    def let_go(self, tps) -> None:
        pairs = sorted((tp.topic, tp.partition) for tp in tps)
        self.held.difference_update(pairs)
        self.calls.append(("go", pairs))


def join_plan():
    q = Query("mem")
    for s in ("r", "s"):
        q.stream(s, topic=f"{s}-in", schema=load_schema("reading"), key="sensor_id",
                 timestamp="ts", partitions=1)  # fmt: skip
        q.window(s, range_ms=100)
    q.join("r.sensor_id", "s.sensor_id")
    q.select(r_ts="r.ts", s_ts="s.ts")
    return q.memory_limit(1).into("mem-out").build()


def test_the_input_that_runs_ahead_is_paused_and_the_slow_one_never() -> None:
    plan = join_plan()
    runner = QueryRunner(plan)
    chain = runner.chains["mjoin"]
    units = SimpleNamespace(held={3: Held(chain)})
    consumer = Consumer()
    limit = MemoryLimit(plan.memory_limit_mb << 20, lambda: consumer)
    topics = {"r": "streamon.mem.delta.r", "s": "streamon.mem.delta.s"}
    limit.watch("mjoin", units, topics)  # type: ignore[arg-type]

    runner.push("s", readings(10, seed=1, start=0))  # s shows time 9, then nothing
    now = 0.0
    for i in range(12):  # r runs far ahead: ~2 MB of deltas wait for s
        runner.push("r", readings(5_000, seed=2 + i, start=10 + i * 5_000))
        now += 1
        limit.check(now)
    assert chain.waiting_bytes().keys() == {"r"} and chain.held_bytes() > 1 << 20
    assert consumer.held == {("streamon.mem.delta.r", 3)}  # never s, the input waited for
    assert limit.stats()["paused"] == ["r[3]"]
    events = limit.take_events("mjoin")
    assert [(e["partition"], e["change"]) for e in events] == [(3, "input r paused")]

    out = runner.push("s", readings(10, seed=50, start=10**6))  # s catches up: r is joined
    assert out and "r" not in chain.waiting_bytes()  # now s's last delta waits for r
    limit.check(now + 1)
    assert ("streamon.mem.delta.r", 3) not in consumer.held
    assert ("go", [("streamon.mem.delta.r", 3)]) in consumer.calls
    assert "input r resumed" in [e["change"] for e in limit.take_events("mjoin")]
    assert limit.take_events("mjoin") == []


def test_state_that_no_pause_shrinks_is_reported_not_dropped(caplog) -> None:
    plan = join_plan()
    runner = QueryRunner(plan)
    chain = runner.chains["mjoin"]
    consumer = Consumer()
    limit = MemoryLimit(1_000, lambda: consumer)  # a limit the windows alone exceed
    limit.watch("mjoin", SimpleNamespace(held={0: Held(chain)}), {"r": "x", "s": "y"})  # type: ignore[arg-type]
    ts = np.arange(0, 50, dtype=np.int64)
    for s in ("r", "s"):
        runner.push(s, readings(len(ts), seed=7, start=0))
    runner.push("r", readings(1, seed=8, start=60))
    runner.push("s", readings(1, seed=9, start=60))
    with caplog.at_level("WARNING"):
        limit.check(100.0)
        limit.check(101.0)  # once a minute, not at every check
    assert consumer.calls == []
    assert sum("no input ahead to pause" in r.message for r in caplog.records) == 1
    assert chain.held_bytes() > 1_000
