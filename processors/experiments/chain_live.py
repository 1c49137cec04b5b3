"""``streamon experiment chain-live``: scheduling policies on real agents, topics and a broker.

The paper's four-operator progress chart (Babcock et al., Sect. 6.1.1: a fast, selective third
operator hidden behind a slow second one) becomes a query of synthetic operators
(``Query.operator``: a chosen CPU cost per tuple and selectivity), run by one worker on the
embedded broker and fed in real time by a generator: a steady stream with one long burst. Each
policy gets the same arrivals (a seeded Poisson process). A monitor samples the worker's status
page and computes the data queued in front of every agent (bytes written to its input minus the
bytes it has processed: the input topic for the ingest agent, the internal topic before every
other agent); the result topic gives every output tuple's latency (its Kafka timestamp minus its
arrival time, which the record carries). Results are checked exactly: every tuple the operators'
selection hashes keep is in the result topic once.

Set-up choices, all so that the comparison measures scheduling and not artefacts:

- *Calibration.* A first run publishes a block of records at once under FIFO and measures how
  fast the worker drains it: the pipeline's capacity C on this machine. The burst runs at
  ``burst_factor`` x C, capped below what Chain's first chain (ingest to op3) can absorb: the
  regime in which the paper's Figs. 6-7 show Chain's advantage. The steady rate is
  ``base_factor`` x C.
- *Equal bytes per tuple.* Records carry a ``payload_bytes`` string, so that a tuple takes about
  as many bytes as an Avro record on the input topic as it does in a columnar envelope on an
  internal topic; otherwise FIFO, whose backlog waits on the input topic, would look better only
  because Avro's encoding of the small fields is tighter.
- *Slow operators.* ``time_scale`` real microseconds per unit of the chart's time axis make the
  operators' own work dominate the per-hop costs of Kafka and Faust, as in the paper's model.

In the paper a "tuple" of the chart is a page of 100 tuples whose size shrinks with each
operator's selectivity; here a tuple is a record and a selectivity keeps a fraction of them, so
sizes shrink the same way. The last operator keeps every tuple (s = 1) so that results can be
checked; the sink after it ejects them, playing the chart's final size-0 step.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from processors.core.batch import VarColumn
from processors.core.scheduling.progress import chains, chart_from_points
from processors.stages.synthetic_stage import copies
from processors.workloads.bursty import steady_with_bursts

log = logging.getLogger(__name__)

#: Sect. 6.1.1's four-operator chart: a fast, selective third operator hidden behind a slow one
FOUR_OPERATORS = [(0, 1.0), (400, 0.9), (2000, 0.88), (2200, 0.1), (4000, 0.0)]


@dataclass(frozen=True)
class LiveChart:
    """A progress chart of Sect. 6 run live: points, and the name of its output files."""

    name: str
    title: str
    points: tuple[tuple[float, float], ...]


CHARTS = {
    "chain-live": LiveChart("chain_live", "four operators", tuple(FOUR_OPERATORS)),
    # Sect. 6.1.1, Figs. 4-5: a fast selective operator, then a slow one
    "chain-live-two-ops": LiveChart(
        "chain_live_two_ops", "two operators", ((0, 1.0), (500, 0.3), (4000, 0.0))
    ),
    # Sect. 6.1.2, Fig. 8: a join with a stored relation (s > 1) before a fast selective one
    "chain-live-stored-join": LiveChart(
        "chain_live_stored_join",
        "join with a stored relation, s > 1",
        ((0, 1.0), (400, 0.9), (1300, 2.0), (1500, 0.2), (4000, 0.0)),
    ),  # fmt: skip
}
SCHEMA = "reading"  # sensor_id carries the sequence number, ts the arrival time in ms

QUERY_TEMPLATE = """\
from processors.core.query import Query
from topics.avro import load_schema

