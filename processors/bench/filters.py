"""``streamon bench filters``: how fast the adaptive filter stage runs, and what adapting costs.

In process, on the Section 9 workload (n filters, each one probe of a 10,000-entry hash index):

Each A-Greedy figure is measured for A-Greedy+ (``agreedy``, the default) and, under keys
``agreedy_exact_*``, for the paper's A-Greedy exactly (``agreedy_exact``), in the same run.

- ``stage_tuples_per_s``: n = 8, A-Greedy+ with Table 1 defaults, stage time only (the
  thread's CPU time: the machine's cores are shared);
- ``agreedy_overhead_fraction``: the share of that stage time spent profiling and re-optimizing
  (profile tuples, window, view, violations: Table 2's rows other than tuple processing), the
  median over rounds of 16 batches, A-Greedy+'s profiling cycle at p's floor
  (``overhead_all_batches``: over all of them);
- ``optimal_gap``: for n = 2..6, the largest 1 - rate(A-Greedy) / rate(Optimal) after
  convergence, where Optimal runs the exact best order (from the workload's truth) with no
  profiling (``optimal_gap_to_10``: n = 2..10; ``optimal_gap_by_n``: each n). Each
  algorithm and an Optimal stage of its own process the same batches in turns balanced for
  carry-over and batch parity, in several replicates (see :func:`optimal_gap`);
  ``gap_all_batches`` is over all batches. Optimal against a second Optimal stage, measured
  the same way, is an A/A control: ``optimal_gap_noise_by_n`` (the largest magnitude:
  ``optimal_gap_noise``, n = 2..6) is what the measure reads where there is no difference;
- ``settle_tuples_median``: tuples to settle after a change, the median over the 8 random
  changes of Figs 16-18 (:mod:`processors.bench.filters_settle` defines settling);
- ``agent_vs_passthrough`` (unless ``--no-kafka``): end to end through Kafka, the filter query's
  rate over the pass-through pipeline's, measured in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from processors.bench.machine import machine_info
from processors.core.ordering.adaptive_rate import FLOOR_EVERY
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.static import optimal_order, order_cost
from processors.core.predicates import InIndex
from processors.stages.filter_stage import FilterStage
from processors.workloads.filters import FilterWorkload, FilterWorkloadRun

# a round spans A-Greedy+'s profiling cycle at p's floor (one batch in FLOOR_EVERY): rounds of
# six batches mostly held no profiled batch, and their median overhead read 0
ROUND_BATCHES = FLOOR_EVERY
STAGE_RATE_TUPLES_PER_TUPLE = 4  # stage_rate's tuples: 16M at --tuples 4M (60 rounds)
ALGORITHMS = ("agreedy", "agreedy_exact")  # A-Greedy+ (the default) and the paper's, exactly
MAX_GAP_N = 10
# Batches are timed in this thread's CPU time: the machine's two cores are shared, and wall
# time would count the moments another process had ours. (The stage's own breakdown is in
# wall time; the medians over rounds keep rounds with such moments from deciding.)
_cpu_ns = time.thread_time_ns


def _say(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def workload_predicates(run: FilterWorkloadRun) -> list[InIndex]:
    """One index-probe filter per workload filter, probing its cost's number of times."""
    return [
        InIndex(column, index, probes=probes, name=f"F{i + 1}")
        for i, (column, index, probes) in enumerate(
            zip(run.column_names, run.indexes, run.probes, strict=True)
        )
    ]


