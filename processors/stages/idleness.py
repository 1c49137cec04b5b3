"""Which inputs of an event-time merge (or of an MJoin) are idle, kept safe for bursts.

An idle mark says an input had nothing new for the idle timeout when ingest looked; it cannot
say that nothing is on its way. When an input comes back from idle (a burst after a pause on
every input, a restart, a rebalance), the others' idle marks may be stale: their records may
be a moment behind. So a comeback makes every input count again, and an idle mark counts only
if it was decided at least an idle timeout after the latest comeback (``meta['at']``, the wall
clock of ingest, on data and marks alike). An input that really stopped is then left out an
idle timeout after the comeback at the latest; one that was only behind shows its records
first, and the merge stays exact (``docs/windows-and-joins.md``, "Event time across
partitions"). Nothing here reads a clock: only the times the envelopes carry.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from processors.core.batch import Batch

AT = "at"  # meta key: ingest's wall clock (ms) when it read the records or judged the idleness
IDLE = "idle"  # meta key: present on a mark that an input has gone quiet
NO_TIME = -(2**63)


def at_of(batch: Batch) -> int:
    """The ``at`` time a batch carries (the smallest int64 when none or unreadable)."""
    try:
        return int(batch.meta.get(AT, NO_TIME))
    except ValueError:
        return NO_TIME


class Idleness:
    """Idle flags of ``n`` inputs under the comeback rule above."""

    def __init__(self, n: int, idle_timeout_ms: int) -> None:
        self.idle = np.zeros(n, np.bool_)
        self.timeout_ms = int(idle_timeout_ms)
        self.back_at = NO_TIME  # ingest time of the latest comeback
        self.stale_marks = 0  # idle marks not taken: too soon after a comeback

    def saw(self, i: int, batch: Batch) -> bool:
        """Input ``i`` sent ``batch`` (data, a watermark or an idle mark); returns whether this
        was a comeback (every input counts again)."""
        if not len(batch) and IDLE in batch.meta:
            at = at_of(batch)
            if self.back_at == NO_TIME or at == NO_TIME or at - self.back_at >= self.timeout_ms:
                self.idle[i] = True
            else:
                self.stale_marks += 1
            return False
        back = bool(self.idle[i])
        if back:
            self.idle[:] = False
            self.back_at = max(self.back_at, at_of(batch))
        return back

    def state(self) -> dict[str, Any]:
        return {"idle": self.idle.copy(), "back_at": self.back_at, "stale": self.stale_marks}

    def load_state(self, tree: dict[str, Any], what: str) -> None:
        idle = np.asarray(tree["idle"], np.bool_)
        if idle.shape != self.idle.shape:
            raise ValueError(f"{what}: {len(self.idle)} idle flags expected")
        self.idle = idle.copy()
        self.back_at = int(tree.get("back_at", NO_TIME))
        self.stale_marks = int(tree.get("stale", 0))
