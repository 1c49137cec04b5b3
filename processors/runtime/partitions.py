"""What an agent keeps per partition, in one place for every kind of stage agent.

A stage agent runs one *unit* per partition it holds: a stage (stateless steps) or a chain of
stages (stateful steps). :class:`PartitionUnits` makes a unit when its partition is assigned
(a stateful one restored from its latest snapshot by :mod:`processors.runtime.restore`) or on
the partition's first batch, drops units of partitions the worker no
longer holds after a rebalance, snapshots changed stateful units before offsets commit, and turns
the plan changes units report in their statistics into the agent's Stats events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from faust.types import TP

from processors.core.state_codec import SnapshotError
from processors.runtime.context import EXIT_BAD_STATE, stop_worker
from processors.runtime.restore import Restorer, Wanted
from processors.runtime.state import StateRestoreError, StateSnapshots

if TYPE_CHECKING:
    from processors.runtime.exactly_once import ExactlyOnce

log = logging.getLogger(__name__)

#: snapshot bytes queued before the producer is flushed, while a save goes through the units
FLUSH_AFTER_BYTES = 16 << 20


@dataclass
class Held:
    """A partition's unit with the input positions its state reflects."""

    unit: Any
    positions: dict[str, int] = field(default_factory=dict)
    #: input the restored snapshot already covers (topic -> first offset not in it)
    restored_from: dict[str, int] = field(default_factory=dict)
    dirty: bool = False


