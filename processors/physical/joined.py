"""The MJoin step with its input streams' stages in front: one partition's stream chains (the
event-time merge, filters, the window) feeding its MJoin chain directly.

The streams of a join are co-partitioned with it (by the join key, or all on one partition:
:mod:`processors.core.partitioning`), so partition ``p`` of every stream's chain feeds only
partition ``p`` of the MJoin. Running them in one step spares, per batch of deltas, an envelope
encode, a produce and fetch through the broker, a decode and the event-time marks between the
steps; in ``streamon bench latency`` the join spent more of its CPU on those than on joining
(docs/benchmarks.md, "bench latency"). What each stream's chain outputs and the progress it
reports (:meth:`StageChain.progress_news`) go to the MJoin in the order the two-step pipeline
delivered them, so results are the same.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from typing import Any

from processors.core.batch import Batch, coalesce
from processors.core.state_codec import PARTS_MAGIC, SnapshotError, expect
from processors.physical.chain import StageChain
from processors.stages.base import Stage
from processors.stages.join_selectivity import Measured
from processors.stages.mjoin_stage import MJoinStage

JOINED_SNAPSHOT_VERSION = 1
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class _Fed:
    """A run of one stream's deltas fed since the last drain, and that stream's event-time
    news as of the run's end (taken when the run is closed)."""

    __slots__ = ("stream", "deltas", "news", "closed")

    def __init__(self, stream: str, deltas: list[Batch]) -> None:
        self.stream = stream
        self.deltas = deltas
        self.news: Batch | None = None
        self.closed = False


