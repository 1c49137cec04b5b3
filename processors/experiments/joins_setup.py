"""The set-up of the MJoin experiments (:mod:`processors.experiments.joins` says how they measure):
sizes, styles and columns, the expected probes of an order, the variants compared and the meter
that feeds one variant's MJoin.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from processors.core.batch import Batch
from processors.core.ordering.config import OrderingConfig
from processors.stages.mjoin_stage import MJoinStage
from processors.workloads.network import (
    NetworkWorkload,
    OverlapPhase,
)

Orders = tuple[tuple[int, ...], ...]  # per router, the other routers in probe order

ROUTERS = 4
PACKETS_PER_S = 1000.0  # with 10 s windows: 3,200-8,000 tuples per router window (Example 1)
WINDOW_MS = 10_000
PHASE_MS = 60_000
BUCKET_MS = 2_000
# A-Greedy's profile: Table 1's p = 0.01 and 1000 profile tuples would take 60-150 s of this
# traffic to fill (about 700-1,600 deltas/s per pipeline, ~99% dropped); p = 0.05 with 500
# tuples keeps it to 6-15 s, less than a phase.
PROFILE_P = 0.05
PROFILE_WINDOW = 500
MIN_PROFILE = 100  # Table 1 / OrderingConfig default, scaled with the profile window

STYLE: dict[str, dict[str, Any]] = {
    "Optimal": {"color": "black", "linestyle": "--", "marker": "s"},
    "A-Greedy": {"color": "tab:blue", "marker": "o"},
    "A-Greedy (Table 1 p, window)": {"color": "tab:cyan", "linestyle": "-.", "marker": "^"},
    # dashed and on top: over a whole cycle it can coincide with the phase-0 line
    "Fixed (default order)": {"color": "tab:red", "linestyle": (0, (4, 3)), "marker": "x"},
    "Fixed (phase 0 best)": {"color": "tab:orange", "marker": "d"},
}
ZORDER = {"Fixed (default order)": 3}


def style_of(label: str, markers: bool) -> dict[str, Any]:
    style = dict(STYLE.get(label, {}))
    if not markers:
        style.pop("marker", None)
    return {"zorder": ZORDER.get(label, 2), **style}


TIMELINE_COLUMNS = [
    "bucket", "t_s", "phase", "steady", "variant", "deltas", "results", "net_size",
    "probes", "probes_per_delta", "drop_probes_per_delta",
    *(f"probes_per_delta_r{i}" for i in range(ROUTERS)),
    "expected_probes_per_delta", "optimal_expected_probes_per_delta",
    "tuples_per_s", "changes", "at_best_orders", "orders",
]  # fmt: skip
SUMMARY_COLUMNS = [
    "phase", "variant", "deltas", "probes_per_delta", "expected_probes_per_delta",
    "optimal_expected_probes_per_delta", "excess_work_pct", "tuples_per_s", "changes",
    "best_orders_after_s", "final_orders",
]  # fmt: skip
CHANGE_COLUMNS = ["t_s", "phase", "variant", "pipeline", "at_delta", "from", "to", "reason"]


# ---------------------------------------------------------------------------------------------
# The workload's expected probes
# ---------------------------------------------------------------------------------------------


def expected_probes(phase: OverlapPhase, routers: int, orders: Sequence[Sequence[int]]) -> float:
    """Expected probes per delta tuple over all routers' deltas (each router weighted by its
    share of the traffic: inserts and deletes alike) for these probe orders: drop-probing (eq.
    1, unit costs) plus output generation, (n - 1) probes per surviving delta (Property 8.1)."""
    shares = phase.shares(routers)
    total = 0.0
    for i in range(routers):
        if shares[i] <= 0:
            continue
        others = [j for j in range(routers) if j != i]
        survive = phase.pass_rate(i, others)
        total += shares[i] * (phase.expected_probes(i, orders[i]) + (routers - 1) * survive)
    return total / float(shares.sum())


def default_orders(routers: int) -> Orders:
    """The stage's starting order for a natural join: the other routers by index."""
    return tuple(tuple(j for j in range(routers) if j != i) for i in range(routers))


