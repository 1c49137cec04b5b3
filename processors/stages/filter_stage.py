"""FilterStage: a conjunction of filters over batches, ordered adaptively (Babu et al. 2004).

Per batch: the executor runs the filters in the current order over a selection vector (each
filter sees only the rows every earlier filter passed); the profiler samples dropped tuples
with probability p and evaluates the filters its algorithm needs on them; the re-optimizer
absorbs those profile tuples and may change the order for the next batch. Every order change
is logged, counted and kept in ``stats()``, with a run-time breakdown like Table 2.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from processors.core.batch import Batch
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.profile import CostEstimates
from processors.core.ordering.reoptimizers import OrderChange, make_reoptimizer
from processors.core.plan import LogicalPlan
from processors.core.predicates import Predicate, plan_predicates
from processors.kernels.profile_view import drop_positions, mark_dropped

log = logging.getLogger(__name__)

BREAKDOWN = (
    "tuple_processing",
    "profile_tuple_creation",
    "profile_window",
    "view_update",
    "violations",
)
RECENT_CHANGES = 20


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class FilterStage:
    """Filters batches through adaptively ordered commutative filters; output keeps row order,
    so it is the same whatever order the filters run in."""

    def __init__(
        self,
        predicates: Sequence[Predicate],
        config: OrderingConfig | None = None,
        name: str = "filter",
        initial_order: Sequence[int] | None = None,
        clock_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.name = name
        self.predicates = list(predicates)
        self.n = len(self.predicates)
        self.config = config or OrderingConfig()
        if self.config.costs is not None and len(self.config.costs) != self.n:
            raise ValueError(
                f"ordering costs has {len(self.config.costs)} entries for {self.n} filters"
            )
        order = None if initial_order is None else list(initial_order)
        self.reoptimizer = make_reoptimizer(self.n, self.config, order)
        self.costs = CostEstimates(
            self.n, self.config.cost_samples, self.config.costs, self._call_overhead_ns()
        )
        self.clock_ms = clock_ms
        self.rng = np.random.default_rng(self.config.seed)
        self._sels = np.empty((self.n + 1, 0), dtype=np.int64)
        self._rows = np.empty(0, dtype=np.int64)
        self.tuples_in = 0
        self.tuples_out = 0
        self.batches = 0
        self.evaluations = np.zeros(self.n, dtype=np.int64)  # main pass, per filter id
        self.profile_evaluations = np.zeros(self.n, dtype=np.int64)
        self.profile_tuples = 0
        self.last_evaluations = 0  # filters evaluated for the last batch (main pass)
        self.ns = dict.fromkeys(BREAKDOWN, 0)
        self.changes_total = 0
        self.recent_changes: deque[dict[str, Any]] = deque(maxlen=RECENT_CHANGES)

    @classmethod
    def from_plan(
        cls,
        plan: LogicalPlan,
        stream: str,
        config: OrderingConfig | None = None,
        name: str = "filter",
    ) -> FilterStage:
        """The stage for a stream's filters; the ordering settings come from the query unless
        given."""
        if config is None:
            config = getattr(plan, "ordering", None)
        return cls(plan_predicates(plan, stream), config, name)

    @staticmethod
    def _call_overhead_ns() -> float:
        """What timing an empty kernel call costs, so that it is not charged to filters."""
        from processors.kernels.select import select_between

        col = np.zeros(1)
        sel = np.zeros(1, dtype=np.int64)
        samples = []
        for _ in range(50):
            t0 = time.perf_counter_ns()
            select_between(col, 0.0, 1.0, sel, 0, sel)
            samples.append(time.perf_counter_ns() - t0)
        return float(np.median(samples))

    # -- the plan ---------------------------------------------------------------------------
    @property
    def order(self) -> list[int]:
        return [int(f) for f in self.reoptimizer.order]

    @property
    def order_names(self) -> list[str]:
        return [self.predicates[f].name for f in self.reoptimizer.order]

    # -- processing -------------------------------------------------------------------------
    def process(self, batch: Batch) -> list[Batch]:
        size = len(batch)
        self.batches += 1
        self.tuples_in += size
        if size == 0:
            return []
        if self.n == 0:
            self.tuples_out += size
            return [batch]
        t0 = time.perf_counter_ns()
        sels, counts = self._run(batch, size)
        passed = int(counts[self.n])
        t1 = time.perf_counter_ns()
        if self.reoptimizer.profiles and passed < size and self.config.p > 0:
            self._profile(batch, size, sels, counts)
        t2 = time.perf_counter_ns()
        if passed == size:
            out = [batch]
        elif passed == 0:
            out = []
        else:
            out = [batch.take(sels[self.n, :passed].copy())]
        t3 = time.perf_counter_ns()
        self.ns["tuple_processing"] += (t1 - t0) + (t3 - t2)
        self.tuples_out += passed
        return out

    def _run(self, batch: Batch, size: int) -> tuple[np.ndarray, np.ndarray]:
        """The main pass: each filter narrows the selection left by the previous one."""
        if self._sels.shape[1] < size:
            self._sels = np.empty((self.n + 1, max(size, 2 * self._sels.shape[1])), np.int64)
            self._rows = np.arange(self._sels.shape[1], dtype=np.int64)
        sels = self._sels
        sels[0, :size] = self._rows[:size]
        counts = np.zeros(self.n + 1, dtype=np.int64)
        counts[0] = size
        measure = self.costs.measured
        order = self.reoptimizer.order
        m = size
        evaluated = 0
        timed: tuple[list[int], list[float], list[int]] = ([], [], [])
        clock = time.perf_counter_ns
        for k in range(self.n):
            if m == 0:
                break
            f = int(order[k])
            start = clock()
            m_next = self.predicates[f].select(batch, sels[k], m, sels[k + 1])
            if measure:
                timed[0].append(f)
                timed[1].append(clock() - start)
                timed[2].append(m)
            self.evaluations[f] += m
            evaluated += m
            counts[k + 1] = m_next
            m = m_next
        if measure:
            self.costs.record_many(*timed)
        self.last_evaluations = evaluated
        return sels, counts

    def _sample(self, size: int) -> np.ndarray:
        """Rows chosen independently with probability p (geometric gaps, not one draw per row)."""
        p = self.config.p
        if p >= 1.0:
            return self._rows[:size].copy()
        expected = size * p
        gaps = self.rng.geometric(p, size=int(expected + 5 * np.sqrt(expected) + 8))
        rows = np.cumsum(gaps) - 1
        while rows[-1] < size:
            more = self.rng.geometric(p, size=len(gaps))
            rows = np.concatenate([rows, rows[-1] + np.cumsum(more)])
        return rows[rows < size]

    def _profile(self, batch: Batch, size: int, sels: np.ndarray, counts: np.ndarray) -> None:
        """Profile sampled dropped tuples (Section 4.1.1), then let the re-optimizer act."""
        t0 = time.perf_counter_ns()
        reopt = self.reoptimizer
        sampled = self._sample(size)
        changes: list[OrderChange] = []
        if len(sampled):
            dropped_at = np.empty(len(sampled), dtype=np.int64)
            drop_positions(sels, counts, sampled, dropped_at)
            keep = dropped_at < self.n
            rows, dropped_at = sampled[keep], dropped_at[keep]
            if len(rows):
                order = reopt.order
                bits = np.zeros((len(rows), self.n), dtype=np.uint8)
                bits[np.arange(len(rows)), order[dropped_at]] = 1
                buffer = np.empty(len(rows), dtype=np.int64)
                for k in range(1, self.n):
                    need = np.flatnonzero(reopt.extra_evaluation(k, dropped_at))
                    if not len(need):
                        continue
                    f = order[k]
                    candidates = rows[need]
                    m = self.predicates[f].select(batch, candidates, len(candidates), buffer)
                    mark_dropped(candidates, buffer, m, need, bits, f)
                    self.profile_evaluations[f] += len(candidates)
                self.profile_tuples += len(rows)
                t1 = time.perf_counter_ns()
                self.ns["profile_tuple_creation"] += t1 - t0
                before = dict(reopt.ns)
                changes = reopt.absorb(bits, self.clock_ms(), self.costs.values())
                for key in ("profile_window", "view_update", "violations"):
                    self.ns[key] += reopt.ns[key] - before[key]
                for change in changes:
                    self._report(change)
                return
        self.ns["profile_tuple_creation"] += time.perf_counter_ns() - t0

    def _report(self, change: OrderChange) -> None:
        names = [p.name for p in self.predicates]
        entry = {
            "at_tuple": self.tuples_in,
            "time_ms": self.clock_ms(),
            "from": [names[f] for f in change.before],
            "to": [names[f] for f in change.after],
            "position": change.position,
            "reason": change.reason,
        }
        self.changes_total += 1
        self.recent_changes.append(entry)
        log.info(
            "%s: filter order changed after %d tuples (%s): %s -> %s",
            self.name, self.tuples_in, change.reason, entry["from"], entry["to"],
        )

    # -- reporting --------------------------------------------------------------------------
    def breakdown(self) -> dict[str, float]:
        """Share of stage time per task of Section 4.4 (percent), as in Table 2."""
        total = sum(self.ns.values())
        return {k: (100.0 * v / total if total else 0.0) for k, v in self.ns.items()}

    @property
    def overhead_fraction(self) -> float:
        """Time spent adapting (everything but tuple processing) over all stage time."""
        total = sum(self.ns.values())
        return (total - self.ns["tuple_processing"]) / total if total else 0.0

    def stats(self) -> dict[str, Any]:
        names = [p.name for p in self.predicates]
        costs = self.costs.values()
        return {
            "kind": "filter",
            "algorithm": self.config.algorithm,
            "ordering": self.config.to_json(),
            "order": self.order_names,
            "changes_total": self.changes_total,
            "recent_changes": list(self.recent_changes),
            "tuples_in": self.tuples_in,
            "tuples_out": self.tuples_out,
            "batches": self.batches,
            "evaluations": {names[f]: int(c) for f, c in enumerate(self.evaluations)},
            "evaluations_per_tuple": (
                float(self.evaluations.sum()) / self.tuples_in if self.tuples_in else 0.0
            ),
            "profile_tuples": self.profile_tuples,
            "profile_window": len(self.reoptimizer.window),
            "cost_ns": {names[f]: float(costs[f]) for f in range(self.n)},
            "breakdown_ns": dict(self.ns),
            "breakdown_percent": self.breakdown(),
        }
