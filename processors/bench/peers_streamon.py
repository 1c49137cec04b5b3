"""streamon's side of the in-process workloads of ``streamon bench peers``, as a subprocess.

Run as ``python -m processors.bench.peers_streamon SPEC.json`` so that its memory, CPU time and
start-up are measured like a peer's (processors.bench.peers_run). It regenerates the workload's
tuples from processors.bench.peers_data (the same seeded generators that wrote the peers' CSV
files), warms its kernels on other data (numba compiles: that is start-up), and then runs the
stage over columnar batches: the adaptive FilterStage for ``filters``, the eager RANGE MJoin for
``join3`` and ``netmon``. Prints ``RESULT {json}`` with the count and checksum of the results.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from processors.bench import peers_data as D
from processors.core.batch import ROW_ID, Batch
from processors.core.ordering.config import OrderingConfig
from processors.core.predicates import Between, Compare, IsIn, Predicate
from processors.stages.eager_mjoin import EagerMJoinStage
from processors.stages.filter_stage import FilterStage

FILTER_BATCH = 65_536
JOIN_SLICE = 16_384  # tuples per input per push


def filter_predicates() -> list[Predicate]:
    """The bench's 8 filters as streamon predicates (site and sensor sets as IN)."""
    out: list[Predicate] = []
    for i, (field, op, value) in enumerate(D.FILTERS):
        name = f"F{i + 1}"
        if op == "between":
            out.append(Between(field, value[0], value[1], name=name))
        elif op == "in":
            out.append(IsIn(field, value, name=name))
        else:
            out.append(Compare(field, op, value, name=name))
    return out


def run_filters(n: int, seed: int) -> dict[str, Any]:
    warm = FilterStage(filter_predicates(), OrderingConfig(seed=seed))
    warm.process(D.filters_batch(20_000, seed + 100))
    data = D.filters_batch(n, seed)
    stage = FilterStage(filter_predicates(), OrderingConfig(seed=seed))
    ready = time.time()
    count, checksum = 0, 0
    for pos in range(0, n, FILTER_BATCH):
        for out in stage.process(data.slice(pos, min(pos + FILTER_BATCH, n))):
            count += len(out)
            checksum += D.reading_checksum(out.columns["ts"], out.columns["sensor_id"])
    t1 = time.time()
    return {"records": n, "t_ready": ready, "t0": ready, "t1": t1, "count": count,
            "checksum": checksum % D.MOD, "order": stage.order_names,
            "changes": stage.stats().get("changes_total")}  # fmt: skip


def _join_batches(inputs: list[dict[str, np.ndarray]]) -> list[Batch]:
    out = []
    for cols in inputs:
        data = {ROW_ID: np.arange(len(cols["ts"]), dtype=np.int64)}
        data.update({c: v for c, v in cols.items() if c != "ts"})
        out.append(Batch.inserts(data, cols["ts"]))
    return out


def drive_join(stage: EagerMJoinStage, batches: list[Batch], measure: list[str]) -> list[Any]:
    """Push the inputs slice by slice in event time (each input's watermark advanced to the
    slice's end) and sum what ``measure`` asks of the results: count, checksum, bytes."""
    allts = np.sort(np.concatenate([b.ts for b in batches]))
    bounds = [*allts[:: JOIN_SLICE * len(batches)].tolist()[1:], int(allts[-1]) + 1]
    pos = [0] * len(batches)
    count, checksum, total = 0, 0, 0
    for hi in bounds:
        outs: list[Batch] = []
        for i, b in enumerate(batches):
            end = int(np.searchsorted(b.ts, hi, side="left"))
            if end > pos[i]:
                stage.push(i, b.slice(pos[i], end))
                pos[i] = end
            stage.advance(i, hi)
        outs += stage.release()
        for o in outs:
            count += len(o)
            c = o.columns
            if measure[0] == "join3":
                checksum += D.join_checksum([c["s0.id"], c["s1.id"], c["s2.id"]])
            else:
                checksum += D.netmon_checksum(c["r0.pid"], c["r0.size"])
                total += int(c["r0.size"].sum())
    for o in stage.flush():
        count += len(o)
    return [count, checksum % D.MOD, total]


def run_join(kind: str, n: int, range_ms: int, seed: int) -> dict[str, Any]:
    if kind == "join3":
        names, key, wanted = ["s0", "s1", "s2"], "k", ["s0.id", "s1.id", "s2.id"]

        def make(size: int, s: int) -> list[dict[str, np.ndarray]]:
            return D.join3_inputs(size, seed=s)
    else:
        names, key, wanted = ["r0", "r1", "r2", "r3"], "pid", ["r0.pid", "r0.size"]

        def make(size: int, s: int) -> list[dict[str, np.ndarray]]:
            return D.netmon_inputs(size, seed=s)

    def stage() -> EagerMJoinStage:
        preds = [((0, key), (i, key)) for i in range(1, len(names))]
        return EagerMJoinStage(names, preds, [range_ms] * len(names), OrderingConfig(seed=seed),
                               result_columns=wanted)  # fmt: skip

    drive_join(stage(), _join_batches(make(20_000, seed + 100)), [kind])
    inputs = _join_batches(make(n, seed))
    records = sum(len(b) for b in inputs)
    s = stage()
    ready = time.time()
    count, checksum, total = drive_join(s, inputs, [kind])
    t1 = time.time()
    result = {"records": records, "t_ready": ready, "t0": ready, "t1": t1, "count": count,
              "checksum": checksum, "late": s.late_total}  # fmt: skip
    if kind == "netmon":
        result["extra"] = [total]
    return result


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    kind = spec["workload"]
    if kind == "filters":
        result = run_filters(spec["n"], spec.get("seed", 5))
    else:
        result = run_join(kind, spec["n"], spec["range_ms"], spec.get("seed", 3))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
