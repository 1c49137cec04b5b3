"""Restoring the state of newly assigned partitions off the event loop (issue 16).

A rebalance hands a worker partitions whose state (windows, join indexes, exactly-once positions
and outboxes) is in the state topic. Reading it back takes seconds when the state is large; done
inside the assignment handler, as before, it stopped the event loop for as long: every other
partition of the worker, the status page, the commit timer and the producer's callbacks waited.

Here the handler only holds the newly assigned partitions back on the consumer (their records
wait in the broker) and starts one pass over the state topic for every unit of every agent, in a
thread. Every new partition waits, not only those of units with state: an ingest agent that ran
ahead would write envelopes for units whose stored state may turn out unusable, and a worker
that stops for that (exit 78) must stop before writing anything, as it did when the restore
blocked the loop (``tests/integration/test_state_restore.py``). Partitions the worker kept
through the rebalance go on.
When the pass returns, the units are installed on the loop in one synchronous step and their
partitions let go. Faust's own resumption at the end of the rebalance cannot let them go early
(``BulkConsumer.resume_partitions`` leaves partitions being restored alone), and a pass that a
newer rebalance overtook is dropped: that rebalance restores the units it still assigns.
Progress: the pass's counts on the status page (``state.restore``, ``done`` once installed) and
in the log every few seconds (:mod:`processors.runtime.state_scan`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from faust.types import TP

from processors.runtime.context import EXIT_AGENT_FAILED, EXIT_OUTPUT_FAILED, stop_worker
from processors.runtime.state import StateSnapshots

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Wanted:
    """A unit to restore: its agent, its partition and the agent's input topics."""

    agent: str
    partition: int
    topics: frozenset[str]

    def tps(self) -> set[TP]:
        return {TP(topic, self.partition) for topic in self.topics}


class Party(Protocol):
    """What keeps restored units: an agent's partition units, the exactly-once protocol."""

    def wanted(self, assigned: set[TP]) -> list[Wanted]:
        """The units of ``assigned`` that are not restored yet."""
        ...

    def install(self, units: list[Wanted]) -> None:
        """Restore ``units`` now, from the snapshots' adopted records (on the event loop)."""
        ...


async def in_daemon_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a daemon thread: a pass stuck on an unreachable broker must not keep a
    stopping worker alive, as the default executor's threads would."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = fn(), None
        except BaseException as exc:  # handed to the awaiting task
            result, error = None, exc
        loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="streamon-restore", daemon=True).start()
    return await done


class Restorer:
    """Restores, for every party, the units of each new assignment in one threaded pass."""

    def __init__(self, snapshots: StateSnapshots, consumer: Callable[[], Any]) -> None:
        self.snapshots = snapshots
        self.consumer = consumer
        self.parties: list[Party] = []
        self.passes = 0
        #: the assignment as of the latest rebalance (what is new in the next one waits)
        self.assigned: set[TP] = set()
        #: units of passes not installed yet (the status page)
        self.pending = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, party: Party) -> None:
        self.parties.append(party)

    def connect(self, app: Any) -> None:
        """Start a pass at each assignment. Connect before the agents' own receivers."""

        async def on_assigned(sender: Any, assigned: Any, **_: Any) -> None:
            self.start(set(assigned))

        app.on_partitions_assigned.connect(on_assigned)
        self._receiver = on_assigned  # the signal holds a weak reference

    def start(self, assigned: set[TP]) -> asyncio.Task[None] | None:
        """Hold back the new partitions of ``assigned`` and those whose units need their state,
        and start their pass (None: nothing to restore)."""
        self.passes += 1
        new, self.assigned = assigned - self.assigned, set(assigned)
        wanted = [(party, party.wanted(assigned)) for party in self.parties]
        units = sorted({(u.agent, u.partition) for _, some in wanted for u in some})
        if not units:
            return None
        tps = ({tp for _, some in wanted for u in some for tp in u.tps()} | new) & assigned
        self.consumer().hold_for_restore(tps, self.passes)
        self.pending += len(units)
        log.info("restoring %d units in the background; partitions %s wait for them",
                 len(units), sorted(f"{tp.topic}[{tp.partition}]" for tp in tps))  # fmt: skip
        task = asyncio.ensure_future(self._restore(self.passes, wanted, units, tps))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _restore(
        self,
        restore_pass: int,
        wanted: list[tuple[Party, list[Wanted]]],
        units: list[tuple[str, int]],
        tps: set[TP],
    ) -> None:
        try:
            found = await in_daemon_thread(lambda: self.snapshots.scan(units))
        except Exception as exc:
            stop_worker(
                f"reading the state of {len(units)} units back from {self.snapshots.topic} "
                f"failed: {exc!r}; the worker stops (a supervisor restarts it)",
                EXIT_OUTPUT_FAILED,
            )
        self.pending -= len(units)
        try:
            consumer = self.consumer()
            if getattr(consumer, "should_stop", False):
                return  # the worker is stopping: the next owner restores these units
            if restore_pass == self.passes:  # else a newer rebalance restores what it assigns
                self._install(consumer, wanted, found)
            consumer.restore_ended(tps, restore_pass)
        except Exception as exc:  # a bug: its partitions would otherwise wait for ever
            stop_worker(f"installing restored state failed: {exc!r}", EXIT_AGENT_FAILED)

    def _install(
        self, consumer: Any, wanted: list[tuple[Party, list[Wanted]]], found: dict[str, Any]
    ) -> None:
        try:
            held = set(consumer.assignment())
        except Exception:  # the consumer stopped meanwhile
            return
        self.snapshots.adopt(found)
        try:
            for party, some in wanted:
                party.install([u for u in some if u.tps() & held])
        finally:
            self.snapshots.discard(found)
        self.snapshots.restore["done"] = True

    def stats(self) -> dict[str, int]:
        return {"passes": self.passes, "pending_units": self.pending}
