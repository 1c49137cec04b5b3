"""Adaptive caching at run time in an MJoin: Profiler, Re-optimizer and Executor of A-Caching
(Babu et al., ICDE 2005, Fig. 4, Sects. 4.3-4.5, 5, 6 and Appendix A).

Enabled by ``OrderingConfig.caches_on`` (``query.adapt(caching=True, cache_memory_mb=...)``,
CQL ``WITH (cache_memory = '64 MB')``). :class:`MJoinCaches` calls the hooks here; the stage
itself only runs its pipelines.

- Profiler (Appendix A). d_ij and c_ij: a fraction of each pipeline's deltas is run once more
  through the whole pipeline without caches, one vectorized pass per batch, counting the tuples
  that reach each operator (delta_j, per delta with ``bincount``) and the time each operator
  spends (with ``cache_metric = "tuples"``, the default, the tuples in and out: counted work,
  as the MJoin's join-order costs; with ``"time"`` the operator's batch time shared over the
  deltas by their tuples in and out).
  rate(R_i) is input i's share of the recent deltas (the unit is one delta of any input).
  miss_prob: a used cache's is observed from its lookups; a profiled one's is estimated with
  a Bloom filter over its probe keys at its first operator (the full probe stream, seen by the
  regular pipeline). probe_cost and update_cost: in tuples, 1 + the entry size per probe and 1
  per update; in time, the executor's measured time per tuple a lookup handles and per
  combination an update inserts (an index probe's time per tuple before any cache has run).
- Re-optimizer: :class:`AdaptiveSelector` is advanced every I/10 tuples with the estimates; a
  join order change of A-Greedy re-enumerates the candidates (step 5). Candidates are the
  prefix-invariant ones plus, up to Sect. 6's quota m, globally-consistent ones the executor
  runs (those whose maintaining set leaves out the pipeline's own input).
- Executor: the selector's used set is applied with :meth:`MJoinCaches.change` (caches that
  stay keep their entries); every change is reported (plan changes, log, ``stats()``). The
  memory budget is enforced on the caches' actual bytes after every operation that grows a
  cache: the caches with the least priority go first (Sect. 5).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from processors.core.batch import Batch
from processors.core.caching.adaptive import AdaptiveConfig, AdaptiveSelector, State
from processors.core.caching.candidates import (
    Candidate,
    global_candidates,
    prefix_candidates,
    quota,
)
from processors.core.caching.estimators import (
    BloomMissEstimator,
    ObservedMissRate,
    OperatorProfile,
    WindowAverage,
    key_words,
)
from processors.core.caching.model import CacheEstimate, CacheParams, PipelineStats, estimate
from processors.stages.mjoin_cache_plan import CacheSpec, Placed, resolve, stage_orders

if TYPE_CHECKING:
    from processors.stages.mjoin_caches import MJoinCaches
    from processors.stages.mjoin_stage import MJoinStage
    from processors.stages.pipeline_run import PipelineRun

log = logging.getLogger(__name__)

GLOBAL_M = 6  # Sect. 6: candidates searched exhaustively when globally-consistent ones join
BLOOM_WINDOW = 256  # W_d: probe keys per Bloom-filter window (Appendix A)
BLOOM_ALPHA = 2.0
# windows a key stays cached in the miss estimate: the paper's one window under counted work,
# whose lookups cost more than it says; longer where costs are timed (docs/caching.md)
BLOOM_HORIZON = {"tuples": 0, "time": 15}
PRIOR_TUPLES = 1_024  # tuples the prior probe/update price weighs as, against measured ones
MIN_PROFILE_P = 0.05  # deltas profiled per pipeline at least (Appendix A's p_i)
RECENT = 20
MIN_OPEN = 16  # keys an open Bloom window needs to stand in for a closed one


def table_bytes(buckets: int, key_width: int) -> int:
    """A SubresultCache's table: keys, epoch, head and count per bucket."""
    return buckets * 8 * (key_width + 3)


def buckets_for(distinct: float) -> int:
    """Direct-mapped buckets for ``distinct`` expected keys: twice as many, a power of two."""
    return int(min(65_536, max(16, 2 ** math.ceil(math.log2(max(2.0 * distinct, 1.0))))))


