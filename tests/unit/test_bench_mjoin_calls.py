"""bench mjoin's per-call figure measures the join it says: the eager join of its feed gives
the ordered join's results (docs/windows-and-joins.md, "Eager joins"), and some."""

from __future__ import annotations

from processors.bench.mjoin_calls import STREAMS, call_us, eager_join_plan, ticks_of
from processors.physical.runner import QueryRunner


def _rows(output: str, per_call: int, ticks: int) -> list[tuple[int, ...]]:
    runner = QueryRunner(eager_join_plan(output))
    feed = ticks_of(per_call, ticks)
    out = [b for t in range(ticks) for s in STREAMS for b in runner.push(s, feed[s][t])]
    out += runner.flush()
    return sorted((int(r["a_ts"]), int(r["b_ts"]), int(r["c_ts"])) for b in out for r in b.rows())


def test_the_feed_joins_as_the_ordered_join_does() -> None:
    eager = _rows("eager", 5, 300)
    assert len(eager) > 100  # keys recur about once a window: results, not an empty join
    assert eager == _rows("ordered", 5, 300)


def test_a_call_is_timed() -> None:
    assert call_us(5, ticks=20, rounds=1) > 0
