"""``streamon bench peers``: streamon against Apache Flink, Quix Streams and plain Faust.

Same machine, same data, same queries, one run. Workloads (processors.bench.peers_data):

- ``filters``: 8 conjunctive filters over N readings whose selectivities change halfway;
- ``join3``: a 3-way equi-join of RANGE windows (every pair of tuples less than the RANGE apart);
- ``netmon``: the demo's network-monitoring join (4 routers on pid, 10-minute RANGE windows,
  count and total bytes of the joined sightings);
- ``e2e_filters``: ``filters`` from an input topic to a result topic on the embedded broker
  (processors.bench.peers_e2e).

In process, Flink cannot read Kafka here (its connector jars cannot be installed): it reads the
same tuples from CSV files through its filesystem source into a count-and-checksum aggregate,
and streamon runs its stage over the same tuples as columnar batches. Every system runs as a
subprocess (processors.bench.peers_run) so that rate per core, peak memory and start-up are
measured alike. Quix Streams only reads Kafka: on the joins it runs on a private embedded
broker (processors.bench.peers_quix), and so does a streamon worker (``streamon_broker``,
processors.bench.peers_kafka_joins) for the like-for-like ratio. Results must agree (count and
order-independent checksum); a system that fails is reported with its error, never dropped.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from processors.bench import peers_data as D
from processors.bench.peers_kafka_joins import run_streamon_join
from processors.bench.peers_quix import run_quix_join
from processors.bench.peers_run import run_program
from processors.bench.peers_venv import PINS, PROGRAMS, java_version, peer_python

WORKLOADS = ("filters", "join3", "netmon", "e2e_filters")
JOIN3_RANGE_MS = 3_000  # ~1,000 tuples of each input in a window; a multiple of 3 (no ties)
NETMON_RANGE_MS = 600_000  # the demo's 10 minutes
FIGURES = ("rate", "rate_per_core", "peak_rss_mb", "startup_s")


def _say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def agreement(systems: dict[str, dict[str, Any]], oracle: tuple[int, int] | None = None
              ) -> dict[str, Any]:  # fmt: skip
    """Whether the systems that ran gave the same (count, checksum) as each other and as the
    oracle, if any; a system that ran on other input (plain Faust on a prefix of the topic)
    carries its own ``oracle`` and must match that one."""
    answers: dict[str, tuple[int, int]] = {}
    own: dict[str, bool] = {}
    for name, r in systems.items():
        if "error" in r:
            continue
        answer = (int(r["count"]), int(r["checksum"]) % D.MOD)
        answers[name] = answer
        if r.get("oracle") is not None:
            own[name] = answer == (int(r["oracle"][0]), int(r["oracle"][1]) % D.MOD)
    common = {a for name, a in answers.items() if name not in own}
    if oracle is not None:
        answers["oracle"] = (oracle[0], oracle[1] % D.MOD)
        common.add(answers["oracle"])
    ran = len(answers) - (oracle is not None)
    agree = len(common) <= 1 and all(own.values()) and ran >= 1 and len(answers) > 1
    return {"agree": agree, "answers": answers, "own_oracle_match": own}


def json_keys(workload: str, systems: dict[str, dict[str, Any]], agreed: dict[str, Any],
              kafka_peers: bool = False, on_broker: tuple[str, ...] = ()
              ) -> dict[str, Any]:  # fmt: skip
    """The flat figures of one workload: ``<workload>_<system>_<figure>`` (rate, rate per core,
    peak RSS, start-up), ``<workload>_<system>_error`` for a system that failed,
    ``<workload>_agree`` and ``<workload>_streamon_vs_best_peer`` (None if no peer ran): over
    every peer that ran, wherever it ran. A peer that ran on the broker in a workload that
    streamon ran in process (``on_broker``: Quix on the joins) is flagged
    ``<workload>_<system>_on_broker``,
    ``<workload>_streamon_vs_best_inprocess_peer`` leaves such peers out, and
    ``<workload>_streamon_vs_best_kafka_peer`` compares a streamon worker on the broker
    (``streamon_broker``) with them."""
    out: dict[str, Any] = {f"{workload}_agree": agreed["agree"]}
    for name, r in systems.items():
        if "error" in r:
            out[f"{workload}_{name}_error"] = r["error"]
            out[f"{workload}_{name}_rate"] = None
            continue
        for fig in FIGURES:
            out[f"{workload}_{name}_{fig}"] = r.get(fig)
    peers = [r["rate"] for name, r in systems.items()
             if not name.startswith("streamon") and "error" not in r]  # fmt: skip
    mine = systems.get("streamon", {})
    best = max(peers) if peers else None
    ratio = mine["rate"] / best if best and "error" not in mine and "rate" in mine else None
    out[f"{workload}_streamon_vs_best_peer"] = ratio
    if on_broker:
        for name in on_broker:
            out[f"{workload}_{name}_on_broker"] = True
        local = [
            r["rate"]
            for n, r in systems.items()
            if not n.startswith("streamon") and n not in on_broker and "error" not in r
        ]
        out[f"{workload}_streamon_vs_best_inprocess_peer"] = (
            mine["rate"] / max(local) if local and ratio is not None else None
        )
        kafka = [systems[n]["rate"] for n in on_broker if "error" not in systems.get(n, {})]
        worker = systems.get("streamon_broker", {"error": "not run"})
        out[f"{workload}_streamon_vs_best_kafka_peer"] = (
            worker["rate"] / max(kafka) if kafka and "error" not in worker else None
        )
    if kafka_peers:
        out[f"{workload}_streamon_vs_best_kafka_peer"] = ratio
    return out


def attempt(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``fn()``'s result, or ``{"error": ...}``: a peer that cannot run is reported."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001  (any failure of a peer is a result to report)
        _say(f"  {name} failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        return {"error": f"{type(exc).__name__}: {exc}"[:2000]}


class InProcess:
    """The in-process workloads: files in ``work``, streamon and Flink as subprocesses."""

    def __init__(self, work: Path, peer_py: Path | None, timeout: float) -> None:
        self.work, self.peer_py, self.timeout = work, peer_py, timeout

    def _streamon(self, spec: dict[str, Any]) -> dict[str, Any]:
        path = self.work / f"streamon-{spec['workload']}.json"
        path.write_text(json.dumps(spec))
        argv = [sys.executable, "-m", "processors.bench.peers_streamon", str(path)]
        return run_program(argv, self.timeout, self.work / f"streamon-{spec['workload']}.log")

    def _flink(self, workload: str, spec: dict[str, Any]) -> dict[str, Any]:
        if self.peer_py is None:
            raise RuntimeError("no peer virtualenv")
        path = self.work / f"flink-{workload}.json"
        path.write_text(json.dumps(spec))
        argv = [str(self.peer_py), str(PROGRAMS / "flink_job.py"), str(path)]
        return run_program(argv, self.timeout, self.work / f"flink-{workload}.log")

    def filters(self, n: int) -> dict[str, Any]:
        batch = D.filters_batch(n)
        mask = D.filter_mask(batch)
        c = batch.columns
        oracle = (int(mask.sum()), D.reading_checksum(c["ts"][mask], c["sensor_id"][mask]))
        csv = self.work / "filters.csv"
        D.write_filters_csv(batch, csv)
        del batch, c, mask
        chk = f"COUNT(*) AS n, SUM({D.flink_mod('ts * 31 + sensor_id')}) AS chk"
        columns = [["ts", "BIGINT"], ["sensor_id", "BIGINT"], ["temperature", "DOUBLE"],
                   ["humidity", "FLOAT"], ["site", "STRING"], ["ok", "BOOLEAN"]]  # fmt: skip
        flink = {"records": n, "mode": "streaming",
                 "tables": [{"name": "readings", "path": str(csv), "columns": columns}],
                 "query": f"SELECT {chk} FROM readings WHERE {D.flink_filter_where()}",
                 "scan_query": f"SELECT {chk} FROM readings"}  # fmt: skip
        systems = {
            "streamon": attempt("streamon", lambda: self._streamon(
                {"workload": "filters", "n": n, "seed": 5})),
            "flink": attempt("flink", lambda: self._flink("filters", flink)),
        }  # fmt: skip
        return {"systems": systems, "oracle": oracle, "records": n,
                "selectivity": oracle[0] / n}  # fmt: skip

    def join(self, workload: str, n: int) -> dict[str, Any]:
        if workload == "join3":
            inputs, names, rng = D.join3_inputs(n, seed=3), ["s0", "s1", "s2"], JOIN3_RANGE_MS
            sql, seed = D.flink_join3_sql(rng), 3
        else:
            inputs, names, rng = (
                D.netmon_inputs(n, seed=0),
                ["r0", "r1", "r2", "r3"],
                NETMON_RANGE_MS,
            )
            sql, seed = D.flink_netmon_sql(rng), 0
        tables = []
        for name, cols in zip(names, inputs, strict=True):
            path = self.work / f"{workload}-{name}.csv"
            D.write_columns_csv(cols, path)
            tables.append({"name": name, "path": str(path), "rowtime": True,
                           "columns": [[c, "BIGINT"] for c in cols]})  # fmt: skip
        records = sum(len(c["ts"]) for c in inputs)
        flink = {"records": records, "mode": "streaming", "tables": tables, "query": sql}
        systems = {
            "streamon": attempt("streamon", lambda: self._streamon(
                {"workload": workload, "n": n, "range_ms": rng, "seed": seed})),
            "flink": attempt("flink", lambda: self._flink(workload, flink)),
            "quix": attempt("quix", lambda: run_quix_join(
                workload, tables, rng, records, self.peer_py, self.work, self.timeout)),
        }  # fmt: skip
        counts = [r["count"] for r in systems.values() if "error" not in r]
        systems["streamon_broker"] = attempt("streamon_broker", lambda: run_streamon_join(
            workload, inputs, rng, counts[0] if counts else -1, self.timeout))  # fmt: skip
        return {"systems": systems, "oracle": None, "records": records, "range_ms": rng,
                "on_broker": ["quix"]}  # fmt: skip


def _report(workload: str, res: dict[str, Any]) -> None:
    for name, r in res["systems"].items():
        if "error" in r:
            _say(f"  {workload} {name}: ERROR {r['error'].splitlines()[0]}")
            continue
        per_core = r.get("rate_per_core")
        _say(f"  {workload} {name}: {r['rate']:,.0f} records/s "
             f"({f'{per_core:,.0f}' if per_core else '?'}/core), count {r['count']:,}, "
             f"peak RSS {r['peak_rss_mb']:,.0f} MB, start-up {r['startup_s']:.1f} s")  # fmt: skip


def run_peers_bench(
    records: int = 2_000_000, join_records: int = 1_000_000, netmon_packets: int = 500_000,
    e2e_records: int = 1_000_000, faust_records: int = 50_000, only: str | None = None,
    timeout: float = 1200.0,
) -> dict[str, Any]:  # fmt: skip
    """Every workload (or ``only`` those, comma-separated), every system; see the module doc."""
    chosen = [w for w in WORKLOADS if only is None or w in only.split(",")]
    peer_py: Path | None = None
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "pins": list(PINS),
                               "java": java_version(), "workloads": {}}  # fmt: skip
    try:
        peer_py = peer_python()
    except Exception as exc:  # noqa: BLE001  (every peer then reports this error)
        results["peer_venv_error"] = f"{type(exc).__name__}: {exc}"
    with tempfile.TemporaryDirectory(prefix="streamon-bench-peers-") as tmp:
        work = Path(tmp)
        inproc = InProcess(work, peer_py, timeout)
        for workload in chosen:
            _say(f"workload {workload}")
            if workload == "filters":
                res = inproc.filters(records)
            elif workload == "join3":
                res = inproc.join("join3", join_records)
            elif workload == "netmon":
                res = inproc.join("netmon", netmon_packets)
            else:
                from processors.bench.peers_e2e import run_e2e_filters

                res = run_e2e_filters(work, peer_py, e2e_records, faust_records, timeout)
            agreed = agreement(res["systems"], res.get("oracle"))
            res["agreement"] = agreed
            _report(workload, res)
            _say(f"  {workload}: results agree: {agreed['agree']} {agreed['answers']}")
            results.update(json_keys(workload, res["systems"], agreed,
                                     kafka_peers=workload == "e2e_filters",
                                     on_broker=tuple(res.get("on_broker", ()))))  # fmt: skip
            results["workloads"][workload] = res
    from processors.bench.machine import machine_info

    results["machine"] = machine_info()
    return results
