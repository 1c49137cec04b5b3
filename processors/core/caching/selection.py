"""Offline cache selection (Babu et al., ICDE 2005, Sect. 4.4, Sect. 6, Appendix B).

The problem (Appendix B): every operator of every pipeline is covered by exactly one chosen
cache, an operator alone being a zero-length cache of proc d_ij c_ij and no cost; a chosen cache
C costs proc(C), and each shared group with a chosen cache costs cost(C) once. Minimizing the
total is the same as maximizing the net benefit, sum of benefit(C) minus the groups' costs,
over non-overlapping caches (Sect. 4.2), since benefit(C) is the segment's operators' proc
minus proc(C). Three algorithms:

- :func:`optimal_forest`: Theorem 4.1's bottom-up recursion over each pipeline's containment
  forest; optimal without shared caches (Theorem 4.2), O(m) after sorting.
- :func:`greedy`: Appendix B's greedy for shared caches: pick the group of least cost rate
  (Theorem 4.3's O(log n) approximation), then resolve overlaps.
- :func:`exhaustive`: all 2^m subsets, for globally-consistent caches (Sect. 6, m = 6) and as
  the oracle of the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from processors.core.caching.candidates import Candidate, groups_of
from processors.core.caching.model import CacheEstimate, PipelineStats


@dataclass(frozen=True)
class Slot:
    """A candidate cache as the selection sees it: operators ``start..end`` of ``pipeline``,
    its shared group, and proc(C)."""

    pipeline: int
    start: int
    end: int
    group: int
    proc: float

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    def overlaps(self, other: Slot) -> bool:
        return (
            self.pipeline == other.pipeline and self.start <= other.end and other.start <= self.end
        )


@dataclass(frozen=True)
class Problem:
    """Appendix B's instance: ``op_cost[i][p]`` is proc of operator p of pipeline i as a
    zero-length cache, ``group_cost[g]`` the shared cost L_g of group g."""

    op_cost: tuple[tuple[float, ...], ...]
    caches: tuple[Slot, ...]
    group_cost: tuple[float, ...]

    def __post_init__(self) -> None:
        if any(v < 0 for row in self.op_cost for v in row) or any(c.proc < 0 for c in self.caches):
            raise ValueError("proc and operator costs must not be negative")
        for c in self.caches:
            if not 0 <= c.start <= c.end < len(self.op_cost[c.pipeline]):
                raise ValueError(f"{c} is outside its pipeline")
            if not 0 <= c.group < len(self.group_cost):
                raise ValueError(f"{c} names no group")

    @property
    def n_operators(self) -> int:
        return sum(len(row) for row in self.op_cost)

    @property
    def shared(self) -> bool:
        groups = [c.group for c in self.caches]
        return len(set(groups)) < len(groups)

    @property
    def laminar(self) -> bool:
        """Whether overlapping caches always nest (true of prefix-invariant ones, Sect. 4.4)."""
        cs = self.caches
        return all(
            not a.overlaps(b)
            or (a.start <= b.start and b.end <= a.end)
            or (b.start <= a.start and a.end <= b.end)
            for x, a in enumerate(cs)
            for b in cs[x + 1 :]
        )

    def benefit(self, k: int) -> float:
        c = self.caches[k]
        return sum(self.op_cost[c.pipeline][c.start : c.end + 1]) - c.proc

    def net(self, chosen: Sequence[int]) -> float:
        """Sum of benefit(C) minus each used group's cost, once (Sect. 4.4)."""
        groups = {self.caches[k].group for k in chosen}
        return sum(self.benefit(k) for k in chosen) - sum(self.group_cost[g] for g in groups)

    def total_cost(self, chosen: Sequence[int]) -> float:
        """Appendix B's objective: sum of proc(C) + cost(C), operators alone included."""
        return sum(sum(row) for row in self.op_cost) - self.net(chosen)

    def feasible(self, chosen: Sequence[int]) -> bool:
        """Whether no two chosen caches share an operator."""
        cs = [self.caches[k] for k in chosen]
        return len(set(chosen)) == len(chosen) and not any(
            a.overlaps(b) for x, a in enumerate(cs) for b in cs[x + 1 :]
        )


