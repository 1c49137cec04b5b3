"""Routing by streamon's hash, the event-time merge and progress, on every partition at once.

Producers partition as they like: here each record goes to a random input partition (no
partitioner at all, the worst case), inputs have different partition counts, and the input
partitions are read in random interleavings and chunk sizes, as a fleet of ingest agents would.
:class:`FleetRunner` routes, merges and joins on every partition as the worker does. The union
of all partitions' results must be exactly the naive oracle's over the whole streams
(tests/oracle/naive.py): the stream order the oracle uses is event time, ties broken by input
partition and position, which is what the merge defines (docs/windows-and-joins.md).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle.naive import naive_join, naive_window_deltas, result_counter

from processors.core.batch import Batch
from processors.core.partitioning import partitioning
from processors.core.query import Query, col
from processors.physical.fleet import FleetRunner

SCHEMA = {
    "type": "record",
    "name": "Row",
    "fields": [{"name": c, "type": "long"} for c in ("a", "b", "c", "ts")],
}


def make_stream(rng: np.random.Generator, n: int, domain: int, parts: int) -> dict:
    """Records with sorted timestamps, each put on a random input partition."""
    ts = np.sort(rng.integers(0, 80, n)).astype(np.int64)
    cols = {c: rng.integers(0, domain, n).astype(np.int64) for c in "abc"}
    return {"cols": cols, "ts": ts, "part": rng.integers(0, parts, n), "parts": parts}


def stream_order(s: dict) -> np.ndarray:
    """The merge's order: event time, then input partition, then position."""
    return np.lexsort((np.arange(len(s["ts"])), s["part"], s["ts"]))


END = 1_000  # event time of the closing records, after every other


def feed(
    fleet: FleetRunner, streams: dict[str, dict], rng: np.random.Generator, close: bool = True
) -> None:
    """Every (stream, input partition) read in random chunks, in a random interleaving, then
    (``close``) one closing record (key 99, time END) on every input partition, as a user
    would send to move time on everywhere."""
    queues = {}
    for name, s in streams.items():
        for p in range(s["parts"]):
            rows = np.flatnonzero(s["part"] == p)
            queues[(name, p)] = [rows, 0]
    live = [k for k, (rows, _) in queues.items() if len(rows)]
    while live:
        key = live[int(rng.integers(0, len(live)))]
        rows, at = queues[key]
        take = rows[at : at + int(rng.integers(1, 7))]
        queues[key][1] = at + len(take)
        s = streams[key[0]]
        batch = Batch.inserts({c: s["cols"][c][take] for c in "abc"} | {"ts": s["ts"][take]},
                              s["ts"][take])  # fmt: skip
        fleet.push(key[0], key[1], batch)
        if queues[key][1] >= len(rows):
            live.remove(key)
    if not close:
        return
    for name, s in streams.items():
        for p in range(s["parts"]):
            one = {c: np.array([99], np.int64) for c in "abc"} | {"ts": np.array([END])}
            fleet.push(name, p, Batch.inserts(one, np.array([END], np.int64)))


def before_end(counter: Counter) -> Counter:
    return Counter({k: v for k, v in counter.items() if k[1] < END})


def oracle_deltas(s: dict, window: tuple | None) -> list[dict]:
    order = stream_order(s)
    rows = [{"a": int(s["cols"]["a"][i]), "b": int(s["cols"]["b"][i]),
             "c": int(s["cols"]["c"][i]), "ts": int(s["ts"][i])} for i in order]  # fmt: skip
    rows += [{"a": 99, "b": 99, "c": 99, "ts": END}] * s["parts"]
    if window is None:
        return [{"sign": 1, "ts": r["ts"], "rid": k, "row": {c: r[c] for c in "abc"}}
                for k, r in enumerate(rows)]  # fmt: skip
    kind, size, by = window
    deltas, late = naive_window_deltas(rows, kind, size, by)
    assert not late
    return [{**d, "row": {c: d["row"][c] for c in "abc"}} for d in deltas]


