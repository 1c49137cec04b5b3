"""SyntheticStage: an operator with a chosen CPU cost per tuple and a chosen selectivity.

Operator scheduling (Babcock et al., Sect. 3) sees an operator only as a point of a progress
chart: time per tuple and selectivity. A query of synthetic operators reproduces any chart on
real agents and topics (``Query.operator``), so that scheduling policies can be compared live
and their results checked exactly: which tuples leave, and how often, depends only on the key.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from processors.core.batch import Batch
from processors.kernels.splitmix import mix64
from processors.kernels.synthetic import (
    calibrate_iterations_per_ns,
    fraction_threshold,
    synthetic_counts,
)
from processors.stages.base import StageBase

_calibrated: float | None = None


def iterations_per_ns() -> float:
    """Calibrated once per process: every synthetic stage shares the figure."""
    global _calibrated
    if _calibrated is None:
        _calibrated = calibrate_iterations_per_ns()
    return _calibrated


def operator_seed(name: str) -> np.uint64:
    """Each operator's own hash seed, from its name, so that operators select independently."""
    state = np.uint64(0)
    for byte in name.encode():
        state = mix64(np.uint64(state) ^ np.uint64(byte))
    return np.uint64(state)


def copies(key: int, name: str, selectivity: float) -> int:
    """How many times the operator emits the tuple with ``key`` (the formula the kernel uses)."""
    whole = math.floor(selectivity)
    cut = fraction_threshold(selectivity - whole)
    return whole + int(mix64(np.uint64(key) ^ operator_seed(name)) < cut)


class SyntheticStage(StageBase):
    """Spends ``cost_ns`` of CPU per input tuple and emits each tuple floor(s) or floor(s) + 1
    times (by a hash of its ``key`` column), so that on average it keeps ``selectivity``."""

    kind = "synthetic"

    def __init__(self, name: str, cost_ns: float, selectivity: float, key: str) -> None:
        if cost_ns < 0 or not math.isfinite(cost_ns):
            raise ValueError(f"operator {name}: cost must be a finite number >= 0, not {cost_ns}")
        if selectivity < 0 or not math.isfinite(selectivity):
            raise ValueError(
                f"operator {name}: selectivity must be a finite number >= 0, not {selectivity}"
            )
        self.name = name
        self.cost_ns = float(cost_ns)
        self.selectivity = float(selectivity)
        self.key = key
        self._whole = math.floor(selectivity)
        self._cut = fraction_threshold(selectivity - self._whole)
        self._seed = operator_seed(name)
        self._iterations = round(self.cost_ns * iterations_per_ns())
        self._counts = np.empty(0, np.int64)
        self.tuples_in = 0
        self.tuples_out = 0

    def process(self, batch: Batch) -> list[Batch]:
        n = len(batch)
        if n == 0:
            return []
        column = batch.columns.get(self.key)
        if not isinstance(column, np.ndarray) or column.dtype.kind not in "iu":
            raise ValueError(f"operator {self.name}: key {self.key!r} is not an integer column")
        if len(self._counts) < n:
            self._counts = np.empty(max(n, 2 * len(self._counts)), np.int64)
        counts = self._counts[:n]
        keys = column.astype(np.int64, copy=False)
        total = synthetic_counts(keys, self._seed, self._whole, self._cut, self._iterations, counts)
        self.tuples_in += n
        self.tuples_out += int(total)
        if total == 0:
            return []
        if total == n and self._whole == 1 and self._cut == 0:
            return [batch]
        return [batch.take(np.repeat(np.arange(n, dtype=np.int64), counts))]

    def stats(self) -> dict[str, Any]:
        return {
            "kind": "synthetic",
            "cost_ns": self.cost_ns,
            "selectivity": self.selectivity,
            "key": self.key,
            "iterations_per_tuple": self._iterations,
            "tuples_in": self.tuples_in,
            "tuples_out": self.tuples_out,
        }
