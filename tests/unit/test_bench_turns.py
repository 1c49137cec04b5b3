"""The filter bench's turns (processors.bench.filters.balanced_turns): balanced for carry-over."""

from __future__ import annotations

from collections import Counter

import pytest

from processors.bench.filters import balanced_turns


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6])
def test_each_stage_at_each_place_and_after_each_other_equally_often(k: int) -> None:
    rows = balanced_turns(k)
    assert all(sorted(row) == list(range(k)) for row in rows)
    places = Counter((s, i) for row in rows for i, s in enumerate(row))
    after = Counter((a, b) for row in rows for a, b in zip(row, row[1:], strict=False))
    assert len(places) == k * k and len(set(places.values())) == 1
    assert len(after) == k * (k - 1) and len(set(after.values())) == 1
