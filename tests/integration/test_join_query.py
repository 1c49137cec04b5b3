"""Windowed MJoin queries on the real broker through real Faust workers, with restarts.

Three router streams of 2 partitions, RANGE windows, joined on pid; ingest routes them by pid
with streamon's own hash. The oracle is the independent naive one (tests/oracle/naive.py), run
on the whole streams as the broker stored them (event-time order, ties by partition and
offset). Once the inputs are read to their end and quiet for the idle timeout, every input
partition is idle and the MJoin releases everything, so the worker's results over all
partitions must be exactly the oracle's.

- SIGTERM mid-stream, then a new worker: the results are exactly the oracle's (the state comes
  back from the snapshots; no duplicate, nothing missing).
- SIGKILL mid-stream, then a new worker: nothing is missing; duplicates (results of the input
  after the last snapshot, produced again) are counted and reported.
- A second worker joins mid-stream and takes a partition over: exactly the oracle's results.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
from oracle.naive import naive_join, naive_window_deltas

from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.publish import publish_batch
from processors.core.batch import Batch, VarColumn
from processors.runtime.producer import SIGN_HEADER
from topics.admin import ensure_topics, read_topic
from topics.avro import SchemaStore, decode_single_object, load_schema
from topics.specs import TopicSpec

PARTITIONS = 2
STREAMS = ("a", "b", "c")
RANGE_MS = 2_000
PER_STREAM = 3_000  # tuples per stream and half
FIELDS = ("router", "pid", "ts", "size", "src", "dst")

QUERY = """\
from processors.core.query import Query
from topics.avro import load_schema
schema = load_schema("packet")
query = Query({name!r})
for s in ("a", "b", "c"):
    query.stream(s, topic={prefix!r} + "." + s, schema=schema, key="pid", timestamp="ts",
                 partitions={p})
    query.window(s, range_ms={range_ms})
query.join("a.pid", "b.pid").join("b.pid", "c.pid")
query.select({columns})
query.into({result!r}, partitions={p})
query.processing_guarantee({guarantee!r})
"""


def packets(stream: int, half: int) -> Batch:
    """Packets of one router, in time order; pid is the key (co-partitioning)."""
    rng = np.random.default_rng(10 * half + stream)
    n = PER_STREAM
    ts = np.sort(rng.integers(0, 30_000, n)).astype(np.int64) + 30_000 * half
    pid = rng.integers(0, 400, n).astype(np.int64)
    batch = Batch.inserts(
        {
            "router": np.full(n, stream, np.int32),
            "pid": pid,
            "ts": ts,
            "size": rng.integers(40, 1500, n).astype(np.int32),
            "src": rng.integers(0, 10, n).astype(np.int64),
            "dst": np.arange(n, dtype=np.int64) + 10_000 * (stream + 3 * half),
        },
        ts,
    )
    batch.key = VarColumn.from_values([str(int(p)).encode() for p in pid], utf8=False)
    return batch


def stored_inputs(bootstrap: str, prefix: str) -> dict[int, list[list[dict]]]:
    """Per partition, each stream's records as stored (arrival order), decoded."""
    schema, store = load_schema("packet"), SchemaStore()
    out: dict[int, list[list[dict]]] = {p: [[] for _ in STREAMS] for p in range(PARTITIONS)}
    for i, s in enumerate(STREAMS):
        for record in read_topic(bootstrap, f"{prefix}.{s}"):
            out[record.partition][i].append(decode_single_object(record.value, schema, store))
    return out


def natural_join_by_key(deltas: list[list[dict]], key: str) -> Counter:
    """The naive join's semantics (tests/oracle/naive.py: global order (ts, input, position),
    a delta meets the other inputs' current windows), with each window indexed by the join key
    so that thousands of deltas stay fast; for a natural join on ``key`` only."""
    events = sorted(
        ((d["ts"], i, k, d) for i, stream in enumerate(deltas) for k, d in enumerate(stream)),
        key=lambda e: e[:3],
    )
    windows: list[dict[object, dict[int, dict]]] = [{} for _ in deltas]
    out: Counter = Counter()
    for ts, i, _, d in events:
        row, value = d["row"], d["row"][key]
        if d["sign"] < 0:
            del windows[i][value][d["rid"]]
        combos: list[list[dict]] = [[]]
        for j in range(len(deltas)):
            rows = [row] if j == i else list(windows[j].get(value, {}).values())
            combos = [c + [r] for c in combos for r in rows]
        for combo in combos:
            values = tuple(tuple(sorted(r.items())) for r in combo)
            out[(d["sign"], ts, values)] += 1
        if d["sign"] > 0:
            windows[i].setdefault(value, {})[d["rid"]] = row
    return out


