"""The plans ``streamon bench caching`` compares (Babu et al., ICDE 2005, Sect. 7.3, Fig. 11),
how they are built, driven over the same deltas and measured.

- M: the MJoin, A-Greedy ordering (as the paper's M), the same join with A-Greedy's final
  orders fixed, and with the data model's optimal static orders fixed
  (:func:`~processors.bench.caching_data.static_orders`); the fastest counts as the best MJoin;
- X: every binary join tree of the four inputs (15 up to the order of children), run by
  :class:`JoinTreeStage`, its intermediate relations stored;
- P / G: the MJoin with either set of fixed orders and caches forced at run time
  (``MJoinStage.use_caches``), over non-overlapping subsets of that order's prefix-invariant
  candidates (P), or of Sect. 6's m = 6 quota with globally-consistent ones (G); and, for
  every binary tree, the MJoin with the tree's orders caching what the tree stores
  (:func:`mirror_plans`, a P plan: the spectrum's XJoin end reached with caches).

Every input's window is probed through its hash index, or with ``join_cost="scan"`` by a scan
of the window (:func:`with_join_cost`: Fig. 10's nested-loop join at Table 2's points).

Every run's result rows and inserts must equal the A-Greedy MJoin's (exactness first).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

from processors.core.batch import INSERT, Batch
from processors.core.caching.candidates import (
    Candidate,
    global_candidates,
    orders_of,
    prefix_candidates,
    quota,
    tree_caches,
    tree_orders,
)
from processors.core.join_tree import JoinTree, tree_text
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.reoptimizers import make_reoptimizer
from processors.stages.join_tree_stage import JoinTreeStage
from processors.stages.mjoin_stage import MJoinStage

FIXED = OrderingConfig("fixed", profile_probability=0.0)
Chunks = list[list[tuple[int, Batch]]]


def star_predicates(n: int) -> list[tuple[tuple[int, str], tuple[int, str]]]:
    return [((0, "a"), (i, "a")) for i in range(1, n)]


def time_chunks(inputs: Sequence[Batch], per_chunk: int) -> Chunks:
    """The deltas of ``inputs`` cut at common time boundaries, about ``per_chunk`` deltas per
    chunk in all, so streams of different rates are pushed in time order."""
    total = sum(len(b) for b in inputs)
    end = max(int(b.ts[-1]) for b in inputs if len(b)) + 1
    count = max(total // per_chunk, 1)
    bounds = np.linspace(0, end, count + 1).astype(np.int64)
    starts = [np.searchsorted(b.ts, bounds, side="left") for b in inputs]
    chunks: Chunks = []
    for c in range(count):
        part = []
        for i, b in enumerate(inputs):
            lo, hi = int(starts[i][c]), int(starts[i][c + 1])
            if hi > lo:
                part.append((i, b.slice(lo, hi)))
        chunks.append(part)
    return chunks


@dataclass
class Run:
    """One plan over one delta stream: counts, stage time and subresult memory."""

    results: int = 0
    inserts: int = 0
    ns: int = 0
    deltas: int = 0
    peak_bytes: int = 0
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.deltas / max(self.ns / 1e9, 1e-9)


def subresult_bytes(stage: MJoinStage) -> int:
    """Bytes of stored join subresults: an XJoin's intermediate relations, an MJoin's caches."""
    if isinstance(stage, JoinTreeStage):
        return stage.held_bytes() - MJoinStage.held_bytes(stage)
    return int(stage.caches.nbytes)


def drive(stage: MJoinStage, chunks: Chunks, sample_every: int = 8) -> Run:
    """Push ``chunks`` through ``stage`` and flush; time only the stage's calls. Subresult
    memory is sampled every ``sample_every`` chunks and at the end (its peak is kept)."""
    run = Run()
    for c, part in enumerate(chunks):
        for i, b in part:
            t0 = time.perf_counter_ns()
            stage.push(i, b)
            out = stage.release()
            run.ns += time.perf_counter_ns() - t0
            run.deltas += len(b)
            run.results += sum(len(o) for o in out)
            run.inserts += sum(int(np.count_nonzero(o.sign == INSERT)) for o in out)
        if c % sample_every == 0:
            run.peak_bytes = max(run.peak_bytes, subresult_bytes(stage))
    t0 = time.perf_counter_ns()
    out = stage.flush()
    run.ns += time.perf_counter_ns() - t0
    run.results += sum(len(o) for o in out)
    run.inserts += sum(int(np.count_nonzero(o.sign == INSERT)) for o in out)
    run.peak_bytes = max(run.peak_bytes, subresult_bytes(stage))
    run.stats = stage.stats()
    return run


def alternate(
    makes: Sequence[Callable[[], MJoinStage]], chunks: Chunks, rounds: int, sample_every: int = 8
) -> list[list[Run]]:
    """Each plan (a stage maker) run ``rounds`` times over ``chunks``, the plans taking turns
    within each round (so that a slow spell of the machine hits them alike); every plan's runs
    in order. Callers check each run and keep the fastest."""
    runs: list[list[Run]] = [[] for _ in makes]
    for _ in range(rounds):
        for i, make in enumerate(makes):
            runs[i].append(drive(make(), chunks, sample_every))
    return runs


def fix_orders(stage: MJoinStage, orders: Sequence[Sequence[int]]) -> None:
    """Set every pipeline's probe order (input indices), as a re-optimizer would."""
    for i, pipe in enumerate(stage.pipelines):
        order = [pipe.inputs.index(x) for x in orders[i]]
        stage.reopts[i] = make_reoptimizer(pipe.size, stage.config, order, list(pipe.parent))


