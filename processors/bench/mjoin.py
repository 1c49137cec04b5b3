"""``streamon bench mjoin``: the join's probe kernel, the MJoin stage in process, and end to end.

- ``probes_per_s``: existence probes of the multi-map index (10,000 keys), in one kernel call
  per 65,536 probes, lifetimes checked;
- ``star4_tuples_per_s``: input delta tuples (inserts and deletes) per second through a 4-way
  star MJoin (natural join on one attribute), A-Greedy on, each input a ROWS 10,000 window whose
  keys are drawn from a domain of 14,427 values, so that a probe finds a match with probability
  1/2: the paper's default selectivity (Table 1: 0.5) for every join;
- ``e2e_tuples_per_s`` (unless ``--no-kafka``): input records per second through Kafka and one
  worker running the network-monitoring join, next to the pass-through pipeline in the same run.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from processors.core.batch import ROW_ID, Batch
from processors.core.ordering.config import OrderingConfig
from processors.kernels.multimap import MultiMap
from processors.stages.join_store import ALIVE
from processors.stages.mjoin_stage import MJoinStage

WINDOW = 10_000
DOMAIN = 14_427  # 1 - (1 - 1/D)^W = 0.5: half of the probes find a match


def _say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def probe_rate(keys: int = 10_000, probes: int = 4_000_000, seed: int = 1) -> float:
    """Existence probes per second of the multi-map kernel."""
    rng = np.random.default_rng(seed)
    index = MultiMap(keys)
    slots = np.arange(keys, dtype=np.int64)
    index.insert(rng.integers(0, 2 * keys, keys), slots)
    born = np.zeros(keys, np.int64)
    died = np.full(keys, ALIVE, np.int64)
    query = rng.integers(0, 2 * keys, 65_536)
    gen = np.ones(len(query), np.int64)
    index.exists(born, died, query, gen)  # compile
    done, spent = 0, 0
    while done < probes:
        t0 = time.perf_counter_ns()
        index.exists(born, died, query, gen)
        spent += time.perf_counter_ns() - t0
        done += len(query)
    return done / (spent / 1e9)


def rows_window_deltas(keys: np.ndarray, ts: np.ndarray, window: int) -> Batch:
    """The delta stream of a ROWS ``window`` over an append-only stream (numpy, for the bench):
    tuple i enters at ts[i]; tuple i - window leaves just before it."""
    n = len(keys)
    rid = np.arange(n, dtype=np.int64)
    gone = np.arange(max(n - window, 0), dtype=np.int64)
    order = np.concatenate([2 * rid + 1, 2 * (gone + window)])
    sign = np.concatenate([np.ones(n, np.int8), -np.ones(len(gone), np.int8)])
    which = np.concatenate([rid, gone])
    at = np.concatenate([ts, ts[gone + window]])
    s = np.argsort(order, kind="stable")
    return Batch({ROW_ID: which[s], "a": keys[which[s]]}, sign[s], at[s])


def star_inputs(n_inputs: int, tuples: int, seed: int = 1) -> list[Batch]:
    """Delta streams of ``n_inputs`` windowed inputs, timestamps interleaved round robin."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_inputs):
        keys = rng.integers(0, DOMAIN, tuples).astype(np.int64)
        ts = np.arange(tuples, dtype=np.int64) * n_inputs + i
        out.append(rows_window_deltas(keys, ts, WINDOW))
    return out


def star_rate(
    n_inputs: int = 4, tuples: int = 400_000, batch: int = 16_384, seed: int = 1
) -> dict[str, Any]:
    """Input deltas per second of stage time through an n-way star MJoin."""
    inputs = star_inputs(n_inputs, tuples, seed)
    names = [f"s{i}" for i in range(n_inputs)]
    predicates = [((0, "a"), (i, "a")) for i in range(1, n_inputs)]
    warm = MJoinStage(names, predicates, OrderingConfig(seed=seed))
    for i, b in enumerate(star_inputs(n_inputs, 2 * WINDOW, seed + 1)):
        warm.push(i, b)
    warm.flush()  # compiles every kernel
    stage = MJoinStage(names, predicates, OrderingConfig(seed=seed))
    total = sum(len(b) for b in inputs)
    results = 0
    spent = 0
    pos = 0
    longest = max(len(b) for b in inputs)
    while pos < longest:
        for i, b in enumerate(inputs):
            if pos < len(b):
                part = b.slice(pos, min(pos + batch, len(b)))
                t0 = time.perf_counter_ns()
                stage.push(i, part)
                results += sum(len(o) for o in stage.release())
                spent += time.perf_counter_ns() - t0
        pos += batch
    t0 = time.perf_counter_ns()
    results += sum(len(o) for o in stage.flush())
    spent += time.perf_counter_ns() - t0
    stats = stage.stats()
    return {
        "inputs": n_inputs,
        "deltas": total,
        "results": results,
        "tuples_per_s": total / (spent / 1e9),
        "probes_per_delta": stats["probes_per_delta"],
        "orders": stats["orders"],
        "changes_total": stats["changes_total"],
    }


def run_mjoin_bench(tuples: int = 400_000, kafka: bool = True) -> dict[str, Any]:
    _say("multi-map probe kernel")
    probes = probe_rate()
    _say(f"  {probes:,.0f} probes/s")
    _say(f"4-way star MJoin in process, {tuples:,} tuples per input")
    star = star_rate(4, tuples)
    _say(f"  {star['tuples_per_s']:,.0f} input deltas/s ({star['results']:,} results)")
    results: dict[str, Any] = {
        "probes_per_s": probes,
        "star4_tuples_per_s": star["tuples_per_s"],
        "star4": star,
    }
    if kafka:
        from processors.bench.mjoin_e2e import network_vs_passthrough

        _say("end to end through Kafka: the network-monitoring join against pass-through")
        e2e = network_vs_passthrough()
        results.update(e2e)
    from processors.bench.machine import machine_info

    results["machine"] = machine_info()
    return results