def oracle(inputs: dict[int, list[list[dict]]]) -> Counter:
    """The naive join's results (sign, values) over the whole streams: each stream's records of
    every partition in event-time order, ties by partition, then offset (the merge's order)."""
    deltas = []
    for i in range(len(STREAMS)):
        rows = sorted(
            ((r["ts"], p, k, r) for p, streams in inputs.items()
             for k, r in enumerate(streams[i])),
            key=lambda e: e[:3],
        )  # fmt: skip
        # event time under its own name, so that the ts field stays a column of the rows
        timed = [{**r, "event_ms": r["ts"]} for *_, r in rows]
        d, late = naive_window_deltas(timed, "range", RANGE_MS, ts_field="event_ms")
        assert not late
        deltas.append(d)
    results: Counter = Counter()
    for (sign, _, values), count in natural_join_by_key(deltas, "pid").items():
        results[(sign, values)] += count
    return results


def test_the_keyed_oracle_agrees_with_the_nested_loop_oracle() -> None:
    rng = np.random.default_rng(4)
    streams = []
    for _ in range(3):
        rows = [
            {"pid": int(rng.integers(0, 4)), "x": int(rng.integers(0, 3)), "event_ms": int(t)}
            for t in np.sort(rng.integers(0, 100, 40))
        ]
        streams.append(naive_window_deltas(rows, "range", 15, ts_field="event_ms")[0])
    nested = naive_join(streams, [((0, "pid"), (1, "pid")), ((1, "pid"), (2, "pid"))])
    assert natural_join_by_key(streams, "pid") == nested and sum(nested.values()) > 50


def results_of(bootstrap: str, result: str, schema: dict) -> Counter:
    """The result topic (every partition) as (sign, values), values in the oracle's format."""
    out: Counter = Counter()
    store = SchemaStore(load=False)
    store.add(schema)
    for record in read_topic(bootstrap, result):
        row = decode_single_object(record.value, schema, store)
        sign = -1 if dict(record.headers).get(SIGN_HEADER) == b"-1" else 1
        values = tuple(tuple(sorted((f, row[f"{s}_{f}"]) for f in FIELDS)) for s in STREAMS)
        out[(sign, values)] += 1
    return out


def result_schema(query_text: str) -> dict:
    """The result schema of the query the worker runs (the same text, built here)."""
    scope: dict = {}
    exec(query_text, scope)  # noqa: S102 (the test's own query text)
    return scope["query"].build().output_schema


def start(tmp_path: Path, name: str, bootstrap: str, query_file: Path, n: int) -> WorkerProcess:
    return WorkerProcess(
        query_file, bootstrap=bootstrap, state_dir=tmp_path / "state", worker_id=f"{name}-{n}"
    )


def publish_half(bootstrap: str, prefix: str, half: int) -> None:
    schema = load_schema("packet")
    for i, s in enumerate(STREAMS):
        publish_batch(bootstrap, f"{prefix}.{s}", packets(i, half), schema)


def wait_quiet(
    bootstrap: str, topic: str, workers: list[WorkerProcess], settle: float = 6.0
) -> int:
    """Wait until the result topic stops growing for ``settle`` seconds (max 120 s)."""
    deadline = time.monotonic() + 120
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        seen = wait_for_count(bootstrap, topic, 10**12, 1.0, workers)
        if seen != last:
            last, since = seen, time.monotonic()
        elif seen > 0 and time.monotonic() - since > settle:
            return seen
    return last


def expected_total(bootstrap: str, prefix: str) -> int:
    return sum(oracle(stored_inputs(bootstrap, prefix)).values())


def write_query(
    bootstrap: str, tmp_path: Path, topic_name: str, guarantee: str = "at_least_once"
) -> tuple[str, str, str, Path]:
    """The three input topics and the join query's file: (prefix, result topic, text, file)."""
    prefix, result = topic_name, f"{topic_name}.out"
    ensure_topics(bootstrap, [TopicSpec(f"{prefix}.{s}", PARTITIONS) for s in STREAMS])
    query_file = tmp_path / "query.py"
    columns = ", ".join(f'{s}_{f}="{s}.{f}"' for s in STREAMS for f in FIELDS)
    text = QUERY.format(
        name=topic_name, prefix=prefix, p=PARTITIONS, range_ms=RANGE_MS, columns=columns,
        result=result, guarantee=guarantee,
    )  # fmt: skip
    query_file.write_text(text)
    return prefix, result, text, query_file


def assert_exact(got: Counter, want: Counter, log: str) -> None:
    """The worker's results are exactly the oracle's: nothing missing or extra."""
    missing, extra = want - got, got - want
    assert not missing and not extra, (
        f"{sum(missing.values())} missing, {sum(extra.values())} extra of "
        f"{sum(want.values())}\n{log[-4000:]}"
    )