query = Query({name!r})
query.stream("r", topic={topic!r}, schema=load_schema("reading"), key="sensor_id",
             timestamp="ts", partitions=1)
{operators}
query.schedule({policy!r}, **{settings!r})
query.into({result!r}, partitions=1)
"""


@dataclass(frozen=True)
class LiveSetup:
    """The experiment's knobs (times in seconds unless named otherwise)."""

    time_scale: float = 0.1  # real µs of CPU per unit of the chart's time axis (µs in the paper)
    payload_bytes: int = 200
    burst_factor: float = 1.4  # burst rate over the measured capacity
    base_factor: float = 0.25  # steady rate over the measured capacity
    chain1_margin: float = 0.85  # the burst stays below this share of Chain's first chain
    lead_s: float = 4.0  # steady input before the burst
    burst_s: float = 15.0
    tail_s: float = 6.0  # steady input after the burst
    quantum_ms: float = 5.0
    sample_every_s: float = 0.1
    seed: int = 0

    def scaled(self, scale: float) -> LiveSetup:
        """Shorter (or longer) phases for ``--scale``."""
        from dataclasses import replace

        return replace(
            self,
            lead_s=max(self.lead_s * scale, 1.0),
            burst_s=max(self.burst_s * scale, 2.0),
            tail_s=max(self.tail_s * scale, 2.0),
        )


def chart_operators(
    points: list[tuple[float, float]], time_scale: float
) -> list[tuple[float, float]]:
    """(cost in µs per tuple received, selectivity) of each operator of a progress chart.

    The chart's last operator ejects its output (size 0); here it keeps every tuple (s = 1) so
    that the results can be checked, and the sink after it does the ejecting.
    """
    pts = chart_from_points(points)
    ops = []
    for (t0, s0), (t1, s1) in zip(pts, pts[1:], strict=False):
        cost = (t1 - t0) / s0 * time_scale
        ops.append((cost, s1 / s0 if s1 > 0 else 1.0))
    return ops


def first_chain_share(points: list[tuple[float, float]]) -> float:
    """The share of a tuple's processing time spent on the chart's first chain (Sect. 4.1)."""
    pts = chart_from_points(points)
    first = chains(pts)[0]
    return float(first.t_end - first.t_start) / float(pts[-1][0])


def query_source(
    name: str, topic: str, result: str, ops: list[tuple[float, float]], policy: str,
    settings: dict[str, Any],
) -> str:  # fmt: skip
    lines = [
        f"query.operator('op{i + 1}', cost_us={cost!r}, selectivity={sel!r}, key='r.sensor_id')"
        for i, (cost, sel) in enumerate(ops)
    ]
    return QUERY_TEMPLATE.format(
        name=name, topic=topic, result=result, operators="\n".join(lines), policy=policy,
        settings=settings,
    )  # fmt: skip


def expected_results(n: int, ops: list[tuple[float, float]]) -> np.ndarray:
    """How many times each sequence number 0..n-1 comes out (the operators' hash rule)."""
    counts = np.ones(n, np.int64)
    for i, (_, sel) in enumerate(ops):
        name = f"op{i + 1}"
        keep = np.fromiter((copies(k, name, sel) for k in range(n)), np.int64, count=n)
        counts *= keep
    return counts


@dataclass
class Schedule:
    """Arrival offsets (seconds from the run's start) and what they describe."""

    offsets: np.ndarray
    base_rate: float
    burst_rate: float
    burst: tuple[float, float]  # start, length
    duration: float


def burst_schedule(base_rate: float, burst_rate: float, setup: LiveSetup) -> Schedule:
    """Steady input with one burst, as a seeded Poisson process."""
    duration = setup.lead_s + setup.burst_s + setup.tail_s
    offsets = steady_with_bursts(
        duration, base_rate, [(setup.lead_s, setup.burst_s, burst_rate)], poisson=True,
        seed=setup.seed,
    )  # fmt: skip
    return Schedule(offsets, base_rate, burst_rate, (setup.lead_s, setup.burst_s), duration)


@dataclass
class RunResult:
    policy: str
    settings: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)
    latencies: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    results: int = 0
    expected: int = 0
    missing: int = 0
    duplicates: int = 0
    drained_s: float = 0.0
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def peak_bytes(self) -> int:
        return max((s["queued_bytes"] for s in self.samples), default=0)

    @property
    def peak_tuples(self) -> int:
        return max((s["queued_tuples"] for s in self.samples), default=0)

    @property
    def peak_latency_ms(self) -> float:
        return float(self.latencies[:, 1].max()) if len(self.latencies) else 0.0

    @property
    def mean_latency_ms(self) -> float:
        return float(self.latencies[:, 1].mean()) if len(self.latencies) else 0.0

    def arbiter(self) -> dict[str, Any]:
        return dict(self.status.get("scheduling", {}).get("arbiter", {}))


