"""``streamon bench latency``: output latency at half of the measured capacity (issue 16).

For each of three queries (a filter, a 3-way RANGE-window join, a GROUP BY), one worker on the
embedded broker (or ``STREAMON_BOOTSTRAP``):

1. **capacity**: after a warm-up, a burst of records is published as fast as this process
   can, their keys recurring per window as the paced records' will; a burst's capacity is
   those records over the span from its start to the last result record reflecting it, and
   the capacity is the median of three bursts' (one alone moved up to fivefold between runs).
   With ``--capacity sustained`` it is instead the highest paced rate the worker keeps up
   with, climbed to in steps (:mod:`processors.bench.latency_capacity`);
2. **latency**: the same worker then gets records at half that rate for ``seconds``, each
   carrying its publish wall-clock time as its event time. A result's latency is its produce
   timestamp minus the newest input time it reflects: the row's ``ts`` (filter), the largest
   of the three ``ts`` (join: the last record completes the match), the group's ``max(ts)``
   (GROUP BY: the update that shows the newest record). Results of the first second are
   left out (the rate settles), and so are those of the trailer: a few records on every
   input partition right after the paced ones, so that the event-time merges release the
   last paced records at once rather than after the idle timeout (3 s: with a few hundred
   GROUP BY results, those alone made its p99). ``longest_gap_ms`` is the longest time
   without any result record while input flows.

The publisher runs in this process on the same machine: on 2 cores it takes a share of a core
at the higher rates, which the figures include.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from processors.bench.latency_capacity import Pacer, output_lag_ms, sustained_capacity
from processors.commands.launcher import WorkerProcess
from processors.runtime.config import load_settings, resolve_bootstrap
from processors.runtime.producer import SIGN_HEADER, RecordProducer
from processors.workloads.examples import reading_columns
from topics.admin import ensure_topics, high_watermarks, read_topic
from topics.avro import SchemaStore, decode_single_object, load_schema
from topics.columnar import RecordCodec
from topics.specs import TopicSpec

PARTITIONS = 4
JOIN_WINDOW_MS = 1_000
WARMUP_S = 1.0
#: the capacity burst's event time moves this many records a millisecond (all streams)
BURST_PER_MS = 100
TICK_S = 0.01
#: capacity is the median of this many bursts: one burst's figure moved up to fivefold between
#: runs of the same command (docs/benchmarks.md), and the offered rate with it
BURSTS = 3
STILL_S = 4  # seconds without a new result that count as drained (idle timeout 3 s, + 1)

_HEAD = """\
from processors.core.query import Query, col
from topics.avro import load_schema
query = Query({name!r})
"""
_STREAM = """\
query.stream({s!r}, topic={prefix!r} + ".{s}", schema=load_schema("reading"), key="sensor_id",
             timestamp="ts", partitions={p})
