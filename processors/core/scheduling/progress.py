"""Progress charts, lower envelopes and chains: Babcock et al., Operator Scheduling in Data Stream
Systems (VLDB J. 2004), Sect. 3 and 4.1.

A progress chart is the list of operator points ``[(t_0, s_0), ..., (t_m, s_m)]`` of one operator
path: a tuple (a unit of memory) entering with size ``s_0 = 1`` has size ``s_i`` after ``t_i``
units of processing. Operators are numbered **0..m-1** here (the paper numbers them 1..m):
operator ``i`` takes the chart from point ``i`` to point ``i + 1``.

Numbers are used as given (ints, floats or ``fractions.Fraction``), so exact inputs give exact
envelopes and slopes; nothing here converts to float.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral, Real

Point = tuple[Real, Real]

# two float derivatives this close (relative) are a tie, resolved to the smaller index (Sect. 3,
# footnote 2): charts rebuilt from measured statistics carry float rounding; exact numbers
# (ints, Fractions) are compared exactly
TIE_RTOL = 1e-9


def _finite(value: object, what: str) -> Real:
    if not isinstance(value, Real) or isinstance(value, bool):
        raise ValueError(f"{what} must be a real number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return value


def progress_chart(ops: Sequence[tuple[Real, Real]]) -> list[Point]:
    """The operator points of a path from per-operator ``(time per tuple it receives,
    selectivity)`` (Sect. 3): ``t_i = t_{i-1} + c_i * s_{i-1}``, ``s_i = s_{i-1} * sel_i``, and
    the last point's size forced to 0 (the last operator ejects its output).

    A chart given directly as points (first pair ``(0, s_0)``) is accepted too and only
    validated: an operator's time is positive, so a leading time of 0 can only be a point.
    """
    ops = list(ops)
    if not ops:
        raise ValueError("progress chart is empty: a path needs at least one operator")
    first = ops[0]
    if len(first) == 2 and isinstance(first[0], Real) and first[0] == 0:
        return chart_from_points(ops)
    points: list[Point] = [(0, 1)]
    t, s = 0, 1
    for i, pair in enumerate(ops):
        if len(pair) != 2:
            raise ValueError(f"operator {i}: expected (time, selectivity), got {pair!r}")
        c = _finite(pair[0], f"operator {i} time")
        sel = _finite(pair[1], f"operator {i} selectivity")
        if c <= 0:
            raise ValueError(f"operator {i} has time {c!r}; per-tuple times must be positive")
        if sel < 0:
            raise ValueError(f"operator {i} has selectivity {sel!r}; it must be >= 0")
        t = t + c * s
        s = s * sel
        points.append((t, s))
    points[-1] = (points[-1][0], 0)
    return points


def chart_from_points(points: Sequence[Point]) -> list[Point]:
    """Validate a chart given as operator points: starts at time 0 with a positive size,
    strictly increasing times, sizes >= 0, the last size 0 (Sect. 3). After a size-0 point (a
    selectivity-0 operator, as measured statistics can give) the rest stays at size 0 and may
    take no time."""
    pts = [tuple(p) for p in points]
    if len(pts) < 2:
        raise ValueError(f"progress chart needs at least two points (one operator), got {len(pts)}")
    for i, p in enumerate(pts):
        if len(p) != 2:
            raise ValueError(f"point {i}: expected (time, size), got {p!r}")
        _finite(p[0], f"point {i} time")
        _finite(p[1], f"point {i} size")
        if p[1] < 0:
            raise ValueError(f"point {i} has negative size {p[1]!r}")
    if pts[0][0] != 0:
        raise ValueError(f"a progress chart starts at time 0, got {pts[0][0]!r}")
    if pts[0][1] <= 0:
        raise ValueError(f"a progress chart starts with a positive size, got {pts[0][1]!r}")
    for i in range(1, len(pts)):
        if pts[i - 1][1] == 0:
            # after a selectivity-0 operator nothing is left: later operators get nothing
            if pts[i][1] != 0 or pts[i][0] < pts[i - 1][0]:
                raise ValueError(
                    f"point {i} follows a size-0 point: its size must stay 0 and its time "
                    f"must not decrease, got {pts[i]!r}"
                )
        elif pts[i][0] <= pts[i - 1][0]:
            raise ValueError(
                f"operator {i - 1} has time {pts[i][0] - pts[i - 1][0]!r} "
                f"(points {i - 1} and {i}); times must strictly increase"
            )
    if pts[-1][1] != 0:
        raise ValueError(
            f"the last point's size must be 0 (the last operator ejects its output), "
            f"got {pts[-1][1]!r}"
        )
    return pts  # type: ignore[return-value]


def _chart(points: Sequence[Point]) -> list[Point]:
    """Points as given (validated), or a chart built from (time, selectivity) pairs."""
    return progress_chart(points)


def ratio(num: Real, den: Real) -> Real:
    """num / den, a Fraction when both are integers (so that integer charts stay exact)."""
    if isinstance(num, Integral) and isinstance(den, Integral):
        return Fraction(int(num), int(den))
    return num / den


def _slope(a: Point, b: Point) -> Real:
    """-(s_b - s_a) / (t_b - t_a); 0 between two points at the same time (a zero-size
    tail, which only charts built from a selectivity-0 operator have)."""
    dt = b[0] - a[0]
    return ratio(a[1] - b[1], dt) if dt else 0


def _steeper(d: Real, best: Real) -> bool:
    """d is strictly steeper than best: exactly for exact numbers (ints, Fractions), within
    TIE_RTOL (a tie) when either is a float."""
    if isinstance(d, float) or isinstance(best, float):
        return d > best + TIE_RTOL * abs(best)
    return d > best


def lower_envelope(points: Sequence[Point]) -> list[int]:
    """Indexes of the lower envelope's points: x_0 = 0, x_{k+1} = SDOP(x_k) (Sect. 3), the
    steepest descent operator point to the right, ties to the smallest index. Once the size is
    0 the envelope goes straight to the last point."""
    pts = _chart(points)
    m = len(pts) - 1
    out = [0]
    i = 0
    while i < m:
        if pts[i][1] == 0:
            i = m
        else:
            best_j, best = i + 1, _slope(pts[i], pts[i + 1])
            for j in range(i + 2, m + 1):
                d = _slope(pts[i], pts[j])
                if _steeper(d, best):
                    best_j, best = j, d
            i = best_j
        out.append(i)
    return out


@dataclass(frozen=True)
class Segment:
    """A lower-envelope segment: operators ``first_op..last_op`` (inclusive, 0-based) form one
    chain whose priority is the segment's slope, the memory released per unit of processing
    along it (Sect. 4.1). The end points are kept so that segments can be merged (Mixed)."""

    first_op: int
    last_op: int
    slope: Real
    t_start: Real = 0
    s_start: Real = 1
    t_end: Real = 0
    s_end: Real = 0

    @property
    def ops(self) -> range:
        return range(self.first_op, self.last_op + 1)


def chains(points: Sequence[Point]) -> list[Segment]:
    """The chains of a path: one per lower-envelope segment, in path order (Sect. 4.1). Their
    slopes never increase along the path (Proposition 1)."""
    pts = _chart(points)
    env = lower_envelope(pts)
    out = []
    for a, b in zip(env, env[1:], strict=False):
        out.append(
            Segment(
                first_op=a,
                last_op=b - 1,
                slope=_slope(pts[a], pts[b]),
                t_start=pts[a][0],
                s_start=pts[a][1],
                t_end=pts[b][0],
                s_end=pts[b][1],
            )
        )
    return out


def clip_envelope(segments: Sequence[Segment], gamma: Real) -> list[Segment]:
    """Mixed(gamma), Sect. 5.3: consecutive segments whose slope is below ``gamma`` are merged
    into one segment (its slope: the straight line over them), inside which the tuples then
    move first-in first-out. With a convex envelope these are the tail segments."""
    gamma = _finite(gamma, "gamma")
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma!r}")
    out: list[Segment] = []
    run: list[Segment] = []

    def close() -> None:
        if not run:
            return
        a, b = run[0], run[-1]
        if len(run) == 1:
            out.append(a)
        else:
            dt = b.t_end - a.t_start
            out.append(
                Segment(
                    first_op=a.first_op,
                    last_op=b.last_op,
                    slope=ratio(a.s_start - b.s_end, dt) if dt else 0,
                    t_start=a.t_start,
                    s_start=a.s_start,
                    t_end=b.t_end,
                    s_end=b.s_end,
                )
            )
        run.clear()

    for seg in segments:
        if seg.slope < gamma:
            run.append(seg)
        else:
            close()
            out.append(seg)
    close()
    return out


def operator_priorities(points: Sequence[Point], gamma: Real | None = None) -> list[Real]:
    """Per operator, the slope of the envelope segment it lies on: its Chain priority
    (Sect. 4.1); with ``gamma``, of the Mixed(gamma) envelope (Sect. 5.3)."""
    segs = chains(points)
    if gamma is not None:
        segs = clip_envelope(segs, gamma)
    out: list[Real] = []
    for seg in segs:
        out.extend([seg.slope] * len(seg.ops))
    return out


def greedy_priorities(points: Sequence[Point]) -> list[Real]:
    """Per operator, Greedy's static priority (1 - s') / t' (Sect. 4.2): the part of its input
    it removes per unit time, i.e. the slope of its own progress line."""
    pts = _chart(points)
    return [_slope(pts[i], pts[i + 1]) for i in range(len(pts) - 1)]


def envelope_gaps(points: Sequence[Point]) -> list[Real]:
    """Per envelope segment, delta_i of Lemma 4.2: the largest amount by which the chart (a
    step function: a tuple keeps its size until its operator finishes) lies above the
    segment. Chain's memory exceeds its lower-envelope simulation by at most their sum, which
    is at most 1 per path when every selectivity is <= 1 (Theorem 4.3)."""
    pts = _chart(points)
    out = []
    for seg in chains(pts):
        gap = 0
        for i in seg.ops:
            t = pts[i][0]
            on_line = seg.s_start - seg.slope * (t - seg.t_start)
            # just before operator i finishes the tuple still has size s_i; the segment is
            # lowest there, at t_{i+1}
            t_next = pts[i + 1][0]
            below = seg.s_start - seg.slope * (t_next - seg.t_start)
            gap = max(gap, pts[i][1] - on_line, pts[i][1] - below)
        out.append(gap)
    return out