def join_query(streams: dict[str, dict], windows: dict[str, tuple | None]) -> Query:
    q = Query("fleet")
    for name, s in streams.items():
        q.stream(name, topic=f"in.{name}", schema=SCHEMA, timestamp="ts", partitions=s["parts"])
        w = windows[name]
        if w is not None:
            kind, size, by = w
            if kind == "range":
                q.window(name, range_ms=size)
            else:
                q.window(name, rows=size, partition_by=by[0] if by else None)
    names = list(streams)
    for left, right in zip(names, names[1:], strict=False):
        q.join(f"{left}.a", f"{right}.a")
    return q.into("out")


WINDOWS = [("range", 15, ()), ("range", 4, ()), ("rows", 2, ("a",)), None]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 3), envelopes=st.booleans())
def test_a_routed_join_on_every_partition_equals_the_naive_join(
    seed: int, n: int, envelopes: bool
) -> None:
    rng = np.random.default_rng(seed)
    names = [f"s{i}" for i in range(n)]
    streams = {m: make_stream(rng, int(rng.integers(5, 40)), int(rng.integers(2, 6)),
                              int(rng.integers(1, 5))) for m in names}  # fmt: skip
    windows = {m: WINDOWS[int(rng.integers(0, len(WINDOWS) - (1 if n > 2 else 0)))]
               for m in names}  # fmt: skip
    plan = join_query(streams, windows).build()
    fleet = FleetRunner(plan, envelopes=envelopes)  # envelopes: as on the internal topics
    assert fleet.physical.steps[-1].out_partitions == max(s["parts"] for s in streams.values())
    feed(fleet, streams, rng)
    released = len(fleet.results)
    fleet.flush()
    preds = [((i, "a"), (i + 1, "a")) for i in range(n - 1)]
    expected = naive_join([oracle_deltas(streams[m], windows[m]) for m in names], preds)

    def counted(batches: list[Batch]) -> Counter:
        got = result_counter(batches, [["a", "b", "c", "ts"]] * n, [f"{m}_" for m in names])
        out: Counter = Counter()  # the oracle's rows have no ts column
        for (sign, ts, values), k in got.items():
            out[(sign, ts, tuple(tuple(p for p in v if p[0] != "ts") for v in values))] += k
        return out

    got = counted([b for _, b in fleet.results])
    assert not fleet.dead_letters()
    assert before_end(got) == before_end(expected), (sum(got.values()), sum(expected.values()))
    # everything before the closing records came out without the flush
    assert not before_end(counted([b for _, b in fleet.results[released:]]))


def test_a_fused_filter_plan_runs_on_every_input_partition() -> None:
    """A stateless single-stream plan has no internal topic (the worker runs it inside
    ingest, processors/runtime/fused.py): its step runs once per input partition."""
    rng = np.random.default_rng(5)
    s = make_stream(rng, 300, 10, 3)
    query = Query("fused").stream("r", topic="in.r", schema=SCHEMA, timestamp="ts", partitions=3)
    plan = query.where(col("r.b") < 4).into("out").build()
    fleet = FleetRunner(plan, envelopes=True)
    assert fleet.physical.fused
    for p in range(3):
        rows = np.flatnonzero(s["part"] == p)
        cols = {c: v[rows] for c, v in s["cols"].items()}
        fleet.push("r", p, Batch.inserts({**cols, "ts": s["ts"][rows]}, ts=s["ts"][rows]))
    fleet.flush()
    got = sorted(int(x) for _, b in fleet.results for x in b.columns["a"][b.columns["b"] < 4])
    assert fleet.result_rows() == len(got)  # every result passes the filter
    assert got == sorted(s["cols"]["a"][s["cols"]["b"] < 4].tolist())