class Generator(threading.Thread):
    """Publishes pre-encoded records when their arrival time comes (Kafka timestamp = arrival)."""

    def __init__(
        self, bootstrap: str, topic: str, offsets: np.ndarray, start: float, payload_bytes: int
    ) -> None:
        super().__init__(name="chain-live-generator", daemon=True)
        from confluent_kafka import Producer

        from topics.avro import load_schema
        from topics.columnar import RecordCodec

        n = len(offsets)
        self.arrival_ms = (start * 1000 + np.asarray(offsets) * 1000).astype(np.int64)
        rng = np.random.default_rng(7)
        site = b"lab-" + b"x" * max(payload_bytes - 4, 0)
        columns = {
            "sensor_id": np.arange(n, dtype=np.int64),
            "ts": self.arrival_ms,
            "temperature": rng.normal(20, 5, n),
            "humidity": rng.uniform(10, 90, n).astype(np.float32),
            "site": VarColumn(
                np.arange(n + 1, dtype=np.int64) * len(site), np.frombuffer(site * n, np.uint8)
            ),  # fmt: skip
            "ok": np.ones(n, np.bool_),
        }
        buf, offs = RecordCodec(load_schema(SCHEMA)).encode_many(columns, n)
        raw = buf.tobytes()
        bounds = offs.tolist()
        self.values = [raw[bounds[i] : bounds[i + 1]] for i in range(n)]
        self.sizes = np.diff(offs)
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2,
                                  "queue.buffering.max.messages": 2_000_000})  # fmt: skip
        self.sent = 0
        self.sent_bytes = 0
        self.done = threading.Event()

    def run(self) -> None:
        produce = self.producer.produce
        n = len(self.values)
        i = 0
        while i < n:
            now_ms = time.time() * 1000
            due = int(np.searchsorted(self.arrival_ms, now_ms, side="right"))
            while i < due:
                produce(self.topic, self.values[i], timestamp=int(self.arrival_ms[i]))
                self.sent_bytes += int(self.sizes[i])
                i += 1
                self.sent = i
            self.producer.poll(0)
            if i < n:
                time.sleep(min(0.002, max((self.arrival_ms[i] - now_ms) / 1000, 0)))
        self.producer.flush(30)
        self.done.set()


def queued(status: dict[str, Any], generated_bytes: int, generated: int) -> dict[str, Any]:
    """Data waiting in front of each agent: what its input received minus what it processed.

    The ingest agent's input is the input topic (what the generator wrote); every other agent's
    is the topic its predecessor writes (that agent's bytes out).
    """
    agents = {a["agent"]: a for a in status["stats"]["agents"]}
    by_topic = {a["out_topic"]: a for a in agents.values() if a.get("out_topic")}
    per_agent: dict[str, tuple[int, int]] = {}
    for name, a in agents.items():
        if not a.get("topic") or name == "scheduler":
            continue
        upstream = by_topic.get(a["topic"])
        if upstream is None:  # reads the input topic
            in_bytes, in_tuples = generated_bytes, generated
        else:
            in_bytes, in_tuples = upstream["bytes_out"], upstream["tuples_out"]
        per_agent[name] = (max(in_bytes - a["bytes_in"], 0), max(in_tuples - a["tuples_in"], 0))
    return {
        "queued_bytes": sum(b for b, _ in per_agent.values()),
        "queued_tuples": sum(t for _, t in per_agent.values()),
        "per_agent_bytes": {k: b for k, (b, _) in per_agent.items()},
        "per_agent_tuples": {k: t for k, (_, t) in per_agent.items()},
    }