"""
#: the 3-way RANGE join, ISTREAM (the inserts of the joined relation, what the latency is of):
#: eager by default (processors.stages.eager_mjoin)
_JOIN = (
    "".join(f'query.window("{s}", range_ms={JOIN_WINDOW_MS})\n' for s in "abc")
    + 'query.join("a.sensor_id", "b.sensor_id").join("b.sensor_id", "c.sensor_id")\n'
    + 'query.select(a_ts="a.ts", b_ts="b.ts", c_ts="c.ts").emit("istream")\n'
)
QUERIES: dict[str, tuple[str, str]] = {  # name -> (streams, the rest of the query)
    "filter": ("r", 'query.where(col("r.temperature") < 25.0)\n'),
    "join": ("abc", _JOIN),
    "groupby": ("r", 'query.group_by("r.site").aggregate(n="count", newest=("max", "r.ts"))\n'),
    # the same join in event-time order (Query.join_output("ordered")): with --only only
    "join_ordered": ("abc", _JOIN + 'query.join_output("ordered")\n'),
}
DEFAULT_KINDS = ("filter", "join", "groupby")
NEWEST = {"filter": ("ts",), "join": ("a_ts", "b_ts", "c_ts"), "groupby": ("newest",),
          "join_ordered": ("a_ts", "b_ts", "c_ts")}  # fmt: skip


def _say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def recurring_keys(rate: float, streams: int) -> int:
    """How many join keys make a key recur about once per window per stream at ``rate``
    records/s in all (each arrival then meets about one tuple of each other stream). The
    capacity burst and the paced records use it alike: with a key about once per stream in
    the whole burst (until 2026-11-29) a key recurred half as often there, so the 3-way join
    made about a quarter of the paced phase's results per record, and its capacity was
    measured on lighter work than the latency it set the rate for."""
    return max(10, int(rate / streams * JOIN_WINDOW_MS / 1000))


def query_text(kind: str, name: str, prefix: str, result: str) -> str:
    streams, rest = QUERIES[kind]
    text = _HEAD.format(name=name)
    text += "".join(_STREAM.format(s=s, prefix=prefix, p=PARTITIONS) for s in streams)
    return text + rest + f"query.into({result!r}, partitions={PARTITIONS})\n"


class _Publisher:
    """Readings for a query's streams, encoded in bulk. Join keys are drawn from a range sized
    so that a key recurs about once per window per stream at the offered rate (each arrival
    then matches about one tuple of each other stream, as in a key-to-key join).

    Unkeyed, as by default, librdkafka's sticky partitioner puts each call's records (a 10 ms
    tick) on one partition of each topic, and an event-time merge waits for the partitions
    that had none for a while; with ``spread``, every call spreads its records over every
    partition, as producers keyed by the stream's key do (docs/benchmarks.md, "Where the
    join's second went")."""

    def __init__(self, bootstrap: str, prefix: str, streams: str, spread: bool = False) -> None:
        self.spread = spread
        self.topics = [f"{prefix}.{s}" for s in streams]
        self.codec = RecordCodec(load_schema("reading"))
        self.producer = RecordProducer(bootstrap)
        self.sent = 0
        self.keys = 1_000

    def publish(self, n: int, ts: np.ndarray | None = None) -> None:
        batch = reading_columns(n, seed=self.sent % 9973)
        if ts is not None:
            batch.columns["ts"] = ts
        batch.columns["sensor_id"] = np.random.default_rng(self.sent).integers(0, self.keys, n)
        k = len(self.topics)
        spread = range(PARTITIONS) if self.spread else [None]
        for i, topic in enumerate(self.topics):  # every k-th row to each stream: same times
            rows = np.arange(i, n, k)
            for partition in spread:  # with spread: every partition, every call
                part = batch.take(rows if partition is None else rows[partition::PARTITIONS])
                if len(part):
                    buf, offsets = self.codec.encode_many(part.columns, len(part))
                    self.producer.produce_many(topic, buf, offsets, partition=partition)
        self.sent += n

    def trailer(self, ts: int, per_partition: int = 100) -> None:
        """``per_partition`` records at event time ``ts`` on every partition of every stream:
        each event-time merge then releases what came before at once, instead of after the
        idle timeout (3 s) for the partitions whose last records are older."""
        batch = reading_columns(per_partition, seed=self.sent % 9973)
        batch.columns["ts"] = np.full(per_partition, ts, np.int64)
        buf, offsets = self.codec.encode_many(batch.columns, per_partition)
        for topic in self.topics:
            for partition in range(PARTITIONS):
                self.producer.produce_many(topic, buf, offsets, partition=partition)
        self.sent += per_partition * PARTITIONS * len(self.topics)

    def flush(self) -> None:
        self.producer.flush_blocking()

    def close(self) -> None:
        self.producer.close()


def _ingested(worker: WorkerProcess) -> int:
    """Input records the worker's ingest agents have taken in."""
    agents = worker.status()["stats"]["agents"]
    return sum(int(a["tuples_in"]) for a in agents if a["agent"].startswith("ingest"))


def _wait_drained(worker: WorkerProcess, bootstrap: str, result: str, want: int) -> None:
    """Until the worker has ingested ``want`` records and its results stopped growing for
    ``STILL_S`` (a burst of one event time waits in the merge for the idle timeout)."""
    deadline = time.monotonic() + 300
    last, still = -1, 0
    while time.monotonic() < deadline:
        if not worker.running:
            raise RuntimeError(f"worker exited:\n{worker.log_tail(30)}")
        try:
            done = _ingested(worker) >= want
        except (OSError, KeyError, ValueError):
            done = False
        try:
            count = sum(high_watermarks(bootstrap, result).values())
        except Exception:  # the result topic is not there yet
            count = 0
        still = still + 1 if done and count == last and count > 0 else 0
        if still >= STILL_S:  # past the idle timeout: held tuples are out by then
            return
        last = count
        time.sleep(1.0)
    raise RuntimeError(f"the worker did not drain {want} records in 300 s: {worker.log_path}")