def problem_of(
    cands: Sequence[Candidate],
    estimates: Sequence[CacheEstimate],
    stats: Sequence[PipelineStats],
) -> Problem:
    """The instance for candidates with their current estimates; a shared group costs the
    largest of its members' costs (they are equal when measured alike, Def. 4.1)."""
    groups, group_of = groups_of(cands)
    group_cost = tuple(max(estimates[k].cost for k in g) for g in groups)
    op_cost = tuple(tuple(s.d[p] * s.c[p] for p in range(len(s.c))) for s in stats)
    caches = tuple(
        Slot(c.pipeline, c.start, c.end, group_of[k], estimates[k].proc)
        for k, c in enumerate(cands)
    )
    return Problem(op_cost, caches, group_cost)


def optimal_forest(problem: Problem) -> tuple[int, ...]:
    """Theorem 4.1: per pipeline, bottom up, a subtree's best is its root alone or the union
    of its children's bests. Each cache pays its group's cost as if unshared, which is exact
    when no group has two members. Needs nested-or-disjoint caches (prefix-invariant ones)."""
    chosen: list[int] = []
    for i in range(len(problem.op_cost)):
        ks = sorted(
            (k for k, c in enumerate(problem.caches) if c.pipeline == i),
            key=lambda k: (problem.caches[k].start, -problem.caches[k].end),
        )
        parent: dict[int, int] = {}
        stack: list[int] = []
        for k in ks:  # containment parents in one pass over the sorted intervals
            c = problem.caches[k]
            while stack and problem.caches[stack[-1]].end < c.start:
                stack.pop()
            if stack:
                top = problem.caches[stack[-1]]
                if c.end > top.end:
                    raise ValueError(f"caches {top} and {c} cross: no containment forest")
            parent[k] = stack[-1] if stack else -1
            stack.append(k)
        below = dict.fromkeys(ks, 0.0)  # sum of the children's best
        take: dict[int, bool] = {}
        best: dict[int, float] = {}
        for k in reversed(ks):  # children come after their parent in the sorted order
            net = problem.benefit(k) - problem.group_cost[problem.caches[k].group]
            take[k] = net > below[k]
            best[k] = net if take[k] else below[k]
            if parent[k] >= 0:
                below[parent[k]] += best[k]
        for k in ks:  # top down: a taken cache hides its subtree
            p = parent[k]
            while p >= 0 and not take[p]:
                p = parent[p]
            if take[k] and p < 0:
                chosen.append(k)
    return tuple(sorted(chosen))


def _cost_rate(members: list[tuple[float, int, int]], fixed: float) -> tuple[float, list[int]]:
    """Appendix B's D_r: the least (L + sum B) / (sum n) over subsets, found on the prefixes
    of the members sorted by B / n (the claim proved there). Members are (B, n, id)."""
    ordered = sorted(members, key=lambda m: (m[0] / m[1], m[2]))
    best, upto, total_b, total_n = float("inf"), 0, fixed, 0
    for x, (b, n, _) in enumerate(ordered):
        total_b += b
        total_n += n
        if total_b / total_n < best:
            best, upto = total_b / total_n, x + 1
    return best, [m[2] for m in ordered[:upto]]


