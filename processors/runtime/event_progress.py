"""What an ingest agent tells the partitions downstream about event time, per input partition.

The event-time merge (:mod:`processors.stages.merge_stage`) waits, on every internal partition,
for every input partition's watermark. Data envelopes carry it; this class decides when an
internal partition that got no data must be told anyway, and when an input partition has gone
idle:

- a *watermark* (an empty envelope with ``src`` and ``wm``) goes to each partition that did not
  get data from a unit, at most every ``min_gap_s`` per partition; the timer sends what is
  still owed, so the last one is never lost;
- an *idle mark* (``idle`` as well) goes to every partition when an input partition has been
  read to its end (its fetch high watermark is at the agent's position) and nothing arrived for
  the query's ``idle_timeout_ms``, and again every half second while that lasts (a merge
  forgets idleness when another source comes back, and waits for the next mark). Its next
  record makes it active again.

Pure bookkeeping with the clock passed in: the agent does the sending
(:mod:`processors.runtime.ingest`), tests drive it directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from processors.core.batch import Batch
from processors.stages.merge_stage import marker, tag
from topics.envelope import MAX_ENVELOPE_BYTES, envelope_slices

NO_TS = -(2**63)
IDLE_REPEAT_S = 0.5


@dataclass
class _Source:
    """One input partition: its watermark and what each internal partition was last told."""

    since_s: float  # the last record (or when the partition was first held)
    high: int = NO_TS
    told: dict[int, int] = field(default_factory=dict)  # internal partition -> watermark sent
    told_at: dict[int, float] = field(default_factory=dict)
    idle_sent_s: float | None = None  # when the last idle mark went (None: active)


class EventProgress:
    """Watermarks and idle marks of the input partitions one ingest agent holds."""

    def __init__(
        self,
        partitions: int,
        idle_timeout_ms: int,
        min_gap_s: float = 0.1,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.wall_ms = wall_ms
        self.partitions = partitions
        self.idle_timeout_s = idle_timeout_ms / 1000.0
        #: how often an idle mark is repeated while the partition stays idle: a merge that saw
        #: another partition come back waits for every partition until its next idle mark
        self.repeat_s = min(self.idle_timeout_s, IDLE_REPEAT_S)
        self.min_gap_s = min_gap_s
        self.sources: dict[int, _Source] = {}
        self.idle_marks = 0
        self.watermarks = 0

    def tag(self, batch: Batch, source: int, more_follow: bool = False) -> Batch:
        """``batch`` labelled with its input partition and that partition's watermark; when
        ``more_follow`` (more of this unit's tuples go to the same internal partition after
        it, e.g. the rest of a batch cut to fit envelopes), with the batch's own largest event
        time instead: a merge that took the unit's watermark from the first envelope would
        release the other sources past the tuples still to come, which then arrive late."""
        high = self.sources[source].high
        if more_follow and len(batch):
            high = min(high, int(batch.ts.max()))
        return tag(batch, source, high, self.wall_ms())

    def label(
        self, parts: list[tuple[int, Batch]], source: int, max_bytes: int = MAX_ENVELOPE_BYTES
    ) -> list[tuple[int, Batch]]:
        """A unit's data for internal partitions, ``(target, batch)`` in sending order, cut into
        envelopes and each labelled (``tag``): the last envelope to each target carries the
        source's watermark, the ones before it their own largest event time."""
        pieces = [
            (target, piece) for target, part in parts for piece in envelope_slices(part, max_bytes)
        ]
        last = {target: i for i, (target, _) in enumerate(pieces)}
        for i, (target, piece) in enumerate(pieces):
            self.tag(piece, source, more_follow=last[target] != i)
        return pieces

    def saw(self, source: int, max_ts: int, now_s: float) -> None:
        """A unit of records of ``source`` whose largest event time is ``max_ts``."""
        state = self.sources.get(source)
        if state is None:
            state = self.sources[source] = _Source(now_s)
        state.since_s = now_s
        state.high = max(state.high, max_ts)
        state.idle_sent_s = None

    def wrote(self, source: int, targets: Iterable[int], now_s: float) -> None:
        """Data envelopes of ``source`` (tagged with its watermark) went to ``targets``."""
        state = self.sources[source]
        for q in targets:
            state.told[q], state.told_at[q] = state.high, now_s

    def owed(self, source: int, now_s: float, force: bool = False) -> list[tuple[int, Batch]]:
        """Watermarks to send now: to partitions told less than ``source``'s watermark, not
        within ``min_gap_s`` (unless ``force``)."""
        state = self.sources.get(source)
        if state is None or state.high == NO_TS:
            return []
        out = []
        for q in range(self.partitions):
            if state.told.get(q, NO_TS) >= state.high:
                continue
            if not force and now_s - state.told_at.get(q, -1e18) < self.min_gap_s:
                continue
            state.told[q], state.told_at[q] = state.high, now_s
            out.append((q, marker(source, state.high, at=self.wall_ms())))
        self.watermarks += len(out)
        return out

    def revive(self, pending: Callable[[int], bool], now_s: float) -> list[tuple[int, Batch]]:
        """Watermarks (not idle) to every partition for each input partition marked idle that
        has records waiting again (``pending``), before any of this agent's data goes out: a
        merge that still took it for idle would release the other partitions' tuples past
        its records, which then arrive late. Its records themselves may wait behind other
        partitions' in the consumer (an idle stream's records were published first, and came
        after another partition's in one turn)."""
        out: list[tuple[int, Batch]] = []
        for source, state in self.sources.items():
            if state.idle_sent_s is None or not pending(source):
                continue
            state.idle_sent_s = None
            state.since_s = now_s
            at = self.wall_ms()
            for q in range(self.partitions):
                state.told[q], state.told_at[q] = state.high, now_s
                out.append((q, marker(source, state.high, at=at)))
        self.watermarks += len(out)
        return out

    def tick(
        self, held: Iterable[int], caught_up: Callable[[int], bool], now_s: float
    ) -> list[tuple[int, Batch]]:
        """The timer's work: owed watermarks, and idle marks for the partitions read to their
        end and quiet for the idle timeout. ``held``: the input partitions this worker holds
        now (others are forgotten: their new owner speaks for them)."""
        held = set(held)
        for gone in set(self.sources) - held:
            del self.sources[gone]
        out: list[tuple[int, Batch]] = []
        for source in sorted(held):
            state = self.sources.get(source)
            if state is None:
                state = self.sources[source] = _Source(now_s)
            out += self.owed(source, now_s, force=True)
            quiet = now_s - state.since_s >= self.idle_timeout_s
            due = state.idle_sent_s is None or now_s - state.idle_sent_s >= self.repeat_s
            if quiet and due and caught_up(source):
                state.idle_sent_s = now_s
                self.idle_marks += 1
                at = self.wall_ms()
                out += [(q, marker(source, state.high, idle=True, at=at))
                        for q in range(self.partitions)]  # fmt: skip
        return out