class PartitionUnits:
    """The units of one agent by partition. With ``snapshots`` the units are stateful: restored
    when a partition is first seen, saved by :meth:`save`, forgotten when revoked (their new
    owner restores them). Without, a unit lives while its partition is held and keeps what it
    learned (a stateless stage's plan is re-learned by a new owner, nothing else is lost)."""

    def __init__(
        self,
        agent: str,
        in_topics: Iterable[str],
        make: Callable[[int], Any],
        snapshots: StateSnapshots | ExactlyOnce | None = None,
        reset_state: bool = False,
    ) -> None:
        self.agent = agent
        self.in_topics = set(in_topics)
        self.make = make
        self.snapshots = snapshots
        self.reset_state = reset_state
        self.held: dict[int, Held] = {}
        #: partitions revoked and not assigned again: a block of one that the agent took before
        #: the rebalance is its new owner's to process (a unit made for it here would save
        #: over the new owner's state)
        self.revoked: set[int] = set()
        self._changes_seen: dict[tuple[int, str], int] = {}

    def holds(self, partition: int) -> bool:
        """Whether ``partition``'s input is this worker's to process."""
        return partition not in self.revoked

    def get(self, partition: int) -> Held:
        held = self.held.get(partition)
        if held is None:
            held = self.held[partition] = self._start(partition)
        return held

    def _start(self, partition: int) -> Held:
        unit = self.make(partition)
        if self.snapshots is None:
            return Held(unit)
        try:
            stored = self.snapshots.load(self.agent, partition)
            if stored is None:
                return Held(unit)
            try:
                unit.load_snapshot(stored.data)
            except SnapshotError as exc:
                raise stored.error(str(exc)) from exc
        except StateRestoreError as exc:
            if not self.reset_state:
                stop_worker(
                    f"agent {self.agent}, partition {partition}: {exc}. The worker stops rather "
                    "than lose or invent state; `streamon worker --reset-state` starts such "
                    "partitions empty (from the committed input offsets)",
                    EXIT_BAD_STATE,
                )
            log.warning(
                "agent %s, partition %d: %s; --reset-state: starting this partition empty",
                self.agent, partition, exc,
            )  # fmt: skip
            return Held(self.make(partition))
        log.info("%s[%d]: state restored at positions %s", self.agent, partition, stored.positions)
        return Held(unit, dict(stored.positions), dict(stored.positions))

    def plan(self) -> dict[str, Any]:
        """Each held unit's statistics, by partition (the agent's plan on the status page)."""
        return {str(p): held.unit.stats() for p, held in sorted(self.held.items())}

    def events(self) -> list[dict[str, Any]]:
        """Plan changes since the previous call, from each stage's ``changes_total`` and
        ``recent_changes``; more changes than a stage remembers are counted as unreported."""
        new_events: list[dict[str, Any]] = []
        for p, held in sorted(self.held.items()):
            for stage, stats in _stage_stats(held.unit.stats()):
                total, recent = stats.get("changes_total"), stats.get("recent_changes")
                if not isinstance(total, int) or not isinstance(recent, list):
                    continue
                fresh = total - self._changes_seen.get((p, stage), 0)
                self._changes_seen[(p, stage)] = total
                if fresh <= 0:
                    continue
                shown = recent[-fresh:]
                if fresh > len(shown):
                    new_events.append({"partition": p, "unreported": fresh - len(shown)})
                new_events.extend({"partition": p, **change} for change in shown)
        return new_events

    async def save(self, flush: Callable[[], Awaitable[None]]) -> None:
        """Before offsets commit: every changed partition's state, durable. Partition by
        partition, letting the agents run in between (a join's whole state took the event loop
        for 0.1-0.3 s a commit in ``bench latency``): the offsets this commit writes were taken
        before it began, and a partition saved after more input keeps the positions it saved
        at, so a restore skips that input (``restored_from``) and nothing is counted twice."""
        if self.snapshots is None:
            return
        if not isinstance(self.snapshots, StateSnapshots):  # exactly-once: its commit takes them
            await flush()
            return
        wrote = 0
        for p, held in sorted(self.held.items()):
            if held.dirty:
                parts = held.unit.snapshot_parts()  # made piece by piece as they are written
                wrote += self.snapshots.save(self.agent, p, held.positions, parts)
                held.dirty = False
                if wrote > FLUSH_AFTER_BYTES:  # a large state is not queued whole, twice over
                    await flush()
                    wrote = 0
                else:  # the agents get a turn between partitions: one save, not one stall
                    await asyncio.sleep(0)
        if wrote:
            await flush()

    def drop(self, partitions: Iterable[int]) -> None:
        for p in partitions:
            self.held.pop(p, None)
            for key in [k for k in self._changes_seen if k[0] == p]:
                del self._changes_seen[key]

    def wanted(self, assigned: set[TP]) -> list[Wanted]:
        """Assigned partitions this agent holds no unit of yet, whose state a restore reads."""
        if self.snapshots is None:
            return []
        new = {tp.partition for tp in assigned if tp.topic in self.in_topics} - set(self.held)
        topics = frozenset(self.in_topics)
        return [Wanted(self.agent, p, topics) for p in sorted(new)]

    def install(self, units: list[Wanted]) -> None:
        """Restore ``units`` now (the restorer read their records; the agent may have
        restored one itself meanwhile, from a block fetched before its partition was held)."""
        for u in units:
            self.get(u.partition)

    def connect(
        self, app: Any, flush: Callable[[], Awaitable[None]], restorer: Restorer | None = None
    ) -> None:
        """Follow the app's rebalances (and, for stateful units, its commits). Stateful units
        are restored by ``restorer`` before their partitions are read, off the event loop;
        without one, each is restored when its partition's first block comes."""

        async def on_assigned(sender: Any, assigned: Any, **_: Any) -> None:
            held = {tp.partition for tp in assigned if tp.topic in self.in_topics}
            self.drop(set(self.held) - held)
            self.revoked -= held

        async def on_revoked(sender: Any, revoked: Any, **_: Any) -> None:
            """A partition may move to another worker: save it, then forget it."""
            mine = {tp.partition for tp in revoked if tp.topic in self.in_topics}
            await self.save(flush)
            self.drop(mine)
            self.revoked |= mine

        async def save() -> None:
            await self.save(flush)

        app.on_partitions_assigned.connect(on_assigned)
        if self.snapshots is not None and restorer is not None:
            restorer.add(self)
        if self.snapshots is not None:
            app.flush_hooks.append(save)
            app.on_partitions_revoked.connect(on_revoked)
        # keep the receivers alive: the signals hold weak references to them
        self._receivers = (on_assigned, on_revoked, save)


def _stage_stats(stats: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(stage, stats) pairs of a unit's statistics: a stage's own, or a chain's by stage."""
    if "kind" in stats:
        return [("", stats)]
    return [(str(k), v) for k, v in stats.items() if isinstance(v, dict)]
