"""The live runs of ``streamon experiment shedding``: a generator thread writing both routers'
packets at the ramp's rate, one worker, its status page sampled twice a second, the result
topic read back and checked; and the staircase that measures the worker's capacity.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from processors.core.cost.shed_signals import slope
from processors.experiments.shedding_live_setup import Sent, ShedSetup

STREAMS = ("a", "b")
#: a sampled read of results takes runs of this many records
CHUNK = 20_000


class Generator(threading.Thread):
    """Writes ``rate(t)`` packets a second to each input (t from ``start``) until ``rate`` is
    None; a packet's ts (and Kafka timestamp) is when it is written, its ``dst`` its number."""

    def __init__(
        self, bootstrap: str, topics: dict[str, str], rate: Callable[[float], float | None],
        pids: int, seed: int,
    ) -> None:  # fmt: skip
        super().__init__(name="shedding-generator", daemon=True)
        from confluent_kafka import Producer

        from processors.runtime.kafka_security import client_config
        from topics.avro import load_schema
        from topics.columnar import RecordCodec

        self.topics, self.rate, self.pids = topics, rate, pids
        self.codec = RecordCodec(load_schema("packet"))
        self.producer = Producer(client_config({  # the process's security settings too
            "bootstrap.servers": bootstrap, "linger.ms": 5,
            "queue.buffering.max.messages": 2_000_000,
        }))  # fmt: skip
        self.rng = np.random.default_rng(seed)
        self.parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {
            s: [] for s in topics
        }
        self.sent = dict.fromkeys(topics, 0)
        self.start_t = 0.0
        self.stop = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        self.start_t = last = time.time()
        owed = 0.0
        try:
            while not self.stop.is_set():
                now = time.time()
                r = self.rate(now - self.start_t)
                if r is None:
                    break
                owed += r * (now - last)
                last = now
                n = int(owed)
                if n > 0:
                    owed -= n
                    for stream, topic in self.topics.items():
                        self._write(stream, topic, n, int(now * 1000))
                self.producer.poll(0)
                time.sleep(0.004)
        finally:
            self.producer.flush(60)
            self.done.set()

    def _write(self, stream: str, topic: str, n: int, ms: int) -> None:
        first = self.sent[stream]
        dst = np.arange(first, first + n, dtype=np.int64)
        pid = self.rng.integers(0, self.pids, n).astype(np.int64)
        ts = np.full(n, ms, np.int64)
        cols = {
            "router": np.full(n, STREAMS.index(stream), np.int32), "pid": pid, "ts": ts,
            "size": self.rng.integers(40, 1500, n).astype(np.int32),
            "src": self.rng.integers(0, 1 << 32, n).astype(np.int64), "dst": dst,
        }  # fmt: skip
        buf, offs = self.codec.encode_many(cols, n)
        raw, bounds = buf.tobytes(), offs.tolist()
        produce = self.producer.produce
        for i in range(n):
            produce(topic, raw[bounds[i] : bounds[i + 1]], timestamp=ms)
        self.parts[stream].append((dst, pid, ts))
        self.sent[stream] = first + n

    def written(self, stream: str) -> Sent:
        parts = self.parts[stream]
        if not parts:
            empty = np.zeros(0, np.int64)
            return Sent(empty, empty, empty)
        return Sent(*(np.concatenate([p[i] for p in parts]) for i in range(3)))


@dataclass
class LiveRun:
    """One run's samples (status page, twice a second) and results."""

    shed: bool
    start_t: float = 0.0
    samples: list[dict[str, Any]] = field(default_factory=list)
    sent: dict[str, Sent] = field(default_factory=dict)
    results: dict[str, np.ndarray] = field(default_factory=dict)  # a_dst, b_dst, a_ts, ...
    changes: list[dict[str, Any]] = field(default_factory=list)
    results_written: int = 0  # by the worker, every partition (``results`` holds a sample)
    sampled: bool = True  # every result of the sampled partitions read (else runs of them)
    worker_exit: int | None = None