def run_with_restart(
    bootstrap: str, tmp_path: Path, topic_name: str, stop: str, guarantee: str = "at_least_once"
) -> tuple[Counter, Counter, str]:
    prefix, result, text, query_file = write_query(bootstrap, tmp_path, topic_name, guarantee)
    first = start(tmp_path, "w", bootstrap, query_file, 1)
    publish_half(bootstrap, prefix, 0)
    try:
        want = expected_total(bootstrap, prefix)
        if stop == "kill":  # crash while results are still coming
            want = want // 3
        seen = wait_for_count(bootstrap, result, want, 120.0, [first])
        assert seen >= want, f"{seen} of {want} results before the restart\n{first.log_tail(60)}"
    finally:
        code = first.stop() if stop == "term" else first.kill()
    log = first.log_tail(80)
    publish_half(bootstrap, prefix, 1)
    second = start(tmp_path, "w", bootstrap, query_file, 2)
    try:
        want = expected_total(bootstrap, prefix)
        seen = wait_for_count(bootstrap, result, want, 120.0, [second])
        log += "\n" + second.log_tail(80)
        assert seen >= want, f"{seen} of {want} results after the restart\n{log[-6000:]}"
        wait_quiet(bootstrap, result, [second], settle=3.0)  # repeats, if any, come too
    finally:
        second.stop()
    assert stop == "kill" or code == 0, log
    got = results_of(bootstrap, result, result_schema(text))
    return got, oracle(stored_inputs(bootstrap, prefix)), log


