"""Load shedding on a worker: the drop box on each input stream, and the SHED records that set
them (issue 18; docs/shedding.md).

A drop box sits where the ingest agent reads the stream's records, before they are decoded:
the place Ayad and Naughton show is best for filters (Observation 2) and joins (Observation 3),
and the cheapest one (a dropped record costs a hash, not a decode). Which records it keeps is
:mod:`processors.kernels.dropbox`'s choice, by topic, partition and offset, so the same
records are kept when they are read again at the same share.

Shares change only by SHED records on the control topic (the query's shedding controller
publishes them, :mod:`processors.runtime.shed_controller`, driven from here where the query
declares ``shed()``; a user can too, ``streamon control shed``). Every worker applies them to
its boxes; each change is logged, kept for the status page and reported once as an event on
the stats topic.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from processors.core.plan import LogicalPlan
from processors.kernels.dropbox import keep_mask, threshold, topic_word
from processors.runtime.change_log import ChangeLog
from processors.runtime.control import SHED, ControlRecord
from processors.runtime.record_block import RecordBlock
from processors.runtime.shed_controller import ShedController

log = logging.getLogger(__name__)


class DropBox:
    """The drop box of one input stream: keeps ``keep`` of its records (1: all, no work)."""

    def __init__(self, query: str, stream: str, topic: str) -> None:
        self.stream = stream
        self.topic = topic
        self.seed = np.uint64(zlib.crc32(f"{query}/{stream}".encode()))
        self._topic = topic_word(topic)
        self.keep = 1.0
        self._limit = threshold(1.0)
        self.kept = 0
        self.dropped = 0

    def set(self, keep: float) -> None:
        self.keep = min(1.0, max(0.0, float(keep)))
        self._limit = threshold(self.keep)

    def apply(self, block: RecordBlock) -> RecordBlock:
        """The records of ``block`` this box keeps (``block`` itself when it keeps all)."""
        if self.keep >= 1.0 or not len(block):
            self.kept += len(block)
            return block
        mask = self.mask(block.partition, np.asarray(block.offsets, np.int64))
        kept = int(mask.sum())
        self.kept += kept
        self.dropped += len(block) - kept
        if kept == len(block):
            return block
        return block.select(mask)

    def mask(self, partition: int, offsets: np.ndarray) -> np.ndarray:
        """Which of these offsets of ``partition`` the box keeps at its share."""
        out = np.empty(len(offsets), np.bool_)
        keep_mask(self.seed, self._topic, partition, offsets, self._limit, out)
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"topic": self.topic, "keep": self.keep, "kept": self.kept,
                "dropped": self.dropped}  # fmt: skip


#: the statistics interval of a query that sheds load: its controller decides on them
SHED_STATS_INTERVAL_S = 0.5


def stats_interval_s(plan: LogicalPlan, default: float) -> float:
    """How often a worker of ``plan`` publishes its statistics."""
    return default if plan.shedding is None else min(default, SHED_STATS_INTERVAL_S)


def offered_records(consumer: Any, topics: set[str]) -> tuple[int, int] | None:
    """What was offered so far to the partitions of ``topics`` that ``consumer`` holds: (a
    key of which partitions, their fetch high watermarks added up); None until every one has
    answered a fetch. High watermarks come with fetch responses (not ListOffsets, which the
    test broker answers wrongly), and the ingest agents go on fetching under overload."""
    try:
        tps = sorted(tp for tp in consumer.assignment() if tp.topic in topics)
        highs = [consumer.highwater(tp) for tp in tps]
    except Exception:  # not started yet, or a partition revoked meanwhile (its own thread)
        return None
    if not tps or any(h is None for h in highs):
        return None
    return hash(tuple((tp.topic, tp.partition) for tp in tps)), sum(int(h) for h in highs)


class Shedding:
    """One worker's drop boxes, set by the query's SHED records."""

    def __init__(
        self,
        query: str,
        streams: Iterable[tuple[str, str]],
        controller: ShedController | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.query = query
        self.controller = controller
        self.boxes = {name: DropBox(query, name, topic) for name, topic in streams}
        self.clock = clock
        self.since_ms: int | None = None  # when shedding began (None: not shedding)
        self.reason = ""
        self.issuer = ""
        self.changes = ChangeLog()

    @classmethod
    def of(
        cls,
        plan: LogicalPlan,
        publish: Callable[[bytes, bytes], None],
        worker_id: str,
        consumer: Callable[[], Any] | None = None,
    ) -> Shedding:
        """A worker's drop boxes for ``plan``'s inputs, with the controller if the query sheds
        load (``publish(value, key)`` writes a control record; ``consumer()`` is the worker's
        consumer, whose fetch high watermarks tell the controller what is offered)."""
        controller = None
        if plan.shedding is not None:
            topics = {s.topic for s in plan.streams}
            offered = None if consumer is None else (lambda: offered_records(consumer(), topics))
            controller = ShedController(plan, publish, worker_id, offered=offered)
        shedding = cls(plan.name, [(s.name, s.topic) for s in plan.streams], controller)
        if controller is not None:  # the fast path reads the boxes' own counts
            controller.reads = shedding.records_read
        return shedding

    @property
    def active(self) -> bool:
        return any(box.keep < 1.0 for box in self.boxes.values())

    def box(self, stream: str) -> DropBox:
        return self.boxes[stream]

    def records_read(self) -> int:
        """Every record the boxes have seen (kept or dropped)."""
        return sum(box.kept + box.dropped for box in self.boxes.values())

    def kept_fraction(self) -> dict[str, float]:
        return {name: box.keep for name, box in self.boxes.items()}

    def apply(self, record: ControlRecord) -> None:
        """A SHED record: ``{"keep": {stream: share}, "reason": text}`` (streams not named keep
        all); other kinds are not for the drop boxes."""
        if record.kind != SHED:
            return
        keep = record.payload.get("keep") or {}
        unknown = sorted(set(keep) - set(self.boxes))
        if unknown or not all(isinstance(v, int | float) and 0 <= v <= 1 for v in keep.values()):
            raise ValueError(f"SHED for {self.query}: streams {sorted(keep)} with shares "
                             f"{list(keep.values())} (streams: {sorted(self.boxes)})")  # fmt: skip
        before = self.kept_fraction()
        for name, box in self.boxes.items():
            box.set(float(keep.get(name, 1.0)))
        after = self.kept_fraction()
        if after == before:
            return
        now_ms = int(self.clock() * 1000)
        was_active = any(v < 1.0 for v in before.values())
        self.reason = str(record.payload.get("reason", ""))
        self.issuer = record.issuer
        if not self.active:
            self.since_ms = None
            log.info("query %s: drop boxes lifted (%s; %s)", self.query, self.reason or "no "
                     "reason given", record.issuer or "unknown issuer")  # fmt: skip
        else:
            self.since_ms = self.since_ms if was_active else now_ms
            shares = ", ".join(f"{n} {100 * v:.1f}%" for n, v in after.items())
            log.info("query %s: drop boxes keep %s (%s; %s)", self.query, shares,
                     self.reason or "no reason given", record.issuer or "unknown")  # fmt: skip
        self.changes.record({
            "kind": "shedding", "time_ms": now_ms, "from": before, "to": after,
            "reason": self.reason, "issuer": record.issuer,
        })  # fmt: skip

    # -- the controller, where the query declares shed() ------------------------------------
    def on_stats(self, record: dict[str, Any]) -> None:
        if self.controller is not None:
            self.controller.on_stats(record)

    def on_own_stats(self, record: dict[str, Any]) -> None:
        """This worker's statistics as they are reported (before the stats topic has them)."""
        if self.controller is not None:
            self.controller.on_stats(record, own=True)

    def tick(self) -> bool:
        return self.controller is not None and self.controller.tick(self.kept_fraction())

    def snapshot(self) -> dict[str, Any]:
        """For the status page: each box's share and counts, why, and since when."""
        controller = self.controller
        return {
            "controller": None
            if controller is None
            else {
                "config": controller.config.to_json(),
                "here": controller.leading,
                "decisions": controller.decisions,
                "measured": controller.last_signals,
            },
            "active": self.active,
            "since_ms": self.since_ms,
            "reason": self.reason,
            "issuer": self.issuer,
            "boxes": {name: box.snapshot() for name, box in self.boxes.items()},
            "changes": self.changes.entries(),
        }

    def events(self) -> list[dict[str, Any]]:
        """Share changes since the last call (for the stats topic)."""
        return self.changes.unreported()
