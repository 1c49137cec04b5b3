"""The eager join (processors/stages/eager_mjoin.py) against the naive oracle and the ordered
MJoin: an ISTREAM join of RANGE windows gives each result as soon as its last tuple arrives,
in any arrival order, and the same multiset of results as the ordered join.

Streams are fed as in test_routed_fleet: records on random input partitions, read in random
chunks and interleavings, so the eager join sees its inputs out of event-time order.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle.naive import naive_join, result_counter
from test_routed_fleet import END, feed, make_stream, oracle_deltas

from processors.core.batch import Batch
from processors.core.plan import QueryError
from processors.core.query import Query, col
from processors.cql import parse_cql
from processors.physical.fleet import FleetRunner
from processors.stages.eager_mjoin import EagerMJoinStage
from processors.stages.mjoin_stage import MJoinStage

SCHEMA = {
    "type": "record",
    "name": "Row",
    "fields": [{"name": c, "type": "long"} for c in ("a", "b", "c", "ts")],
}


def range_query(
    parts: dict[str, int], sizes: dict[str, int], mode: str = "eager", lateness: int = 0
) -> Query:
    q = Query("eager").lateness(lateness)
    for name, p in parts.items():
        q.stream(name, topic=f"in.{name}", schema=SCHEMA, timestamp="ts", partitions=p)
        q.window(name, range_ms=sizes[name])
    names = list(parts)
    for left, right in zip(names, names[1:], strict=False):
        q.join(f"{left}.a", f"{right}.a")
    return q.emit("istream").join_output(mode).into("out")


def counted(batches: list[Batch], names: list[str]) -> Counter:
    """Results as (sign, ts, values) without the ts columns (the oracle's rows have none)."""
    got = result_counter(batches, [["a", "b", "c", "ts"]] * len(names), [f"{m}_" for m in names])
    out: Counter = Counter()
    for (sign, ts, values), k in got.items():
        out[(sign, ts, tuple(tuple(p for p in v if p[0] != "ts") for v in values))] += k
    return out


def inserts(counter: Counter) -> Counter:
    return Counter({k: v for k, v in counter.items() if k[0] == 1 and k[1] < END})


def expected_inserts(streams: dict[str, dict], sizes: dict[str, int]) -> Counter:
    names = list(streams)
    preds = [((i, "a"), (i + 1, "a")) for i in range(len(names) - 1)]
    deltas = [oracle_deltas(streams[m], ("range", sizes[m], ())) for m in names]
    return inserts(naive_join(deltas, preds))


def _streams(rng: np.random.Generator, n: int) -> tuple[dict[str, dict], dict[str, int]]:
    names = [f"s{i}" for i in range(n)]
    streams = {m: make_stream(rng, int(rng.integers(5, 60)), int(rng.integers(2, 6)),
                              int(rng.integers(1, 5))) for m in names}  # fmt: skip
    sizes = {m: int(rng.choice([1, 4, 10, 15, 40])) for m in names}  # ties at the edge often
    return streams, sizes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 4))
