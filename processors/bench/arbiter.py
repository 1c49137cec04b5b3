"""``streamon bench arbiter``: what operator scheduling costs (Babcock et al. argue Chain's
overhead is negligible, Sect. 4.2; this measures ours).

- ``decision_us``: in process, the arbiter granting turns to agents that have nothing to do but
  ask again (so the figure is all overhead: the policy's choice, the bookkeeping and the asyncio
  hand-over), per decision, with 6 and 24 agents waiting under Chain;
- ``choose_us``: Chain's ``choose`` alone on the same ready sets;
- end to end (unless ``--no-kafka``): the pass-through pipeline (ingest, stage, sink) on the same
  records with scheduling ``off`` and with Chain, alternately, in the same run:
  ``chain_vs_off`` is the rate with the arbiter over the rate without.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from processors.core.scheduling.plan import SchedulingPlan
from processors.core.scheduling.policies import ReadyOperator, make_policy
from processors.runtime.arbiter import Arbiter

QUERY = """\
from processors.workloads.examples import readings_passthrough
query = readings_passthrough(topic={topic!r}, result={result!r}, name={name!r}, partitions={p})
query.schedule({policy!r})
"""
PARTITIONS = 4


def _say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def _plan(k: int) -> SchedulingPlan:
    ops = [f"op{i}" for i in range(k)]
    stats = {op: (1e-6 * (1 + i % 5), 0.5 + 0.1 * (i % 4)) for i, op in enumerate(ops)}
    plan = SchedulingPlan(paths={"p": ops}, stats=stats)
    plan.validate()
    return plan


def decision_cost(agents: int, turns: int = 20_000) -> dict[str, float]:
    """Microseconds per granted turn with ``agents`` agents always waiting, and of the policy's
    choice alone."""
    plan = _plan(agents)
    policy = make_policy("chain", plan)
    arbiter = Arbiter()
    arbiter.install(policy, policy.describe())
    per_agent = max(turns // agents, 1)

    async def agent(op: str) -> None:
        for i in range(per_agent):
            async with arbiter.turn(op, float(i)):
                pass

    async def main() -> None:
        await asyncio.gather(*(agent(op) for op in plan.paths["p"]))

    started = time.perf_counter()
    asyncio.run(main())
    elapsed = time.perf_counter() - started
    ready = [ReadyOperator(op, float(i)) for i, op in enumerate(plan.paths["p"])]
    n = 50_000
    t0 = time.perf_counter()
    for _ in range(n):
        policy.choose(0.0, ready)
    choose = (time.perf_counter() - t0) / n
    return {
        "agents": agents,
        "decisions": arbiter.stats.decisions,
        "turn_us": 1e6 * elapsed / arbiter.stats.decisions,
        "decision_us": arbiter.stats.decision_ns / arbiter.stats.decisions / 1000,
        "choose_us": 1e6 * choose,
    }


def _pipeline_rate(bootstrap: str, state_dir: Path, topic: str, count: int, name: str,
                   policy: str) -> dict[str, Any]:  # fmt: skip
    from processors.commands.launcher import WorkerProcess, wait_for_count
    from topics.admin import read_topic

    result = f"{name}-out"
    query_file = state_dir / "bench" / f"{name}.py"
    query_file.parent.mkdir(parents=True, exist_ok=True)
    query_file.write_text(
        QUERY.format(topic=topic, result=result, name=name, p=PARTITIONS, policy=policy)
    )
    worker = WorkerProcess(
        query_file, bootstrap=bootstrap, state_dir=state_dir, worker_id=name, loglevel="warn"
    )
    try:
        seen = wait_for_count(bootstrap, result, count, timeout=600, workers=[worker])
        if seen < count:
            raise RuntimeError(f"pipeline delivered {seen} of {count}; see {worker.log_path}")
        arbiter = worker.status()["scheduling"]["arbiter"]
    finally:
        worker.stop()
    stamps = sorted(r.timestamp_ms for r in read_topic(bootstrap, result))
    rate = (len(stamps) - 1) / max((stamps[-1] - stamps[0]) / 1000.0, 1e-3)
    return {"rate": rate, "decisions": arbiter.get("decisions", 0),
            "decision_ns_avg": arbiter.get("decision_ns_avg", 0.0)}  # fmt: skip


def run_arbiter_bench(records: int = 500_000, kafka: bool = True, repeats: int = 2) -> dict:
    results: dict[str, Any] = {}
    for agents in (6, 24):
        cost = decision_cost(agents)
        _say(
            f"{agents} agents waiting: {cost['turn_us']:.1f} µs per granted turn (decision "
            f"{cost['decision_us']:.1f} µs, Chain's choice {cost['choose_us']:.2f} µs)"
        )
        results[f"in_process_{agents}"] = cost
    results["decision_us"] = results["in_process_6"]["decision_us"]
    results["turn_us"] = results["in_process_6"]["turn_us"]
    results["choose_us"] = results["in_process_6"]["choose_us"]
    if kafka:
        from processors.commands.publish import publish_batch
        from processors.runtime.config import load_settings, resolve_bootstrap
        from processors.workloads.examples import reading_columns
        from topics.admin import ensure_topics
        from topics.avro import load_schema
        from topics.specs import TopicSpec

        settings = load_settings()
        bootstrap = resolve_bootstrap(settings)
        run = f"bench-arbiter-{time.strftime('%Y%m%d-%H%M%S')}"
        topic = f"{run}.readings"
        ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS)])
        _say(f"publishing {records:,} readings to {topic}")
        publish_batch(bootstrap, topic, reading_columns(records, seed=11), load_schema("reading"))
        rates: dict[str, list[float]] = {"off": [], "chain": []}
        runs = []
        for i in range(repeats):
            for policy in ("off", "chain") if i % 2 == 0 else ("chain", "off"):
                out = _pipeline_rate(bootstrap, settings.state_dir, topic, records,
                                     f"{run}-{policy}-{i}", policy)  # fmt: skip
                rates[policy].append(out["rate"])
                runs.append({"policy": policy, **out})
                _say(f"pass-through, scheduling {policy}: {out['rate']:,.0f} records/s "
                     f"({out['decisions']:,} decisions)")  # fmt: skip
        off, chain = statistics.median(rates["off"]), statistics.median(rates["chain"])
        results.update(
            {
                "records": records,
                "pipeline_rate_off": off,
                "pipeline_rate_chain": chain,
                "chain_vs_off": chain / off,
                "pipeline_runs": runs,
            }  # fmt: skip
        )
        _say(f"with the arbiter (Chain) the pipeline keeps {chain / off:.2f} of its rate")
    return results
