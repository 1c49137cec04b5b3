"""Plan-change reporting shared by the adaptive stages (filter orders, MJoin join orders).

Every change is counted and the latest ``RECENT_CHANGES`` are kept for ``stats()``, formatted
with the names of the reordered items only when asked (a stage near a tie may reorder every
batch). The log gets the first change at once and then at most one line per ``LOG_EVERY_S``
(all of them at DEBUG): a line per change would flood the log and, on a fast stage, cost more
than the re-optimization itself.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from processors.core.ordering.reoptimizers import OrderChange

RECENT_CHANGES = 20
LOG_EVERY_S = 10.0  # order changes logged at INFO at most this often (all at DEBUG)


@dataclass(frozen=True)
class _Kept:
    context: dict[str, Any]  # leading fields of the entry, e.g. {"at_tuple": 1000}
    time_ms: int
    change: OrderChange
    names: Sequence[str]  # the name of each reordered item, by id


class PlanChanges:
    """The order changes of one stage: count, latest entries, rate-limited log lines.

    ``what`` names the plan in log lines ("filter order"); ``log`` is the stage module's logger,
    so that a stage's lines keep their logger name.
    """

    def __init__(self, stage: str, what: str, log: logging.Logger) -> None:
        self.stage = stage
        self.what = what
        self.log = log
        self.total = 0
        self.recent: deque[_Kept] = deque(maxlen=RECENT_CHANGES)
        self._logged_at = -LOG_EVERY_S  # monotonic time of the last change logged at INFO
        self._unlogged = 0

    def record(
        self,
        change: OrderChange,
        names: Sequence[str],
        time_ms: int,
        count: int,
        unit: str,
        context: dict[str, Any],
        what: str | None = None,
    ) -> None:
        """Count and keep ``change`` (of items named ``names``), made after ``count``
        ``unit`` ("tuples"); ``context`` leads its stats entry; ``what`` overrides the plan's
        name in the log line ("join order of r")."""
        self.total += 1
        self.recent.append(_Kept(dict(context), int(time_ms), change, names))
        what = what or self.what
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY_S:
            self._unlogged += 1
            if self.log.isEnabledFor(logging.DEBUG):
                self.log.debug(
                    "%s: %s changed after %d %s (%s): %s -> %s",
                    self.stage, what, count, unit, change.reason,
                    _named(names, change.before), _named(names, change.after),
                )  # fmt: skip
            return
        self.log.info(
            "%s: %s changed after %d %s (%s): %s -> %s%s",
            self.stage, what, count, unit, change.reason,
            _named(names, change.before), _named(names, change.after),
            f" ({self._unlogged} more changes since the last line)" if self._unlogged else "",
        )  # fmt: skip
        self._logged_at, self._unlogged = now, 0

    def entries(self) -> list[dict[str, Any]]:
        """The kept changes, oldest first, as ``stats()`` reports them."""
        return [_entry(k) for k in self.recent]

    def state(self) -> dict[str, Any]:
        """A snapshot state tree of the count and the kept changes (names as ids)."""
        return {
            "total": self.total,
            "recent": [
                {
                    "context": dict(k.context),
                    "time_ms": k.time_ms,
                    "before": list(k.change.before),
                    "after": list(k.change.after),
                    "position": k.change.position,
                    "reason": k.change.reason,
                }
                for k in self.recent
            ],
        }

    def load_state(
        self, tree: dict[str, Any], names_of: Callable[[dict[str, Any]], Sequence[str]]
    ) -> None:
        """Put back a :meth:`state`; ``names_of(context)`` gives the item names of an entry.
        Raises KeyError, TypeError or ValueError on a malformed tree (callers wrap them)."""
        self.total = int(tree["total"])
        self.recent.clear()
        for r in tree["recent"]:
            change = OrderChange(
                tuple(int(f) for f in r["before"]),
                tuple(int(f) for f in r["after"]),
                int(r["position"]),
                str(r["reason"]),
            )
            names = names_of(r["context"])
            if any(not 0 <= f < len(names) for f in change.before + change.after):
                raise ValueError(f"order change names item outside 0..{len(names) - 1}")
            self.recent.append(_Kept(dict(r["context"]), int(r["time_ms"]), change, names))


def _named(names: Sequence[str], order: tuple[int, ...]) -> list[str]:
    return [names[f] for f in order]


def _entry(kept: _Kept) -> dict[str, Any]:
    return {
        **kept.context,
        "time_ms": kept.time_ms,
        "from": _named(kept.names, kept.change.before),
        "to": _named(kept.names, kept.change.after),
        "position": kept.change.position,
        "reason": kept.change.reason,
    }