def sample(worker: Any, gen: Generator) -> dict[str, Any]:
    """The worker's counters now: records read, kept and passed on; what waits where."""
    status = worker.status(timeout=30)
    agents = {a["agent"]: a for a in status["stats"]["agents"]}
    read = {s: agents.get(f"ingest.{s}", {}).get("tuples_in", 0) for s in STREAMS}
    passed = sum(agents.get(f"ingest.{s}", {}).get("tuples_out", 0) for s in STREAMS)
    joined = agents.get("mjoin", {}).get("tuples_in", 0)
    boxes = (status.get("shedding") or {}).get("boxes", {})
    return {
        "t": time.time() - gen.start_t,
        "offered": dict(gen.sent),
        "read": read,
        "source_backlog": sum(gen.sent[s] - read[s] for s in STREAMS),
        "join_backlog": max(passed - joined, 0),
        "keep": {s: boxes.get(s, {}).get("keep", 1.0) for s in STREAMS},
        "kept": {s: boxes.get(s, {}).get("kept", read[s]) for s in STREAMS},
        "dropped": {s: boxes.get(s, {}).get("dropped", 0) for s in STREAMS},
        "results": agents.get("sink", {}).get("tuples_out", 0),
        "changes": list((status.get("shedding") or {}).get("changes", [])),
    }


def gather_changes(into: list[dict[str, Any]], seen: list[dict[str, Any]]) -> None:
    """Add to ``into`` the changes of ``seen`` (a status page's last 20) not in it yet: read at
    every sample, a run keeps all of them (a climb alone makes 10-15)."""
    known = {(c.get("time_ms"), str(c.get("to"))) for c in into}
    into.extend(c for c in seen if (c.get("time_ms"), str(c.get("to"))) not in known)


def start_query(
    bootstrap: str, state_dir: Path, setup: ShedSetup, shed: bool, tag: str
) -> tuple[Any, dict[str, str], str, Any]:
    """Topics, query file and a worker holding every input partition."""
    from processors.commands.launcher import WorkerProcess
    from processors.commands.queries import load_plan
    from processors.physical.compiler import compile_plan
    from processors.runtime.worker import topic_specs
    from topics.admin import ensure_topics
    from topics.specs import TopicSpec

    name = f"shedding_{tag}_{uuid.uuid4().hex[:6]}"
    topics = {s: f"{name}.{s}" for s in STREAMS}
    result = f"{name}.out"
    query_file = state_dir / f"{name}.py"
    query_file.write_text(setup.query_source(name, topics["a"], topics["b"], result, shed))
    plan = load_plan(str(query_file))
    ensure_topics(bootstrap, [TopicSpec(t, setup.partitions) for t in topics.values()])
    ensure_topics(bootstrap, topic_specs(compile_plan(plan)))
    worker = WorkerProcess(query_file, bootstrap=bootstrap, state_dir=state_dir,
                           worker_id=name, loglevel="info")  # fmt: skip
    worker.wait_holding(list(topics.values()), setup.partitions, timeout=120)
    return worker, topics, result, plan


def run_ramp(
    bootstrap: str, state_dir: Path, setup: ShedSetup, rate: Callable[[float], float],
    duration_s: float, shed: bool, settle_s: float = 90.0, runs: int | None = None,
) -> LiveRun:  # fmt: skip
    """One run of the ramp, with or without shedding: sampled until the ramp is over and the
    worker has caught up (at most ``settle_s`` more), then its results read back."""
    worker, topics, result, plan = start_query(bootstrap, state_dir, setup, shed,
                                               "shed" if shed else "noshed")  # fmt: skip
    run = LiveRun(shed)
    gen = Generator(bootstrap, topics, lambda t: float(rate(t)) if t < duration_s else None,
                    setup.pids, setup.seed)  # fmt: skip
    try:
        time.sleep(2.0)  # the worker's first fetches
        gen.start()
        while not gen.start_t:
            time.sleep(0.01)
        run.start_t = gen.start_t
        deadline = gen.start_t + duration_s + settle_s
        while time.time() < deadline:
            time.sleep(setup.sample_every_s)
            s = sample(worker, gen)
            gather_changes(run.changes, s.pop("changes"))
            run.samples.append(s)
            caught_up = s["source_backlog"] == 0 and s["join_backlog"] == 0
            lifted = all(k >= 1.0 for k in s["keep"].values())
            if gen.done.is_set() and caught_up and lifted:
                break
        time.sleep(setup.window_ms / 1000 + setup.idle_ms / 1000 + 1.0)  # the last releases
        final = worker.status(timeout=30)
        gather_changes(run.changes, (final.get("shedding") or {}).get("changes", []))
        run.results_written = next(
            (a["tuples_out"] for a in final["stats"]["agents"] if a["agent"] == "sink"), 0
        )
    finally:
        gen.stop.set()
        run.worker_exit = worker.stop()
    run.sent = {s: gen.written(s) for s in STREAMS}
    run.results = read_results(bootstrap, result, plan, list(range(setup.sampled_partitions)),
                               runs)  # fmt: skip
    run.sampled = runs is None
    return run


