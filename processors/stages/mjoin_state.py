"""The snapshot state tree of an MJoin stage (version 1), and loading it back.

Layout of the tree that :func:`mjoin_state` returns (encoded by :mod:`processors.core.state_codec`;
``kind`` and ``version`` are added by the stage)::

    inputs        [name, ...]                    the stage's configuration, checked on load
    predicates    [[[i, col], [j, col]], ...]    (sorted, each pair sorted)
    columns       [[col, ...] | None, ...]       per input: its columns once a batch arrived
    stores        [store, ...]                   per input: join_store.store_state
    buffers       [batch | None, ...]            per input: deltas awaiting release
    shown         int64[n]                       largest timestamp shown per input
    next_gen      int                            the next global sequence number
    orders        [[entity, ...], ...]           per pipeline: the current drop-probing order
    rng_state     uint64[1]                      the sampler's state
    deltas_in     int64[n], results_out int, probes [int64[n - 1], ...]
    plan_changes  plan_changes.PlanChanges.state
    dead_letters  [{"batch": batch, "reason": str}, ...]

A batch is ``{"columns": {name: column}, "sign": int8[m], "ts": int64[m]}`` with columns as
:func:`processors.stages.join_store.encode_column` writes them. Profiling statistics (profile
windows, cost estimates) are not kept: adaptivity resumes from the current orders with fresh
statistics. Indexes are rebuilt by re-inserting each window's tuples in their original order.
Subresult caches (:mod:`processors.stages.mjoin_caches`) are not kept either: a cache promises
no completeness, so the restored stage's caches start empty and fill again, results unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from processors.core.batch import Batch
from processors.core.ordering.reoptimizers import make_reoptimizer
from processors.core.state_codec import SnapshotError
from processors.stages.idleness import Idleness
from processors.stages.join_store import (
    EVENT_TIME,
    decode_column,
    decode_int64,
    encode_column,
    load_store,
    store_state,
)
from processors.stages.plan_changes import PlanChanges

if TYPE_CHECKING:
    from processors.stages.mjoin_stage import MJoinStage


def _batch_state(batch: Batch) -> dict[str, Any]:
    return {
        "columns": {name: encode_column(col) for name, col in batch.columns.items()},
        "sign": batch.sign.copy(),
        "ts": batch.ts.copy(),
    }


def _load_batch(tree: dict[str, Any], what: str) -> Batch:
    ts = decode_int64(tree["ts"], None, f"{what}.ts")
    sign = decode_int64(tree["sign"], len(ts), f"{what}.sign")
    if not bool(np.isin(sign, (-1, 1)).all()):
        raise ValueError(f"{what}: signs other than +1 and -1")
    cols = {str(c): decode_column(v, len(ts), f"{what}.{c}") for c, v in tree["columns"].items()}
    return Batch(cols, sign.astype(np.int8), ts)


def predicate_list(stage: MJoinStage) -> list[list[list[Any]]]:
    """The join predicates in a canonical form (each pair sorted, then the list)."""
    pairs = [sorted([[a[0], a[1]], [b[0], b[1]]]) for a, b in stage.graph.predicates]
    return sorted(pairs)


def mjoin_state(stage: MJoinStage) -> dict[str, Any]:
    """Everything the stage needs to continue exactly where it is (arrays are copies)."""
    buffers = [Batch.concat(b) if b else None for b in stage._buffers]
    return {
        "inputs": list(stage.names),
        "predicates": predicate_list(stage),
        "columns": [None if c is None else list(c) for c in stage._columns],
        "stores": [store_state(s) for s in stage.stores],
        "buffers": [None if b is None else _batch_state(b) for b in buffers],
        "shown": np.array(stage._shown, np.int64),
        "idleness": stage.idleness.state(),
        "next_gen": stage._next_gen,
        "orders": [r.order.tolist() for r in stage.reopts],
        "rng_state": stage._rng_state.copy(),
        "deltas_in": np.array(stage.deltas_in, np.int64),
        "results_out": stage.results_out,
        "probes": [p.copy() for p in stage.probes],
        "plan_changes": stage.plan_changes.state(),
        "dead_letters": [
            {"batch": _batch_state(b), "reason": reason} for b, reason in stage.dead_letters
        ],
    }


def load_mjoin_state(stage: MJoinStage, tree: dict[str, Any]) -> None:
    """Put :func:`mjoin_state` back into a freshly built stage of the same configuration;
    :class:`SnapshotError` naming what does not fit (the stage is unchanged then)."""
    if tree.get("inputs") != stage.names:
        raise SnapshotError(
            f"{stage.name}: snapshot joins inputs {tree.get('inputs')}, this stage {stage.names}"
        )
    if tree.get("predicates") != predicate_list(stage):
        raise SnapshotError(
            f"{stage.name}: snapshot joins on {tree.get('predicates')}, this stage on "
            f"{predicate_list(stage)}"
        )
    try:
        _load(stage, tree)
    except SnapshotError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise SnapshotError(f"{stage.name}: malformed mjoin snapshot: {exc!r}") from exc


def _per_input(tree: dict[str, Any], key: str, n: int) -> list[Any]:
    value = tree[key]
    if not isinstance(value, list) or len(value) != n:
        raise ValueError(f"{key}: one entry per input ({n}) expected")
    return value


def _load(stage: MJoinStage, tree: dict[str, Any]) -> None:
    n = stage.n
    columns = [None if c is None else [str(x) for x in c] for c in _per_input(tree, "columns", n)]
    stores = [
        load_store(stage.names[i], stage.stores[i].key_columns, t)
        for i, t in enumerate(_per_input(tree, "stores", n))
    ]
    for i, (cols, store) in enumerate(zip(columns, stores, strict=True)):
        if [c for c in store.columns if c != EVENT_TIME] != (cols or []):
            raise ValueError(f"{stage.names[i]}: window columns {list(store.columns)}, not {cols}")
    buffers = [
        [] if b is None else [_load_batch(b, f"buffer of {stage.names[i]}")]
        for i, b in enumerate(_per_input(tree, "buffers", n))
    ]
    shown = decode_int64(tree["shown"], n, "shown").tolist()
    idleness = Idleness(n, stage.idleness.timeout_ms)
    if "idleness" in tree:  # older snapshots have none: no input idle
        idleness.load_state(tree["idleness"], stage.name)
    orders = _per_input(tree, "orders", n)
    reopts = [
        make_reoptimizer(p.size, stage.config, [int(e) for e in orders[i]], list(p.parent))
        for i, p in enumerate(stage.pipelines)
    ]
    rng_state = tree["rng_state"]
    if not isinstance(rng_state, np.ndarray) or rng_state.dtype != np.uint64:
        raise ValueError("rng_state: not a uint64 array")
    if rng_state.shape != stage._rng_state.shape:
        raise ValueError(f"rng_state: shape {rng_state.shape}")
    probes = [
        decode_int64(p, pipe.size, "probes")
        for p, pipe in zip(_per_input(tree, "probes", n), stage.pipelines, strict=True)
    ]
    deltas_in = decode_int64(tree["deltas_in"], n, "deltas_in").tolist()
    letters = [
        (_load_batch(d["batch"], "dead letter"), str(d["reason"])) for d in tree["dead_letters"]
    ]
    old = stage.plan_changes
    changes = PlanChanges(old.stage, old.what, old.log)
    changes.load_state(
        tree["plan_changes"], lambda ctx: stage._entity_names[stage.names.index(ctx["pipeline"])]
    )
    next_gen = int(tree["next_gen"])
    if any(len(s.born) and int(s.born[s.live_slots()].max(initial=0)) >= next_gen for s in stores):
        raise ValueError(f"next_gen {next_gen} is not after every stored tuple")
    # everything decoded: now replace the stage's state
    stage._columns = columns  # type: ignore[assignment]
    stage.stores = stores
    stage._buffers = buffers
    stage._shown = [int(s) for s in shown]
    stage.idleness = idleness
    stage._next_gen = next_gen
    stage.plan_changes = changes
    stage.reopts = reopts
    stage._rng_state = rng_state.copy()
    stage.probes = [p.copy() for p in probes]
    stage.deltas_in = [int(d) for d in deltas_in]
    stage.results_out = int(tree["results_out"])
    stage.dead_letters = letters
