"""Progress charts, lower envelopes, chains and Mixed's clipping (Babcock et al., Sect. 3, 4.1,
5.3) on hand-checked charts, exactly (Fractions), and Proposition 1 / Theorem 4.3's delta bound
on random charts against an independent lower-hull oracle."""

from __future__ import annotations

import random
from fractions import Fraction as F

import pytest
from helpers import MIXED_CHART

from processors.core.scheduling import (
    chains,
    chart_from_points,
    clip_envelope,
    envelope_gaps,
    greedy_priorities,
    lower_envelope,
    operator_priorities,
    progress_chart,
)

# Sect. 6 charts (times in microseconds per memory unit)
TWO_OPS = [(0, 1), (500, F(3, 10)), (4000, 0)]
FOUR_OPS = [(0, 1), (400, F(9, 10)), (2000, F(88, 100)), (2200, F(1, 10)), (4000, 0)]
STORED_JOIN = [(0, 1), (400, F(9, 10)), (1300, 2), (1500, F(1, 5)), (4000, 0)]
# Sect. 5.3, Example 2
EXAMPLE2 = [(0, 1), (1, F(1, 10)), (99, F(1, 1000)), (100, 0)]


def _summary(points):
    return [(s.first_op, s.last_op, s.slope) for s in chains(points)]


# -- hand-checked charts ------------------------------------------------------------------------


def test_fig1_style_chart_hides_a_selective_operator_behind_a_slow_one() -> None:
    # from (0,1): slopes to the points 1..4 are 1/20, 7/30, 4/35, 1/8 -> point 2;
    # from (3, 3/10): 1/40, 3/50 -> point 4
    pts = [(0, 1), (2, F(9, 10)), (3, F(3, 10)), (7, F(1, 5)), (8, 0)]
    assert lower_envelope(pts) == [0, 2, 4]
    assert _summary(pts) == [(0, 1, F(7, 30)), (2, 3, F(3, 50))]
    assert operator_priorities(pts) == [F(7, 30), F(7, 30), F(3, 50), F(3, 50)]
    # Greedy looks at each operator alone: (1 - s') / t'
    assert greedy_priorities(pts) == [F(1, 20), F(3, 5), F(1, 40), F(1, 5)]


def test_fig2_style_chart_with_a_join_of_selectivity_above_one() -> None:
    # the size goes up at the join; from (0,1) the derivatives are -1/2, 1/4, 1/4: a tie,
    # resolved to the smallest index (footnote 2), so two segments of equal slope
    pts = [(0, 1), (1, F(3, 2)), (2, F(1, 2)), (4, 0)]
    assert lower_envelope(pts) == [0, 2, 3]
    assert _summary(pts) == [(0, 1, F(1, 4)), (2, 2, F(1, 4))]


def test_ties_go_to_the_smallest_index() -> None:
    # all three points are collinear with (0,1): each is its own segment
    pts = [(0, 1), (1, F(2, 3)), (2, F(1, 3)), (3, 0)]
    assert lower_envelope(pts) == [0, 1, 2, 3]
    # floats that are equal up to rounding tie as well (0.3/3 and 0.6/6 in binary)
    fl = [(0, 1.0), (3, 0.7), (6, 0.4), (10, 0.0)]
    assert lower_envelope(fl) == [0, 1, 2, 3]
    # exact numbers are compared exactly: a derivative steeper by 1e-12 is not a tie
    eps = F(1, 10**12)
    ex = [(0, 1), (2, F(3, 4)), (4, F(1, 2) - eps), (100, 0)]
    assert (1 - ex[2][1]) / 4 - F(1, 8) == eps / 4
    assert lower_envelope(ex)[1] == 2
    # the same chart in floats is a tie (relative difference below TIE_RTOL): nearest point
    assert lower_envelope([(0, 1.0), (2, 0.75), (4, 0.5 - 1e-12), (100, 0.0)])[1] == 1


def test_two_operator_chart_of_sect_6_1_1() -> None:
    assert lower_envelope(TWO_OPS) == [0, 1, 2]
    assert _summary(TWO_OPS) == [(0, 0, F(7, 5000)), (1, 1, F(3, 35000))]
    # every operator is its own chain: Greedy and Chain rank them alike (Sect. 6.1.1)
    assert greedy_priorities(TWO_OPS) == operator_priorities(TWO_OPS)


