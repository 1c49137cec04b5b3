"""Join selectivities measured from an MJoin's windows, for the cost model (issue 17).

The selectivity f of a predicate ``x.c = y.d`` is the share of (x, y) pairs that match (Ayad &
Naughton, Table 1). Here: the matches in y's index of a sample of x's live tuples, scaled to
all of them, with both window sizes, so that partitions add up (a co-partitioned join matches
only within a partition: f = the sum of matches over the product of the summed windows). The
sample holds at most :data:`SAMPLE` tuples and a stage is measured at most every
:data:`REFRESH_S` seconds, so statistics stay cheap with windows of millions of tuples.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from processors.stages.join_store import ALIVE

if TYPE_CHECKING:
    from processors.stages.mjoin_stage import MJoinStage

SAMPLE = 2_048
REFRESH_S = 5.0


def predicate_pairs(stage: MJoinStage) -> list[tuple[tuple[int, str], tuple[int, str]]]:
    """Every pair of (input, column) in one equality class, of two different inputs."""
    classes: dict[int, list[tuple[int, str]]] = {}
    for side, cls in sorted(stage.graph.class_of.items()):
        classes.setdefault(cls, []).append(side)
    return [
        (a, b)
        for members in classes.values()
        for a, b in itertools.combinations(members, 2)
        if a[0] != b[0]
    ]


def window_matches(stage: MJoinStage, seed: int = 0) -> dict[str, dict[str, float]]:
    """Per predicate ``"x.c = y.d"``: matches (estimated from a sample), left and right
    window sizes, now."""
    rng = np.random.default_rng(seed)
    live = []
    for store in stage.stores:
        slots = store.live_slots()
        live.append(slots[store.died[slots] == ALIVE])
    out: dict[str, dict[str, float]] = {}
    for (x, cx), (y, cy) in predicate_pairs(stage):
        wx, wy = len(live[x]), len(live[y])
        text = f"{stage.names[x]}.{cx} = {stage.names[y]}.{cy}"
        if wx == 0 or wy == 0:
            out[text] = {"matches": 0.0, "left": float(wx), "right": float(wy)}
            continue
        sample = live[x] if wx <= SAMPLE else rng.choice(live[x], SAMPLE, replace=False)
        keys = stage.stores[x].keys(cx, sample)
        store = stage.stores[y]
        gens = np.full(len(keys), ALIVE - 1, np.int64)
        left, _ = store.indexes[cy].expand(store.born, store.died, keys, gens)
        out[text] = {"matches": len(left) * wx / len(sample), "left": float(wx), "right": float(wy)}
    return out


class Measured:
    """The latest :func:`window_matches` of a stage, refreshed at most every REFRESH_S."""

    def __init__(self) -> None:
        self.at = float("-inf")
        self.last: dict[str, Any] = {}

    def of(self, stage: MJoinStage) -> dict[str, Any]:
        now = time.monotonic()
        if now - self.at >= REFRESH_S:
            self.at, self.last = now, window_matches(stage)
        return self.last
