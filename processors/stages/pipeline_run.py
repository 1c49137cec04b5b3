"""One MJoin pipeline pass's intermediate results, shared by the MJoin, its eager variant and
the subresult caches (:mod:`processors.stages.mjoin_stage`)."""

from __future__ import annotations

import numpy as np

from processors.core.batch import Batch


class PipelineRun:
    """One pipeline's intermediate results: per result, its delta row (``origin``, sorted)
    and the slot of every input bound so far."""

    def __init__(self, m: int) -> None:
        self.origin = np.arange(m, dtype=np.int64)
        self.bound: dict[int, np.ndarray] = {}

    def keep(self, mask_or_index: np.ndarray) -> None:
        self.origin = self.origin[mask_or_index]
        self.bound = {e: s[mask_or_index] for e, s in self.bound.items()}

    def alive_rows(self) -> int:
        return int(np.count_nonzero(np.diff(self.origin))) + 1 if len(self.origin) else 0


def whole_or_take(batch: Batch, rows: np.ndarray) -> Batch:
    """``batch.take(rows)`` for ascending distinct ``rows``, or the batch itself when they are
    all of it (most epochs: insert-only deltas in one slice), sparing a copy of every column
    twice an epoch (15-20% of a small epoch's time). The stores copy what they keep and the
    pipelines do not write to a delta batch, so sharing it is safe."""
    return batch if len(rows) == len(batch) else batch.take(rows)