def test_join_is_exact_across_a_graceful_restart(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    got, want, log = run_with_restart(bootstrap, tmp_path, topic_name, "term")
    assert sum(want.values()) > 2000
    assert_exact(got, want, log)


def test_join_loses_nothing_when_a_worker_is_killed(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    got, want, log = run_with_restart(bootstrap, tmp_path, topic_name, "kill")
    missing = want - got
    assert not missing, f"{sum(missing.values())} results missing\n{log[-4000:]}"
    extra = got - want
    # anything extra must be a repeat of a correct result, not a wrong one
    assert all(key in want for key in extra), list(extra.items())[:3]
    duplicates, total = sum(extra.values()), sum(want.values())
    print(f"SIGKILL restart: {duplicates} duplicate results of {total} ({duplicates / total:.2%})")


def test_join_is_exact_through_three_kills_in_exactly_once_mode(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    """The join in exactly-once mode, killed (SIGKILL) three times while results come, the
    second half published between kills: exactly the oracle's results, none repeated."""
    prefix, result, text, query_file = write_query(bootstrap, tmp_path, topic_name, "exactly_once")
    publish_half(bootstrap, prefix, 0)
    first_half = expected_total(bootstrap, prefix)
    logs = []
    for n in range(3):
        worker = start(tmp_path, "w", bootstrap, query_file, n)
        try:
            wait_for_count(bootstrap, result, first_half * (n + 1) // 4, 120.0, [worker])
        finally:
            worker.kill()
        logs.append(worker.log_tail(40))
        if n == 1:
            publish_half(bootstrap, prefix, 1)
    last = start(tmp_path, "w", bootstrap, query_file, 3)
    try:
        want = expected_total(bootstrap, prefix)
        seen = wait_for_count(bootstrap, result, want, 120.0, [last])
        log = "\n".join(logs) + "\n" + last.log_tail(80)
        assert seen >= want, f"{seen} of {want} results after the kills\n{log[-6000:]}"
        wait_quiet(bootstrap, result, [last], settle=3.0)  # repeats, if any, come too
    finally:
        last.stop()
    assert_exact(results_of(bootstrap, result, result_schema(text)), oracle(
        stored_inputs(bootstrap, prefix)), log)  # fmt: skip


def test_join_is_exact_when_a_second_worker_takes_over_a_partition(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    """One worker joins the first half; a second worker joins the group and takes one of the two
    partitions, with its windows and indexes (from the snapshot the first worker saves when the
    partition is revoked); the second half is joined by both. Results: exactly the oracle's."""
    prefix, result, text, query_file = write_query(bootstrap, tmp_path, topic_name)
    workers = [start(tmp_path, "w", bootstrap, query_file, 1)]
    try:
        publish_half(bootstrap, prefix, 0)
        want = expected_total(bootstrap, prefix)
        seen = wait_for_count(bootstrap, result, want, 120.0, workers)
        assert seen >= want, f"{seen} of {want} results of the first half\n{workers[0].log_tail()}"

        workers.append(start(tmp_path, "w", bootstrap, query_file, 2))
        topic, held = f"{prefix}.a", [set(), set()]
        deadline = time.monotonic() + 60
        while not (all(held) and held[0] | held[1] == set(range(PARTITIONS))):
            assert time.monotonic() < deadline, f"no rebalance: {held}\n{workers[1].log_tail()}"
            time.sleep(0.5)
            try:
                held = [w.held_partitions(topic) for w in workers]
            except (OSError, KeyError, ValueError):  # the second status page is not up yet
                continue

        publish_half(bootstrap, prefix, 1)
        want = expected_total(bootstrap, prefix)
        seen = wait_for_count(bootstrap, result, want, 120.0, workers)
        log = "\n".join(w.log_tail(60) for w in workers)
        assert seen >= want, f"{seen} of {want} results after the hand-over\n{log[-6000:]}"
        wait_quiet(bootstrap, result, workers, settle=3.0)  # repeats, if any, come too
        codes = [w.stop() for w in workers]
        assert codes == [0, 0], log[-6000:]
    finally:
        for w in workers:
            w.stop()
    got = results_of(bootstrap, result, result_schema(text))
    assert_exact(got, oracle(stored_inputs(bootstrap, prefix)), log)


CYCLIC = """\
from processors.core.query import Query
from topics.avro import load_schema
schema = load_schema("packet")
query = Query({name!r})
for s in ("a", "b", "c"):
    query.stream(s, topic={prefix!r} + "." + s, schema=schema, timestamp="ts", partitions=1)
query.window("a", rows=50).window("b", rows=5, partition_by="src").window("c", range_ms=3000)
query.join("a.pid", "b.pid").join("b.src", "c.src").join("a.src", "c.src")
query.select({columns})
query.into({result!r}, partitions=1)
"""


def test_cyclic_join_over_rows_and_partitioned_windows_equals_the_nested_loop_oracle(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    """ROWS, PARTITION BY and RANGE windows, a cyclic join graph (two equality classes), one
    partition (ROWS windows need the whole stream): the nested-loop oracle, exactly, all of it
    once the inputs are idle."""
    prefix, result = topic_name, f"{topic_name}.out"
    ensure_topics(bootstrap, [TopicSpec(f"{prefix}.{s}", 1) for s in STREAMS])
    columns = ", ".join(f'{s}_{f}="{s}.{f}"' for s in STREAMS for f in FIELDS)
    text = CYCLIC.format(name=topic_name, prefix=prefix, columns=columns, result=result)
    query_file = tmp_path / "query.py"
    query_file.write_text(text)
    schema = load_schema("packet")
    for i, s in enumerate(STREAMS):
        rng = np.random.default_rng(50 + i)
        n = 400
        ts = np.sort(rng.integers(0, 30_000, n)).astype(np.int64)
        cols = {
            "router": np.full(n, i, np.int32), "pid": rng.integers(0, 40, n).astype(np.int64),
            "ts": ts, "size": rng.integers(40, 1500, n).astype(np.int32),
            "src": rng.integers(0, 10, n).astype(np.int64), "dst": np.arange(n, dtype=np.int64),
        }  # fmt: skip
        publish_batch(bootstrap, f"{prefix}.{s}", Batch.inserts(cols, ts), schema)
    inputs = stored_inputs(bootstrap, prefix)[0]
    windows = [("rows", 50, ()), ("rows", 5, ("src",)), ("range", 3000, ())]
    deltas = []
    for rows, (kind, size, by) in zip(inputs, windows, strict=True):
        timed = [{**r, "event_ms": r["ts"]} for r in rows]
        d, late = naive_window_deltas(timed, kind, size, by, ts_field="event_ms")
        assert not late
        deltas.append(d)
    predicates = [((0, "pid"), (1, "pid")), ((1, "src"), (2, "src")), ((0, "src"), (2, "src"))]
    expected: Counter = Counter()  # all of it: the inputs go idle, the MJoin holds nothing back
    for (sign, _, values), count in naive_join(deltas, predicates).items():
        expected[(sign, values)] += count
    assert sum(expected.values()) > 500
    worker = start(tmp_path, "w", bootstrap, query_file, 1)
    try:
        seen = wait_for_count(bootstrap, result, sum(expected.values()), 120.0, [worker])
        wait_quiet(bootstrap, result, [worker], settle=2.0)
    finally:
        worker.stop()
    got = results_of(bootstrap, result, result_schema(text))
    missing, extra = expected - got, got - expected
    assert not missing and not extra, (
        f"seen {seen}: {sum(missing.values())} missing, {sum(extra.values())} extra of "
        f"{sum(expected.values())}\n{worker.log_tail(40)}"
    )