def _results(
    bootstrap: str,
    result: str,
    kind: str,
    schema: dict,
    sample: int = 100_000,
    since_ms: int = 0,
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The produce timestamps of every result record (sorted), and (produce timestamp, newest
    input time reflected) of up to ``sample`` inserted rows spread over the topic, of those
    written at ``since_ms`` or later (a burst's results: the earlier bursts' are not decoded
    again)."""
    store = SchemaStore(load=False)
    store.add(schema)
    fields = NEWEST[kind]
    records = read_topic(bootstrap, result, timeout=300.0)
    stamps = np.sort(np.array([r.timestamp_ms for r in records], dtype=np.int64))
    step = max(1, len(records) // sample)
    rows = []
    for record in records[::step]:
        if record.timestamp_ms < since_ms:
            continue
        if dict(record.headers).get(SIGN_HEADER) == b"-1":
            continue  # a retraction: the insert after it speaks for the update
        row = decode_single_object(record.value, schema, store)
        rows.append((int(record.timestamp_ms), max(int(row[f]) for f in fields)))
    return stamps, rows


def _burst_capacity(
    publisher: _Publisher,
    worker: WorkerProcess,
    bootstrap: str,
    result: str,
    kind: str,
    schema: dict,
    backlog: int,
) -> float:
    """One capacity burst: ``backlog`` records published as fast as this process can, over the
    span from its start to the last result reflecting it (records/s). Its event time moves
    BURST_PER_MS records a millisecond, its keys recur as the paced records' will (the same
    join results per record), and a few later records follow so that the merges release its
    end at once rather than after the idle timeout."""
    publisher.keys = recurring_keys(BURST_PER_MS * 1000, len(QUERIES[kind][0]))
    started = time.time()
    t0 = int(started * 1000)
    publisher.publish(backlog, t0 + np.arange(backlog, dtype=np.int64) // BURST_PER_MS)
    publisher.publish(400, np.full(400, t0 + backlog // BURST_PER_MS + 1, np.int64))
    publisher.flush()
    _wait_drained(worker, bootstrap, result, publisher.sent)
    _, rows = _results(bootstrap, result, kind, schema, sample=10**9, since_ms=t0)
    last = max(t for t, newest in rows if t0 <= newest <= t0 + backlog // BURST_PER_MS)
    return backlog / max(last / 1000.0 - started, 1e-3)


def _pace(publisher: _Publisher, rate: float, seconds: float) -> tuple[float, float]:
    """Publish ``rate`` records/s for ``seconds``, event time = wall-clock ms at publish;
    returns the wall-clock span (s) the records were published in."""
    started = time.time()
    end = started + seconds
    sent = 0
    while (now := time.time()) < end:
        due = int(rate * (now - started)) - sent
        if due > 0:
            publisher.publish(due, np.full(due, int(now * 1000), np.int64))
            sent += due
        time.sleep(TICK_S)
    publisher.flush()
    return started, time.time()


def run_one(
    bootstrap: str,
    state: Path,
    kind: str,
    backlog: int,
    seconds: float,
    rate: float | None = None,
    spread: bool = False,
    realtime: bool = False,
    capacity_measure: str = "burst",
) -> dict:
    run = f"lat-{kind}-{time.strftime('%H%M%S')}"
    prefix, result = run, f"{run}.out"
    streams = QUERIES[kind][0]
    ensure_topics(bootstrap, [TopicSpec(f"{prefix}.{s}", PARTITIONS) for s in streams])
    text = query_text(kind, run, prefix, result)
    scope: dict[str, Any] = {}
    exec(text, scope)  # noqa: S102 (the bench's own query text)
    schema = scope["query"].build().output_schema
    publisher = _Publisher(bootstrap, prefix, streams, spread)
    query_file = state / f"{run}.py"
    query_file.write_text(text)
    worker = WorkerProcess(
        query_file, bootstrap=bootstrap, state_dir=state, worker_id=run, loglevel="warn",
        extra_args=["--realtime"] if realtime else None,
    )  # fmt: skip

    def now_ms(n: int) -> np.ndarray:
        return np.full(n, int(time.time() * 1000), np.int64)

    try:
        worker.wait_holding(publisher.topics, PARTITIONS)
        scheduling = worker.scheduling()
        # a burst shares one event time: a key about once per stream keeps the join's results
        # about as many as its inputs (a 3-way join of k equal keys makes k**3)
        publisher.keys = 20_000 // len(streams)
        publisher.publish(20_000, now_ms(20_000))  # warm-up: kernels load, the stages start
        publisher.flush()
        _wait_drained(worker, bootstrap, result, publisher.sent)
        bursts = [
            _burst_capacity(publisher, worker, bootstrap, result, kind, schema, backlog)
            for _ in range(BURSTS)
        ]
        capacity = burst_capacity = float(np.median(bursts))
        steps: list[dict[str, Any]] = []
        if capacity_measure == "sustained":

            def set_rate(r: float) -> None:
                publisher.keys = recurring_keys(max(r, 1.0), len(streams))
                pacer.rate = r

            def lag() -> float:
                return output_lag_ms(bootstrap, result, PARTITIONS, NEWEST[kind], schema)

            def drain() -> None:
                time.sleep(0.1)  # the pacer's last tick
                publisher.flush()
                _wait_drained(worker, bootstrap, result, publisher.sent)

            with Pacer(lambda n, ms: publisher.publish(n, np.full(n, ms, np.int64))) as pacer:
                capacity, steps = sustained_capacity(set_rate, lag, drain, burst_capacity)
            publisher.flush()
            _say(f"{kind}: burst capacity {burst_capacity:,.0f} records/s, sustained "
                 f"{capacity:,.0f}: {steps}")  # fmt: skip
            _wait_drained(worker, bootstrap, result, publisher.sent)
        rate = rate or capacity / 2
        publisher.keys = recurring_keys(rate, len(streams))
        _say(f"{kind}: capacity {capacity:,.0f} records/s; offering {rate:,.0f}/s for "
             f"{seconds:.0f} s")  # fmt: skip
        before = publisher.sent
        started, ended = _pace(publisher, rate, seconds)
        paced_records = publisher.sent - before
        publisher.trailer(int(ended * 1000) + 1)  # not counted: rows up to `ended` only
        publisher.flush()
        _wait_drained(worker, bootstrap, result, publisher.sent)
    finally:
        worker.stop()
        publisher.close()
    from_ms, to_ms = int((started + WARMUP_S) * 1000), int(ended * 1000)
    stamps, rows = _results(bootstrap, result, kind, schema)
    lat = np.array(
        [t - newest for t, newest in rows if from_ms <= newest <= to_ms], dtype=np.float64
    )
    times = stamps[(stamps >= from_ms) & (stamps <= to_ms)]
    gaps = np.diff(np.concatenate([[from_ms], times, [to_ms]]))
    figures = {
        "capacity_records_per_s": capacity,
        "offered_records_per_s": rate,
        "achieved_records_per_s": paced_records / (ended - started),
        "sampled_results": len(lat),
        "p50_ms": float(np.percentile(lat, 50)) if len(lat) else None,
        "p99_ms": float(np.percentile(lat, 99)) if len(lat) else None,
        "max_ms": float(lat.max()) if len(lat) else None,
        "longest_gap_ms": float(np.max(gaps)),
    }
    _say(f"{kind}: " + ", ".join(f"{k} {v:,.0f}" for k, v in figures.items() if v is not None))
    figures["capacity_measure"] = capacity_measure
    figures["burst_capacity_records_per_s"] = burst_capacity
    figures["capacity_bursts_records_per_s"] = [round(b) for b in bursts]
    figures["capacity_steps"] = steps
    _say(f"{kind}: capacity of each burst {figures['capacity_bursts_records_per_s']}")
    figures["worker_scheduling"] = scheduling
    _say(f"{kind}: worker scheduling {scheduling}")
    return figures


def run_latency_bench(
    backlog: int = 200_000,
    seconds: float = 10.0,
    only: str | None = None,
    rate: float | None = None,
    spread: bool = False,
    realtime: bool = False,
    capacity_measure: str = "burst",
) -> dict[str, Any]:
    """The filter, the join and the GROUP BY (or ``only`` one of QUERIES), offered ``rate``
    records/s (default: half the measured capacity) for ``seconds``; ``spread``: every tick on
    every input partition; ``realtime``: the worker asks for real-time scheduling (its
    ``--realtime``; it runs as before where that is not permitted; the JSON's
    ``worker_scheduling`` says what it got); ``capacity_measure``: "burst" or "sustained"
    (the capacity the default rate is half of)."""
    if capacity_measure not in ("sustained", "burst"):
        raise ValueError(f"--capacity: sustained or burst, not {capacity_measure!r}")
    if only is not None and only not in QUERIES:
        raise ValueError(f"--only: one of {sorted(QUERIES)}, not {only!r}")
    settings = load_settings()
    bootstrap = resolve_bootstrap(settings)
    state = settings.state_dir / "bench-latency"
    state.mkdir(parents=True, exist_ok=True)
    _say(f"broker {bootstrap}")
    results: dict[str, Any] = {}
    kinds = [only] if only else list(DEFAULT_KINDS)
    for kind in kinds:
        figures = run_one(
            bootstrap, state, kind, backlog, seconds, rate, spread, realtime, capacity_measure
        )
        results[kind] = figures
        for key in ("p50_ms", "p99_ms", "max_ms"):
            results[f"{kind}_{key}"] = figures[key]
        results[f"{kind}_longest_gap_ms"] = figures["longest_gap_ms"]
    results["spread"] = spread
    results["worker_scheduling"] = results[kinds[-1]]["worker_scheduling"]
    results["longest_gap_ms"] = max(results[f"{k}_longest_gap_ms"] for k in kinds)
    return results