def test_eager_results_equal_the_naive_join_and_the_ordered_join(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    streams, sizes = _streams(rng, n)
    names = list(streams)
    parts = {m: s["parts"] for m, s in streams.items()}
    got = {}
    lateness = int(rng.choice([0, 0, 3, 20]))
    for mode in ("eager", "ordered"):
        plan = range_query(parts, sizes, mode, lateness).build()
        fleet = FleetRunner(plan)
        joins = [s for c in fleet.chains.values() for s in c.stages]
        assert any(isinstance(s, EagerMJoinStage) for s in joins) == (mode == "eager")
        feed(fleet, streams, np.random.default_rng(seed))
        if mode == "eager":  # the watermarks reached the joins: only the closing records stay
            held = sum(len(st) for s in joins if isinstance(s, EagerMJoinStage) for st in s.stores)
            assert held <= sum(s["parts"] for s in streams.values())
        fleet.flush()
        assert not fleet.dead_letters()
        got[mode] = inserts(counted([b for _, b in fleet.results], names))
    expected = expected_inserts(streams, sizes)
    assert got["eager"] == expected, (sum(got["eager"].values()), sum(expected.values()))
    assert got["ordered"] == expected


def test_the_ordered_join_with_lateness_equals_the_naive_join() -> None:
    """Found by the test above: with lateness, a window's buffered tuples waited for their
    partition's next tuple even after the watermark had passed them, and held back the
    expiries behind them, so an expired tuple met later tuples of the other input at the
    end (WindowStage._admit_until)."""
    rng = np.random.default_rng(0)
    streams, sizes = _streams(rng, 2)  # s0 RANGE 40, s1 RANGE 1, 3 and 4 input partitions
    plan = range_query({m: s["parts"] for m, s in streams.items()}, sizes, "ordered", 3)
    fleet = FleetRunner(plan.build())
    feed(fleet, streams, np.random.default_rng(0))
    fleet.flush()
    got = inserts(counted([b for _, b in fleet.results], list(streams)))
    assert got == expected_inserts(streams, sizes)  # was 2 extra: an s0 tuple past its 40 ms


@pytest.mark.parametrize("seed", range(8))
def test_eager_results_come_as_the_last_tuple_arrives(seed: int) -> None:
    """No closing records, no flush, no idle timeout: every result is out once its tuples are
    in, whatever the other input partitions did meanwhile."""
    rng = np.random.default_rng(seed)
    streams, sizes = _streams(rng, 3)
    plan = range_query({m: s["parts"] for m, s in streams.items()}, sizes).build()
    fleet = FleetRunner(plan)
    feed(fleet, streams, np.random.default_rng(seed), close=False)
    assert inserts(counted([b for _, b in fleet.results], list(streams))) == expected_inserts(
        streams, sizes
    )


def _stage(sizes: list[int]) -> EagerMJoinStage:
    return EagerMJoinStage(["a", "b"], [((0, "k"), (1, "k"))], sizes)


def _delta(keys: list[int], ts: list[int], first_rid: int = 0) -> Batch:
    return Batch.inserts(
        {"k": np.array(keys, np.int64),
         "__rid": np.arange(first_rid, first_rid + len(keys), dtype=np.int64)},
        np.array(ts, np.int64),
    )  # fmt: skip


def _marked(stage: EagerMJoinStage, i: int, batch: Batch, wm: int | None = None) -> list[Batch]:
    batch.meta["stream"] = stage.names[i]
    out = stage.process(batch)
    if wm is not None:
        out += stage.process(Batch.empty_marker({"stream": stage.names[i], "wm": str(wm)}))
    return out


def test_the_tie_rule_at_the_window_edge_is_the_ordered_joins() -> None:
    """a (input 0) and b (input 1), range 10 each: with b.ts = a.ts + 10, a's delete at
    (a.ts + 10, 0) precedes b's insert (a.ts + 10, 1): no result; with a.ts = b.ts + 10, a's
    insert precedes b's delete: a result, stamped with a's time."""
    stage = _stage([10, 10])
    assert _marked(stage, 0, _delta([1], [100])) == []
    assert _marked(stage, 1, _delta([1], [110])) == []
    stage = _stage([10, 10])
    assert _marked(stage, 1, _delta([1], [100])) == []
    (out,) = _marked(stage, 0, _delta([1], [110]))
    assert out.ts.tolist() == [110] and out.columns["a.k"].tolist() == [1]
    # the newer tuple arriving first changes nothing: the older one makes the result
    stage = _stage([10, 10])
    assert _marked(stage, 0, _delta([1], [110])) == []
    (out,) = _marked(stage, 1, _delta([1], [100]))
    assert out.ts.tolist() == [110]


def test_purged_windows_stay_small_and_older_tuples_are_late() -> None:
    stage = _stage([10, 10])
    for t in range(0, 1_000, 5):
        _marked(stage, 0, _delta([t % 7], [t], t), wm=t)
        _marked(stage, 1, _delta([t % 7], [t], t), wm=t)
    assert all(len(s) <= 10 for s in stage.stores), [len(s) for s in stage.stores]
    assert stage.purged_total > 300 and not stage.dead_letters
    assert stage.stats()["output"] == "eager"
    _marked(stage, 0, _delta([3], [500], 5_000))
    ((late, why),) = stage.take_dead_letters()
    assert late.ts.tolist() == [500] and "late" in why
    assert stage.waiting_bytes() == {}  # level in time: nothing a pause would shrink
    deletes = _delta([3], [995], 9_000)
    deletes = Batch(deletes.columns, -deletes.sign, deletes.ts)
    _marked(stage, 1, deletes)
    ((refused, why),) = stage.take_dead_letters()
    assert len(refused) == 1 and "append-only" in why


def test_an_input_ahead_of_the_slowest_is_what_a_pause_would_bound() -> None:
    stage = _stage([10, 10])
    _marked(stage, 1, _delta([1], [0]), wm=0)
    for t in range(0, 500, 5):
        _marked(stage, 0, _delta([2], [t], t), wm=t)
    waiting = stage.waiting_bytes()
    assert list(waiting) == ["a"] and 0 < waiting["a"] <= stage.stores[0].nbytes
    assert len(stage.stores[0]) == 100  # b's watermark holds purging back
    _marked(stage, 1, _delta([1], [495], 1), wm=495)
    assert stage.waiting_bytes() == {} and len(stage.stores[0]) <= 10


def test_an_idle_input_does_not_hold_purging_back() -> None:
    stage = _stage([10, 10])
    _marked(stage, 1, _delta([1], [0]), wm=0)
    stage.process(Batch.empty_marker({"stream": "b", "idle": "1"}))
    for t in range(0, 1_000, 5):
        _marked(stage, 0, _delta([2], [t], t), wm=t)
    assert len(stage.stores[0]) <= 10


def test_a_snapshot_continues_with_the_same_results() -> None:
    def run(restore_at: int | None) -> list[tuple[int, int, int]]:
        stage = _stage([30, 20])
        out: list[Batch] = []
        for step, t in enumerate(range(0, 400, 3)):
            if step == restore_at:
                fresh = _stage([30, 20])
                fresh.load_snapshot(stage.snapshot())
                stage = fresh
            out += _marked(stage, step % 2, _delta([t % 5], [t], step), wm=t)
        return sorted(
            (int(ts), int(a), int(b))
            for o in out
            for ts, a, b in zip(o.ts, o.columns["a.k"], o.columns["b.k"], strict=True)
        )

    whole = run(None)
    assert whole and run(40) == whole and run(99) == whole


def test_which_plans_run_eager() -> None:
    parts, sizes = {"a": 1, "b": 2}, {"a": 10, "b": 20}
    assert range_query(parts, sizes).build().eager_join
    assert not range_query(parts, sizes, "ordered").build().eager_join
    plan = range_query(parts, sizes).build()
    assert plan.to_json()["join_output"] == "eager"
    changelog = Query("c")  # every change (inserts and deletes): ordered
    for name in parts:
        changelog.stream(name, topic=f"in.{name}", schema=SCHEMA, timestamp="ts")
        changelog.window(name, rows=5)
    changelog.join("a.a", "b.a").emit("istream").into("out")
    assert not changelog.build().eager_join  # ROWS windows depend on order
    fleet = FleetRunner(range_query(parts, sizes, "ordered").build())
    stages = [s for c in fleet.chains.values() for s in c.stages]
    assert any(type(s) is MJoinStage for s in stages)
    with pytest.raises(QueryError, match="join_output"):
        Query("x").join_output("soon")


def test_cql_sets_the_join_output() -> None:
    text = """
    CREATE STREAM a (k BIGINT NOT NULL, ts BIGINT NOT NULL) WITH (topic = 'in.a', timestamp = 'ts');
    CREATE STREAM b (k BIGINT NOT NULL, ts BIGINT NOT NULL) WITH (topic = 'in.b', timestamp = 'ts');
    CREATE QUERY q INTO 'out' WITH (join_output = 'ordered') AS
    SELECT ISTREAM a.k FROM a [RANGE 10 MS], b [RANGE 10 MS]
    WHERE a.k = b.k;
    """
    assert not parse_cql(text).query().build().eager_join
    assert parse_cql(text.replace("'ordered'", "'eager'")).query().build().eager_join


def test_a_projected_eager_join_gathers_only_what_it_writes() -> None:
    """With a select list (arithmetic included), the eager join gathers only the columns the
    projection reads, and writes what the ordered join writes."""
    rng = np.random.default_rng(7)
    streams, sizes = _streams(rng, 3)
    parts = {m: s["parts"] for m, s in streams.items()}
    got = {}
    for mode in ("eager", "ordered"):
        q = range_query(parts, sizes, mode).select(x="s0.b", y=col("s2.c") * 2 + 1)
        fleet = FleetRunner(q.build())
        feed(fleet, streams, np.random.default_rng(7))
        fleet.flush()
        rows = Counter()
        for _, b in fleet.results:
            if mode == "eager":
                assert set(b.columns) == {"x", "y"}
            for ts, x, y in zip(b.ts, b.columns["x"], b.columns["y"], strict=True):
                if ts < END:
                    rows[(int(ts), int(x), int(y))] += 1
        got[mode] = rows
    joins = [s for c in fleet.chains.values() for s in c.stages]
    assert got["eager"] == got["ordered"] and sum(got["eager"].values()) > 0
    assert not any(isinstance(s, EagerMJoinStage) for s in joins)
