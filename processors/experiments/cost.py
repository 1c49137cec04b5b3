"""Ayad and Naughton's Example 1 and Fig. 7 from the cost model (``an-example1``, ``an-fig7``).

Both read the query and statistics shipped as ``processors/workloads/cql/an_example1.cql`` and
``.toml``; no worker runs: the paper's figures are the model's, and so are these.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from processors.commands.queries import load_plan
from processors.core.cost.inputs import CostInputs, bind
from processors.core.cost.model import evaluate
from processors.core.cost.shapes import Shape, shapes
from processors.core.cost.shedding import approximate
from processors.core.cost.stats_file import load_stats
from processors.experiments import plotting
from processors.experiments.runner import Experiment, runner

CQL = Path(__file__).parents[1] / "workloads" / "cql"
#: the paper's names for the three binary plans of Fig. 3
PAPER_NAMES = {"A B C": "(a)", "B C A": "(b)", "A C B": "(c)"}


def _example1() -> tuple[CostInputs, dict[str, Shape]]:
    plan = load_plan(str(CQL / "an_example1.cql"), require_into=False)
    inputs = bind(plan, load_stats(CQL / "an_example1.toml"))
    named = {}
    for shape in shapes(("A", "B", "C"), with_filters=False):
        order = shape.order()
        key = "mjoin" if order == "mjoin" else " ".join(map(str, order))
        named[PAPER_NAMES.get(key, key)] = shape
    return inputs, dict(sorted(named.items()))


def throughput(shape: Shape, inputs: CostInputs) -> float:
    """Results per second: all of them when feasible, else the best drop boxes' (Sect. 5.2)."""
    cost = evaluate(shape, inputs)
    return cost.output_per_s if cost.feasible else approximate(shape, inputs).output_per_s


def an_example1(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Example 1: each plan's buffer, tuples handled and utilization, feasible at 0.5/4/5 ms."""
    inputs, named = _example1()
    rows = []
    for name, shape in named.items():
        row: dict[str, object] = {"plan": name, "shape": shape.text()}
        for ms in (0.5, 4.0, 5.0):
            cost = evaluate(shape, inputs.with_join_cost(ms / 1000))
            row.update(buffer_tuples=cost.memory_tuples, tuples_per_s=cost.tuples_per_s)
            row[f"utilization_{ms:g}ms"] = cost.utilization
            row[f"feasible_{ms:g}ms"] = cost.feasible
        rows.append(row)
    notes = [
        "Ayad & Naughton Example 1 (Sect. 3.3), from the cost model (processors/core/cost)",
        "paper: buffers 80/50/130, tuples/s 250/280/900, utilization 12.5%/14%/50% at 0.5 ms; "
        "only (a) feasible at 4 ms; none at 5 ms. (c) is 0.45 here: 900 x 0.5 ms",
    ]
    columns = ["plan", "shape", "buffer_tuples", "tuples_per_s", "utilization_0.5ms",
               "utilization_4ms", "utilization_5ms", "feasible_0.5ms", "feasible_4ms",
               "feasible_5ms"]  # fmt: skip
    csv = plotting.write_csv(out_dir / "an_example1.csv", rows, columns, notes)
    fig, ax = plotting.figure("Example 1: tuples handled per second (bars) and buffer", "plan",
                              "tuples/s")  # fmt: skip
    names = [str(r["plan"]) for r in rows]
    ax.bar(names, [float(r["tuples_per_s"]) for r in rows], color="tab:blue", label="tuples/s")
    for i, r in enumerate(rows):
        ax.annotate(f"{float(r['buffer_tuples']):.0f} tuples", (i, float(r["tuples_per_s"])),
                    ha="center", va="bottom", fontsize=8)  # fmt: skip
    ax.axhline(250, color="black", linestyle="--", linewidth=0.8, label="capacity at 4 ms")
    ax.legend(fontsize=8)
    return [csv, plotting.save(fig, out_dir / "an_example1.png")]


def an_fig7(out_dir: Path, scale: float, seed: int) -> list[Path]:
    """Fig. 7: the optimum throughput of plans (a), (b), (c) (and the MJoin) as the per-tuple
    cost grows from 0.5 ms to 0.1 s, drop boxes placed by Sect. 5.2 when infeasible."""
    inputs, named = _example1()
    steps = max(20, int(400 * scale))
    costs = np.linspace(0.0005, 0.1, steps)
    series = {name: [throughput(s, inputs.with_join_cost(float(c))) for c in costs]
              for name, s in named.items()}  # fmt: skip
    rows = [{"cost_s": float(c), **{n: v[i] for n, v in series.items()}}
            for i, c in enumerate(costs)]  # fmt: skip
    notes = ["Ayad & Naughton Fig. 7: optimum throughput (results/s) of Example 1's plans as the "
             "cost per tuple grows; infeasible plans keep the drop boxes of Sect. 5.2",
             f"{steps} costs from 0.0005 to 0.1 s; 'mjoin' is not in the paper"]  # fmt: skip
    csv = plotting.write_csv(out_dir / "an_fig7.csv", rows, ["cost_s", *series], notes)
    png = plotting.line_plot(
        out_dir / "an_fig7.png", "Fig. 7: optimum throughput vs cost per tuple",
        "cost per tuple (s)", "results/s", list(costs), series, markers=False,
    )  # fmt: skip
    return [csv, png]


EXPERIMENTS: dict[str, Experiment] = {"an-example1": an_example1, "an-fig7": an_fig7}
run_experiment = runner(EXPERIMENTS)
