"""The stages one partition of a step runs, chained: what a stateful agent keeps per partition
and what the in-process runner calls. Its snapshot holds each stage's snapshot."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from processors.core.batch import Batch
from processors.core.state_codec import SnapshotError, decode_state, encode_state, expect
from processors.stages.base import Stage

CHAIN_SNAPSHOT_VERSION = 1
NO_TS = -(2**63)


class StageChain:
    """``stages`` run in order on every batch; empty batches are not passed on. Batches that
    come out of a stream's chain are labelled with the stream (``meta['stream']``), which the
    MJoin reads to tell its inputs apart."""

    def __init__(self, step: str, stages: Sequence[Stage], stream: str | None = None) -> None:
        self.step = step
        self.stages = list(stages)
        self.stream = stream
        self._told_wm = NO_TS  # event-time progress last told downstream (not state: resent)
        self._told_idle = False
        self._idle_in = False  # the last input was an idle mark
        self._at: str | None = None  # ingest's wall clock on the latest input
        self._fed: list[Batch] = []  # output of fed batches, not yet drained

    def push(self, stream: str, batch: Batch) -> list[Batch]:
        """One input batch of ``stream``; the batches the chain outputs (then what the event
        time it brought makes due further on)."""
        batch.meta["stream"] = stream
        self._idle_in = not len(batch) and "idle" in batch.meta
        if "at" in batch.meta:  # ingest's time, passed on with this chain's own marks
            self._at = batch.meta["at"]
        return self._label(self._run(0, [batch]) + self._advance())

    def release_first(self) -> list[Batch]:
        """What the first stage releases now, through the stages after it: the input it
        buffered while deferring (:attr:`processors.stages.mjoin_stage.MJoinStage.deferring`)."""
        return self._label(self._run(1, [b for b in self.stages[0].release() if len(b)]))

    def feed(self, stream: str, batch: Batch) -> None:
        """:meth:`push`, its output kept for :meth:`drain` (an agent feeds a turn's
        envelopes, then drains once: :class:`processors.physical.joined.JoinedChain`)."""
        self._fed += self.push(stream, batch)

    def drain(self) -> list[Batch]:
        """What the batches fed since the last drain output, in order."""
        out, self._fed = self._fed, []
        return out

    def _advance(self) -> list[Batch]:
        """Event time after the merge, stage by stage: what each stage's ``advance`` makes
        due, through the stages after it."""
        if not self._merges() or not self.stages[0].drives_time:  # type: ignore[attr-defined]
            return []
        mark = self.stages[0].progress(NO_TS)
        out: list[Batch] = []
        for i, stage in enumerate(self.stages[1:], start=1):
            if mark == NO_TS:
                break
            out += self._run(i + 1, [b for b in stage.advance(mark) if len(b)])
            mark = stage.progress(mark)
        return out

    def _merges(self) -> bool:
        """Whether the chain starts with the event-time merge (a stream's chain)."""
        return bool(self.stages) and hasattr(self.stages[0], "all_idle")

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

    def progress(self) -> int | None:
        """The least event time a later output of a stream's chain can have (None: a chain
        that does not start with the event-time merge, so knows nothing of event time)."""
        if not self._merges():
            return None
        mark = NO_TS
        for stage in self.stages:
            mark = stage.progress(mark)
        return None if mark == NO_TS else mark

    def idle(self) -> bool:
        """Every input partition feeding this chain went quiet and it holds nothing back."""
        return self._merges() and bool(self.stages[0].all_idle())  # type: ignore[attr-defined]

    def progress_news(self, outputs: list[Batch]) -> Batch | None:
        """After a push that output ``outputs``: a marker for the step downstream (an MJoin)
        when there is event-time news: an idle mark when all inputs went quiet (again with
        each idle mark that comes in while they stay so), else a watermark that moved past
        what the outputs themselves show. None: nothing new."""
        if self.idle():
            if self._told_idle and not self._idle_in:  # each idle mark is passed on
                return None
            self._told_idle = True
            return Batch.empty_marker(self._timed({"idle": "1"}))
        self._told_idle = False
        wm = self.progress()
        shown = int(outputs[-1].ts[-1]) if outputs and len(outputs[-1]) else None
        if self.stages and getattr(self.stages[0], "eager", False):  # arrival order: no time
            shown = None
        if wm is None or wm <= self._told_wm or (shown is not None and shown >= wm):
            return None
        self._told_wm = wm
        return Batch.empty_marker(self._timed({"wm": str(wm)}))

    def _timed(self, meta: dict[str, str]) -> dict[str, str]:
        """``meta`` with ingest's time of the latest input (the MJoin's comeback rule reads
        it: :mod:`processors.stages.idleness`)."""
        return meta if self._at is None else {**meta, "at": self._at}

    def held_bytes(self) -> int:
        return sum(stage.held_bytes() for stage in self.stages)

    def waiting_bytes(self) -> dict[str, int]:
        waiting: dict[str, int] = {}
        for stage in self.stages:
            for stream, nbytes in stage.waiting_bytes().items():
                waiting[stream] = waiting.get(stream, 0) + nbytes
        return waiting

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

    def snapshot_parts(self) -> Iterator[bytes]:
        """The snapshot as pieces to write one after another (one piece here; a
        :class:`processors.physical.joined.JoinedChain` makes several)."""
        yield self.snapshot()

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
