"""``streamon demo``: Example 1's network monitoring, live on the embedded broker.

Four routers' packet streams go to four topics (keyed by packet id); one worker runs the
continuous query "total size and number of the packets that every router saw in the last
window" (RANGE windows, a 4-way MJoin on pid, a sum). Some sightings have no recorded size
(a nullable field, null in ``NULL_SIZES`` of the records): the sum ignores them, as SQL does,
and the count counts every joined sighting. The traffic shared between routers
changes phase by phase, so the best probe order of each router's pipeline changes too: the
demo prints the join orders as the worker adapts them, the running totals, and at the end
checks the totals against the same stages replayed in process over the stored records.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.network_query import publish, query_plan, query_text, stored
from processors.physical.fleet import FleetRunner
from processors.runtime.config import load_settings, resolve_bootstrap
from processors.runtime.web_auth import ENV_WEB_TOKEN
from processors.workloads.network import NetworkWorkload, default_phases
from topics.admin import ensure_topics, read_topic
from topics.avro import SchemaStore, decode_single_object
from topics.specs import TopicSpec

PARTITIONS = 4
WINDOW_MS = 60_000
PHASE_MS = 180_000
#: publishing steps per second
TICKS = 10
#: a router that sends nothing for this long (after the worker read all it sent) is not waited
#: for: a tenth of a second between steps leaves a wide margin, and a result that waits for a
#: quiet router waits this long at most
IDLE_TIMEOUT_MS = 1_000
NULL_SIZES = 0.2  # fraction of sightings whose size the router did not record


def _say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def format_orders(orders: Mapping[str, Sequence[str]] | None) -> str:
    """``r0: r1 > r3 > r2; r1: ...``: each router pipeline's probe order, by stream name."""
    if not orders:
        return "(none yet)"
    return "; ".join(f"{name}: {' > '.join(order)}" for name, order in orders.items())


def named_orders(names: Sequence[str], orders: Sequence[Sequence[int]]) -> dict[str, list[str]]:
    """Probe orders given as stream indices (the workload's best orders) by stream name."""
    return {names[i]: [names[j] for j in order] for i, order in enumerate(orders)}


def demo_workload(records: int = 20_000, phases: int = 4) -> NetworkWorkload:
    """The demo's router traffic: about ``records`` sightings over the first ``phases`` of
    :func:`default_phases` (each router's best probe order changes at every phase). A function
    so that the plan page's browser test runs exactly the demo's data, only less of it."""
    schedule = default_phases(4, PHASE_MS)[:phases]
    rate = max(round(records / (len(schedule) * PHASE_MS / 1000) / 2.5), 1)  # ~2.5 sightings each
    return NetworkWorkload(
        packets_per_s=float(rate), duration_ms=len(schedule) * PHASE_MS, phases=schedule, seed=7,
        null_sizes=NULL_SIZES,
    )  # fmt: skip


def demo_query(name: str, prefix: str, result: str) -> str:
    """The demo's query text (CQL): RANGE windows on the four routers' topics ``prefix.r0``..,
    the adaptive 4-way MJoin on pid, the sums into ``result``."""
    return query_text(
        name, prefix, result, partitions=PARTITIONS, window_ms=WINDOW_MS, p=0.2, window_tuples=200,
        nullable_size=True, idle_timeout_ms=IDLE_TIMEOUT_MS,
    )  # fmt: skip


def _orders(worker: WorkerProcess) -> dict[str, Any]:
    try:
        agents = {a["agent"]: a for a in worker.status()["stats"]["agents"]}
    except (OSError, KeyError, ValueError):
        return {}
    plan = agents.get("mjoin", {}).get("plan") or {}
    return {p: stats.get(f"mjoin[{p}]", {}).get("orders") for p, stats in plan.items()}


def _totals(values: tuple[int, int, int]) -> str:
    return f"total_bytes={values[0]}, packets={values[1]} (sized={values[2]})"


def expected_totals(text: str, bootstrap: str, prefix: str) -> tuple[int, int, int]:
    """(total bytes, packets, packets with a size) from the stored records, replayed through
    the same stages on every partition, routed as the worker routes them, each input partition
    idle at the end as the worker sees them once the data stops."""
    plan = query_plan(text)
    fleet = FleetRunner(plan)
    for p, batches in stored(bootstrap, prefix, 4, PARTITIONS, nullable_size=True).items():
        for i, batch in enumerate(batches):
            fleet.push(f"r{i}", p, batch)
    for stream in plan.streams:
        for p in range(PARTITIONS):
            fleet.idle(stream.name, p)
    total = packets = sized = 0
    for (step, _), chain in fleet.chains.items():
        if step != "aggregate":
            continue
        for values in chain.stages[0].current().values():  # type: ignore[attr-defined]
            total += int(values["total_bytes"] or 0)  # None: no size in that partition
            packets += int(values["packets"])
            sized += int(values["sized"])
    return total, packets, sized