def stage_rate(
    n: int = 8, tuples: int = 4_000_000, batch: int = 65_536, seed: int = 1, **ordering: Any
) -> dict[str, Any]:
    """Tuples per second of stage time, and the stage's breakdown, for one configuration."""
    run = FilterWorkloadRun(FilterWorkload(n=n, window_rate=0.0, seed=seed))
    stage = FilterStage(workload_predicates(run), OrderingConfig(seed=seed, **ordering))
    for _ in range(8):  # warm-up: compile, and let the order converge
        stage.process(run.next_batch(batch)[0])
    stage_ns = 0
    done = 0
    base = dict(stage.ns)
    rounds: list[float] = []  # overhead share per round of ROUND_BATCHES batches
    mark = dict(stage.ns)
    while done < tuples:
        b, _ = run.next_batch(batch)
        t0 = _cpu_ns()
        stage.process(b)
        stage_ns += _cpu_ns() - t0
        done += len(b)
        if done // batch % ROUND_BATCHES == 0 or done >= tuples:
            part = {k: stage.ns[k] - mark[k] for k in stage.ns}
            rounds.append(1.0 - part["tuple_processing"] / sum(part.values()))
            mark = dict(stage.ns)
    parts = {k: stage.ns[k] - base[k] for k in stage.ns}
    total = sum(parts.values())
    return {
        "n": n,
        "tuples": done,
        "tuples_per_s": done / (stage_ns / 1e9),
        # median over rounds (see optimal_gap); over all batches as overhead_all_batches
        "overhead_fraction": float(np.median(rounds)),
        "overhead_all_batches": (total - parts["tuple_processing"]) / total if total else 0.0,
        "overhead_rounds": rounds,
        "breakdown_percent": {k: 100.0 * v / total for k, v in parts.items()},
        "evaluations_per_tuple": stage.stats()["evaluations_per_tuple"],
        "order": stage.order_names,
    }


