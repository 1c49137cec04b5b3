"""The stages one partition of a step runs, chained: what a stateful agent keeps per partition
and what the in-process runner calls. Its snapshot holds each stage's snapshot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from processors.core.batch import Batch
from processors.core.state_codec import SnapshotError, decode_state, encode_state, expect
from processors.stages.base import Stage

CHAIN_SNAPSHOT_VERSION = 1


class StageChain:
    """``stages`` run in order on every batch; empty batches are not passed on. Batches that
    come out of a stream's chain are labelled with the stream (``meta['stream']``), which the
    MJoin reads to tell its inputs apart."""

    def __init__(self, step: str, stages: Sequence[Stage], stream: str | None = None) -> None:
        self.step = step
        self.stages = list(stages)
        self.stream = stream

    def push(self, stream: str, batch: Batch) -> list[Batch]:
        """One input batch of ``stream``; the batches the chain outputs."""
        batch.meta["stream"] = stream
        return self._label(self._run(0, [batch]))

    def flush(self) -> list[Batch]:
        """End of input: each stage's held-back output, through the stages after it."""
        out: list[Batch] = []
        for i, stage in enumerate(self.stages):
            out += self._run(i + 1, [b for b in stage.flush() if len(b)])
        return self._label(out)

    def _run(self, start: int, batches: list[Batch]) -> list[Batch]:
        for stage in self.stages[start:]:
            batches = [out for b in batches for out in stage.process(b) if len(out)]
        return batches

    def _label(self, batches: list[Batch]) -> list[Batch]:
        if self.stream is not None:
            for b in batches:
                b.meta["stream"] = self.stream
        return batches

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        return [dead for stage in self.stages for dead in stage.take_dead_letters()]

    def stats(self) -> dict[str, Any]:
        """Each stage's statistics, by stage name."""
        return {stage.name: stage.stats() for stage in self.stages}

    def snapshot(self) -> bytes:
        """Every stage's snapshot, in chain order, with the step's name."""
        return encode_state(
            {
                "kind": "chain",
                "version": CHAIN_SNAPSHOT_VERSION,
                "step": self.step,
                "stages": [{"name": s.name, "data": s.snapshot()} for s in self.stages],
            }
        )

    def load_snapshot(self, data: bytes) -> None:
        """Continue from a :meth:`snapshot` of the same step (a freshly built chain);
        :class:`SnapshotError` if it is of another step or its stages do not match."""
        tree = decode_state(data)
        expect(tree, "chain", CHAIN_SNAPSHOT_VERSION, self.step)
        if tree.get("step") != self.step:
            raise SnapshotError(f"snapshot of step {tree.get('step')!r}, not {self.step!r}")
        stages = tree.get("stages")
        names = [s.name for s in self.stages]
        saved_names = (
            [s.get("name") if isinstance(s, dict) else None for s in stages]
            if isinstance(stages, list)
            else None
        )
        if saved_names != names:
            raise SnapshotError(
                f"{self.step}: snapshot of stages {saved_names}, the plan runs {names}"
            )
        assert isinstance(stages, list)
        for stage, saved in zip(self.stages, stages, strict=True):
            data_ = saved.get("data")
            if not isinstance(data_, bytes):
                raise SnapshotError(f"{self.step}: stage {stage.name} has no snapshot bytes")
            stage.load_snapshot(data_)
