"""The stage contract: a batch-at-a-time operator with no Kafka and no Faust in it.

The runtime feeds a stage the batches of one input partition in order and forwards what it
returns; a stage keeps whatever state it needs per instance (one instance per partition), so the
same object runs unchanged in process (tests, benchmarks) and inside a Faust agent.

Every stage kind implements the whole protocol (:class:`Stage`); :class:`StageBase` gives the
defaults of a stage without state. Snapshots are bytes in the format of
:mod:`processors.core.state_codec` (data only, never pickle): a stage's ``snapshot()`` taken at
any point and loaded into a freshly built stage of the same configuration continues exactly
where the original stood (``docs/architecture.md``, "The stage protocol").
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from processors.core.batch import Batch
from processors.core.state_codec import decode_state, encode_state, expect


class Stage(Protocol):
    """A streaming operator over columnar batches."""

    name: str

    def process(self, batch: Batch) -> list[Batch]:
        """Consume one input batch; return the output batches it produces (maybe none)."""
        ...

    def flush(self) -> list[Batch]:
        """End of input: whatever the stage still holds back (a lateness buffer, a join's
        pending deltas)."""
        ...

    def advance(self, watermark: int) -> list[Batch]:
        """No later input is below ``watermark``: the output that makes due (a RANGE
        window's expiries)."""
        ...

    def progress(self, upstream: int) -> int:
        """The least event time a later output can have, given that no later input is below
        ``upstream`` (event-time progress sent downstream: ``docs/windows-and-joins.md``)."""
        ...

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        """Input the stage refused since the last call, with the reason (then forgotten)."""
        ...

    def stats(self) -> dict[str, Any]:
        """Stage-specific statistics and the current plan (JSON-able), for stats and status."""
        ...

    def held_bytes(self) -> int:
        """About how many bytes of tuples the stage holds (windows, join buffers, tuples held
        back): what the query's memory limit counts."""
        ...

    def waiting_bytes(self) -> dict[str, int]:
        """Of :meth:`held_bytes`, what waits for another input's event time to come, by the
        input it came from: those inputs run ahead, and pausing them bounds it."""
        ...

    def snapshot(self) -> bytes:
        """The stage's state as snapshot bytes (:mod:`processors.core.state_codec`)."""
        ...

    def load_snapshot(self, data: bytes) -> None:
        """Continue from ``data`` (a :meth:`snapshot` of a stage of the same configuration);
        :class:`~processors.core.state_codec.SnapshotError` if it is not one."""
        ...


class StageBase:
    """Defaults for a stage without state: nothing held back, nothing refused, and a snapshot
    that records only the kind (so that loading one of another kind is still caught)."""

    kind: ClassVar[str] = "stage"
    SNAPSHOT_VERSION: ClassVar[int] = 1
    name: str

    def flush(self) -> list[Batch]:
        return []

    def advance(self, watermark: int) -> list[Batch]:
        return []

    def progress(self, upstream: int) -> int:
        """The least event time a later output can have, given that no later input is below
        ``upstream`` (a stage that holds tuples back lowers it; most pass it on)."""
        return upstream

    def take_dead_letters(self) -> list[tuple[Batch, str]]:
        return []

    def held_bytes(self) -> int:
        return 0

    def waiting_bytes(self) -> dict[str, int]:
        return {}

    def state(self) -> dict[str, Any]:
        """The state tree :meth:`snapshot` encodes (stateful stages extend it)."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Put a decoded state tree back (stateful stages override it)."""

    def snapshot(self) -> bytes:
        return encode_state({"kind": self.kind, "version": self.SNAPSHOT_VERSION, **self.state()})

    def load_snapshot(self, data: bytes) -> None:
        tree = decode_state(data)
        expect(tree, self.kind, self.SNAPSHOT_VERSION, self.name)
        self.load_state(tree)


class PassThroughStage(StageBase):
    """Forwards every batch unchanged: the simplest stage, and the baseline of the benchmarks."""

    kind = "passthrough"

    def __init__(self, name: str = "passthrough") -> None:
        self.name = name
        self._batches = 0

    def process(self, batch: Batch) -> list[Batch]:
        self._batches += 1
        return [batch]

    def stats(self) -> dict[str, Any]:
        return {"kind": "passthrough", "batches": self._batches}