def run_policy(
    bootstrap: str,
    state_dir: Path,
    policy: str,
    settings: dict[str, Any],
    ops: list[tuple[float, float]],
    offsets: np.ndarray,
    setup: LiveSetup,
    *,
    settle_s: float = 120.0,
) -> RunResult:
    """One worker running the operators under ``policy``, fed ``offsets``; sampled until the
    last result is out, then checked against the operators' selection rule."""
    from processors.runtime.launcher import WorkerProcess
    from processors.runtime.queries import load_plan
    from processors.runtime.worker import plan_pipeline
    from topics.admin import ensure_topics, read_topic

    run_id = f"chainlive-{policy}-{uuid.uuid4().hex[:6]}"
    topic, result = f"{run_id}-in", f"{run_id}-out"
    query_file = state_dir / f"{run_id}.py"
    settings = {"quantum_ms": setup.quantum_ms, **settings}
    query_file.write_text(query_source(run_id.replace("-", "_"), topic, result, ops, policy,
                                       settings))  # fmt: skip
    ensure_topics(bootstrap, plan_pipeline(load_plan(str(query_file))).specs)
    worker = WorkerProcess(query_file, bootstrap=bootstrap, state_dir=state_dir,
                           worker_id=run_id, loglevel="warn")  # fmt: skip
    out = RunResult(policy, settings)
    n = len(offsets)
    try:
        _wait_ready(worker)
        start = time.time() + 0.5
        generator = Generator(bootstrap, topic, offsets, start, setup.payload_bytes)
        generator.start()
        deadline = start + float(offsets[-1] if n else 0) + settle_s
        while time.time() < deadline:
            time.sleep(setup.sample_every_s)
            status = worker.status(timeout=30)
            sample = queued(status, generator.sent_bytes, generator.sent)
            sample["t"] = time.time() - start
            out.samples.append(sample)
            ingest = _agent(status, "ingest.r")
            drained = sample["queued_tuples"] == 0 and ingest["tuples_in"] >= n
            if generator.done.is_set() and drained:
                out.drained_s = sample["t"]
                break
        out.status = worker.status(timeout=30)
        records = read_topic(bootstrap, result)
        out.latencies, seen = _latencies(records, start)
        expected = expected_results(n, ops)
        out.expected = int(expected.sum())
        out.results = len(records)
        got = np.bincount(seen, minlength=n)[:n] if len(seen) else np.zeros(n, np.int64)
        out.missing = int(np.maximum(expected - got, 0).sum())
        out.duplicates = int(np.maximum(got - expected, 0).sum())
    finally:
        worker.stop()
    return out