def run_demo(records: int = 20_000) -> int:
    settings = load_settings()
    bootstrap = resolve_bootstrap(settings)
    _say(f"broker: {bootstrap}")
    run = time.strftime("%Y%m%d-%H%M%S")
    name = prefix = f"demo-{run}"
    result = f"{prefix}.totals"
    workload = demo_workload(records)
    topics = [TopicSpec(f"{prefix}.{r}", PARTITIONS) for r in workload.stream_names]
    ensure_topics(bootstrap, topics)
    text = demo_query(name, prefix, result)
    query_file = settings.state_dir / "demo" / f"{name}.cql"
    query_file.parent.mkdir(parents=True, exist_ok=True)
    query_file.write_text(text)
    _say("query: SELECT sum(r0.size), count(*) FROM r0..r3 [RANGE 60 s] WHERE all pids equal")
    _say(f"size is nullable: {NULL_SIZES:.0%} of the sightings have none (the sum skips them; "
         "sized = count(r0.size) counts the joined sightings with a size)")  # fmt: skip
    for i, order in enumerate(workload.best_orders()):
        best = named_orders(workload.stream_names, order)
        _say(f"phase {i}: best probe orders {format_orders(best)}")
    worker = WorkerProcess(
        query_file, bootstrap=bootstrap, state_dir=settings.state_dir,
        worker_id=f"demo-worker-{os.getpid()}",
    )  # fmt: skip
    _say(f"started worker {worker.worker_id} (log: {worker.log_path})")
    shown: dict[str, Any] = {}
    try:
        worker.wait_holding([t.name for t in topics], PARTITIONS)  # then publishing starts
        _say("the worker holds every input partition; publishing")
        _say(f"watch it adapt: the plan page is at {worker.page_url()}"
             + (f" (add ?token=... : {ENV_WEB_TOKEN} is set)" if os.environ.get(ENV_WEB_TOKEN)
                else ""))  # fmt: skip
        published, said = 0, 0.0
        # 30 s of event time per second, in small steps as a live source would send them (a
        # second's worth at once would wait for its own processing: about 0.5 s)
        for published, _ in publish(bootstrap, prefix, workload, span_ms=PHASE_MS // 6 // TICKS):
            time.sleep(1.0 / TICKS)
            orders = _orders(worker) if time.monotonic() - said >= 1.0 else None
            if orders and orders != shown:
                shown, said = orders, time.monotonic()
                first = orders.get("0") or next(iter(orders.values()))
                shown_now = format_orders(first)
                _say(f"{published:>7} sightings in; join orders (partition 0) {shown_now}")
        _say(f"published {published} sightings on 4 router topics")
        deadline = time.monotonic() + 120
        want = expected_totals(text, bootstrap, prefix)
        latest: tuple[int, int, int] | None = None
        schema, store = query_plan(text).output_schema, SchemaStore(load=False)
        store.add(schema)
        while time.monotonic() < deadline:
            wait_for_count(bootstrap, result, 1, 5.0, [worker])
            records_out = read_topic(bootstrap, result)
            if records_out:
                last = decode_single_object(records_out[-1].value, schema, store)
                latest = (int(last["total_bytes"] or 0), int(last["packets"]), int(last["sized"]))
                if latest == want:
                    break
            time.sleep(1.0)
        shown_latest = "none" if latest is None else _totals(latest)
        _say(f"latest result: {shown_latest}")
        _say(f"replayed in process:  {_totals(want)}")
        for p, orders in sorted(_orders(worker).items()):
            _say(f"partition {p}: final join orders {format_orders(orders)}")
    finally:
        worker.stop()
    ok = latest == want
    if ok:  # Spark reads the results back; a machine without Java only skips this part
        from processors.commands.analyze import demo_analysis

        out = settings.state_dir / "demo" / f"{name}-analysis"
        ok = demo_analysis(bootstrap, query_file, want[:2], out, _say) is not False
    if ok:
        _explain_measured(bootstrap, query_file)
    _say("OK" if ok else "FAILED")
    _say("the embedded broker keeps running for the next command; `streamon broker stop` stops it")
    return 0 if ok else 1


def _explain_measured(bootstrap: str, query_file: Path) -> None:
    """The cost model's view of the query with what the worker measured (the chosen plan's
    lines of ``streamon explain QUERY --measured``); informative, so a failure is only said."""
    from processors.commands.explain import run_explain, stats_records

    _say(f"cost model (Ayad-Naughton) on the measured statistics: streamon explain {query_file} "
         "--measured")  # fmt: skip
    try:
        text = run_explain(str(query_file), records=stats_records(bootstrap))
    except (ValueError, OSError) as exc:
        _say(f"  explain: {exc}")
        return
    for line in text.splitlines()[:5]:
        _say(f"  {line}" if line else "")
