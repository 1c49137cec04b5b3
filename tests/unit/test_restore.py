"""Restores off the event loop (processors/runtime/restore.py), in process: a real (never
started) BulkConsumer, real PartitionUnits and StateSnapshots over a recorded state topic.

- While the pass reads the topic in its thread, the event loop runs on, the new partitions
  (stateless agents' too) stay paused even when Faust resumes the whole assignment (as its
  recovery does at the end of every rebalance), and no unit exists yet; once the pass returns,
  every unit holds its stored state and its partitions are fetched again.
- A pass that a newer rebalance overtook installs nothing and does not let go of partitions the
  newer pass holds.
- A pass that fails stops the worker, naming the state topic.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from faust_helpers import TP, make_consumer, run
from test_state_snapshots import Log

from processors.runtime import restore as restore_module
from processors.runtime import state_scan
from processors.runtime.partitions import PartitionUnits
from processors.runtime.restore import Restorer
from processors.runtime.state import StateSnapshots

TOPIC = "in"
ASSIGNED = {TP(TOPIC, 0), TP(TOPIC, 1)}
#: a partition of a stateless agent (an ingest's input): new, so it waits for the pass as well
RAW = TP("raw", 0)


class Unit:
    """A stateful unit that keeps the bytes it was restored from."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.state = b""

    def load_snapshot(self, data: bytes) -> None:
        self.state = data

    def snapshot_parts(self) -> list[bytes]:
        return [self.state]


def stored_state(monkeypatch: pytest.MonkeyPatch, *gates: threading.Event) -> Log:
    """A state topic holding one snapshot per partition; the n-th pass over it waits for
    ``gates[n]`` (the event loop sets it)."""
    log = Log()
    writer = StateSnapshots("unused:9092", "state", log)  # type: ignore[arg-type]
    for p in (0, 1):
        writer.save("join", p, {TOPIC: 10 + p}, b"state-%d" % p)
    passes = iter(gates)

    def windows(*_: object, **__: object) -> Iterator[list[Any]]:
        assert next(passes).wait(10), "the event loop never got to run during the pass"
        yield log.records

    monkeypatch.setattr(state_scan, "tail_windows", windows)
    return log


def setup(log: Log) -> tuple[Any, PartitionUnits, Restorer]:
    _, consumer = make_consumer()
    consumer.assignment = lambda: set(ASSIGNED)  # type: ignore[method-assign]
    consumer._set_active_tps(set(ASSIGNED))
    snapshots = StateSnapshots("unused:9092", "state", log)  # type: ignore[arg-type]
    units = PartitionUnits("join", [TOPIC], Unit, snapshots)
    restorer = Restorer(snapshots, lambda: consumer)
    restorer.add(units)
    return consumer, units, restorer


def test_the_loop_runs_on_while_state_is_read_and_partitions_wait_for_it(monkeypatch) -> None:
    gate = threading.Event()
    consumer, units, restorer = setup(stored_state(monkeypatch, gate))

    async def check() -> None:
        consumer.assignment = lambda: ASSIGNED | {RAW}  # type: ignore[method-assign]
        consumer._set_active_tps(ASSIGNED | {RAW})
        task = restorer.start(ASSIGNED | {RAW})
        assert task is not None
        await asyncio.sleep(0.05)  # the pass is blocked in its thread; the loop is not
        assert not task.done() and units.held == {}
        assert consumer.restoring == dict.fromkeys(ASSIGNED | {RAW}, 1)
        consumer.resume_partitions(ASSIGNED | {RAW})  # Faust's recovery, at a rebalance's end
        assert consumer._get_active_partitions() == set()
        assert restorer.stats() == {"passes": 1, "pending_units": 2}
        gate.set()
        await task
        assert {p: h.unit.state for p, h in units.held.items()} == {0: b"state-0", 1: b"state-1"}
        assert {p: h.positions for p, h in units.held.items()} == {0: {TOPIC: 10}, 1: {TOPIC: 11}}
        assert consumer.restoring == {}
        assert consumer._get_active_partitions() == ASSIGNED | {RAW}
        assert restorer.snapshots.restore["done"] and restorer.snapshots._fetched == {}
        assert restorer.stats() == {"passes": 1, "pending_units": 0}

    run(check())


def test_a_pass_overtaken_by_a_rebalance_installs_nothing_and_keeps_the_newer_hold(
    monkeypatch,
) -> None:
    gates = threading.Event(), threading.Event()
    consumer, units, restorer = setup(stored_state(monkeypatch, *gates))

    async def check() -> None:
        first = restorer.start(set(ASSIGNED))
        await asyncio.sleep(0.05)  # the first pass is in its thread, waiting for gates[0]
        second = restorer.start({TP(TOPIC, 1)})  # the next rebalance keeps partition 1 only
        consumer.assignment = lambda: {TP(TOPIC, 1)}  # type: ignore[method-assign]
        assert first is not None and second is not None
        gates[0].set()
        await first
        assert units.held == {}  # the first pass's records are not used
        assert consumer.restoring == {TP(TOPIC, 1): 2}  # still held, by the second pass
        gates[1].set()
        await second
        assert list(units.held) == [1] and units.held[1].unit.state == b"state-1"
        assert consumer.restoring == {} and TP(TOPIC, 1) in consumer._get_active_partitions()
        assert TP(TOPIC, 0) not in consumer._get_active_partitions()  # revoked: stays paused

    run(check())


def test_a_failed_pass_stops_the_worker_naming_the_state_topic(monkeypatch) -> None:
    def windows(*_: object, **__: object) -> Iterator[list[Any]]:
        raise TimeoutError("broker unreachable")
        yield []

    monkeypatch.setattr(state_scan, "tail_windows", windows)
    stops: list[tuple[str, int]] = []

    class Stopped(Exception):
        pass

    def stop(message: str, code: int) -> None:
        stops.append((message, code))
        raise Stopped  # the real one ends the process

    monkeypatch.setattr(restore_module, "stop_worker", stop)
    consumer, _, restorer = setup(Log())

    async def check() -> None:
        task = restorer.start(set(ASSIGNED))
        assert task is not None
        with pytest.raises(Stopped):
            await task

    run(check())
    assert len(stops) == 1 and "from state" in stops[0][0] and "unreachable" in stops[0][0]
    assert stops[0][1] == restore_module.EXIT_OUTPUT_FAILED


def test_a_revoked_partition_is_not_held_until_it_is_assigned_again(monkeypatch) -> None:
    """A block the agent took before a rebalance may come after it: the stateful agent asks
    ``holds`` first and leaves a revoked partition's block to its new owner (a unit made for
    it here would restore the new owner's state and save over it)."""
    opened = threading.Event()
    opened.set()
    log = stored_state(monkeypatch, opened)
    app, _ = make_consumer()
    units = PartitionUnits("join", [TOPIC], Unit, StateSnapshots("unused:9092", "state", log))  # type: ignore[arg-type]
    flushed = []

    async def flush() -> None:
        flushed.append(len(log.records))

    async def check() -> None:
        units.connect(app, flush)
        units.get(0).dirty = True
        written = len(log.records)
        await app.on_partitions_revoked.send(ASSIGNED | {RAW})
        assert flushed == [len(log.records)] > [written]  # saved,
        assert units.held == {}  # then forgotten
        assert not units.holds(0) and not units.holds(1)
        await app.on_partitions_assigned.send({TP(TOPIC, 1)})
        assert units.holds(1) and not units.holds(0)

    run(check())