def _agent(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(a for a in status["stats"]["agents"] if a["agent"] == name)


def _wait_ready(worker: Any, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not worker.running:
            raise RuntimeError(f"worker exited:\n{worker.log_tail()}")
        try:
            status = worker.status()
            if any(t.startswith("chainlive") for t in status.get("assignment", [])):
                return
        except Exception:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"worker not ready after {timeout}s:\n{worker.log_tail()}")


def _latencies(records: list[Any], start: float) -> tuple[np.ndarray, np.ndarray]:
    """(output time since start, latency ms) per result record, and the sequence numbers."""
    from topics.avro import SchemaStore, decode_single_object, load_schema

    schema, store = load_schema(SCHEMA), SchemaStore()
    rows = []
    seqs = []
    for r in records:
        rec = decode_single_object(r.value, schema, store)
        rows.append((r.timestamp_ms / 1000 - start, r.timestamp_ms - rec["ts"]))
        seqs.append(rec["sensor_id"])
    return np.array(rows, np.float64).reshape(-1, 2), np.array(seqs, np.int64)


def calibrate(
    bootstrap: str, state_dir: Path, ops: list[tuple[float, float]], setup: LiveSetup
) -> dict[str, float]:
    """The pipeline's capacity in tuples per second: a block of records published at once,
    drained by the worker under FIFO, divided by the time from the first to the last result."""
    cost_us = _cost_per_input_tuple_us(ops)
    n = int(max(4.0 / (cost_us * 1e-6), 500))  # about four seconds of work
    offsets = np.zeros(n)
    run = run_policy(bootstrap, state_dir, "fifo", {}, ops, offsets, setup)
    if run.missing or run.duplicates or not len(run.latencies):
        raise RuntimeError(
            f"calibration run lost or repeated results: {run.missing} missing, "
            f"{run.duplicates} duplicated"
        )
    drain_s = float(run.latencies[:, 0].max() - max(run.latencies[:, 0].min(), 0.0))
    first_out = float(run.latencies[:, 0].min())
    capacity = n / max(drain_s + first_out, 1e-3)
    return {
        "records": n,
        "drain_s": drain_s + first_out,
        "capacity_per_s": capacity,
        "configured_cost_us": cost_us,
        "configured_capacity_per_s": 1e6 / cost_us,
    }


def _cost_per_input_tuple_us(ops: list[tuple[float, float]]) -> float:
    total, reaching = 0.0, 1.0
    for cost, sel in ops:
        total += cost * reaching
        reaching *= sel
    return total


# -- the experiment ------------------------------------------------------------------------------

POLICY_RUNS: list[tuple[str, dict[str, Any]]] = [
    ("fifo", {}),
    ("greedy", {}),
    ("round-robin", {}),
    ("chain", {}),
]


def run_chain_live(
    out_dir: Path, scale: float = 1.0, seed: int = 0, json_path: Path | None = None,
    setup: LiveSetup | None = None, bootstrap: str | None = None,
    chart: LiveChart = CHARTS["chain-live"],
) -> list[Path]:  # fmt: skip
    """Calibrate, run every policy on the same bursty arrivals, then Chain-Flush at a latency
    threshold between FIFO's and Chain's peaks; write CSVs, PNGs and the JSON summary."""
    from processors.runtime.config import load_settings, resolve_bootstrap

    setup = (setup or LiveSetup(seed=seed)).scaled(scale)
    settings = load_settings()
    bootstrap = bootstrap or resolve_bootstrap(settings)
    state_dir = settings.state_dir / "chain-live"
    state_dir.mkdir(parents=True, exist_ok=True)
    points = [tuple(p) for p in chart.points]
    ops = chart_operators(points, setup.time_scale)

    _say(f"calibrating: {len(ops)} synthetic operators, {_cost_per_input_tuple_us(ops):.0f} µs "
         "of work per input tuple")  # fmt: skip
    cal = calibrate(bootstrap, state_dir, ops, setup)
    capacity = cal["capacity_per_s"]
    chain1 = capacity / first_chain_share(points)
    burst_rate = min(setup.burst_factor * capacity, setup.chain1_margin * chain1)
    base_rate = setup.base_factor * capacity
    schedule = burst_schedule(base_rate, burst_rate, setup)
    _say(f"capacity {capacity:,.0f} tuples/s (first chain alone {chain1:,.0f}/s): steady "
         f"{base_rate:,.0f}/s, burst {burst_rate:,.0f}/s for {setup.burst_s:g} s, "
         f"{len(schedule.offsets):,} records")  # fmt: skip

    runs: list[RunResult] = []
    for policy, policy_settings in POLICY_RUNS:
        runs.append(_run_and_say(bootstrap, state_dir, policy, policy_settings, ops, schedule,
                                 setup))  # fmt: skip
    by_policy = {r.policy: r for r in runs}
    fifo_lat, chain_lat = by_policy["fifo"].peak_latency_ms, by_policy["chain"].peak_latency_ms
    # the smallest feasible threshold is about FIFO's peak (Sect. 6.2); halfway to Chain's peak
    # the threshold binds during the burst
    threshold_ms = round(fifo_lat + 0.5 * max(chain_lat - fifo_lat, 0.0))
    flush = _run_and_say(bootstrap, state_dir, "chain-flush", {"latency_ms": threshold_ms}, ops,
                         schedule, setup)  # fmt: skip
    runs.append(flush)

    summary = _summary(runs, cal, schedule, setup, threshold_ms, points)
    out_dir = Path(out_dir)
    paths = _write_outputs(out_dir, runs, summary, schedule, chart)
    if json_path is not None:
        json_path = Path(json_path)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(summary, indent=2))
        paths.append(json_path)
    _say(
        f"peak queued bytes: Chain {summary['chain_peak_bytes']:,}, FIFO "
        f"{summary['fifo_peak_bytes']:,} (ratio {summary['chain_vs_fifo_peak_bytes']:.2f}), "
        f"Greedy {summary['greedy_peak_bytes']:,}; Chain-Flush peak latency "
        f"{summary['flush_peak_latency_ms']:.0f} ms at a {threshold_ms} ms threshold"
    )
    return paths