def balanced_turns(k: int) -> list[list[int]]:
    """Orders in which ``k`` stages take their turns on successive batches, balanced for
    carry-over (a Williams design): each stage comes at each place in the turn equally often
    and right after each other stage equally often. Which stage ran just before matters here:
    a stage that follows one with the same order finds the batch's selections and indexes in
    cache (an A/A control of Optimal against itself, in a fixed cycle, read -2% to -10%)."""
    first = [0]
    for i in range(1, k):
        first.append((i + 1) // 2 if i % 2 else k - i // 2)
    rows = [[(f + r) % k for f in first] for r in range(k)]
    return rows if k % 2 == 0 else rows + [row[::-1] for row in rows]


def turns_both_parities(k: int) -> list[list[int]]:
    """:func:`balanced_turns`, then the same rows backwards: each row also comes on batches of
    both parities (k = 2: AB BA BA AB), which differ in cost when a workload alternates."""
    rows = balanced_turns(k)
    return rows + rows[::-1]


GAP_REPLICATES = 6  # pairs of fresh stages per algorithm and n (see optimal_gap)
GAP_TUPLES_PER_STAGE_TUPLE = 24  # optimal_gap's tuples per algorithm: 96M at --tuples 4M
GAP_WARM_BATCHES = 8


def _gap_pair(
    n: int, seed: int, make: Callable[[list[InIndex]], FilterStage], best: list[int],
    tuples: int, batch: int, optimal_first: bool,
) -> dict[str, Any]:  # fmt: skip
    """One replicate of :func:`optimal_gap`: a fresh stage from ``make`` and a fresh Optimal
    stage take turns (AB, BA) on the same batches; the gap per round of two batches. Which of
    the two is built first (and so where its buffers lie) alternates between replicates."""
    run = FilterWorkloadRun(FilterWorkload(n=n, window_rate=0.0, seed=seed))
    run.next_batch(200_000)  # the sample the optimal order was found on
    predicates = workload_predicates(run)

    def optimal() -> FilterStage:
        return FilterStage(predicates, OrderingConfig("fixed"), initial_order=best)

    if optimal_first:
        second = optimal()
        pair = (make(predicates), second)
    else:
        pair = (make(predicates), optimal())
    for _ in range(GAP_WARM_BATCHES):
        b, _ = run.next_batch(batch)
        for stage in pair:
            stage.process(b)
    base = dict(pair[0].ns)
    spent, in_round, rounds = [0, 0], [0, 0], []
    turns = turns_both_parities(2)  # AB BA BA AB: each first on even and odd batches alike
    done = turn = 0
    while done < tuples:
        b, _ = run.next_batch(batch)
        for i in turns[turn % 4]:
            t0 = _cpu_ns()
            pair[i].process(b)
            took = _cpu_ns() - t0
            spent[i] += took
            in_round[i] += took
        turn += 1
        done += len(b)
        if turn % 4 == 0 or done >= tuples:
            rounds.append(1.0 - in_round[1] / in_round[0])
            in_round = [0, 0]
    stage = pair[0]
    parts = {k: stage.ns[k] - base[k] for k in base}
    total = sum(parts.values())
    return {
        "gap": float(np.median(rounds)),
        "gap_all_batches": 1.0 - spent[1] / spent[0],
        "round_gaps": rounds,
        "tuples_per_s": done / (spent[0] / 1e9),
        "optimal_tuples_per_s": done / (spent[1] / 1e9),
        "overhead_fraction": 1 - parts["tuple_processing"] / total if total else 0.0,
        "stage": stage,
    }


def optimal_gap(
    n: int,
    tuples: int = 2_000_000,
    batch: int = 65_536,
    seed: int = 1,
    algorithms: tuple[str, ...] = ALGORITHMS,
    replicates: int = GAP_REPLICATES,
) -> dict[str, Any]:
    """Each A-Greedy version against the optimal fixed order on the same batches, after
    convergence. Returns A-Greedy+'s figures under the old keys and each algorithm's under
    ``by_algorithm``.

    Each algorithm is measured in pairs with an Optimal stage of its own, the two taking
    turns on every batch, AB BA BA AB: the stage that runs second on a batch finds it in
    cache (about 30% faster), and batches of even and odd number differ in cost, so each goes
    first on as many batches of each parity (turns in a fixed rotation of several stages
    left the A/A control at up to 2%). A pair of fresh stages is a replicate (which one is
    built first alternates); the gap is the median over ``replicates`` of each one's median
    over rounds of four batches. ``tuples`` is per algorithm, split over the replicates.
    Measured: the A/A control reads within +-0.003 at n = 2..10 (docs/benchmarks.md)."""
    run = FilterWorkloadRun(FilterWorkload(n=n, window_rate=0.0, seed=seed))
    # the truth of a large sample gives the exact optimal order (unit costs: one probe each)
    sample, passes = run.next_batch(200_000)
    best, _ = optimal_order(~passes)
    drops = ~passes
    makers: dict[str, Callable[[list[InIndex]], FilterStage]] = {
        a: (lambda preds, a=a: FilterStage(preds, OrderingConfig(a, seed=seed)))  # type: ignore[misc]
        for a in algorithms
    }
    # the A/A control: Optimal against Optimal, measured like the others
    makers["twin"] = lambda preds: FilterStage(preds, OrderingConfig("fixed"), initial_order=best)
    each = max(tuples // replicates, batch)
    by: dict[str, dict[str, Any]] = {}
    for a, make in makers.items():
        reps = [_gap_pair(n, seed, make, best, each, batch, r % 2 == 1) for r in range(replicates)]
        stages = [r.pop("stage") for r in reps]
        by[a] = {
            "gap": float(np.median([r["gap"] for r in reps])),
            "replicate_gaps": [r["gap"] for r in reps],
            "gap_all_batches": float(np.median([r["gap_all_batches"] for r in reps])),
            "round_gaps": [g for r in reps for g in r["round_gaps"]],
            "tuples_per_s": float(np.median([r["tuples_per_s"] for r in reps])),
            "optimal_tuples_per_s": float(np.median([r["optimal_tuples_per_s"] for r in reps])),
            "overhead_fraction": float(np.median([r["overhead_fraction"] for r in reps])),
            "order_cost_ratio": max(order_cost(s.order, drops) for s in stages)
            / order_cost(best, drops),
            "order": stages[0].order_names,
            "changes": stages[0].changes_total,
            "profile_probability": stages[0].mean_profile_probability,
        }
    twin = by.pop("twin")
    main = by[algorithms[0]]
    return {
        "n": n,
        "order_cost_ratio": main["order_cost_ratio"],
        "agreedy_overhead_fraction": main["overhead_fraction"],
        "agreedy_tuples_per_s": main["tuples_per_s"],
        "optimal_tuples_per_s": main["optimal_tuples_per_s"],
        "gap": main["gap"],
        "gap_all_batches": main["gap_all_batches"],
        "noise": twin["gap"],  # the A/A control's gap
        "noise_replicate_gaps": twin["replicate_gaps"],
        "round_gaps": main["round_gaps"],
        "agreedy_order": main["order"],
        "optimal_order": [f"F{f + 1}" for f in best],
        "by_algorithm": by,
    }


def run_filters_bench(tuples: int = 16_000_000, kafka: bool = True) -> dict[str, Any]:
    from processors.bench.filters_settle import settle_runs

    stage: dict[str, dict[str, Any]] = {}
    for a in ALGORITHMS:
        rate_tuples = STAGE_RATE_TUPLES_PER_TUPLE * tuples
        _say(f"stage rate, n=8, {a} (p=0.01 at most), {rate_tuples:,} tuples")
        stage[a] = stage_rate(8, rate_tuples, algorithm=a)
        _say(
            f"  {stage[a]['tuples_per_s']:,.0f} tuples/s, overhead "
            f"{stage[a]['overhead_fraction']:.2%}"
        )
    gaps = []
    for n in range(2, MAX_GAP_N + 1):
        g = optimal_gap(n, tuples=max(GAP_TUPLES_PER_STAGE_TUPLE * tuples, 500_000))
        for a, r in g["by_algorithm"].items():
            _say(
                f"  n={n} {a}: {r['tuples_per_s']:,.0f}/s, Optimal "
                f"{g['optimal_tuples_per_s']:,.0f}/s, gap {r['gap']:.2%} (order cost ratio "
                f"{r['order_cost_ratio']:.3f}, overhead {r['overhead_fraction']:.2%}, "
                f"{r['changes']} changes)"
            )
        _say(f"  n={n} A/A control (Optimal twice): gap {g['noise']:.2%}")
        gaps.append(g)

    def worst(a: str, key: str, top: int) -> float:
        return max(g["by_algorithm"][a][key] for g in gaps if g["n"] <= top)

    _say("adaptivity: tuples to settle after 8 random changes (Figs 16-18's runs)")
    settle = settle_runs()
    _say(
        f"  A-Greedy+ {settle['settle_tuples_median']:,.0f}, paper's A-Greedy "
        f"{settle['agreedy_exact_settle_tuples_median']:,.0f} (medians)"
    )
    main, exact = stage["agreedy"], stage["agreedy_exact"]
    results: dict[str, Any] = {
        "stage_tuples_per_s": main["tuples_per_s"],
        "agreedy_overhead_fraction": main["overhead_fraction"],
        "agreedy_exact_overhead_fraction": exact["overhead_fraction"],
        "optimal_gap": worst("agreedy", "gap", 6),
        "optimal_gap_to_10": worst("agreedy", "gap", MAX_GAP_N),
        "agreedy_exact_optimal_gap": worst("agreedy_exact", "gap", 6),
        "agreedy_exact_optimal_gap_to_10": worst("agreedy_exact", "gap", MAX_GAP_N),
        "optimal_gap_by_n": {g["n"]: g["by_algorithm"]["agreedy"]["gap"] for g in gaps},
        "optimal_gap_noise": max(abs(g["noise"]) for g in gaps if g["n"] <= 6),
        "optimal_gap_noise_by_n": {g["n"]: g["noise"] for g in gaps},
        "agreedy_exact_optimal_gap_by_n": {
            g["n"]: g["by_algorithm"]["agreedy_exact"]["gap"] for g in gaps
        },
        "optimal_order_cost_ratio": worst("agreedy", "order_cost_ratio", MAX_GAP_N),
        "agreedy_exact_optimal_order_cost_ratio": worst(
            "agreedy_exact", "order_cost_ratio", MAX_GAP_N
        ),
        "settle_tuples_median": settle["settle_tuples_median"],
        "agreedy_exact_settle_tuples_median": settle["agreedy_exact_settle_tuples_median"],
        "stage": main,
        "stage_exact": exact,
        "optimal_runs": gaps,
        "settle_runs": settle["settle_runs"],
    }
    if kafka:
        from processors.bench.filters_e2e import agent_vs_passthrough

        _say("end to end through Kafka: filter query against the pass-through pipeline")
        e2e = agent_vs_passthrough(None, tuples=2_000_000, repeats=2)
        results.update(e2e)
        results["agent_vs_passthrough"] = e2e["agent_vs_passthrough"]
    results["machine"] = machine_info()
    return results