def test_four_operator_chart_groups_the_hidden_selective_third_operator() -> None:
    # slopes from (0,1): 1/4000, 3/50000, 9/22000, 1/4000 -> the third operator's end point
    assert lower_envelope(FOUR_OPS) == [0, 3, 4]
    assert _summary(FOUR_OPS) == [(0, 2, F(9, 22000)), (3, 3, F(1, 18000))]
    # Greedy ranks the third operator first and the second last but one
    g = greedy_priorities(FOUR_OPS)
    assert g == [F(1, 4000), F(1, 80000), F(39, 10000), F(1, 18000)]
    assert max(range(4), key=g.__getitem__) == 2 and min(range(4), key=g.__getitem__) == 1


def test_stored_relation_join_chart_puts_the_first_three_operators_in_one_chain() -> None:
    # Sect. 6.1.2: the join (second operator, selectivity 20/9) is inside the first chain
    assert lower_envelope(STORED_JOIN) == [0, 3, 4]
    assert _summary(STORED_JOIN) == [(0, 2, F(8, 15000)), (3, 3, F(1, 12500))]
    assert greedy_priorities(STORED_JOIN)[1] < 0  # the join grows memory: Greedy's last


def test_mixed_chart_and_the_merges_the_paper_states() -> None:
    # Sect. 6.2: each operator its own segment ...
    assert lower_envelope(MIXED_CHART) == [0, 1, 2, 3, 4]
    segs = chains(MIXED_CHART)
    assert [s.slope for s in segs] == [F(7, 10000), F(1, 9900), F(1, 15000), F(1, 20000)]
    # ... Mixed(0.0001) combines the third and fourth operators
    m1 = clip_envelope(segs, F(1, 10000))
    assert [(s.first_op, s.last_op, s.slope) for s in m1] == [
        (0, 0, F(7, 10000)),
        (1, 1, F(1, 9900)),
        (2, 3, F(1, 17500)),
    ]
    # Mixed(0.0002) the second, third and fourth
    m2 = clip_envelope(segs, F(2, 10000))
    assert [(s.first_op, s.last_op, s.slope) for s in m2] == [
        (0, 0, F(7, 10000)),
        (1, 3, F(3, 44900)),
    ]
    # Mixed(0.0008) all of them
    m8 = clip_envelope(segs, F(8, 10000))
    assert [(s.first_op, s.last_op, s.slope) for s in m8] == [(0, 3, F(1, 5490))]
    assert operator_priorities(MIXED_CHART, gamma=F(8, 10000)) == [F(1, 5490)] * 4
    # gamma 0 clips nothing
    assert clip_envelope(segs, 0) == segs
    with pytest.raises(ValueError, match="gamma"):
        clip_envelope(segs, -1)


def test_example2_envelope_and_mixed_0_01() -> None:
    segs = chains(EXAMPLE2)
    # the second segment is (barely) steeper than the third: 99/98000 > 1/1000
    assert [s.slope for s in segs] == [F(9, 10), F(99, 98000), F(1, 1000)]
    clipped = clip_envelope(segs, F(1, 100))
    assert [(s.first_op, s.last_op, s.slope) for s in clipped] == [
        (0, 0, F(9, 10)),
        (1, 2, F(1, 990)),
    ]


def test_progress_chart_from_time_and_selectivity() -> None:
    # per operator: time per tuple it receives, selectivity (Sect. 3): t_i = t_{i-1} + c s_{i-1}
    pts = progress_chart([(400, F(9, 10)), (F(16000, 9), F(88, 90)), (F(200, F(88, 100)), 0.5)])
    assert pts[:3] == [(0, 1), (400, F(9, 10)), (2000, F(88, 100))]
    assert pts[3] == (2200, 0)  # the last operator ejects: size 0 whatever its selectivity
    # points are accepted as such
    assert progress_chart(FOUR_OPS) == FOUR_OPS


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ([(0, 1)], "at least two points"),
        ([(1, 1), (2, 0)], "starts at time 0"),
        ([(0, 0), (2, 0)], "positive size"),
        ([(0, 1), (2, F(1, 2)), (2, 0)], "strictly increase"),
        ([(0, 1), (2, -1), (3, 0)], "negative size"),
        ([(0, 1), (2, F(1, 2))], "last point's size must be 0"),
        ([(0, 1), (2, float("nan")), (3, 0)], "finite"),
    ],
)
def test_bad_charts_are_named(points, message) -> None:
    with pytest.raises(ValueError, match=message):
        chart_from_points(points)


