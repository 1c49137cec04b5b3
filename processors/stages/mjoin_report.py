"""What an MJoin reports on the status page (its ``stats``): its inputs, join orders and their
changes, windows, probes per delta, idle inputs and caches (docs/windows-and-joins.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from processors.stages.mjoin_stage import MJoinStage


def mjoin_stats(stage: MJoinStage) -> dict[str, Any]:
    """The MJoin stage's statistics, as the status page and the stats topic show them."""
    return {
        "kind": "mjoin",
        "inputs": list(stage.names),
        "graph": stage.graph.kind,
        "algorithm": stage.config.algorithm,
        "orders": stage.orders(),
        "changes_total": stage.changes_total,
        "recent_changes": stage.plan_changes.entries(),
        "deltas_in": dict(zip(stage.names, stage.deltas_in, strict=True)),
        "results_out": stage.results_out,
        "window_tuples": {s.name: len(s) for s in stage.stores},
        "state_bytes": sum(s.nbytes for s in stage.stores),
        "probes_per_delta": {
            stage.names[i]: float(stage.probes[i].sum()) / max(stage.deltas_in[i], 1)
            for i in range(stage.n)
        },
        "buffered": sum(len(b) for bs in stage._buffers for b in bs),
        "idle_inputs": [
            n for n, idle in zip(stage.names, stage.idleness.idle.tolist(), strict=True) if idle
        ],
        **stage.caches.stats(stage),
    }
