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

from pathlib import Path
from typing import Any

from processors.experiments.chain_live_outputs import (
    summary_of,
    write_outputs,
)
from processors.experiments.chain_live_run import (
    POLICY_RUNS,
    calibrate,
    cost_per_input_tuple_us,
    queued,
    run_policy,
)
from processors.experiments.chain_live_setup import (
    CHARTS,
    FOUR_OPERATORS,
    LiveChart,
    LiveSetup,
    RunResult,
    Schedule,
    burst_schedule,
    chart_operators,
    expected_results,
    first_chain_share,
)

__all__ = [
    "CHARTS",
    "FOUR_OPERATORS",
    "LiveSetup",
    "burst_schedule",
    "chart_operators",
    "expected_results",
    "first_chain_share",
    "queued",
    "run_chain_live",
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

    _say(f"calibrating: {len(ops)} synthetic operators, {cost_per_input_tuple_us(ops):.0f} µs "
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

    summary = summary_of(runs, cal, schedule, setup, threshold_ms, points)
    out_dir = Path(out_dir)
    paths = write_outputs(out_dir, runs, summary, schedule, chart)
    if json_path is not None:
        from processors.experiments.plotting import write_json  # matplotlib: on use

        paths.append(write_json(Path(json_path), summary))
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


def _say(text: str) -> None:
    print(f"[chain-live] {text}", flush=True)