def _run_and_say(
    bootstrap: str, state_dir: Path, policy: str, settings: dict[str, Any],
    ops: list[tuple[float, float]], schedule: Schedule, setup: LiveSetup,
) -> RunResult:  # fmt: skip
    _say(f"running {policy} {settings or ''}".rstrip())
    run = run_policy(bootstrap, state_dir, policy, settings, ops, schedule.offsets, setup)
    if run.missing or run.duplicates:
        raise RuntimeError(
            f"{policy}: {run.missing} results missing, {run.duplicates} duplicated "
            f"(expected {run.expected})"
        )
    arb = run.arbiter()
    _say(f"  peak queued {run.peak_bytes:,} bytes ({run.peak_tuples:,} tuples), peak latency "
         f"{run.peak_latency_ms:,.0f} ms, {run.results:,} results exact; arbiter "
         f"{arb.get('decisions', 0):,} decisions, {arb.get('decision_ns_avg', 0) / 1000:.1f} µs "
         "each")  # fmt: skip
    return run


def _summary(
    runs: list[RunResult], cal: dict[str, float], schedule: Schedule, setup: LiveSetup,
    threshold_ms: float, points: list[tuple[float, float]],
) -> dict[str, Any]:  # fmt: skip
    by = {r.policy: r for r in runs}
    out: dict[str, Any] = {}
    for r in runs:
        key = r.policy.replace("-", "_")
        out[f"{key}_peak_bytes"] = r.peak_bytes
        out[f"{key}_peak_tuples"] = r.peak_tuples
        out[f"{key}_peak_latency_ms"] = r.peak_latency_ms
        out[f"{key}_mean_latency_ms"] = r.mean_latency_ms
    out["flush_threshold_ms"] = threshold_ms
    out["flush_peak_latency_ms"] = by["chain-flush"].peak_latency_ms
    out["flush_peak_bytes"] = by["chain-flush"].peak_bytes
    out["chain_vs_fifo_peak_bytes"] = by["chain"].peak_bytes / max(by["fifo"].peak_bytes, 1)
    out["chain_vs_greedy_peak_bytes"] = by["chain"].peak_bytes / max(by["greedy"].peak_bytes, 1)
    out["flush_latency_over_threshold"] = by["chain-flush"].peak_latency_ms / threshold_ms
    decisions = sum(r.arbiter().get("decisions", 0) for r in runs)
    decision_ns = sum(
        r.arbiter().get("decisions", 0) * r.arbiter().get("decision_ns_avg", 0.0) for r in runs
    )
    busy_ns = sum(
        sum(a["busy_ns"] for a in r.status.get("stats", {}).get("agents", [])) for r in runs
    )
    out["arbiter_decisions"] = decisions
    out["arbiter_decision_us_avg"] = decision_ns / max(decisions, 1) / 1000
    out["arbiter_decision_us_max"] = (
        max((r.arbiter().get("decision_ns_max", 0) for r in runs), default=0) / 1000
    )
    out["arbiter_share_of_busy_time"] = decision_ns / max(busy_ns, 1)
    out["runs"] = {
        r.policy: {
            "settings": r.settings,
            "results": r.results,
            "missing": r.missing,
            "duplicates": r.duplicates,
            "drained_s": r.drained_s,
            "arbiter": {k: v for k, v in r.arbiter().items() if k != "agents"},
            "waits": r.arbiter().get("agents", {}),
        }
        for r in runs
    }
    out["calibration"] = cal
    out["workload"] = {
        "records": len(schedule.offsets),
        "base_rate_per_s": schedule.base_rate,
        "burst_rate_per_s": schedule.burst_rate,
        "burst": list(schedule.burst),
        "chart": points,
    }
    out["setup"] = asdict(setup)
    out["machine"] = _machine()
    return out


