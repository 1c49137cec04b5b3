"""``streamon bench mjoin``: the join's probe kernel, the MJoin stage in process, and end to end.

- ``probes_per_s``: existence probes of the multi-map index (10,000 keys), in one kernel call
  per 65,536 probes, lifetimes checked;
- ``star4_tuples_per_s``: input delta tuples (inserts and deletes) per second through a 4-way
  star MJoin (natural join on one attribute), A-Greedy on, each input a ROWS 10,000 window whose
  keys are drawn from a domain of 14,427 values, so that a probe finds a match with probability
  1/2: the paper's default selectivity (Table 1: 0.5) for every join;
- ``tree_left_deep_tuples_per_s``, ``tree_bushy_tuples_per_s``: the same star workload through
  :class:`JoinTreeStage` as ``((s0, s1), s2), s3`` and ``(s0, s1), (s2, s3)``, next to the MJoin
  on the same deltas in the same run (``tree_star4_mjoin_tuples_per_s``; best of three alternating
  rounds each); ``tree_vs_mjoin_ratio_left_deep``, ``tree_vs_mjoin_ratio_bushy``: tree / MJoin;
- ``tree_chain3_tuples_per_s``: a 3-way chain ``s0.a = s1.a, s1.b = s2.b`` (ROWS 10,000 windows;
  ``a`` from 1,000,000 values, so s0 join s1 holds ~100 tuples; ``b`` from 200, so a probe of s1
  or s2 on ``b`` finds ~50) through the tree ``(s0, s1), s2``, which keeps that small join,
  next to the MJoin (``chain3_mjoin_tuples_per_s``), whose arrivals at s2 expand ~50 s1 matches
  and probe s0 for each; ``tree_vs_mjoin_ratio_chain3``; and the tree ``s0, (s1, s2)``, which
  keeps the large join (~500,000 tuples): ``tree_chain3_large_tuples_per_s``,
  ``tree_vs_mjoin_ratio_chain3_large`` (one round; the others best of three). Before timing,
  every stage runs the warm-up deltas and must give the MJoin's number of result rows (and of
  inserts among them), as it must in every timed run;
- ``eager_call_us_5``, ``eager_call_us_100``: microseconds per call of a small join
  (:mod:`processors.bench.mjoin_calls`);
- ``e2e_tuples_per_s`` (unless ``--no-kafka``): input records per second through Kafka and one
  worker running the network-monitoring join, next to the pass-through pipeline in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from processors.core.batch import INSERT, ROW_ID, Batch
from processors.core.join_tree import JoinTree, tree_text
from processors.core.joins.graph import Side
from processors.core.ordering.config import OrderingConfig
from processors.kernels.multimap import MultiMap
from processors.stages.join_store import ALIVE
from processors.stages.join_tree_stage import JoinTreeStage
from processors.stages.mjoin_stage import MJoinStage

WINDOW = 10_000
DOMAIN = 14_427  # 1 - (1 - 1/D)^W = 0.5: half of the probes find a match
CHAIN_A = 1_000_000  # s0.a = s1.a: ~1% of the probes match, s0 join s1 holds ~W^2/A = 100
CHAIN_B = 200  # s1.b = s2.b: a probe finds ~W/B = 50 matches, s1 join s2 holds ~500,000


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


def rows_window_deltas(
    keys: np.ndarray | dict[str, np.ndarray], ts: np.ndarray, window: int
) -> Batch:
    """The delta stream of a ROWS ``window`` over an append-only stream (numpy, for the bench):
    tuple i enters at ts[i]; tuple i - window leaves just before it. ``keys`` is column ``a``,
    or the columns by name."""
    cols = keys if isinstance(keys, dict) else {"a": keys}
    n = len(ts)
    rid = np.arange(n, dtype=np.int64)
    gone = np.arange(max(n - window, 0), dtype=np.int64)
    order = np.concatenate([2 * rid + 1, 2 * (gone + window)])
    sign = np.concatenate([np.ones(n, np.int8), -np.ones(len(gone), np.int8)])
    which = np.concatenate([rid, gone])
    at = np.concatenate([ts, ts[gone + window]])
    s = np.argsort(order, kind="stable")
    return Batch({ROW_ID: which[s], **{c: v[which[s]] for c, v in cols.items()}}, sign[s], at[s])


def star_inputs(n_inputs: int, tuples: int, seed: int = 1) -> list[Batch]:
    """Delta streams of ``n_inputs`` windowed inputs, timestamps interleaved round robin."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_inputs):
        keys = rng.integers(0, DOMAIN, tuples).astype(np.int64)
        ts = np.arange(tuples, dtype=np.int64) * n_inputs + i
        out.append(rows_window_deltas(keys, ts, WINDOW))
    return out