def bloom_estimate(bloom: BloomMissEstimator | None) -> tuple[float, float]:
    """(miss_prob, distinct keys per window) from the closed windows, else from the open one
    once it has ``MIN_OPEN`` keys (a slow input may take long to close one), else (1, 0)."""
    if bloom is None:
        return 1.0, 0.0
    if bloom.windows.count:
        return bloom.miss_prob, bloom.distinct
    filled, missed, bits = bloom.open_window
    return (missed / filled, float(bits)) if filled >= MIN_OPEN else (1.0, 0.0)


def _meter(w: int) -> tuple[WindowAverage, WindowAverage]:
    """Time spent and tuples handled over the last ``w`` calls."""
    return WindowAverage(w), WindowAverage(w)


def _per_tuple(meter: tuple[WindowAverage, WindowAverage], prior: float) -> float:
    """Time per tuple over the last calls (their sums: a call's fixed overhead spread over
    its tuples), with ``prior`` counted as ``PRIOR_TUPLES`` tuples' worth: the first few
    calls of a new cache, a handful of tuples each, do not set its price alone."""
    spent, tuples = meter
    return (spent.total + prior * PRIOR_TUPLES) / (tuples.total + PRIOR_TUPLES)


def cheapest_per_tuple(stats: list[PipelineStats]) -> float:
    """The least time per tuple in and out over the operators profiled (1.0: none yet)."""
    per = [s.d[p] * s.c[p] / (s.d[p] + s.d[p + 1]) for s in stats for p in range(len(s.c))
           if s.d[p] > 0 and s.c[p] > 0]  # fmt: skip
    return min(per) if per else 1.0


def expected_bytes(cand: Candidate, distinct: float, tuples: float) -> float:
    """Sect. 5's memory requirement in this executor's layout: the table, and the pool of
    combinations (slot and born per input, a link), twice over since the pool doubles."""
    combos = max(64.0, 2.0 * distinct * max(tuples, 1.0))
    return table_bytes(buckets_for(distinct), len(cand.key)) + combos * 8 * (1 + 2 * cand.length)