def test_results_come_out_before_the_end_when_every_partition_moves_on() -> None:
    """Watermarks reach the partitions that no key routes to: the join releases without a
    flush once every input partition has moved past a delta's time."""
    rng = np.random.default_rng(3)
    streams = {m: make_stream(rng, 60, 3, 2) for m in ("s0", "s1")}
    plan = join_query(streams, {"s0": ("range", 10, ()), "s1": ("range", 10, ())}).build()
    fleet = FleetRunner(plan)
    for name, s in streams.items():
        for p in range(2):
            rows = np.flatnonzero(s["part"] == p)
            cols = {c: s["cols"][c][rows] for c in "abc"} | {"ts": s["ts"][rows]}
            fleet.push(name, p, Batch.inserts(cols, s["ts"][rows]))
    # one later record per input partition: every partition of every step moves on
    for name in streams:
        for p in range(2):
            one = {c: np.array([0], np.int64) for c in "abc"} | {"ts": np.array([1_000])}
            one["a"][:] = 99  # a key no other record has
            fleet.push(name, p, Batch.inserts(one, np.array([1_000], np.int64)))

    def before_end() -> int:
        return sum(int((b.ts < 1_000).sum()) for _, b in fleet.results)

    released = before_end()
    fleet.flush()
    assert released == before_end() > 0  # the flush added only the closing records' own


def test_an_idle_input_partition_stops_holding_the_others_back() -> None:
    rng = np.random.default_rng(5)
    streams = {m: make_stream(rng, 40, 3, 2) for m in ("s0", "s1")}
    plan = join_query(streams, {"s0": ("range", 100, ()), "s1": ("range", 100, ())}).build()
    fleet = FleetRunner(plan)
    for name, s in streams.items():  # only input partition 0 of each stream has data
        rows = np.arange(len(s["ts"]))
        cols = {c: s["cols"][c][rows] for c in "abc"} | {"ts": s["ts"][rows]}
        fleet.push(name, 0, Batch.inserts(cols, s["ts"][rows]))
    assert fleet.result_rows() == 0  # partition 1 of each input has said nothing yet
    for name in streams:
        fleet.idle(name, 1)
    held = fleet.result_rows()
    for name in streams:
        fleet.idle(name, 0)
    released = fleet.result_rows()
    fleet.flush()
    assert 0 < held <= released == fleet.result_rows()


def test_a_group_by_on_a_non_key_field_is_routed_by_it() -> None:
    rng = np.random.default_rng(9)
    s = make_stream(rng, 500, 7, 4)
    q = Query("g").stream("r", topic="in", schema=SCHEMA, timestamp="ts", partitions=4)
    q.window("r", range_ms=30).group_by("r.b").aggregate(n="count", total=("sum", "r.c"))
    plan = q.into("out").build()
    part = partitioning(plan)
    assert part.routes == {"r": ("b",)} and part.aggregate == 4
    fleet = FleetRunner(plan)
    feed(fleet, {"r": s}, rng)
    fleet.flush()
    net: Counter = Counter()
    for _, batch in fleet.results:
        for b, n_, total, sign in zip(batch.columns["b"].tolist(), batch.columns["n"].tolist(),
                                      batch.columns["total"].tolist(), batch.sign.tolist(),
                                      strict=True):  # fmt: skip
            net[(b, n_, total)] += sign
    final = {k: v for k, v in net.items() if v}
    assert all(v == 1 for v in final.values())
    assert len(fleet.partitions_used()) > 1  # the groups are spread
    # the oracle: the RANGE window at flush holds the tuples of the last 30 ms
    order = stream_order(s)
    ts, b, c = s["ts"][order], s["cols"]["b"][order], s["cols"]["c"][order]
    keep = ts > END - 30  # nothing but the closing records is that recent
    want: Counter = Counter({(99, 4, 4 * 99): 1})
    for key in np.unique(b[keep]).tolist():
        m = keep & (b == key)
        want[(key, int(m.sum()), int(c[m].sum()))] = 1
    assert Counter(final) == want


@pytest.mark.parametrize("parts", [1, 3])
def test_partitioning_says_how_each_input_is_routed(parts: int) -> None:
    rng = np.random.default_rng(1)
    streams = {"s0": make_stream(rng, 5, 2, parts), "s1": make_stream(rng, 5, 2, 2)}
    plan = join_query(streams, {"s0": None, "s1": None}).build()
    info = partitioning(plan).to_json()
    want = {"by": ["a"], "input_partitions": parts, "partitions": max(parts, 2)}
    assert info["routes"]["s0"] == want
    assert any("routed by the join key" in r for r in info["reasons"])
