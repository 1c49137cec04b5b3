"""EagerMJoinStage: an MJoin over RANGE windows that outputs each result as soon as its last
tuple arrives, instead of once every input has passed the result's time.

The ordered MJoin (:mod:`processors.stages.mjoin_stage`) processes deltas in event-time order,
so it must hold each one until every input partition of every input has shown a later time:
a result waits for the slowest of them (12 input partitions per join partition in
``streamon bench latency``), and the window deltas wait in the event-time merge before that.
For the inserts of a RANGE join (ISTREAM) the order is not needed. A combination of one tuple
per input is a result exactly when, at the time of its newest tuple, every other tuple is still
in its window: ``newest.ts - x.ts < range(x)``, and at ``== range(x)`` when x's input comes
after the newest's in the query (the ordered MJoin's ``(ts, input)`` tie rule, since x's window
delete carries ``x.ts + range(x)``). That condition does not depend on arrival order, so:

- each tuple is joined as it arrives with every tuple that arrived before it (sequence numbers
  in arrival order, the same probe kernels, every probe binding), and the combinations are
  checked against the condition above; so each result comes out once, when its last tuple
  arrives, with the newest tuple's time as its timestamp (as the ordered MJoin would give it);
- no window deletes: a stored tuple is purged once no tuple still to come can pair with it,
  i.e. its ``ts + range`` is below every waited-for input's watermark (the streams' chains
  send them, their lateness allowed for, from merges that pass tuples on unordered:
  ``MergeStage(eager=True)``);
- a tuple older than what was purged of another input could miss partners: it is late, and
  goes to the dead letters with the reason (never joined in part).

The results are the ordered MJoin's inserts, as a multiset; only their order differs (arrival
order, not event time). Babu et al. adapt the drop-probing order the same way: A-Greedy over
each pipeline (Section 8). ``Query.join_output("ordered")`` keeps the ordered MJoin.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

from processors.core.batch import INSERT, Batch
from processors.core.joins.graph import Pipeline, Side
from processors.core.ordering.config import OrderingConfig
from processors.core.state_codec import SnapshotError
from processors.kernels.window_condition import newest_in_window
from processors.stages.join_store import EVENT_TIME
from processors.stages.mjoin_stage import MJoinStage, wall_ms
from processors.stages.pipeline_run import PipelineRun
from processors.stages.window_stage import NOT_APPEND_ONLY

NO_TS = np.iinfo(np.int64).min


class EagerMJoinStage(MJoinStage):
    """The MJoin of RANGE windows ``ranges_ms`` (one per input), eager (module docstring)."""

    supports_caches = False  # its probes check the window condition, its purge frees slots

    def __init__(
        self,
        names: Sequence[str],
        predicates: Sequence[tuple[Side, Side]],
        ranges_ms: Sequence[int],
        config: OrderingConfig | None = None,
        name: str = "mjoin",
        clock_ms: Callable[[], int] = wall_ms,
        idle_timeout_ms: int = 3_000,
        result_columns: Collection[str] | None = None,
    ) -> None:
        super().__init__(names, predicates, config, name, clock_ms, idle_timeout_ms)
        # only the result columns (``input.column``) the projection reads are gathered (with
        # string columns the others were most of a result's cost)
        self.result_columns = None if result_columns is None else frozenset(result_columns)
        if len(ranges_ms) != self.n or any(int(r) <= 0 for r in ranges_ms):
            raise ValueError(f"{name}: one positive RANGE per input expected, got {ranges_ms}")
        self.ranges = np.asarray(ranges_ms, np.int64)
        #: per input: every stored tuple with ``ts + range < purged_below`` is gone
        self.purged_below = [NO_TS] * self.n
        self.late_total = 0
        self.purged_total = 0

    # -- input --------------------------------------------------------------------------------
    def push(self, i: int, batch: Batch) -> None:
        """Buffer input ``i``'s tuples in any time order; late ones, and any that is not an
        insert (a window's input is append-only), to the dead letters."""
        if len(batch) == 0:
            return
        batch = self._check_input(i, batch)
        if bool((batch.sign != INSERT).any()):
            self.dead_letters.append((batch.filter(batch.sign != INSERT), NOT_APPEND_ONLY))
            batch = batch.filter(batch.sign == INSERT)
            if not len(batch):
                return
        others = [b for j, b in enumerate(self.purged_below) if j != i]
        below = max(others) if others else NO_TS
        late = batch.ts < below
        if late.any():
            self.late_total += int(late.sum())
            self.dead_letters.append(
                (batch.filter(late), f"{self.name}: tuples of {self.names[i]} older than "
                 f"{below}, the time the other inputs' windows were cleared up to (late)")
            )  # fmt: skip
            batch = batch.filter(~late)
            if not len(batch):
                return
        columns = {**batch.columns, EVENT_TIME: np.asarray(batch.ts, np.int64)}
        self._buffers[i].append(Batch(columns, batch.sign, batch.ts, batch.key, dict(batch.meta)))
        self.deltas_in[i] += len(batch)

    def release(self, final: bool = False) -> list[Batch]:
        """Join everything buffered, in arrival order; then purge what no tuple can reach."""
        parts = [self._take_released(i, None) for i in range(self.n)]
        out: list[Batch] = []
        if any(p is not None for p in parts):
            sizes = [0 if p is None else len(p) for p in parts]
            gen = self._next_gen + np.arange(sum(sizes), dtype=np.int64)
            self._next_gen += len(gen)
            bounds = np.cumsum([0, *sizes])
            results = self._join_epoch(
                parts, [gen[bounds[i] : bounds[i + 1]] for i in range(self.n)]
            )
            out = [self._assemble(results)] if results else []
        self._purge()
        return out

    # -- the window condition -----------------------------------------------------------------
    def _probe(
        self,
        pipe: Pipeline,
        delta: Batch,
        gen: np.ndarray,
        run: PipelineRun,
        e: int,
        bind: bool = False,
    ) -> None:
        """Every probe binds (an existence probe cannot see the window condition); then the
        combinations so far that no later tuple can make valid are dropped."""
        super()._probe(pipe, delta, gen, run, e, bind=True)
        if len(run.origin):
            keep = self._in_window(pipe, delta, run)
            if not keep.all():
                run.keep(keep)

    def _condition(
        self, pipe: Pipeline, delta: Batch, run: PipelineRun
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per combination bound so far: the newest tuple's time, and whether the combination
        is (or, partly bound, may still become) a result (:mod:`.window_condition`)."""
        inputs = [pipe.root, *(pipe.inputs[e] for e in run.bound)]
        ts = np.empty((len(inputs), len(run.origin)), np.int64)
        ts[0] = np.asarray(delta.ts, np.int64)[run.origin]
        for r, (e, slots) in enumerate(run.bound.items(), start=1):
            ts[r] = self.stores[pipe.inputs[e]].columns[EVENT_TIME][slots]  # type: ignore[index]
        members = np.asarray(inputs, np.int64)
        complete = len(run.bound) == pipe.size
        return newest_in_window(ts, members, self.ranges[members], complete)

    def _in_window(self, pipe: Pipeline, delta: Batch, run: PipelineRun) -> np.ndarray:
        """Combinations that are (or, partly bound, may still become) results."""
        return self._condition(pipe, delta, run)[1]

    def _results(self, pipe: Pipeline, delta: Batch, run: PipelineRun) -> Batch:
        """The ordered MJoin's results, stamped with the newest tuple's time (as the ordered
        MJoin stamps them: its producing delta is the newest)."""
        out = super()._results(pipe, delta, run)
        newest, _ = self._condition(pipe, delta, run)
        return Batch(out.columns, out.sign, newest)

    # -- purging ------------------------------------------------------------------------------
    def _purge(self) -> None:
        """Remove the stored tuples no tuple still to come can pair with (module docstring).
        A store is swept once its horizon moved a quarter of its range: keeping a tuple a
        little longer changes no result (the window condition is checked on every one)."""
        horizon = self._least_waited()  # the streams' watermarks allow for their lateness
        if horizon is None or horizon == NO_TS:
            return
        for i, store in enumerate(self.stores):
            size = int(self.ranges[i])
            if horizon - self.purged_below[i] < max(1, size // 4) or not len(store):
                continue
            live = store.live_slots()
            ts = store.columns[EVENT_TIME][live]  # type: ignore[index]
            gone = live[ts + size < horizon]
            self.purged_below[i] = horizon
            if len(gone):
                self.purged_total += store.remove(gone)

    # -- reporting and state ------------------------------------------------------------------
    def waiting_bytes(self) -> dict[str, int]:
        """Of each input ahead of the least watermark waited for, the part of its window
        newer than that watermark: what purging keeps while the slowest input catches up (the
        ordered join would hold it as waiting deltas), so pausing those inputs bounds it
        (processors.runtime.backpressure). The slowest input is never listed."""
        low = self._least_waited()
        if low is None:
            return {}
        out: dict[str, int] = {}
        for i, store in enumerate(self.stores):
            if self._shown[i] <= low or not len(store):
                continue
            # every slot's time, less the free slots' (stale): no mask of the live ones made
            times = store.columns[EVENT_TIME][: store.capacity]
            free = store.free_slots[: store.n_free]
            ahead = int(np.count_nonzero(times > low)) - int(np.count_nonzero(times[free] > low))
            if ahead:
                out[self.names[i]] = store.nbytes * ahead // len(store)
        return out

    def held_bytes(self) -> int:
        """The windows, the caches and what waits for the next release: what waits for a
        slower input (:meth:`waiting_bytes`) is part of the windows here, not counted twice."""
        buffered = sum(b.nbytes() for batches in self._buffers for b in batches)
        return sum(s.nbytes for s in self.stores) + self.caches.nbytes + buffered

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out.update(output="eager", late_total=self.late_total, purged_total=self.purged_total)
        return out

    def state(self) -> dict[str, Any]:
        tree = super().state()
        tree["purged_below"] = np.array(self.purged_below, np.int64)
        return tree

    def load_state(self, state: dict[str, Any]) -> None:
        purged = np.asarray(state.get("purged_below", [NO_TS] * self.n), np.int64)
        if purged.shape != (self.n,):
            raise SnapshotError(f"{self.name}: purged_below of {purged.shape}, not ({self.n},)")
        super().load_state(state)
        self.purged_below = [int(p) for p in purged]