class AdaptiveCaching:
    """The runtime of A-Caching for one MJoin (see the module docstring)."""

    def __init__(self, stage: MJoinStage, caches: MJoinCaches) -> None:
        cfg = stage.config
        self.caches = caches
        self.w = cfg.cache_window
        self.metric = cfg.cache_metric
        self.horizon = BLOOM_HORIZON[self.metric]
        self.budget = cfg.cache_budget_bytes
        cp = cfg.cache_profile_probability
        self.p = max(cfg.p, MIN_PROFILE_P) if cp is None else cp
        self.step = max(1, cfg.cache_interval // 10)
        self._rng = np.random.default_rng(cfg.seed)
        self.selector = AdaptiveSelector([], AdaptiveConfig(cfg.cache_interval, 0.2, 0,
                                                            self.budget))  # fmt: skip
        self.orders: tuple[tuple[int, ...], ...] = ()
        self.profiles = [OperatorProfile(p.size, self.w) for p in stage.pipelines]
        # the regular pass's time per tuple in and out of each operator (time metric)
        self.pass_units = [self._pass_meters(p.size) for p in stage.pipelines]
        self._mark: tuple[int, int, int, int] | None = None  # pipeline, position, ns, tuples
        self.arrivals = np.zeros(stage.n, np.float64)
        self._seen = np.zeros(stage.n, np.int64)
        self._pending = 0
        self.probe_keys: dict[Any, tuple[tuple[int, str], ...]] = {}
        self.blooms: dict[Any, BloomMissEstimator] = {}
        self.observed: dict[Any, ObservedMissRate] = {}
        # executor: lookup time and tuples handled, update time and combinations inserted
        self.probe_unit = _meter(4 * self.w)
        self.update_unit = _meter(4 * self.w)
        self.placed: dict[int, Any] = {}  # id(Placed) -> candidate ident
        self.estimates: dict[Any, CacheEstimate] = {}
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self.changes_total = 0
        self._round_at = 0
        self.sync(stage)

    # -- candidates and orders (Sect. 4.5 step 5) ---------------------------------------------
    def _enumerate(self, stage: MJoinStage, orders: Any) -> list[Candidate]:
        prefix = prefix_candidates(stage.graph, orders).caches
        picked = quota(prefix, global_candidates(stage.graph, orders, root_in_y=False), GLOBAL_M)
        self.selector.config = replace(
            self.selector.config, exhaustive_cap=0 if picked is None else GLOBAL_M
        )
        out = []
        for c in prefix if picked is None else picked:
            try:
                spec = CacheSpec(c.pipeline, c.start, c.end, 1, c.kind)
                self.probe_keys[c.ident] = resolve(stage, spec).probe_keys
            except ValueError:
                continue  # not runnable here (docs/caching.md)
            out.append(c)
        return out

    def sync(self, stage: MJoinStage) -> None:
        """Follow A-Greedy's orders: re-enumerate after a change, drop the reordered
        pipelines' caches and restart their profiles (step 5)."""
        orders = tuple(tuple(o) for o in stage_orders(stage))
        if orders == self.orders:
            return
        first = not self.orders
        changed = {i for i in range(stage.n) if first or orders[i] != self.orders[i]}
        self.orders = orders
        cands = self._enumerate(stage, orders)
        if first:
            self.selector = AdaptiveSelector(cands, self.selector.config)
            return
        for i in changed:
            self.profiles[i] = OperatorProfile(stage.pipelines[i].size, self.w)
            self.pass_units[i] = self._pass_meters(stage.pipelines[i].size)
        change = self.selector.order_changed(changed, cands)
        live = {c.ident for c in cands}
        self.blooms = {k: v for k, v in self.blooms.items() if k in live}
        self._apply(stage, [change] if change else [], adds=False)

    # -- the Profiler (Appendix A) ------------------------------------------------------------
    def observe(
        self, stage: MJoinStage, i: int, k: int, delta: Batch, gen: np.ndarray, run: PipelineRun
    ) -> None:
        """Before position k of pipeline i: profile a sample of the deltas (k = 0) and feed the
        Bloom filters of the profiled candidates starting at k."""
        timed = self.metric == "time"
        if timed:
            self._time_pass(stage, i, k, len(run.origin))
        if k == 0:
            self._profile(stage, i, delta, gen, run)
        pipe = stage.pipelines[i]
        for c in self.selector.cands:
            state = self.selector.state[c.ident]
            if c.pipeline != i or c.start != k or state is not State.PROFILED:
                continue
            cols = [stage._values(pipe, delta, run, e, col) for e, col in self.probe_keys[c.ident]]
            bloom = self.blooms.get(c.ident)
            if bloom is None:
                bloom = self.blooms[c.ident] = BloomMissEstimator(
                    BLOOM_WINDOW, BLOOM_ALPHA, self.w, len(self.blooms), self.horizon
                )
            bloom.observe(key_words(cols))
        if timed:  # the operator at k starts now, after this hook's own work
            self._mark = (i, k, time.perf_counter_ns(), len(run.origin))

    def _pass_meters(self, size: int) -> list[tuple[WindowAverage, WindowAverage]]:
        return [_meter(4 * self.w) for _ in range(size)]

    def _time_pass(self, stage: MJoinStage, i: int, k: int, tuples: int) -> None:
        """The regular pass reached position k: the operator before it (if it probed rather
        than looked a cache up) took the time since its own position was reached."""
        now, mark = time.perf_counter_ns(), self._mark
        self._mark = (i, k, now, tuples)
        if mark is None or mark[:2] != (i, k - 1):
            return
        if self.caches.segment_at(i, k - 1) is None:
            spent, moved = self.pass_units[i][k - 1]
            spent.add(now - mark[2])
            moved.add(mark[3] + tuples)

    def _profile(
        self, stage: MJoinStage, i: int, delta: Batch, gen: np.ndarray, run: PipelineRun
    ) -> None:
        """d_ij and c_ij: the sampled deltas through the whole pipeline, no caches."""
        m = len(run.origin)
        rows = run.origin[self._rng.random(m) < self.p]
        if not len(rows):
            return
        pipe = stage.pipelines[i]
        sub, g, side = delta.take(rows), gen[rows], type(run)(len(rows))
        counts = np.zeros((len(rows), pipe.size + 1))
        tau = np.zeros((len(rows), pipe.size))
        for k, e in enumerate(stage.reopts[i].order.tolist()):
            if not len(side.origin):
                break
            counts[:, k] = np.bincount(side.origin, minlength=len(rows))
            t0 = time.perf_counter_ns()
            stage._probe(pipe, sub, g, side, e)
            spent = time.perf_counter_ns() - t0
            out = np.bincount(side.origin, minlength=len(rows))
            work = counts[:, k] + out
            if self.metric == "tuples":
                tau[:, k] = work
            else:  # the regular pass's time per tuple, else this small batch's
                tau[:, k] = work * _per_tuple(self.pass_units[i][k], spent / max(work.sum(), 1.0))
            counts[:, k + 1] = out
        self.profiles[i].record(counts, tau)

    def looked_up(
        self, c: Placed, probes: int, computed: np.ndarray, handled: int, ns: int
    ) -> None:
        """A used cache's lookup of ``probes`` keys: miss_prob observed as the probes whose
        segment was computed (``computed``: once per distinct missing key of the batch, the
        work a miss costs, so that a cold batch does not count each repeat of a key), and its
        own time per tuple handled (probe_cost), the segment's work on misses left out."""
        ident = self.placed.get(id(c))
        if ident is None:
            return
        missed = np.zeros(probes, np.bool_)
        missed[computed] = True
        if ident not in self.observed:
            self.observed[ident] = ObservedMissRate(BLOOM_WINDOW, self.w, self.horizon)
        self.observed[ident].observe(missed)
        if handled:
            self.probe_unit[0].add(ns)
            self.probe_unit[1].add(handled)

    def updated(self, combos: int, ns: int) -> None:
        """A CacheUpdate's inserts (update_cost)."""
        if combos:
            self.update_unit[0].add(ns)
            self.update_unit[1].add(combos)

    # -- estimates ----------------------------------------------------------------------------
    def _stats(self, stage: MJoinStage) -> list[PipelineStats]:
        total = self.arrivals.sum()
        return [
            self.profiles[i].stats(float(self.arrivals[i] / total) if total else 0.0)
            for i in range(stage.n)
        ]

    def _units(self, stats: list[PipelineStats]) -> tuple[float, float]:
        """Cost per tuple of a cache probe and of an update: counted work, or the executor's
        measurements weighed with a prior, the cheapest operator's time per tuple in and out
        (a lookup is a hash probe handing on its entry's tuples, as an index probe is; the
        operators' average would be a nested-loop scan's where one is in the pipelines)."""
        if self.metric == "tuples":
            return 1.0, 1.0
        unit = cheapest_per_tuple(stats)
        return _per_tuple(self.probe_unit, unit), _per_tuple(self.update_unit, 2.0 * unit)

    def _estimates(self, stage: MJoinStage) -> tuple[dict[Any, CacheEstimate], set[Any], list]:
        stats = self._stats(stage)
        probe, update = self._units(stats)
        ests, ready = {}, set()
        for c in self.selector.cands:
            s = stats[c.pipeline]
            tuples = s.d[c.end + 1] / s.d[c.start] if s.d[c.start] > 0 else 0.0
            bloom, seen = self.blooms.get(c.ident), self.observed.get(c.ident)
            used = self.selector.state[c.ident] is State.USED
            miss, distinct = bloom_estimate(bloom)
            if used and seen is not None and seen.ready:
                miss = seen.miss_prob
            params = CacheParams(probe * (1.0 + tuples), update, miss)
            e = estimate(c, stats, params, distinct)
            ests[c.ident] = replace(e, memory=expected_bytes(c, distinct, tuples))
            pipes = {c.pipeline, *c.maintained}
            if all(self.profiles[x].ready for x in pipes) and (
                used or (bloom is not None and bloom.ready)
            ):
                ready.add(c.ident)
        return ests, ready, stats

    # -- the Re-optimizer ---------------------------------------------------------------------
    def tick(self, stage: MJoinStage) -> None:
        """At an epoch's end: count the deltas; every I/10 of them advance the selector and
        apply its changes; keep the caches within the budget."""
        now = np.asarray(stage.deltas_in, np.int64)
        fresh = now - self._seen
        self._seen = now
        self.arrivals += fresh
        if self.arrivals.sum() > 2 * self.selector.config.interval:
            self.arrivals *= 0.5  # rates follow the last intervals
        self._pending += int(fresh.sum())
        if self._pending >= self.step:
            tuples, self._pending = self._pending, 0
            was_open = self.selector.profiling
            ests, ready, stats = self._estimates(stage)
            if was_open and self.selector.tuples - self._round_at >= self.selector.config.interval:
                ready = {c.ident for c in self.selector.cands}  # data that never came: miss = 1
            self.estimates = ests
            changes = self.selector.advance(tuples, ests, ready, stats)
            if self.selector.profiling and not was_open:
                self._round_at = self.selector.tuples
            self._apply(stage, changes)
        self.enforce(stage)

    def _apply(self, stage: MJoinStage, changes: list, adds: bool = True) -> None:
        """Make the executor's caches the selector's used set (caches that stay keep their
        entries); ``adds=False`` in the middle of an epoch (drops only)."""
        for ch in changes:
            self.changes_total += 1
            self.recent.append(ch.entry(stage.names))
            log.info("%s: %s", stage.name, ch.describe(stage.names))
        reason = changes[-1].reason if changes else "re-selection (Sect. 4.4)"
        want = {c.ident: c for c in self.selector.used}
        live = {id(p) for p in self.caches.placed}  # forget caches dropped elsewhere
        self.placed = {k: v for k, v in self.placed.items() if k in live}
        have = {self.placed.get(id(p)) for p in self.caches.placed}  # None: forced by hand
        drop = [p for p in self.caches.placed if self.placed.get(id(p)) not in want]
        add = []
        if adds:
            for ident, c in want.items():
                if ident not in have:
                    buckets = buckets_for(self._distinct(ident))
                    spec = CacheSpec(c.pipeline, c.start, c.end, buckets, c.kind)
                    add.append((ident, spec))
        if not drop and not add:
            return
        added, refused = self.caches.change(stage, add, drop, reason)
        for p in drop:
            self.placed.pop(id(p), None)
        for ident, p in added:
            self.placed[id(p)] = ident
            self.observed.pop(ident, None)
        for ident, why in refused:
            self.selector.state[ident] = State.UNUSED
            log.info("%s: cache %s not placed: %s", stage.name, want[ident].label(stage.names),
                     why)  # fmt: skip

    def _distinct(self, ident: Any) -> float:
        return bloom_estimate(self.blooms.get(ident))[1]

    def enforce(self, stage: MJoinStage) -> None:
        """Sect. 5 on actual bytes: while the caches hold more than the budget, the one of
        least priority (net benefit per byte) stops being used."""
        while self.caches.placed and self.caches.nbytes > self.budget:

            def priority(p: Placed) -> float:
                e = self.estimates.get(self.placed.get(id(p)))
                return -math.inf if e is None else e.net / max(p.cache.nbytes, 1)

            worst = min(self.caches.placed, key=priority)
            ident = self.placed.pop(id(worst), None)
            if ident in self.selector.state:
                self.selector.state[ident] = State.UNUSED
            self.caches.change(stage, [], [worst], "memory budget exceeded (Sect. 5)")
            self.changes_total += 1

    # -- reporting ----------------------------------------------------------------------------
    def stats(self, stage: MJoinStage) -> dict[str, Any]:
        states = self.selector.state
        return {
            "rounds": self.selector.rounds,
            "budget_bytes": None if math.isinf(self.budget) else int(self.budget),
            "used": [c.label(stage.names) for c in self.selector.used],
            "profiled": sum(s is State.PROFILED for s in states.values()),
            "unused": sum(s is State.UNUSED for s in states.values()),
            "candidates": len(self.selector.cands),
            "changes_total": self.changes_total,
            "recent_changes": list(self.recent),
        }
