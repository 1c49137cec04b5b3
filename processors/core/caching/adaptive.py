"""A-Caching's adaptive re-selection (Babu et al., ICDE 2005, Sect. 4.5, with Sect. 5's memory).

Each candidate is used, profiled (its benefit and cost being estimated) or unused. All start
profiled; once every profiled one has W observations the offline algorithm picks the caches to
use and memory is allocated to them by priority. Every ``interval`` tuples a new round profiles
the unused ones again (4.5 b: a used cache is profiled, hence not used, only when it holds an
unused candidate whose probe stream it hides), and the offline algorithm runs again only if the
benefit or cost of a used or profiled cache moved by more than ``threshold`` since it last ran
(4.5 c). Between rounds, a used cache whose benefit falls below its cost stops being used at
once (4.5 a). A join order change drops the caches of the reordered pipelines, and any cache
elsewhere whose prefix invariant no longer holds (step 5).

The class is pure: the runtime feeds it tuples counts and estimates and applies the
:class:`CachePlanChange` objects it returns, reporting them like join order changes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from processors.core.caching.allocation import allocate_caches
from processors.core.caching.candidates import Candidate
from processors.core.caching.model import CacheEstimate, PipelineStats
from processors.core.caching.selection import problem_of, select
from processors.core.ordering.reoptimizers import OrderChange

Ident = tuple[Any, ...]


class State(enum.Enum):
    USED = "used"
    PROFILED = "profiled"
    UNUSED = "unused"


@dataclass(frozen=True)
class CachePlanChange:
    """One change of the caches in use: which were added and dropped, and why. ``refused``
    are caches the selection chose that got no memory (Sect. 5)."""

    at_tuple: int
    reason: str
    before: tuple[Candidate, ...]
    after: tuple[Candidate, ...]
    refused: tuple[Candidate, ...] = ()
    method: str = ""

    @property
    def added(self) -> tuple[Candidate, ...]:
        had = {c.ident for c in self.before}
        return tuple(c for c in self.after if c.ident not in had)

    @property
    def dropped(self) -> tuple[Candidate, ...]:
        has = {c.ident for c in self.after}
        return tuple(c for c in self.before if c.ident not in has)

    def entry(self, names: Sequence[str]) -> dict[str, Any]:
        """A stats entry, caches by label (as ``PlanChanges.entries`` reports orders)."""
        return {
            "at_tuple": self.at_tuple,
            "reason": self.reason,
            "added": [c.label(names) for c in self.added],
            "dropped": [c.label(names) for c in self.dropped],
            "refused": [c.label(names) for c in self.refused],
            "used": [c.label(names) for c in self.after],
        }

    def describe(self, names: Sequence[str]) -> str:
        e = self.entry(names)
        parts = [f"+{x}" for x in e["added"]] + [f"-{x}" for x in e["dropped"]]
        tail = f"; no memory for {', '.join(e['refused'])}" if self.refused else ""
        return (
            f"caches changed after {self.at_tuple} tuples ({self.reason}): "
            + (", ".join(parts) or "none")
            + tail
        )

    def order_change(self, index: Mapping[Ident, int]) -> OrderChange:
        """As an :class:`OrderChange` over cache ids (``index`` numbers the caches, whose
        labels are then the names), for ``PlanChanges.record``."""
        return OrderChange(
            tuple(index[c.ident] for c in self.before),
            tuple(index[c.ident] for c in self.after),
            -1,
            self.reason,
        )


@dataclass(frozen=True)
class AdaptiveConfig:
    """I (tuples between rounds, Sect. 4.5 step 4), p (4.5 c), the largest candidate count
    searched exhaustively (Sect. 6 uses m = 6) and the memory budget in bytes (Sect. 5)."""

    interval: int = 10_000
    threshold: float = 0.2
    exhaustive_cap: int = 0
    budget_bytes: float = math.inf


@dataclass
class _Baseline:
    values: dict[Ident, tuple[float, float]] = field(default_factory=dict)

    def moved(self, ident: Ident, e: CacheEstimate, p: float) -> bool:
        if ident not in self.values:
            return True
        b, c = self.values[ident]
        return abs(e.benefit - b) > p * abs(b) or abs(e.cost - c) > p * abs(c)


class AdaptiveSelector:
    """The used / profiled / unused states of the candidates and their transitions."""

    def __init__(self, candidates: Sequence[Candidate], config: AdaptiveConfig | None = None):
        self.config = config or AdaptiveConfig()
        self.cands: list[Candidate] = list(candidates)
        self.state: dict[Ident, State] = {c.ident: State.PROFILED for c in self.cands}
        self.tuples = 0
        self.rounds = 0  # offline algorithm runs
        self._round_open = True  # step 1: everything starts profiled
        self._round_at = 0
        self._resume: set[Ident] = set()  # used caches profiled this round (4.5 b)
        self._baseline: _Baseline | None = None
        self._chosen: set[Ident] = set()  # the last selection, before memory

    # -- views --------------------------------------------------------------------------------
    def in_state(self, state: State) -> list[Candidate]:
        return [c for c in self.cands if self.state[c.ident] is state]

    @property
    def used(self) -> list[Candidate]:
        return self.in_state(State.USED)

    @property
    def profiling(self) -> bool:
        """Whether a round is open (its profiled caches still gathering observations)."""
        return self._round_open

    # -- transitions --------------------------------------------------------------------------
    def advance(
        self,
        tuples: int,
        estimates: Mapping[Ident, CacheEstimate],
        ready: Collection[Ident],
        stats: Sequence[PipelineStats],
    ) -> list[CachePlanChange]:
        """``tuples`` more processed; ``estimates`` of every candidate (only the used ones are
        read between rounds, all when a round closes), ``ready`` the candidates with W
        observations. Returns the changes to apply, in order."""
        self.tuples += tuples
        steps = [self._demote_negative(estimates)]
        if not self._round_open and self.tuples - self._round_at >= self.config.interval:
            steps.append(self._open_round())
        if self._round_open and all(c.ident in ready for c in self.in_state(State.PROFILED)):
            steps.append(self._close_round(estimates, stats))
        return [c for c in steps if c is not None]

    def _change(
        self, before: list[Candidate], reason: str, refused: Sequence[Candidate] = (), method=""
    ) -> CachePlanChange | None:
        after = self.used
        if {c.ident for c in before} == {c.ident for c in after} and not refused:
            return None
        return CachePlanChange(
            self.tuples, reason, tuple(before), tuple(after), tuple(refused), method
        )

    def _demote_negative(self, estimates: Mapping[Ident, CacheEstimate]) -> CachePlanChange | None:
        """4.5 a: a stored cache whose used members' benefit no longer covers its cost stops
        being used, and so does a member whose own benefit is negative."""
        before = self.used
        groups: dict[object, list[Candidate]] = {}
        for c in before:
            groups.setdefault(c.share_key, []).append(c)
        for members in groups.values():
            es = [estimates[c.ident] for c in members]
            net = sum(e.benefit for e in es) - max(e.cost for e in es)
            for c, e in zip(members, es, strict=True):
                if net < 0 or e.benefit < 0:
                    self.state[c.ident] = State.UNUSED
                    self._chosen.discard(c.ident)
        return self._change(before, "benefit below cost (Sect. 4.5 a)")

    def _open_round(self) -> CachePlanChange | None:
        """Step 4 with 4.5 b: unused caches are profiled again; a used one too (and so not
        used meanwhile) only if it contains an unused candidate."""
        before = self.used
        unused = {c.ident for c in self.in_state(State.UNUSED)}
        for c in before:
            if any(o.ident in unused and c.contains(o) and o.ident != c.ident for o in self.cands):
                self.state[c.ident] = State.PROFILED
                self._resume.add(c.ident)
        for ident in unused:
            self.state[ident] = State.PROFILED
        self._round_open = True
        return self._change(before, "profiling a cache inside it (Sect. 4.5 b)")

    def _close_round(
        self, estimates: Mapping[Ident, CacheEstimate], stats: Sequence[PipelineStats]
    ) -> CachePlanChange | None:
        """Step 3 with 4.5 c: run the offline algorithm if a used or profiled cache moved by
        more than p, else go back to the previous choice."""
        before = self.used
        self._round_open = False
        self._round_at = self.tuples
        live = [c for c in self.cands if self.state[c.ident] is not State.UNUSED]
        base = self._baseline
        p = self.config.threshold
        if base is not None and not any(base.moved(c.ident, estimates[c.ident], p) for c in live):
            for c in self.in_state(State.PROFILED):
                self.state[c.ident] = State.USED if c.ident in self._resume else State.UNUSED
            self._resume.clear()
            return self._change(before, "statistics stable (Sect. 4.5 c)")
        self._resume.clear()
        ests = [estimates[c.ident] for c in self.cands]
        sel = select(problem_of(self.cands, ests, stats), self.config.exhaustive_cap)
        self.rounds += 1
        self._baseline = _Baseline(
            {c.ident: (e.benefit, e.cost) for c, e in zip(self.cands, ests, strict=True)}
        )
        self._chosen = {self.cands[k].ident for k in sel.chosen}
        for c in self.in_state(State.PROFILED):
            self.state[c.ident] = State.UNUSED
        refused = self._apply_memory(ests)
        return self._change(before, "re-selection (Sect. 4.4)", refused, sel.method)

    def _apply_memory(self, ests: Sequence[CacheEstimate]) -> list[Candidate]:
        """Sect. 5: the chosen caches that fit the budget by priority are used, the rest not."""
        chosen = [k for k, c in enumerate(self.cands) if c.ident in self._chosen]
        kept, refused, _ = allocate_caches(self.cands, chosen, ests, self.config.budget_bytes)
        keep = {self.cands[k].ident for k in kept}
        for c in self.cands:
            if c.ident in self._chosen:
                self.state[c.ident] = State.USED if c.ident in keep else State.UNUSED
            elif self.state[c.ident] is State.USED:
                self.state[c.ident] = State.UNUSED
        return [self.cands[k] for k in refused]

    def set_budget(
        self, budget_bytes: float, estimates: Mapping[Ident, CacheEstimate]
    ) -> CachePlanChange | None:
        """Sect. 5: memory availability changed; re-allocate over the last selection (outside
        a round; during one, the budget applies when it closes)."""
        self.config = AdaptiveConfig(
            self.config.interval, self.config.threshold, self.config.exhaustive_cap, budget_bytes
        )
        if self._round_open:
            return None
        before = self.used
        refused = self._apply_memory([estimates[c.ident] for c in self.cands])
        return self._change(before, "memory budget changed (Sect. 5)", refused)

    def order_changed(
        self, pipelines: Collection[int], candidates: Sequence[Candidate]
    ) -> CachePlanChange | None:
        """Step 5: ``pipelines`` were reordered and ``candidates`` are the candidates of the new
        orders. Caches of those pipelines go, and so do caches elsewhere that are no longer
        candidates (their prefix invariant relied on a reordered pipeline); new candidates
        start profiled, the others keep their state."""
        before = self.used
        new = {c.ident for c in candidates}
        for c in self.cands:
            if c.pipeline in pipelines or c.ident not in new:
                self._chosen.discard(c.ident)
                self._resume.discard(c.ident)
        old = self.state
        self.cands = list(candidates)
        self.state = {
            c.ident: (
                old[c.ident] if c.ident in old and c.pipeline not in pipelines else State.PROFILED
            )
            for c in self.cands
        }
        names = ", ".join(str(i) for i in sorted(pipelines))
        return self._change(before, f"join order of pipeline {names} changed (Sect. 4.5 step 5)")