def _drive(stage: MJoinStage, inputs: list[Batch], batch: int) -> tuple[int, int, int]:
    """Feed ``inputs`` to ``stage`` ``batch`` deltas of each input at a time, round robin, then
    flush: result rows, inserts among them, and ns spent in the stage."""
    results, inserts, spent, pos = 0, 0, 0, 0
    longest = max(len(b) for b in inputs)
    while pos < longest:
        for i, b in enumerate(inputs):
            if pos < len(b):
                part = b.slice(pos, min(pos + batch, len(b)))
                t0 = time.perf_counter_ns()
                stage.push(i, part)
                out = stage.release()
                spent += time.perf_counter_ns() - t0
                results += sum(len(o) for o in out)
                inserts += sum(int(np.count_nonzero(o.sign == INSERT)) for o in out)
        pos += batch
    t0 = time.perf_counter_ns()
    out = stage.flush()
    spent += time.perf_counter_ns() - t0
    results += sum(len(o) for o in out)
    inserts += sum(int(np.count_nonzero(o.sign == INSERT)) for o in out)
    return results, inserts, spent


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
    results, _, spent = _drive(stage, inputs, batch)
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


def chain_inputs(tuples: int, seed: int = 1) -> list[Batch]:
    """Delta streams of the 3-way chain ``s0(a), s1(a, b), s2(b)``, ROWS ``WINDOW`` each."""
    rng = np.random.default_rng(seed)
    domains: list[dict[str, int]] = [{"a": CHAIN_A}, {"a": CHAIN_A, "b": CHAIN_B}, {"b": CHAIN_B}]
    out = []
    for i, cols in enumerate(domains):
        keys = {c: rng.integers(0, d, tuples).astype(np.int64) for c, d in cols.items()}
        ts = np.arange(tuples, dtype=np.int64) * len(domains) + i
        out.append(rows_window_deltas(keys, ts, WINDOW))
    return out


def tree_vs_mjoin(
    names: Sequence[str],
    predicates: Sequence[tuple[Side, Side]],
    trees: dict[str, JoinTree],
    inputs: list[Batch],
    warm_inputs: list[Batch],
    rounds: int = 1,
    once: Sequence[str] = (),
    batch: int = 16_384,
    seed: int = 1,
) -> dict[str, Any]:
    """Input deltas per second of stage time through the MJoin and through each of ``trees``
    (by label), all on ``inputs``, in ``rounds`` alternating rounds (the best round counts;
    the trees labelled in ``once`` run in the first round only, for slow ones).
    First every stage runs ``warm_inputs`` (compiling its kernels), and each must give the
    MJoin's number of result rows and inserts, there and in every timed run."""
    make: dict[str, Callable[[], MJoinStage]] = {
        "mjoin": lambda: MJoinStage(names, predicates, OrderingConfig(seed=seed))
    }
    for label, tree in trees.items():
        make[label] = lambda t=tree: JoinTreeStage(names, predicates, t, OrderingConfig(seed=seed))
    warm = {label: _drive(new(), warm_inputs, batch)[:2] for label, new in make.items()}
    _same_results(warm, "the warm-up deltas")
    total = sum(len(b) for b in inputs)
    rates: dict[str, list[float]] = {label: [] for label in make}
    counts: dict[str, tuple[int, int]] = {}
    stats: dict[str, dict[str, Any]] = {}
    for r in range(rounds):
        for label, new in make.items():
            if r and label in once:
                continue
            stage = new()
            results, inserts, spent = _drive(stage, inputs, batch)
            rates[label].append(total / (spent / 1e9))
            counts[label] = (results, inserts)
            stats[label] = stage.stats()
        _same_results(counts, "the timed deltas")
    out: dict[str, Any] = {"deltas": total, "results": counts["mjoin"][0]}
    for label, rs in rates.items():
        out[label] = {"tuples_per_s": max(rs), "runs": rs}
        if label == "mjoin":
            out[label]["probes_per_delta"] = stats[label]["probes_per_delta"]
        else:
            out[label]["tree"] = tree_text(trees[label])
            out[label]["intermediate_tuples"] = stats[label]["intermediate_tuples"]
            out[label]["intermediate_out"] = stats[label]["intermediate_out"]
            out[label]["vs_mjoin"] = max(rs) / max(rates["mjoin"])
    return out


