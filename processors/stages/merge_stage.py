"""MergeStage: one event-time ordered stream out of several input partitions.

When ingest routes records by key (or writes a stream's records all to one partition), each
internal partition receives the records of *every* input partition, interleaved as the ingest
agents happened to run. Each input partition is in event-time order on its own (up to the
query's lateness), the interleaving is not; windows and the MJoin need it to be. This stage
restores it with per-source watermarks, the usual k-way merge of stream processors:

- every envelope names its source (``meta['src']``, the input partition) and that source's
  watermark (``meta['wm']``, the largest event time ingest has seen on it); ingest sends an
  empty envelope carrying only the watermark to partitions it had nothing for, so a partition
  that no key routes to still learns that time moved on;
- the stage holds each source's tuples in arrival order and releases, in the order
  ``(running max of ts within the source, source, arrival)``, those below the merged
  watermark, the least of the active sources' watermarks (a source may send more tuples of
  its watermark's time): for sources in time order, exactly the time-ordered merge, ties in
  time broken by input partition;
- a source is idle when ingest says so (``meta['idle']``: ingest has read all of that input
  partition and nothing came for the query's ``idle_timeout_ms``; it repeats the mark every
  half second while that lasts); it stops holding the others back. When a source comes back
  from idle, every source counts again, and an idle mark counts only if ingest judged it an
  idle timeout after that comeback (:mod:`processors.stages.idleness`), so that a burst on all
  input partitions after a pause is merged in order. What a source that was left out sends below
  the released watermark passes on at once, and the window treats it as late (its lateness,
  then the dead letters): ``docs/windows-and-joins.md``, "Event time across partitions".

Nothing here reads a clock: the output depends only on the envelopes, so restores and replays
give the same results. ``progress()`` is the least event time any later output can have (for
sources in order up to the lateness), which the worker forwards downstream so that the MJoin
need not wait for data that no key routes to this partition.

With one source (records stay on their input partition), the stage forwards batches unchanged.
In front of an eager join (``eager=True``, :mod:`processors.stages.eager_mjoin`), which needs
no order, it forwards every batch as it comes and only keeps the watermarks and idle marks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from processors.core.batch import Batch
from processors.core.state_codec import SnapshotError
from processors.stages.base import StageBase
from processors.stages.idleness import AT, IDLE, Idleness
from topics.envelope import decode_batch, encode_batch

SOURCE = "src"  # meta key: the input partition an envelope's tuples come from
WATERMARK = "wm"  # meta key: the largest event time ingest has seen on that source
_NO_TS = np.iinfo(np.int64).min
_ALL = np.iinfo(np.int64).max


def marker(source: int, watermark: int, idle: bool = False, at: int | None = None) -> Batch:
    """An envelope with no tuples from ingest: input partition ``source``'s watermark, or its
    idle mark, judged at wall-clock ``at`` (ms)."""
    meta = {SOURCE: str(source), WATERMARK: str(watermark)}
    if idle:
        meta[IDLE] = "1"
    if at is not None:
        meta[AT] = str(at)
    return Batch.empty_marker(meta)


def tag(batch: Batch, source: int, watermark: int, at: int | None = None) -> Batch:
    """``batch`` labelled, as ingest sends it, with its input partition and watermark (and
    the wall-clock ``at`` ms ingest read it)."""
    batch.meta[SOURCE] = str(source)
    batch.meta[WATERMARK] = str(watermark)
    if at is not None:
        batch.meta[AT] = str(at)
    return batch


class MergeStage(StageBase):
    """The event-time merge of ``sources`` input partitions (see the module docstring)."""

    kind = "merge"

    def __init__(
        self,
        sources: int,
        lateness_ms: int = 0,
        name: str = "merge",
        drives_time: bool | None = None,
        idle_timeout_ms: int = 3_000,
        eager: bool = False,
    ) -> None:
        if sources < 1:
            raise ValueError(f"{name}: sources must be >= 1, got {sources}")
        self.name = name
        self.sources = int(sources)
        #: whether stages after it advance on its watermark (a RANGE window's expiries): when
        #: this partition sees only part of an input partition's records (routed by key) or
        #: several input partitions. With one whole input partition, the stream's own records
        #: move time on, exactly as in the single-partition semantics.
        self.drives_time = sources > 1 if drives_time is None else drives_time
        self.lateness_ms = int(lateness_ms)
        #: pass tuples on as they come, only tracking the merged watermark: for an eager join,
        #: which needs no order (:mod:`processors.stages.eager_mjoin`)
        self.eager = bool(eager)
        self._high = np.full(self.sources, _NO_TS, np.int64)
        self._idleness = Idleness(self.sources, idle_timeout_ms)
        self._queues: list[list[Batch]] = [[] for _ in range(self.sources)]
        self.released = _NO_TS
        self.tuples_in = 0
        self.tuples_out = 0
        self.idle_releases = 0
        self._dead: list[tuple[Batch, str]] = []

    # -- input --------------------------------------------------------------------------------
    def process(self, batch: Batch) -> list[Batch]:
        if self.sources == 1:  # one input partition: already in order, forwarded as it is
            self.tuples_in += len(batch)
            self.tuples_out += len(batch)
            self._idleness.saw(0, batch)
            high = int(batch.meta[WATERMARK]) if WATERMARK in batch.meta else _NO_TS
            if len(batch):
                high = max(high, int(batch.ts.max()))
            self._high[0] = max(int(self._high[0]), high)
            self.released = max(self.released, int(self._high[0]))
            if not len(batch):
                return []
            batch.meta.pop(SOURCE, None)
            batch.meta.pop(WATERMARK, None)
            return [batch]
        src = self._source(batch)
        if src is None:
            return self._release()
        high = int(batch.meta[WATERMARK]) if WATERMARK in batch.meta else _NO_TS
        held_before = bool(self._queues[src])
        if len(batch):
            high = max(high, int(batch.ts.max()))
            if not self.eager:
                self._queues[src].append(batch)
            self.tuples_in += len(batch)
        self._high[src] = max(int(self._high[src]), high)
        self._idleness.saw(src, batch)
        if self.eager:
            return self._pass_on(batch)
        if self._nothing_due(batch, held_before):
            return []
        return self._release()

    def _pass_on(self, batch: Batch) -> list[Batch]:
        """Eager: the batch as it came; the merged watermark moves on all the same."""
        limit = self.watermark()
        if limit != _ALL:
            self.released = max(self.released, limit)
        if not len(batch):
            return []
        self.tuples_out += len(batch)
        batch.meta.pop(SOURCE, None)
        batch.meta.pop(WATERMARK, None)
        return [batch]

    def _nothing_due(self, batch: Batch, held_before: bool) -> bool:
        """Whether a release now would release nothing, so that it can be skipped (it
        concatenates every held queue: most envelopes move no watermark). While the merged
        watermark stays where the last release cut every queue, only a batch that starts an
        empty queue below it has anything due."""
        limit = self.watermark()
        if limit == _ALL or limit > self.released:
            return False
        return held_before or not len(batch) or int(batch.ts[0]) >= limit

    @property
    def _idle(self) -> np.ndarray:
        return self._idleness.idle

    def _source(self, batch: Batch) -> int | None:
        raw = batch.meta.get(SOURCE)
        try:
            src = int(raw) if raw is not None else -1
        except ValueError:
            src = -1
        if 0 <= src < self.sources:
            return src
        if len(batch):
            why = f"{self.name}: envelope from source {raw!r}, expected 0..{self.sources - 1}"
            self._dead.append((batch, why))
        return None

    def flush(self) -> list[Batch]:
        """End of input: everything held, in merge order."""
        return [] if self.sources == 1 else self._release(final=True)

    # -- release ------------------------------------------------------------------------------
    def watermark(self) -> int:
        """The merged watermark: the least watermark of the active sources (all idle: no
        limit). Never below what was already released."""
        active = ~self._idle
        if not active.any():
            return _ALL
        return max(int(self._high[active].min()), self.released)

    def all_idle(self) -> bool:
        """Every source is idle and nothing is held: downstream may stop waiting for us."""
        return bool(self._idle.all()) and not any(self._queues)

    def progress(self, upstream: int = _NO_TS) -> int:
        """The least event time a later output can have (sources in order up to the
        lateness); the smallest int64 before anything is known. The merge is where event
        time starts, so ``upstream`` is not used."""
        if self.sources == 1:
            mark = self.released
        else:
            active = ~self._idle
            mark = int(self._high[active].min()) if active.any() else self.released
            mark = max(mark, self.released)
        return _NO_TS if mark == _NO_TS else mark - self.lateness_ms

    def _release(self, final: bool = False) -> list[Batch]:
        limit = _ALL if final else self.watermark()
        if limit == _ALL and not final and any(self._queues):
            self.idle_releases += 1
        parts: list[Batch] = []
        keys: list[np.ndarray] = []
        for src, queue in enumerate(self._queues):
            if not queue:
                continue
            whole = queue[0] if len(queue) == 1 else Batch.concat(queue)
            running = np.maximum.accumulate(whole.ts)
            # below the watermark only: a source may still send more tuples of its time
            cut = len(whole) if final else int(np.searchsorted(running, limit, side="left"))
            self._queues[src] = [] if cut == len(whole) else [whole.slice(cut, len(whole))]
            if cut:
                parts.append(whole.slice(0, cut) if cut < len(whole) else whole)
                keys.append(running[:cut])
        if limit != _ALL:
            self.released = max(self.released, limit)
        elif not final:  # every source idle: event time is where the furthest one got
            self.released = max(self.released, int(self._high.max()))
        if not parts:
            return []
        merged = parts[0] if len(parts) == 1 else Batch.concat(parts)
        if len(parts) > 1:  # sources in order, each in arrival order: a stable sort keeps
            # ties by (source, arrival), as a lexsort of (time, source) would, ten times faster
            merged = merged.take(np.argsort(np.concatenate(keys), kind="stable"))
        merged.meta.pop(SOURCE, None)
        merged.meta.pop(WATERMARK, None)
        self.tuples_out += len(merged)
        return [merged]

    def held_bytes(self) -> int:
        """Tuples held until every input partition's watermark passes them. They cannot be
        told apart by input topic partition here (one routed partition carries them all), so
        they are counted but not waiting on an input a pause could slow."""
        return sum(b.nbytes() for queue in self._queues for b in queue)

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        dead, self._dead = self._dead, []
        return dead

    def stats(self) -> dict[str, Any]:
        return {
            "kind": "merge",
            "sources": self.sources,
            "held": sum(len(b) for q in self._queues for b in q),
            "watermark": None if self.released == _NO_TS else self.released,
            "idle_sources": int(self._idle.sum()),
            "stale_idle_marks": self._idleness.stale_marks,
            "idle_releases": self.idle_releases,
            "tuples_in": self.tuples_in,
            "tuples_out": self.tuples_out,
        }

    # -- state --------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "sources": self.sources,
            "high": self._high.copy(),
            "idleness": self._idleness.state(),
            "released": self.released,
            "queues": [[encode_batch(b) for b in q] for q in self._queues],
            "counters": [self.tuples_in, self.tuples_out, self.idle_releases],
        }

    def load_state(self, state: dict[str, Any]) -> None:
        if state.get("sources") != self.sources:
            raise SnapshotError(
                f"{self.name}: snapshot of {state.get('sources')!r} sources, not {self.sources}"
            )
        high = np.asarray(state["high"], np.int64)
        queues = state["queues"]
        if high.shape != (self.sources,) or len(queues) != self.sources:
            raise SnapshotError(f"{self.name}: snapshot does not hold {self.sources} sources")
        try:
            self._idleness.load_state(state["idleness"], self.name)
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotError(f"{self.name}: bad idleness in snapshot: {exc}") from exc
        self._high = high.copy()
        self.released = int(state["released"])
        self._queues = [[decode_batch(b) for b in q] for q in queues]
        self.tuples_in, self.tuples_out, self.idle_releases = map(int, state["counters"])