class JoinedChain:
    """``inputs`` (stream -> its chain) in front of ``join`` (the MJoin's chain); the
    :class:`StageChain` protocol, so agents and runners treat it as any step's chain."""

    def __init__(self, step: str, inputs: Mapping[str, StageChain], join: StageChain) -> None:
        self.step = step
        self.inputs = dict(inputs)
        self.join = join
        self.stream = join.stream
        self._fed: list[_Fed] = []  # runs of one stream's deltas, not yet drained
        self._refused: list[tuple[Batch, str]] = []  # deltas the join refused, with why
        self._measured = Measured()  # the MJoin's selectivities from its windows (cost model)

    @property
    def stages(self) -> list[Stage]:
        """Every stage: the streams' in stream order, then the join's."""
        return [s for chain in self.inputs.values() for s in chain.stages] + self.join.stages

    def push(self, stream: str, batch: Batch) -> list[Batch]:
        """A batch of ``stream`` through its chain, then what came out (and the stream's
        event-time news) through the join."""
        self.feed(stream, batch)
        return self.drain()

    def feed(self, stream: str, batch: Batch) -> None:
        """A batch of ``stream`` through its chain only; what came out waits for
        :meth:`drain`. A batch the stream's chain refuses (``ValueError``) leaves no trace."""
        deltas = [d for d in self.inputs[stream].push(stream, batch) if len(d)]
        if self._fed and self._fed[-1].stream == stream:
            self._fed[-1].deltas.extend(deltas)
            return
        self._close_last()  # its stream's event-time news is what it is now, before others
        self._fed.append(_Fed(stream, deltas))

    def drain(self) -> list[Batch]:
        """What the fed batches make the join output: each stream's deltas since the last
        drain as one batch per layout, then the stream's event-time news, all buffered by the
        MJoin and joined in one epoch. An agent feeds a turn's envelopes and drains once, so
        the MJoin's per-call cost is paid once a turn, not once per run of one stream.
        Deltas the join refuses as data (``ValueError``, its state unchanged) are kept for
        :meth:`take_dead_letters` with the reason; the others go on."""
        self._close_last()
        fed, self._fed = self._fed, []
        if not fed:
            return []
        head = self.join.stages[0] if self.join.stages else None
        mjoin = head if isinstance(head, MJoinStage) else None
        out: list[Batch] = []
        if mjoin is not None:  # every run buffered, then one epoch for all of them
            mjoin.deferring = True
        try:
            for entry in fed:
                for delta in entry.deltas:
                    try:
                        out += self.join.push(entry.stream, delta)
                    except ValueError as exc:
                        self._refused.append((delta, f"{self.step}: {exc}"))
                if entry.news is not None:
                    out += self.join.push(entry.stream, entry.news)
        finally:
            if mjoin is not None:
                mjoin.deferring = False
        return out if mjoin is None else out + self.join.release_first()

    def _close_last(self) -> None:
        """The last run of one stream's deltas is complete: coalesce it and take the stream's
        event-time news now. Taken at the drain instead, after a later run of the same stream
        was fed (a turn of several blocks), the news would run ahead of that run's deltas,
        which the MJoin would then refuse as late."""
        if self._fed and not self._fed[-1].closed:
            last = self._fed[-1]
            last.deltas = coalesce(last.deltas)
            last.news = self.inputs[last.stream].progress_news(last.deltas)
            last.closed = True

    def flush(self) -> list[Batch]:
        """End of input: each stream's held-back deltas through the join, then the join's."""
        out = [o for s, c in self.inputs.items() for d in c.flush() for o in self.join.push(s, d)]
        return out + self.join.flush()

    def progress(self) -> int | None:
        return self.join.progress()

    def idle(self) -> bool:
        return self.join.idle()

    def progress_news(self, outputs: list[Batch]) -> Batch | None:
        return self.join.progress_news(outputs)

    def held_bytes(self) -> int:
        return sum(c.held_bytes() for c in self.inputs.values()) + self.join.held_bytes()

    def waiting_bytes(self) -> dict[str, int]:
        waiting: dict[str, int] = {}
        for chain in [*self.inputs.values(), self.join]:
            for stream, nbytes in chain.waiting_bytes().items():
                waiting[stream] = waiting.get(stream, 0) + nbytes
        return waiting

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        chains = [*self.inputs.values(), self.join]
        refused, self._refused = self._refused, []
        return [dead for chain in chains for dead in chain.take_dead_letters()] + refused

    def stats(self) -> dict[str, Any]:
        """Each stage's statistics by stage name (names carry the stream: ``window.a[0]``)."""
        out: dict[str, Any] = {}
        for chain in [*self.inputs.values(), self.join]:
            out.update(chain.stats())
        for stage in self.join.stages:
            if isinstance(stage, MJoinStage) and isinstance(out.get(stage.name), dict):
                out[stage.name]["window_matches"] = self._measured.of(stage)
        return out

    def snapshot(self) -> bytes:
        return b"".join(self.snapshot_parts())

    def snapshot_parts(self) -> Iterator[bytes]:
        """The snapshot in pieces, each chain's made only when the one before has been taken:
        a save that writes each piece as it comes (processors.runtime.state) holds one chain's
        snapshot at a time, not the whole partition's twice over. Layout: ``SMP1``, a u32
        length and a JSON header, then per chain (streams in order, then the join) a u64
        length and the chain's snapshot."""
        header = json.dumps({"kind": "joined", "version": JOINED_SNAPSHOT_VERSION,
                             "step": self.step, "streams": list(self.inputs)}).encode()  # fmt: skip
        yield PARTS_MAGIC + _U32.pack(len(header)) + header
        for chain in [*self.inputs.values(), self.join]:
            data = chain.snapshot()
            yield _U64.pack(len(data))
            yield data

    def load_snapshot(self, data: bytes) -> None:
        """Continue from a :meth:`snapshot` of the same step; :class:`SnapshotError` if it is
        of another step or its streams differ."""
        view = memoryview(data)
        if bytes(view[:4]) != PARTS_MAGIC or len(view) < 8:
            raise SnapshotError(f"{self.step}: not a joined snapshot")
        at = 8 + _U32.unpack_from(view, 4)[0]
        try:
            header = json.loads(bytes(view[8:at]))
        except ValueError as exc:
            raise SnapshotError(f"{self.step}: bad snapshot header: {exc}") from exc
        if not isinstance(header, dict):
            raise SnapshotError(f"{self.step}: bad snapshot header")
        expect(header, "joined", JOINED_SNAPSHOT_VERSION, self.step)
        if header.get("step") != self.step:
            raise SnapshotError(f"snapshot of step {header.get('step')!r}, not {self.step!r}")
        if header.get("streams") != list(self.inputs):
            raise SnapshotError(f"{self.step}: snapshot of streams {header.get('streams')}, "
                                f"the plan joins {list(self.inputs)}")  # fmt: skip
        for chain in [*self.inputs.values(), self.join]:
            if at + 8 > len(view):
                raise SnapshotError(f"{self.step}: snapshot ends before {chain.step}'s")
            (length,) = _U64.unpack_from(view, at)
            if at + 8 + length > len(view):
                raise SnapshotError(f"{self.step}: snapshot of {chain.step} cut short")
            chain.load_snapshot(bytes(view[at + 8 : at + 8 + length]))
            at += 8 + length
        if at != len(view):
            raise SnapshotError(f"{self.step}: {len(view) - at} bytes after the snapshot")