def test_bad_operator_statistics_are_named() -> None:
    with pytest.raises(ValueError, match="operator 1 has time"):
        progress_chart([(1, 0.5), (0, 0.5)])
    with pytest.raises(ValueError, match="operator 0 has selectivity"):
        progress_chart([(1, -0.5)])
    with pytest.raises(ValueError, match="empty"):
        progress_chart([])


def test_a_selectivity_zero_operator_ends_the_envelope() -> None:
    pts = [(0, 1), (2, 0), (2, 0), (5, 0)]
    assert lower_envelope(pts) == [0, 1, 3]


# -- random charts ------------------------------------------------------------------------------


def _lower_hull(points):
    """Andrew's monotone chain, lower half, keeping collinear points: an oracle for the SDOP
    walk (the steepest descent from each envelope point, ties to the nearest)."""
    hull = []
    for p in points:
        while len(hull) >= 2:
            (ox, oy), (ax, ay) = hull[-2], hull[-1]
            cross = (ax - ox) * (p[1] - oy) - (ay - oy) * (p[0] - ox)
            if cross < 0:
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def _random_chart(rng: random.Random, m: int, max_sel: F) -> list:
    t, s = 0, F(1)
    pts = [(0, F(1))]
    for i in range(m):
        t += rng.randint(1, 9)
        s = 0 if i == m - 1 else s * F(rng.randint(1, 20), 20) * max_sel
        pts.append((t, s))
    return pts


@pytest.mark.parametrize("max_sel", [F(1), F(5, 2)])
def test_envelope_is_the_lower_hull_and_slopes_never_increase(max_sel) -> None:
    rng = random.Random(11)
    for _ in range(400):
        pts = _random_chart(rng, rng.randint(1, 8), max_sel)
        env = lower_envelope(pts)
        assert [pts[i] for i in env] == _lower_hull(pts)
        segs = chains(pts)
        slopes = [s.slope for s in segs]
        # Proposition 1
        assert all(a >= b for a, b in zip(slopes, slopes[1:], strict=False)), pts
        # chains partition the operators, in path order
        assert [op for s in segs for op in s.ops] == list(range(len(pts) - 1))
        # Proposition 3: every operator point lies on or above the envelope
        for seg in segs:
            for i in range(seg.first_op, seg.last_op + 2):
                line = seg.s_start - seg.slope * (pts[i][0] - seg.t_start)
                assert pts[i][1] >= line


def test_envelope_gaps_sum_to_at_most_one_when_selectivities_are_at_most_one() -> None:
    """Theorem 4.3's proof: delta_i <= s_i - s_{i+1} per segment, so the sum is <= 1."""
    rng = random.Random(5)
    for _ in range(400):
        pts = _random_chart(rng, rng.randint(1, 8), F(1))
        gaps = envelope_gaps(pts)
        segs = chains(pts)
        assert len(gaps) == len(segs)
        for g, seg in zip(gaps, segs, strict=True):
            assert 0 <= g <= seg.s_start - seg.s_end
            # the largest gap is just before an operator of the segment finishes
            expect = max(
                pts[i][1] - (seg.s_start - seg.slope * (pts[i + 1][0] - seg.t_start))
                for i in seg.ops
            )
            assert g == expect
        assert sum(gaps) <= 1


def test_envelope_gaps_on_the_four_operator_chart() -> None:
    # first segment (operators 0-2, slope 9/22000): just before each operator finishes the
    # gaps are 1 - 46/55, 9/10 - 2/11 and 88/100 - 1/10; the largest is the third operator's
    assert envelope_gaps(FOUR_OPS) == [F(88, 100) - F(1, 10), F(1, 10)]