def read_results(
    bootstrap: str, topic: str, plan: Any, partitions: list[int], runs: int | None = None
) -> dict[str, np.ndarray]:
    """The result records of ``partitions`` (results are spread over them by a hash of the
    join key: a random sample), or ``runs`` runs of CHUNK records spread evenly over each,
    their fields decoded in bulk and their Kafka timestamps (when written)."""
    from topics.admin import high_watermarks, iter_topic, sample_partition
    from topics.columnar import RecordCodec

    values: list[bytes] = []
    written: list[int] = []
    if runs is None:
        records = iter_topic(bootstrap, topic, timeout=600, partitions=partitions)
    else:
        ends = high_watermarks(bootstrap, topic)
        records = (
            r for p in partitions
            for r in sample_partition(bootstrap, topic, p, CHUNK,
                                      max(CHUNK, ends.get(p, 0) // runs), timeout=900)
        )  # fmt: skip
    for record in records:
        values.append(record.value)
        written.append(record.timestamp_ms)
    lengths = np.fromiter((len(v) for v in values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    buf = np.frombuffer(b"".join(values), np.uint8)
    decoded = RecordCodec(plan.output_schema).decode_many(buf, offsets)
    if decoded.errors:
        raise RuntimeError(f"{len(decoded.errors)} result records did not decode: "
                           f"{decoded.errors[:3]}")  # fmt: skip
    cols = decoded.columns
    out = {k: np.asarray(cols[k], np.int64) for k in ("a_dst", "b_dst", "a_ts", "b_ts")}
    out["written_ms"] = np.asarray(written, np.int64)
    return out


def kept_up(points: list[tuple[float, float]], input_per_s: float) -> tuple[bool, float, float]:
    """A step is kept up with unless, over its second half (``points``: (t, what waits)), what
    waits grows by more than a tenth of the input or ends above a second of it; also the
    growth and what waits at its end."""
    growth = slope(points)
    waiting = points[-1][1] if points else 0.0
    return growth < 0.1 * input_per_s and waiting < input_per_s, growth, waiting


#: a staircase ends once this many steps in a row are not kept up with: a step that fails
#: alone (the next, higher one kept up with) was a stall of the worker or the machine, not
#: its capacity (one such step ended the staircase at 4,338 records/s in a run whose second
#: staircase then kept up with 7,145)
CONFIRM_FAILS = 2


def staircase(
    worker: Any, gen: Generator, step_s: float, values: list[float],
    enter: Callable[[int, float], None], waiting: Callable[[dict[str, Any], float], float],
    judge: Callable[[list[tuple[float, float]], float], dict[str, Any]],
) -> list[dict[str, Any]]:  # fmt: skip
    """The steps both calibrations climb: for each value, ``enter(k, value)`` sets it, what
    waits (``waiting`` of each sample) is sampled over the step's second half, and
    ``judge(points, value)`` gives the step's record (with ``kept_up``); until CONFIRM_FAILS
    steps in a row are not kept up with."""
    steps: list[dict[str, Any]] = []
    for k, x in enumerate(values):
        enter(k, x)
        points: list[tuple[float, float]] = []
        while time.time() < gen.start_t + (k + 1) * step_s - 0.1:
            time.sleep(0.2)
            s = sample(worker, gen)
            if s["t"] >= k * step_s + step_s / 2:  # the step's second half
                points.append((s["t"], waiting(s, x)))
        steps.append(judge(points, x))
        if len(steps) >= CONFIRM_FAILS and not any(t["kept_up"] for t in steps[-CONFIRM_FAILS:]):
            break
    return steps


def result_latencies(
    results: dict[str, np.ndarray], start_t: float
) -> tuple[np.ndarray, np.ndarray]:
    """(seconds since ``start_t`` when written, latency ms) per result: the time it was
    written (its Kafka timestamp) less the time its newer input was written."""
    written = results["written_ms"]
    lat = written - np.maximum(results["a_ts"], results["b_ts"])
    return written / 1000.0 - start_t, lat.astype(np.float64)


#: a calibration's results are read back in this many runs of CHUNK records spread evenly
#: over the partition (tens of millions are written; a run of them is under a second)
CALIBRATION_RUNS = 80


def judge_latency(
    steps: list[dict[str, Any]], results: dict[str, np.ndarray], start_t: float, step_s: float,
    bound_ms: float,
) -> None:  # fmt: skip
    """Each step's p99 output latency over its second half (the results written then, read
    back in runs: a sample) and whether it was kept up with within the latency bound: a rate
    kept up with only by letting results wait longer than the query allows is not one the
    worker can keep under that query's bound. A step with no result read back is judged by
    its backlog alone."""
    written_s, lat = result_latencies(results, start_t)
    for k, step in enumerate(steps):
        inside = lat[(written_s >= (k + 0.5) * step_s) & (written_s < (k + 1) * step_s)]
        p99 = float(np.percentile(inside, 99)) if len(inside) else None
        step["latency_n"], step["p99_latency_ms"] = int(len(inside)), p99
        step["within_bound"] = bool(step["kept_up"] and (p99 is None or p99 <= bound_ms))


def _bounded(steps: list[dict[str, Any]], key: str) -> float | None:
    """:func:`capacity_of` the steps within the latency bound (None if none was)."""
    try:
        return capacity_of(steps, key, ok="within_bound")
    except RuntimeError:
        return None


def _start(gen: Generator) -> None:
    gen.start()
    while not gen.start_t:
        time.sleep(0.01)


def calibrate(bootstrap: str, state_dir: Path, setup: ShedSetup) -> dict[str, Any]:
    """The worker's capacity (records/s per input) on this machine: a staircase of steady
    rates without shedding, each ``calibration_step_s`` and ``calibration_factor`` times the
    last, until steps are not kept up with: over the step's second half what waits (before
    the worker and before the join) grows by more than a tenth of the input, or ends above a
    second of it. See :func:`capacity_of`; ``capacity_within_bound_per_s`` is the same over
    the steps whose output latency was within the bound too (:func:`judge_latency`)."""
    worker, topics, result, plan = start_query(bootstrap, state_dir, setup, False, "calib")
    rates = setup.calibration_rates()
    step = setup.calibration_step_s
    gen = Generator(bootstrap, topics,
                    lambda t: rates[int(t // step)] if t < step * len(rates) else None,
                    setup.pids, setup.seed + 1)  # fmt: skip

    def judge(points: list[tuple[float, float]], r: float) -> dict[str, Any]:
        ok, growth, waiting = kept_up(points, 2 * r)
        return {"rate": r, "waiting": waiting, "growth_per_s": growth, "kept_up": ok}

    try:
        time.sleep(2.0)
        _start(gen)
        steps = staircase(worker, gen, step, [float(r) for r in rates], lambda k, r: None,
                          lambda s, r: s["source_backlog"] + s["join_backlog"], judge)  # fmt: skip
    finally:
        gen.stop.set()
        worker.stop()
    _judge_latency_of(bootstrap, result, plan, setup, steps, gen.start_t)
    return {"steps": steps, "capacity_per_s": capacity_of(steps),
            "capacity_within_bound_per_s": _bounded(steps, "rate")}  # fmt: skip


def _judge_latency_of(
    bootstrap: str, result: str, plan: Any, setup: ShedSetup, steps: list[dict[str, Any]],
    start_t: float,
) -> None:  # fmt: skip
    """:func:`judge_latency` over a sample of the calibration's results."""
    results = read_results(bootstrap, result, plan, list(range(setup.sampled_partitions)),
                           CALIBRATION_RUNS)  # fmt: skip
    judge_latency(steps, results, start_t, setup.calibration_step_s, setup.max_latency_ms)


def capacity_of(steps: list[dict[str, Any]], key: str = "rate", ok: str = "kept_up") -> float:
    """Between the last step's ``key`` (rate, or share) that passed (``ok``: kept up with, or
    kept up with within the latency bound) before CONFIRM_FAILS steps in a row did not, and
    the first of those (their geometric mean; the last one that passed if no run of failures
    came). A failure alone is passed over (a stall)."""
    ends = [i for i in range(len(steps))
            if not any(t[ok] for t in steps[i:i + CONFIRM_FAILS])]  # fmt: skip
    end = ends[0] if ends else len(steps)
    good = [s[key] for s in steps[:end] if s[ok]]
    if not good:
        raise RuntimeError(f"no {key} of the staircase passed ({ok}): {steps}")
    return float(np.sqrt(good[-1] * steps[end][key])) if ends else float(good[-1])


def calibrate_kept(
    bootstrap: str, state_dir: Path, setup: ShedSetup, capacity: float
) -> dict[str, Any]:
    """The most the worker keeps up with when offered the ramp's top rate (``high`` x
    ``capacity`` per input): the same staircase, over the drop boxes' share at that rate
    (set by hand, as ``streamon control shed`` does), from ``kept_start`` x capacity / offered
    up by ``kept_factor`` a step. Reading and dropping the records above the capacity costs
    the worker (and the broker and this generator, on the same machine) something: this is
    what the capacity lets it keep there, measured. What waits is counted in kept records (a
    record before the drop boxes counts at the share)."""
    from processors.runtime.control import publish_shed

    offered = setup.high * capacity
    shares = setup.kept_shares(capacity)
    worker, topics, result, plan = start_query(bootstrap, state_dir, setup, False, "calkeep")
    step = setup.calibration_step_s
    gen = Generator(bootstrap, topics, lambda t: offered if t < step * len(shares) else None,
                    setup.pids, setup.seed + 2)  # fmt: skip

    def set_shares(x: float) -> None:
        publish_shed(bootstrap, plan.name, dict.fromkeys(STREAMS, x), "calibration", "experiment")

    def judge(points: list[tuple[float, float]], x: float) -> dict[str, Any]:
        ok, growth, waiting = kept_up(points, 2 * x * offered)
        return {"keep": x, "kept_per_s": x * offered, "waiting": waiting,
                "growth_per_s": growth, "kept_up": ok}  # fmt: skip

    try:
        set_shares(shares[0])
        _wait_for_shares(worker, shares[0])
        _start(gen)
        steps = staircase(
            worker, gen, step, shares, lambda k, x: set_shares(x) if k else None,
            lambda s, x: s["source_backlog"] * x + s["join_backlog"], judge,
        )  # fmt: skip
    finally:
        gen.stop.set()
        worker.stop()
    _judge_latency_of(bootstrap, result, plan, setup, steps, gen.start_t)
    keep, bounded = capacity_of(steps, "keep"), _bounded(steps, "keep")
    return {"offered_per_s": offered, "steps": steps, "keep": keep, "kept_per_s": keep * offered,
            "kept_within_bound_per_s": None if bounded is None else bounded * offered}  # fmt: skip


def _wait_for_shares(worker: Any, x: float, timeout: float = 30.0) -> None:
    """Until the worker's drop boxes keep ``x`` (it reads the control topic a few times a
    second)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        boxes = (worker.status(timeout=30).get("shedding") or {}).get("boxes", {})
        if all(abs(boxes.get(s, {}).get("keep", 1.0) - x) < 1e-9 for s in STREAMS):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the worker's drop boxes did not take the share {x} in {timeout:.0f} s")