def _write_outputs(
    out_dir: Path, runs: list[RunResult], summary: dict[str, Any], schedule: Schedule,
    chart: LiveChart,
) -> list[Path]:  # fmt: skip
    from processors.experiments.plotting import figure, save, write_csv

    notes = [
        f"streamon experiment {chart.name.replace('_', '-')}: Babcock et al. Sect. 6 chart "
        f"{', '.join(f'({t:g},{s:g})' for t, s in chart.points)} ({chart.title}) as synthetic "
        "operators on one worker",
        f"steady {schedule.base_rate:.0f}/s, burst {schedule.burst_rate:.0f}/s at "
        f"{schedule.burst[0]:g}-{schedule.burst[0] + schedule.burst[1]:g} s; "
        f"{len(schedule.offsets)} records (seeded Poisson)",
        f"machine: {summary['machine']}",
    ]
    queue_rows = [
        {
            "policy": _label(r),
            "t_s": s["t"],
            "queued_bytes": s["queued_bytes"],
            "queued_tuples": s["queued_tuples"],
        }  # fmt: skip
        for r in runs
        for s in r.samples
    ]
    agent_rows = [
        {
            "policy": _label(r),
            "t_s": s["t"],
            "agent": agent,
            "queued_bytes": nbytes,
            "queued_tuples": s["per_agent_tuples"].get(agent, 0),
        }  # fmt: skip
        for r in runs
        for s in r.samples
        for agent, nbytes in s["per_agent_bytes"].items()
    ]
    latency_rows = []
    for r in runs:
        for t, lat in _binned_latency(r.latencies):
            latency_rows.append({"policy": _label(r), "t_s": t, "latency_ms": lat})
    summary_rows = [
        {
            "policy": _label(r),
            "peak_queued_bytes": r.peak_bytes,
            "peak_queued_tuples": r.peak_tuples,
            "peak_latency_ms": r.peak_latency_ms,
            "mean_latency_ms": r.mean_latency_ms,
            "results": r.results,
        }  # fmt: skip
        for r in runs
    ]
    paths = [
        write_csv(
            out_dir / f"{chart.name}_queue.csv",
            queue_rows,
            ["policy", "t_s", "queued_bytes", "queued_tuples"],
            notes,
        ),  # fmt: skip
        write_csv(
            out_dir / f"{chart.name}_queue_agents.csv",
            agent_rows,
            ["policy", "t_s", "agent", "queued_bytes", "queued_tuples"],
            notes,
        ),  # fmt: skip
        write_csv(
            out_dir / f"{chart.name}_latency.csv",
            latency_rows,
            ["policy", "t_s", "latency_ms"],
            notes,
        ),  # fmt: skip
        write_csv(
            out_dir / f"{chart.name}_summary.csv",
            summary_rows,
            [
                "policy",
                "peak_queued_bytes",
                "peak_queued_tuples",
                "peak_latency_ms",
                "mean_latency_ms",
                "results",
            ],
            notes,
        ),  # fmt: skip
    ]
    fig, ax = figure(f"Queued data vs time (live, {chart.title})", "time (s)", "queued KB")
    for r in runs:
        ax.plot([s["t"] for s in r.samples], [s["queued_bytes"] / 1024 for s in r.samples],
                label=_label(r), linewidth=1.2)  # fmt: skip
    _shade_burst(ax, schedule)
    ax.legend(fontsize=8)
    paths.append(save(fig, out_dir / f"{chart.name}_queue.png"))
    fig, ax = figure(f"Output latency vs time (live, {chart.title})", "time (s)", "latency (ms)")
    for r in runs:
        binned = _binned_latency(r.latencies)
        ax.plot([t for t, _ in binned], [v for _, v in binned], label=_label(r), linewidth=1.2)
    ax.axhline(summary["flush_threshold_ms"], color="grey", linestyle=":", linewidth=1)
    _shade_burst(ax, schedule)
    ax.legend(fontsize=8)
    paths.append(save(fig, out_dir / f"{chart.name}_latency.png"))
    return paths


def _label(run: RunResult) -> str:
    if run.policy == "chain-flush":
        return f"chain-flush ({run.settings.get('latency_ms')} ms)"
    return run.policy


def _shade_burst(ax: Any, schedule: Schedule) -> None:
    start, length = schedule.burst
    ax.axvspan(start, start + length, color="grey", alpha=0.12, linewidth=0)


def _binned_latency(latencies: np.ndarray, width_s: float = 0.25) -> list[tuple[float, float]]:
    """Mean latency of the outputs of each ``width_s`` interval (as the paper averages blocks
    of outputs), in output-time order."""
    if not len(latencies):
        return []
    bins = np.floor(latencies[:, 0] / width_s).astype(np.int64)
    out = []
    for b in np.unique(bins):
        mask = bins == b
        out.append((float((b + 0.5) * width_s), float(latencies[mask, 1].mean())))
    return out


def _machine() -> dict[str, Any]:
    import os
    import platform

    return {
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }


def _say(text: str) -> None:
    print(f"[chain-live] {text}", flush=True)
