"""The search for drop-box shares when output and cost are not linear in them (a join over RANGE
windows: a box before a RANGE window shrinks the window too), for
:mod:`processors.core.cost.shedding`.

Maximize the output rate over shares in [floor, 1] with the cost within the budget. From the
floors, a greedy ascent raises in steps the share that adds the most output per unit of cost
(the knapsack's rule on marginal figures) and fills what is left; a local search then moves
share from one input to another, or to all the others, while the output grows, with steps
halving. The problem is not convex, so the local search also starts from one share for all and
from each input throttled (the others at one share, as large as fits with it at its floor,
then it as large as what is left allows), the most promising start first;
the best end wins. Every figure comes from the cost model, memoized, and the search stops at a
given number of evaluations with the best shares found so far.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

Figures = Callable[[dict[str, float]], tuple[float, float]]  # shares -> (output, cost)
#: the ascent's step, and the local search's first and last steps
ASCENT_STEP = 1 / 16
FIRST_MOVE, LAST_MOVE = 1 / 8, 1 / 128
#: bisection steps for the largest share that fits
BISECTION_STEPS = 16


class _Spent(Exception):
    """The evaluation budget ran out."""


class ShareSearch:
    def __init__(self, figures: Figures, names: Sequence[str], budget: float, floor: float) -> None:
        self._figures = figures
        self.names = list(names)
        self.budget = budget
        self.floor = floor
        self._memo: dict[tuple[float, ...], tuple[float, float]] = {}
        self.evaluations = 0
        self._limit = 0
        self.best: dict[str, float] = dict.fromkeys(names, floor)
        self._best_out = float("-inf")

    def at(self, x: dict[str, float]) -> tuple[float, float]:
        key = tuple(round(x[n], 12) for n in self.names)
        if key not in self._memo:
            if self.evaluations >= self._limit:
                raise _Spent
            self.evaluations += 1
            self._memo[key] = self._figures(x)
        out, cost = self._memo[key]
        if cost <= self.budget and out > self._best_out:
            self.best, self._best_out = dict(x), out
        return out, cost

    def fits(self, x: dict[str, float]) -> bool:
        return self.at(x)[1] <= self.budget

    def run(self, effort: int) -> dict[str, float]:
        """The best shares found within ``effort`` evaluations (the floors if none fits)."""
        self._limit = effort
        try:
            if not self.fits(dict.fromkeys(self.names, self.floor)):
                return self.best
            starts = [*self._starts(), self._ascent()]
            for start in sorted(starts, key=lambda x: -self.at(x)[0]):  # the best first
                self._exchange(start)
        except _Spent:
            pass
        return self.best

    def _largest(self, fits: Callable[[float], bool], lo: float, hi: float) -> float:
        """The largest v in [lo, hi] with fits(v), given fits(lo) (fitting is monotone)."""
        if fits(hi):
            return hi
        for _ in range(BISECTION_STEPS):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    def _ascent(self) -> dict[str, float]:
        keep = dict.fromkeys(self.names, self.floor)
        out, cost = self.at(keep)
        while True:
            best: tuple[float, dict[str, float], float, float] | None = None
            for s in self.names:
                if keep[s] >= 1.0:
                    continue
                x = {**keep, s: min(1.0, keep[s] + ASCENT_STEP)}
                o, c = self.at(x)
                if c <= self.budget:
                    gain = (o - out) / max(c - cost, 1e-15)
                    if best is None or gain > best[0]:
                        best = (gain, x, o, c)
            if best is None:
                break
            _, keep, out, cost = best
        for s in sorted(self.names, key=lambda n: keep[n]):  # what a whole step no longer fitted
            keep[s] = self._largest(lambda v, s=s: self.fits({**keep, s: v}), keep[s], 1.0)
        return keep

    def _starts(self) -> list[dict[str, float]]:
        """One share for all; for each input, the others at one share as large as fits with
        it at its floor, then it as large as what is left allows."""
        out = []
        for low in (None, *self.names):
            others = [n for n in self.names if n != low]

            def shares(v: float, low: str | None = low, others: list[str] = others) -> dict:
                return {**dict.fromkeys(others, v), **({low: self.floor} if low else {})}

            x = shares(self._largest(lambda v, f=shares: self.fits(f(v)), self.floor, 1.0))
            if low is not None:  # then the low one as high as what is left allows
                x[low] = self._largest(
                    lambda v, x=x, n=low: self.fits({**x, n: v}), self.floor, 1.0
                )
            out.append(x)
        return out

    def _exchange(self, keep: dict[str, float]) -> None:
        out = self.at(keep)[0]
        moves = [((up,), down) for up, down in itertools.permutations(self.names, 2)]
        if len(self.names) > 2:
            moves += [(tuple(n for n in self.names if n != d), d) for d in self.names]
        step = FIRST_MOVE
        while step >= LAST_MOVE:
            moved = False
            for ups, down in moves:
                if all(keep[u] >= 1.0 for u in ups) or keep[down] <= self.floor:
                    continue
                x = {**keep, **{u: min(1.0, keep[u] + step) for u in ups}}
                if not self.fits({**x, down: self.floor}):
                    continue
                x[down] = self._largest(lambda v, x=x, d=down: self.fits({**x, d: v}),
                                        self.floor, keep[down])  # fmt: skip
                o = self.at(x)[0]
                if o > out * (1 + 1e-9):
                    keep, out, moved = x, o, True
            if not moved:
                step /= 2