# ---------------------------------------------------------------------------------------------
# Variants and their stages
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One MJoin configuration. ``pinned[p]`` (if given): the orders set at the start of phase
    p of the schedule (on a fixed-order stage: the oracle and the phase-0 baseline)."""

    key: str
    label: str
    config: OrderingConfig
    pinned: tuple[Orders, ...] | None = None


def variants(workload: NetworkWorkload, scale: float, seed: int) -> list[Variant]:
    """Optimal, A-Greedy (profile suited to this traffic and with Table 1's defaults), the
    stage's default order and the phase-0 best order held for the whole run."""
    best = tuple(workload.best_orders())
    window = max(20, round(PROFILE_WINDOW * scale))
    tuned = OrderingConfig(
        "agreedy_exact",
        profile_probability=PROFILE_P,
        window_tuples=window,
        min_profile_tuples=max(10, round(MIN_PROFILE * scale)),
        seed=seed,
    )
    table1 = OrderingConfig(
        "agreedy_exact",
        window_tuples=max(20, round(1000 * scale)),
        min_profile_tuples=max(10, round(MIN_PROFILE * scale)),
        seed=seed,
    )
    fixed = OrderingConfig("fixed", seed=seed)
    return [
        Variant("optimal", "Optimal", fixed, best),
        Variant("agreedy", "A-Greedy", tuned),
        Variant("agreedy_table1", "A-Greedy (Table 1 p, window)", table1),
        Variant("fixed_default", "Fixed (default order)", fixed),
        Variant("fixed_phase0", "Fixed (phase 0 best)", fixed, (best[0],) * len(best)),
    ]


def network_predicates(routers: int) -> list[tuple[tuple[int, str], tuple[int, str]]]:
    """The Example 1 join: every router's pid equals router 0's (a natural join, a star)."""
    return [((0, "pid"), (i, "pid")) for i in range(1, routers)]


@dataclass
class Meter:
    """A variant's stage, the time spent in it and its counters at the last bucket's end."""

    variant: Variant
    stage: MJoinStage
    spent_ns: int = 0
    results: int = 0
    net_size: int = 0
    marks: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(cls, variant: Variant, routers: int, clock: Callable[[], int]) -> Meter:
        names = [f"r{i}" for i in range(routers)]
        stage = MJoinStage(names, network_predicates(routers), variant.config, variant.key, clock)
        meter = cls(variant, stage)
        meter.mark()
        return meter

    def pin(self, orders: Orders) -> None:
        """Set every pipeline's order (router indices) on a fixed-order stage."""
        for i, pipe in enumerate(self.stage.pipelines):
            entity = {inp: e for e, inp in enumerate(pipe.inputs)}
            self.stage.reopts[i].order = np.array([entity[r] for r in orders[i]], np.int64)

    def orders(self) -> Orders:
        """Every pipeline's current order as router indices."""
        s = self.stage
        return tuple(
            tuple(int(p.inputs[e]) for e in s.reopts[i].order.tolist())
            for i, p in enumerate(s.pipelines)
        )

    def step(self, deltas: Sequence[Sequence[Batch]], final: bool = False) -> None:
        """Push one bucket's deltas of every input and join what can be released (timed)."""
        t0 = time.perf_counter_ns()
        for i, parts in enumerate(deltas):
            for b in parts:
                self.stage.push(i, b)
        out = self.stage.flush() if final else self.stage.release()
        self.spent_ns += time.perf_counter_ns() - t0
        for b in out:
            self.results += len(b)
            # Example 1's answer, sum(size) over the join, maintained from inserts and deletes
            self.net_size += int(np.dot(b.sign.astype(np.int64), b.columns["r0.size"]))

    def mark(self) -> None:
        s = self.stage
        self.marks = {
            "spent_ns": self.spent_ns,
            "results": self.results,
            "net_size": self.net_size,
            "probes": [p.sum() for p in s.probes],
            "deltas": list(s.deltas_in),
            "changes": s.changes_total,
        }

    def since_mark(self) -> dict[str, Any]:
        """Counters since the last ``mark`` (probes and deltas per pipeline)."""
        s, m = self.stage, self.marks
        return {
            "spent_ns": self.spent_ns - m["spent_ns"],
            "results": self.results - m["results"],
            "net_size": self.net_size,
            "probes": [int(p.sum() - q) for p, q in zip(s.probes, m["probes"], strict=True)],
            "deltas": [d - e for d, e in zip(s.deltas_in, m["deltas"], strict=True)],
            "changes": s.changes_total - m["changes"],
        }