def greedy(problem: Problem) -> tuple[int, ...]:
    """Appendix B's greedy: repeatedly take the group (operators alone included) of least cost
    rate over the operators it still covers, until every operator is covered; then, of
    overlapping chosen caches, keep the one covering most operators. A group already taken
    costs nothing more (its cost is paid once). Feasible, within H(operators) of optimal."""
    covered: set[tuple[int, int]] = set()
    paid: set[int] = set()
    picked: list[int] = []  # cache indices in pick order
    all_ops = [(i, p) for i, row in enumerate(problem.op_cost) for p in range(len(row))]
    spans = [{(c.pipeline, p) for p in range(c.start, c.end + 1)} for c in problem.caches]
    by_group: dict[int, list[int]] = {}
    for k, c in enumerate(problem.caches):
        by_group.setdefault(c.group, []).append(k)
    while len(covered) < len(all_ops):
        best: tuple[float, int, list[int]] | None = None
        for g, ks in sorted(by_group.items()):
            members = [
                (problem.caches[k].proc, len(spans[k] - covered), k)
                for k in ks
                if spans[k] - covered
            ]
            if not members:
                continue
            rate, chosen = _cost_rate(members, 0.0 if g in paid else problem.group_cost[g])
            if best is None or rate < best[0]:
                best = (rate, g, chosen)
        lone = min(
            ((problem.op_cost[i][p], i, p) for i, p in all_ops if (i, p) not in covered),
        )
        if best is None or lone[0] < best[0]:
            covered.add((lone[1], lone[2]))  # an operator alone: no cache
            continue
        _, g, chosen = best
        paid.add(g)
        for k in chosen:
            picked.append(k)
            covered |= spans[k]
    kept: list[int] = []
    for k in sorted(picked, key=lambda k: -problem.caches[k].length):  # stable: pick order
        if not any(problem.caches[k].overlaps(problem.caches[x]) for x in kept):
            kept.append(k)
    return tuple(sorted(kept))


def exhaustive(problem: Problem, cap: int = 20) -> tuple[int, ...]:
    """The best non-overlapping subset by search over all of them (Sect. 4.4 notes it is cheap
    for n <= 6; Sect. 6 uses it with m = 6). Raises ValueError beyond ``cap`` caches."""
    m = len(problem.caches)
    if m > cap:
        raise ValueError(f"{m} candidate caches: exhaustive search is capped at {cap}")
    benefit = [problem.benefit(k) for k in range(m)]
    masks = [((1 << (c.end + 1)) - (1 << c.start), c.pipeline, c.group) for c in problem.caches]
    occupied = [0] * len(problem.op_cost)
    uses = [0] * len(problem.group_cost)
    best: list[tuple[float, tuple[int, ...]]] = [(0.0, ())]
    current: list[int] = []

    def visit(k: int, value: float) -> None:
        if k == m:
            if value > best[0][0]:
                best[0] = (value, tuple(current))
            return
        visit(k + 1, value)
        mask, i, g = masks[k]
        if occupied[i] & mask:
            return
        occupied[i] |= mask
        uses[g] += 1
        current.append(k)
        visit(k + 1, value + benefit[k] - (problem.group_cost[g] if uses[g] == 1 else 0.0))
        current.pop()
        uses[g] -= 1
        occupied[i] &= ~mask

    visit(0, 0.0)
    return best[0][1]


@dataclass(frozen=True)
class Selection:
    """A chosen set of caches (indices into the problem's), its net benefit and the method."""

    chosen: tuple[int, ...]
    net: float
    method: str


def select(problem: Problem, exhaustive_cap: int = 0) -> Selection:
    """Sect. 4.4's offline algorithm: the recursion without shared caches, else the greedy;
    exhaustive search when there are at most ``exhaustive_cap`` candidates (Sect. 6 searches
    its m candidates, globally-consistent ones included, exhaustively). Crossing caches beyond
    the cap (only globally-consistent ones cross) go to the greedy, which stays feasible."""
    if 0 < len(problem.caches) <= exhaustive_cap:
        chosen, method = exhaustive(problem, exhaustive_cap), "exhaustive"
    elif problem.shared or not problem.laminar:
        chosen, method = greedy(problem), "greedy"
    else:
        chosen, method = optimal_forest(problem), "recursion"
    return Selection(chosen, problem.net(chosen), method)
