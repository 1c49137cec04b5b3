"""Overlap phases of the network-monitoring workload (:mod:`processors.workloads.network`): which
routes packets take in a phase, and what that means for a join (overlap, pass rates and the
best probe orders, Section 3's eq. 1 with unit probe costs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np

MAX_ROUTERS = 64
MAX_ORDER_ROUTERS = 12  # best_orders visits 2^(n-1) subsets of probes per router

Route = tuple[int, ...]

# Example 1 in numbers (routers 0..3 are R_1..R_4): R_1's traffic comes mostly from R_3 or R_4
# and rarely from R_2, and what R_1 shares with R_2 mostly passes R_3, rarely R_4, so R_1's best
# order is W_2, W_4, W_3. Weights are tuned so that no router has two optimal orders.
EXAMPLE1_ROUTES: dict[Route, float] = {
    (0, 2, 3): 0.40,
    (0, 2): 0.10,
    (0, 3): 0.10,
    (0, 1, 2): 0.05,
    (0, 1, 2, 3): 0.02,
    (1, 2): 0.13,
    (1, 3): 0.10,
    (2, 3): 0.08,
    (1, 2, 3): 0.02,
}


def is_int(x: object) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool)


def is_real(x: object) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool) and math.isfinite(float(x))


@dataclass(frozen=True)
class OverlapPhase:
    """``duration_ms`` of traffic in which a packet takes route ``r`` with probability
    ``weight(r) / sum(weights)``.

    ``routes`` is a mapping or a sequence of (routers, weight) pairs; a route is a non-empty
    collection of distinct router indices (one router: local traffic that no join sees). After
    construction ``routes`` holds the routes as sorted tuples and ``weights`` the normalized
    weights, in the order given.
    """

    duration_ms: int
    routes: Mapping[Route, float] | Sequence[tuple[Route, float]]
    name: str = ""
    weights: tuple[float, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not is_int(self.duration_ms) or self.duration_ms < 1:
            raise ValueError(f"duration_ms must be an integer >= 1, got {self.duration_ms!r}")
        pairs = list(self.routes.items() if isinstance(self.routes, Mapping) else self.routes)
        if not pairs:
            raise ValueError("routes must name at least one route")
        paths: list[Route] = []
        raw: list[float] = []
        for pair in pairs:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise ValueError(f"routes entries must be (routers, weight) pairs, got {pair!r}")
            members, weight = pair
            members = tuple(members) if isinstance(members, Iterable) else ()
            if (
                not members
                or not all(is_int(r) and r >= 0 for r in members)
                or len(set(members)) != len(members)
            ):
                raise ValueError(
                    f"routes must be non-empty collections of distinct router indices >= 0, "
                    f"got {pair[0]!r}"
                )
            if not is_real(weight) or weight <= 0:
                raise ValueError(f"routes weights must be finite numbers > 0, got {weight!r}")
            paths.append(tuple(sorted(int(r) for r in members)))
            raw.append(float(weight))
        if len(set(paths)) != len(paths):
            raise ValueError("routes lists the same set of routers twice")
        total = math.fsum(raw)
        object.__setattr__(self, "routes", tuple(paths))
        object.__setattr__(self, "weights", tuple(w / total for w in raw))

    def _pairs(self) -> Iterator[tuple[Route, float]]:
        return zip(self.routes, self.weights, strict=True)  # type: ignore[arg-type]

    @property
    def max_router(self) -> int:
        return max(max(r) for r, _ in self._pairs())

    @property
    def max_route_len(self) -> int:
        return max(len(r) for r, _ in self._pairs())

    def shares(self, routers: int) -> np.ndarray:
        """Fraction of all packets that each router sees (float64, length ``routers``); a
        router's stream carries ``packets_per_s`` times that many tuples per second."""
        out = np.zeros(routers, np.float64)
        for route, w in self._pairs():
            out[list(route)] += w
        return out

    def overlap(self, routers: int) -> np.ndarray:
        """``O[i, j]``: the fraction of router i's packets that router j sees too (1 on the
        diagonal; NaN in the row of a router that sees no packets)."""
        both = np.zeros((routers, routers), np.float64)
        for route, w in self._pairs():
            both[np.ix_(route, route)] += w
        seen = np.diag(both).copy()
        with np.errstate(invalid="ignore", divide="ignore"):
            return both / seen[:, None]

    def pass_rate(self, router: int, probes: Iterable[int]) -> float:
        """Probability that a delta of ``router``'s window finds its pid in the windows of all
        ``probes`` (inserts and deletes equally many); NaN if the router sees no packets."""
        probe_set = set(probes)
        together = seen = 0.0
        for route, w in self._pairs():
            if router in route:
                seen += w
                if probe_set <= set(route):
                    together += w
        return together / seen / (len(probe_set) + 1) if seen > 0 else math.nan

    def expected_probes(self, router: int, order: Sequence[int]) -> float:
        """Expected probes per delta of ``router`` when probing in ``order`` with unit costs:
        a delta reaches the k-th probe iff it passed the first k-1."""
        return math.fsum(self.pass_rate(router, order[:k]) for k in range(len(order)))

    def best_orders(self, routers: int) -> tuple[tuple[int, ...], ...]:
        """Per router, the order of the other routers with the fewest expected probes per delta
        (ties, to 1e-12: the lexicographically smallest). Exact, by dynamic programming over
        subsets of probes, hence at most 12 routers."""
        if not is_int(routers) or not 2 <= routers <= MAX_ORDER_ROUTERS:
            raise ValueError(
                f"routers must be an integer in 2..{MAX_ORDER_ROUTERS}, got {routers!r}"
            )
        if self.max_router >= routers:
            raise ValueError(f"routers={routers} but a route names router {self.max_router}")
        return tuple(self._best_order(i, routers) for i in range(routers))

    def _best_order(self, router: int, routers: int) -> tuple[int, ...]:
        others = [j for j in range(routers) if j != router]
        m = len(others)
        bit = {j: 1 << b for b, j in enumerate(others)}
        masks = np.arange(1 << m, dtype=np.int64)
        together = np.zeros(1 << m, np.float64)
        seen = 0.0
        for route, w in self._pairs():
            if router in route:
                seen += w
                inside = sum(bit[j] for j in route if j != router)
                together += w * ((masks & ~inside) == 0)
        sizes = np.array([bin(s).count("1") for s in range(1 << m)], np.float64)
        rate = together / seen / (sizes + 1) if seen > 0 else np.zeros(1 << m)
        # cost[S]: fewest expected probes to run the probes of S first; order[S]: that order
        cost = [0.0] * (1 << m)
        order: list[tuple[int, ...]] = [()] * (1 << m)
        for s in range(1, 1 << m):
            best: tuple[float, tuple[int, ...]] | None = None
            for b in range(m):
                if s >> b & 1:
                    rest = s & ~(1 << b)
                    cand = (round(cost[rest] + float(rate[rest]), 12), (*order[rest], others[b]))
                    if best is None or cand < best:
                        best = cand
            assert best is not None
            cost[s], order[s] = best
        return order[(1 << m) - 1]


def default_phases(routers: int = 4, phase_ms: int = 1_200_000) -> tuple[OverlapPhase, ...]:
    """``routers`` phases of ``phase_ms`` each (default two 10-minute windows).

    Phase 0 is Example 1 for 4 routers (:data:`EXAMPLE1_ROUTES`); for other counts it is a line
    r0 - r1 - ... where every stretch of two or more consecutive routers is a route, weighted up
    along the line (1.5^first) so that routers differ. Phase p gives router (i + p) mod n the
    role router i has in phase 0: routers that shared little now share much, and with Example 1
    every router's best order changes at every phase. Line phases may have tied best orders.
    """
    if not is_int(routers) or not 2 <= routers <= MAX_ROUTERS:
        raise ValueError(f"routers must be an integer in 2..{MAX_ROUTERS}, got {routers!r}")
    if routers == 4:
        base = EXAMPLE1_ROUTES
    else:
        base = {
            tuple(range(a, b + 1)): 1.5**a for a in range(routers) for b in range(a + 1, routers)
        }
    return tuple(
        OverlapPhase(
            phase_ms,
            [(tuple((r + p) % routers for r in route), w) for route, w in base.items()],
            name=f"rotation {p}",
        )
        for p in range(routers)
    )
