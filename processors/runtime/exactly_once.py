"""Exactly-once processing (``Query.processing_guarantee("exactly_once")``) on any Kafka broker.

Kafka transactions would commit outputs, state and input offsets together, but tansu 0.6 shows
aborted records to ``read_committed`` readers (docs/reliability.md), so streamon commits with a
transactional outbox instead, per *unit* (one agent's work on one input partition):

1. While an epoch runs, everything a unit writes (envelopes, result records, dead letters) goes
   to its :class:`~processors.runtime.outbox.Outbox`, not to the broker.
2. At a commit, each unit's record is written to the query's state topic: its input positions,
   its stage snapshot (stateful units) and the outbox, header last. Once the broker has
   acknowledged it, the epoch is committed: one header record is the atomic step.
3. Then the outboxes are sent, every message tagged ``<unit>/<epoch>/<index>``
   (:mod:`processors.runtime.tail_tags`), and acknowledged before the consumer group commits
   offsets, which never pass the stored positions (:data:`faust_bulk.CommitCap`).
4. A unit that starts (after a crash, at a rebalance) reads its record: state and positions come
   back, input below the positions is skipped, and the last epoch's outbox is sent again except
   what its partitions already hold, found by the tags at their tails.

So an input counts as processed exactly when its outputs are committed (nothing lost), and an
epoch's outputs are fixed before the first is sent and sent until each is found once (nothing
repeated), whatever a restarted unit would compute differently. The price: each hop's outputs
wait for the commit (``commit_interval_s``), and each is written twice (state topic, then output).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from faust.types import TP

from processors.core.batch import VarColumn
from processors.core.state_codec import SnapshotError
from processors.runtime.context import EXIT_BAD_STATE, fatal, stop_worker
from processors.runtime.kafka_security import KafkaSecurity
from processors.runtime.outbox import Outbox, resolve_partitions
from processors.runtime.producer import SIGN_HEADER, RecordProducer
from processors.runtime.restore import Restorer, Wanted
from processors.runtime.state import StateRestoreError, StateSnapshots, StoredSnapshot
from processors.runtime.tail_tags import TAG_HEADER, count_written, tag
from topics.admin import partition_counts

log = logging.getLogger(__name__)

Unit = tuple[str, int]  # (agent, input partition)
#: how often units commit an epoch (and so how long outputs wait at each hop)
COMMIT_INTERVAL_S = 1.0
_DELETE = (SIGN_HEADER, b"-1")
#: the floor of a revoked partition's input: above every offset, so that all of it is skipped
REVOKED_FLOOR = 1 << 62


@dataclass
class _Agent:
    in_topics: frozenset[str]
    #: a stateful agent's PartitionUnits (snapshots are taken from it at commits)
    units: Any = None


class ExactlyOnce:
    """The exactly-once commit protocol of one worker. It stands in for the output producer of
    the agents (``produce``/``produce_many``/``flush``) and for the stateful agents' snapshot
    store (``load``)."""

    def __init__(
        self,
        producer: RecordProducer,
        snapshots: StateSnapshots,
        bootstrap: str,
        security: KafkaSecurity | None = None,
        reset_state: bool = False,
    ) -> None:
        self.producer = producer
        self.snapshots = snapshots
        self.bootstrap = bootstrap
        self.security = security
        self.reset_state = reset_state
        self.agents: dict[str, _Agent] = {}
        self._current: Unit | None = None
        self._outboxes: dict[Unit, Outbox] = {}
        self._progress: dict[Unit, dict[str, int]] = {}  # stateless units, since the last commit
        self._base: dict[Unit, dict[str, int]] = {}  # stateless units, last committed
        self._restored: dict[Unit, StoredSnapshot | None] = {}
        #: (topic, partition)s revoked and not assigned again: blocks of them that agents took
        #: before the rebalance are not this worker's to process any more (:meth:`forget`)
        self._revoked: set[tuple[str, int]] = set()
        #: (topic, partition) -> committed next offset: the consumer group never commits past it
        self.committed: dict[tuple[str, int], int] = {}
        self._counts: dict[str, int] = {}
        self._lock = asyncio.Lock()
        self._last_epoch = 0
        self.epochs = self.resent = self.found_sent = 0

    # -- registration and the consumer group's limit ------------------------------------------

    def register(self, agent: str, in_topics: Iterable[str], units: Any = None) -> None:
        """An agent whose outputs go through the protocol; ``units``: a stateful agent's
        :class:`~processors.runtime.partitions.PartitionUnits`."""
        self.agents[agent] = _Agent(frozenset(in_topics), units)

    def cap(self, tp: Any) -> int | None:
        """The group may commit ``tp`` up to what a unit stored (nothing before that); topics
        outside the protocol (statistics, control) have no limit."""
        if not any(tp.topic in a.in_topics for a in self.agents.values()):
            return None
        return self.committed.get((tp.topic, tp.partition), 0)

    # -- the producer the agents see ----------------------------------------------------------

    @contextlib.contextmanager
    def unit(self, agent: str, partition: int) -> Iterator[None]:
        """Everything produced inside belongs to ``agent``'s unit of ``partition``. Agents
        produce synchronously inside, so no other unit's output can interleave."""
        outer, self._current = self._current, (agent, partition)
        try:
            yield
        finally:
            self._current = outer

    def _outbox(self) -> Outbox | None:
        if self._current is None:
            return None
        box = self._outboxes.get(self._current)
        if box is None:
            box = self._outboxes[self._current] = Outbox()
        return box

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Inside a unit: into its outbox. Outside (timers: event-time marks, statistics):
        straight to the broker, as in at-least-once mode."""
        box = self._outbox()
        if box is None:
            self.producer.produce(topic, value, key, partition, timestamp_ms)
            return
        keys = None if key is None or partition is not None else VarColumn.from_values([key])
        where = resolve_partitions(1, keys, partition, lambda: self._count(topic))
        box.add(topic, value, key, int(where[0]), timestamp_ms)

    def produce_many(
        self,
        topic: str,
        buf: np.ndarray,
        offsets: np.ndarray,
        keys: VarColumn | None = None,
        partition: int | None = None,
        signs: np.ndarray | None = None,
    ) -> None:
        box = self._outbox()
        if box is None:
            self.producer.produce_many(topic, buf, offsets, keys, partition, signs)
            return
        n = len(offsets) - 1
        where = resolve_partitions(n, keys, partition, lambda: self._count(topic))
        deletes = None if signs is None else np.asarray(signs) < 0
        box.add_many(topic, buf, offsets, where, keys, deletes)

    def _count(self, topic: str) -> int:
        count = self._counts.get(topic)
        if count is None:
            got = partition_counts(self.bootstrap, [topic], security=self.security)
            count = self._counts[topic] = got[topic]
        return count

    def done(self, agent: str, partition: int, topic: str, next_offset: int) -> None:
        """A stateless unit processed its input up to ``next_offset`` (exclusive)."""
        self._progress.setdefault((agent, partition), {})[topic] = next_offset

    def floor(self, agent: str, topic: str, partition: int) -> int:
        """The first offset of ``topic[partition]`` the unit has not committed: input below it
        is skipped (the group's offsets may trail the stored positions by one commit). A
        revoked partition's input is all skipped, and its record is not read."""
        if (topic, partition) in self._revoked:
            return REVOKED_FLOOR
        stored = self.load(agent, partition)
        return 0 if stored is None else stored.positions.get(topic, 0)

    # -- commit -------------------------------------------------------------------------------

    async def flush(self) -> None:
        await self.commit()

    async def commit(self) -> None:
        """Store every unit that moved (record, then outbox), then send the outboxes."""
        async with self._lock:
            try:
                staged = self._stage()
                if not staged:
                    return
                await self.producer.flush()  # the commit point of every staged unit
                for unit, epoch, outbox, _ in staged:
                    self._send(unit, epoch, outbox, {})
                await self.producer.flush()
                for (name, partition), epoch, outbox, _ in staged:
                    if len(outbox):  # goes out with the next flush; if lost, the tails tell
                        self.snapshots.note_sent(name, partition, epoch)
            except Exception as exc:
                fatal("exactly-once commit", exc)
            for (_, partition), _, _, positions in staged:
                for topic, at in positions.items():
                    self.committed[(topic, partition)] = at
            self.epochs += len(staged)

    def _stage(self) -> list[tuple[Unit, int, Outbox, dict[str, int]]]:
        units = set(self._outboxes) | set(self._progress)
        for name, agent in self.agents.items():
            if agent.units is not None:
                units.update((name, p) for p, held in agent.units.held.items() if held.dirty)
        staged = []
        for unit in sorted(units):
            name, partition = unit
            outbox = self._outboxes.pop(unit, None) or Outbox()
            progress = self._progress.pop(unit, {})
            if not self._holds(unit):  # worked on after its partition was revoked: dropped
                continue
            stateful = self.agents[name].units
            if stateful is not None:
                held = stateful.held.get(partition)
                if held is None:  # dropped at a revocation, which committed it first
                    continue
                positions, data = dict(held.positions), held.unit.snapshot_parts()
                held.dirty = False
            else:
                if unit not in self._restored:  # never commit over a record not read yet
                    self.load(name, partition)
                positions = {**self._base.get(unit, {}), **progress}
                self._base[unit] = positions
                data = b""
            epoch = self._last_epoch = max(time.time_ns(), self._last_epoch + 1)
            self.snapshots.save(name, partition, positions, data, outbox.encode(), epoch)
            staged.append((unit, epoch, outbox, positions))
        return staged

    def _send(
        self, unit: Unit, epoch: int, outbox: Outbox, written: dict[tuple[str, int], int]
    ) -> None:
        """Send ``outbox`` tagged with its unit and epoch, skipping, per partition, the first
        ``written`` messages (those already there: the partition holds a prefix)."""
        plain = [(TAG_HEADER, tag(f"{unit[0]}/{unit[1]}", epoch))]
        deleting = [*plain, _DELETE]
        left = {target: n for target, n in written.items() if n > 0}
        produce = self.producer.produce_tagged
        for topic, partition, key, value, ts, delete in outbox:
            if left:
                n = left.get((topic, partition), 0)
                if n:
                    left[(topic, partition)] = n - 1
                    self.found_sent += 1
                    continue
            produce(topic, value, key, partition, ts, deleting if delete else plain)

    # -- restore ------------------------------------------------------------------------------

    def load(self, agent: str, partition: int) -> StoredSnapshot | None:
        """``agent``'s record for ``partition`` (once per holding): its last epoch's outbox is
        sent again, minus what already arrived, before anything else of the unit runs."""
        unit = (agent, partition)
        if unit in self._restored:
            return self._restored[unit]
        try:
            stored = self.snapshots.load(agent, partition)
            if stored is not None:
                try:
                    outbox = Outbox.decode(stored.outbox)
                except SnapshotError as exc:
                    raise stored.error(f"outbox: {exc}") from exc
                if not stored.sent:
                    self._resend(unit, stored.epoch, outbox)
        except StateRestoreError as exc:
            if not self.reset_state:
                stop_worker(
                    f"agent {agent}, partition {partition}: {exc}. The worker stops rather than "
                    "lose or repeat output; `streamon worker --reset-state` starts such "
                    "partitions empty (from the committed input offsets)",
                    EXIT_BAD_STATE,
                )
            log.warning("agent %s, partition %d: %s; --reset-state: starting it empty",
                        agent, partition, exc)  # fmt: skip
            stored = None
        self._restored[unit] = stored
        if stored is not None:
            self._base[unit] = dict(stored.positions)
            for topic, at in stored.positions.items():
                self.committed[(topic, partition)] = at
        return stored

    def _resend(self, unit: Unit, epoch: int, outbox: Outbox) -> None:
        if not len(outbox):
            return
        name = f"{unit[0]}/{unit[1]}"
        written = {
            (topic, q): count_written(self.bootstrap, topic, q, name, epoch, self.security)
            for topic, q in sorted(outbox.targets())
        }
        before = self.found_sent
        self._send(unit, epoch, outbox, written)
        self.producer.flush_blocking()
        there = self.found_sent - before
        self.resent += len(outbox) - there
        log.info("%s: epoch %d's outputs sent again after a restart: %d of %d (the other %d "
                 "had arrived)", name, epoch, len(outbox) - there, len(outbox), there)  # fmt: skip

    def _holds(self, unit: Unit) -> bool:
        name, partition = unit
        return not any((t, partition) in self._revoked for t in self.agents[name].in_topics)

    def forget(self, partitions: Iterable[Any]) -> None:
        """Revoked partitions (just committed): their next owner restores them from the stored
        records. Anything their units do after that commit, until the partition is assigned
        here again, is dropped unsent: the new owner redoes it from the stored positions, and
        a record written here would overwrite the new owner's and delete its state's chunks
        (an agent may still hold a block of the partition it took before the rebalance)."""
        for tp in partitions:
            for name, agent in self.agents.items():
                if tp.topic in agent.in_topics:
                    unit = (name, tp.partition)
                    for kept in (self._restored, self._base, self._outboxes, self._progress):
                        kept.pop(unit, None)
                    self._revoked.add((tp.topic, tp.partition))
            self.committed.pop((tp.topic, tp.partition), None)

    def assigned(self, partitions: Iterable[Any]) -> None:
        """Partitions (re)assigned to this worker: their units work again."""
        self._revoked.difference_update((tp.topic, tp.partition) for tp in partitions)

    def wanted(self, assigned: set[TP]) -> list[Wanted]:
        """The units of ``assigned`` not restored yet (the restorer reads them in one pass)."""
        return sorted(
            {
                Wanted(name, tp.partition, agent.in_topics)
                for tp in assigned
                for name, agent in self.agents.items()
                if tp.topic in agent.in_topics and (name, tp.partition) not in self._restored
            },
            key=lambda u: (u.agent, u.partition),
        )

    def install(self, units: list[Wanted]) -> None:
        for u in units:
            self.load(u.agent, u.partition)

    def connect(self, app: Any, restorer: Restorer) -> None:
        """Restore units (through ``restorer``) when their partitions are assigned; commit,
        then forget, revoked ones. Add to the restorer before the agents do, so that a unit
        of a stateful agent finds its record (and sent outbox) here when it is made."""
        restorer.add(self)

        async def on_revoked(sender: Any, revoked: Any, **_: Any) -> None:
            await self.commit()
            self.forget(revoked)

        async def on_assigned(sender: Any, assigned: Any, **_: Any) -> None:
            self.assigned(assigned)

        @app.timer(COMMIT_INTERVAL_S)
        async def commit_epochs() -> None:
            # on its own clock: the consumer group calls its commit hooks only when it has
            # offsets to commit, and with every input capped at the stored positions it has
            # none until this commit stores them
            await self.commit()

        app.on_partitions_revoked.connect(on_revoked)
        app.on_partitions_assigned.connect(on_assigned)
        app.commit_cap = self.cap
        self._receivers = (on_revoked, on_assigned, commit_epochs)

    def stats(self) -> dict[str, int]:
        return {"epochs": self.epochs, "resent": self.resent, "found_sent": self.found_sent}