def _same_results(counts: dict[str, tuple[int, int]], what: str) -> None:
    for label, got in counts.items():
        if got != counts["mjoin"]:
            raise AssertionError(
                f"bench: {label} gave {got[0]:,} result rows ({got[1]:,} inserts) on {what}, "
                f"the MJoin {counts['mjoin'][0]:,} ({counts['mjoin'][1]:,})"
            )


def join_tree_rates(
    star_tuples: int = 400_000, chain_tuples: int = 200_000, seed: int = 1
) -> dict[str, Any]:
    """The JoinTreeStage against the MJoin on the 4-way star and on the 3-way chain, with the
    figures ``run_mjoin_bench`` reports."""
    names = [f"s{i}" for i in range(4)]
    _say(f"4-way star: MJoin against join trees, {star_tuples:,} tuples per input, 3 rounds")
    star = tree_vs_mjoin(
        names,
        [((0, "a"), (i, "a")) for i in range(1, 4)],
        {"left_deep": ((("s0", "s1"), "s2"), "s3"), "bushy": (("s0", "s1"), ("s2", "s3"))},
        star_inputs(4, star_tuples, seed),
        star_inputs(4, 2 * WINDOW, seed + 1),
        rounds=3,
        seed=seed,
    )
    _report(star)
    _say(f"3-way chain: MJoin against join trees, {chain_tuples:,} tuples per input, 3 rounds")
    chain = tree_vs_mjoin(
        names[:3],
        [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))],
        {"small": (("s0", "s1"), "s2"), "large": ("s0", ("s1", "s2"))},
        chain_inputs(chain_tuples, seed),
        chain_inputs(2 * WINDOW, seed + 1),
        rounds=3,
        once=["large"],
        seed=seed,
    )
    _report(chain)
    return {
        "tree_star4_mjoin_tuples_per_s": star["mjoin"]["tuples_per_s"],
        "tree_left_deep_tuples_per_s": star["left_deep"]["tuples_per_s"],
        "tree_bushy_tuples_per_s": star["bushy"]["tuples_per_s"],
        "tree_vs_mjoin_ratio_left_deep": star["left_deep"]["vs_mjoin"],
        "tree_vs_mjoin_ratio_bushy": star["bushy"]["vs_mjoin"],
        "chain3_mjoin_tuples_per_s": chain["mjoin"]["tuples_per_s"],
        "tree_chain3_tuples_per_s": chain["small"]["tuples_per_s"],
        "tree_vs_mjoin_ratio_chain3": chain["small"]["vs_mjoin"],
        "tree_chain3_large_tuples_per_s": chain["large"]["tuples_per_s"],
        "tree_vs_mjoin_ratio_chain3_large": chain["large"]["vs_mjoin"],
        "join_tree_star4": star,
        "join_tree_chain3": chain,
    }


def _report(compared: dict[str, Any]) -> None:
    for label, fig in compared.items():
        if isinstance(fig, dict):
            shown = f"tree {fig['tree']}, ratio {fig['vs_mjoin']:.2f}" if "tree" in fig else "MJoin"
            _say(f"  {label}: {fig['tuples_per_s']:,.0f} input deltas/s ({shown})")
    _say(f"  {compared['results']:,} results each, same count from every stage")


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
    results.update(join_tree_rates(tuples, seed=1))
    from processors.bench.mjoin_calls import eager_call_costs

    _say("the eager 3-way join of bench latency, a call of 5 and of 100 tuples")
    results.update(calls := eager_call_costs())
    _say("  " + ", ".join(f"{k} {v:.0f}" for k, v in calls.items()))
    if kafka:
        from processors.bench.mjoin_e2e import network_vs_passthrough

        _say("end to end through Kafka: the network-monitoring join against pass-through")
        e2e = network_vs_passthrough()
        results.update(e2e)
    from processors.bench.machine import machine_info

    results["machine"] = machine_info()
    return results