def learned_orders(stage: MJoinStage) -> tuple[tuple[int, ...], ...]:
    """The stage's current probe orders by input index."""
    return tuple(
        tuple(o) for o in orders_of(stage.pipelines, [r.order.tolist() for r in stage.reopts])
    )


@dataclass(frozen=True)
class Plan:
    """A label, the kind (M, X, P or G) and how to build its stage."""

    label: str
    kind: str
    make: Callable[[], MJoinStage]
    detail: str


#: how a join probes an input's window: its hash index (Table 2's runs), or a scan of the window
#: (a nested-loop join, the cost Fig. 10 varies; caches and X's intermediate relations hashed)
JOIN_COSTS = ("hash", "scan")


def with_join_cost(plan: Plan, join_cost: str) -> Plan:
    """``plan`` whose stages probe every input's window as ``join_cost`` says."""
    if join_cost not in JOIN_COSTS:
        raise ValueError(f"bench caching: join cost {join_cost!r} is not one of {JOIN_COSTS}")
    if join_cost == "hash":
        return plan

    def make() -> MJoinStage:
        stage = plan.make()
        for store in stage.stores:
            for column in list(store.indexes):
                store.scan(column)
        return stage

    return Plan(plan.label, plan.kind, make, plan.detail)


def agreedy_plan(names: Sequence[str], seed: int) -> Plan:
    """The MJoin as the paper's M: A-Greedy orders its pipelines."""
    preds = star_predicates(len(names))
    return Plan(
        "M/agreedy", "M", lambda: MJoinStage(names, preds, OrderingConfig(seed=seed)), "A-Greedy"
    )


def fixed_plan(names: Sequence[str], orders: Sequence[Sequence[int]], tag: str) -> Plan:
    """The MJoin with ``orders`` fixed (``tag`` names where they come from)."""
    preds = star_predicates(len(names))

    def fixed() -> MJoinStage:
        s = MJoinStage(names, preds, FIXED)
        fix_orders(s, orders)
        return s

    return Plan(f"M/{tag}", "M", fixed, f"orders {list(map(list, orders))}")


def binary_trees(leaves: Sequence[str]) -> list[JoinTree]:
    """Every binary tree over ``leaves`` up to the order of children ((2n-3)!! of them)."""
    if len(leaves) == 1:
        return [leaves[0]]
    first, rest = leaves[0], list(leaves[1:])
    out: list[JoinTree] = []
    for k in range(0, len(rest)):
        for left in combinations(rest, k):
            right = [x for x in rest if x not in left]
            lefts = binary_trees([first, *left])
            for lt in lefts:
                for rt in binary_trees(right):
                    out.append((lt, rt))
    return out


def tree_plans(names: Sequence[str]) -> list[Plan]:
    preds = star_predicates(len(names))
    return [
        Plan(
            f"X/{tree_text(t)}",
            "X",
            lambda t=t: JoinTreeStage(names, preds, t, FIXED),
            tree_text(t),
        )  # fmt: skip
        for t in binary_trees(list(names))
    ]


def cache_candidates(
    stage: MJoinStage, orders: Sequence[Sequence[int]], m: int = 6
) -> tuple[tuple[Candidate, ...], tuple[Candidate, ...]]:
    """The prefix-invariant candidates and Sect. 6's quota of m (globally-consistent ones whose
    Y holds their own pipeline's input left out: the executor refuses them, docs/caching.md)."""
    prefix = prefix_candidates(stage.graph, orders).caches
    chosen = quota(prefix, global_candidates(stage.graph, orders, root_in_y=False), m)
    return prefix, prefix if chosen is None else chosen


def cache_subsets(cands: Sequence[Candidate]) -> list[tuple[Candidate, ...]]:
    """Every non-empty subset of ``cands`` whose caches do not overlap."""
    out: list[tuple[Candidate, ...]] = []

    def grow(start: int, chosen: tuple[Candidate, ...]) -> None:
        for k in range(start, len(cands)):
            c = cands[k]
            if any(c.overlaps(o) for o in chosen):
                continue
            out.append((*chosen, c))
            grow(k + 1, (*chosen, c))

    grow(0, ())
    return out


def cache_plans(
    names: Sequence[str],
    orders: Sequence[Sequence[int]],
    subsets: Sequence[tuple[Candidate, ...]],
    tag: str = "agreedy",
) -> list[Plan]:
    preds = star_predicates(len(names))

    def make(subset: tuple[Candidate, ...]) -> MJoinStage:
        s = MJoinStage(names, preds, FIXED)
        fix_orders(s, orders)
        s.use_caches(list(subset))
        return s

    plans = []
    for subset in subsets:
        kind = "G" if any(c.kind == "global" for c in subset) else "P"
        text = ", ".join(f"{c.label(names)}" for c in subset)
        plans.append(Plan(f"{kind}[{tag}]/{text}", kind, lambda s=subset: make(s), text))
    return plans


def mirror_plans(names: Sequence[str]) -> list[Plan]:
    """For every binary join tree, the MJoin with the tree's orders and a cache of every
    subtree the tree stores (:func:`tree_caches`): the caching plans that can do what each
    XJoin does, which G's search under A-Greedy's orders never reaches (trend 3 of Sect. 7.3
    says G is about as good as X; these make it possible here)."""
    plans = []
    probe = MJoinStage(names, star_predicates(len(names)), FIXED)
    for tree in binary_trees(list(names)):
        orders = tree_orders(tree, names)
        caches = tree_caches(prefix_candidates(probe.graph, orders).caches, tree, names)
        plans += cache_plans(names, orders, [caches], f"tree {tree_text(tree)}")
    return plans
