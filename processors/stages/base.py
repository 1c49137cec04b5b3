"""The stage contract: a batch-at-a-time operator with no Kafka and no Faust in it.

The runtime feeds a stage the batches of one input partition in order and forwards what it
returns; a stage keeps whatever state it needs per instance (one instance per partition), so the
same object runs unchanged in process (tests, benchmarks) and inside a Faust agent.
"""

from __future__ import annotations

from typing import Any, Protocol

from processors.core.batch import Batch


class Stage(Protocol):
    """A streaming operator over columnar batches."""

    name: str

    def process(self, batch: Batch) -> list[Batch]:
        """Consume one input batch; return the output batches it produces (maybe none)."""
        ...

    def stats(self) -> dict[str, Any]:
        """Stage-specific statistics and the current plan (JSON-able), for stats and status."""
        ...


class PassThroughStage:
    """Forwards every batch unchanged: the simplest stage, and the baseline of the benchmarks."""

    def __init__(self, name: str = "passthrough") -> None:
        self.name = name
        self._batches = 0

    def process(self, batch: Batch) -> list[Batch]:
        self._batches += 1
        return [batch]

    def stats(self) -> dict[str, Any]:
        return {"kind": "passthrough", "batches": self._batches}
