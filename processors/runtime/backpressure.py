"""A query's memory limit in a worker, kept by pausing the inputs that run ahead (issue 16).

Stateful steps hold tuples: windows, join indexes, and join deltas that wait until every other
input has shown their time (an MJoin releases a delta only when no input can still precede
it). When one input is slow, the others' deltas wait in memory, without bound. The limit
(``Query.memory_limit``) counts what the worker's stateful units of the query hold
(``held_bytes`` of the stage protocol), or the worker's own growth in resident memory once
that reaches ``RSS_SHARE`` of the limit (fetch buffers and the heap's slack count too). Over
it, every input partition whose deltas wait (``waiting_bytes``: only inputs ahead of the
least time shown) is held back on the consumer,
with the input of the stream step that feeds it, so that its records wait in the broker
instead; under three quarters of the limit, or once nothing of that input waits, it is let go
(checked after every block and on a timer, since with inputs paused blocks may stop coming).
The input being waited for is never paused, so it can catch up; state that no pause can
shrink (windows of inputs level in time) is reported, not dropped. Every pause and release is
logged and becomes a plan-change event on the status page.

The heap's housekeeping lives here too: ``trim_heap`` gives freed memory back to the system,
``freeze_heap`` keeps full collections short.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from faust.types import TP

from processors.runtime.partitions import PartitionUnits

log = logging.getLogger(__name__)

#: seconds between two measurements (summing a unit's buffers is not free)
CHECK_EVERY_S = 0.05
#: held back inputs are let go under this share of the limit
RESUME_AT = 0.75
#: the worker's own growth (resident memory since its first check) counts against the limit
#: from this share of it on: state is not all it holds (fetch buffers, decoded blocks, the
#: heap's slack), and the limit is what the worker may grow by
RSS_SHARE = 0.9
#: ... once it exceeds this (a worker's start-up grows it by tens of MB: under a small limit
#: that alone paused an input before any state was held)
RSS_FLOOR = 64 * (1 << 20)
#: seconds between two reports of state over the limit that no pause can shrink
REPORT_EVERY_S = 60.0
_MB = 1 << 20
#: seconds between two returns of freed heap memory to the system
TRIM_EVERY_S = 2.0


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None elsewhere."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def resident_bytes() -> int:
    """This process's resident memory (``/proc/self/statm``; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def trim_heap() -> None:
    """Give freed heap memory back to the system. A worker frees millions of small objects (a
    fetched record, a message value) after each block; glibc keeps the pages for reuse, and
    the process's resident size then reads hundreds of MB over what it holds."""
    if _TRIM is not None:
        _TRIM(0)


@dataclass
class _Watched:
    units: PartitionUnits
    #: stream -> the agent's input topic that carries it
    topics: dict[str, str]
    out_topic: str = ""


@dataclass
class MemoryLimit:
    """One per worker and query; stateful agents :meth:`watch` their units and call
    :meth:`check` after each block. ``consumer`` gives the BulkConsumer (late: the app makes it
    when it starts)."""

    limit_bytes: int
    consumer: Callable[[], Any]
    held_bytes: int = 0
    watched: dict[str, _Watched] = field(default_factory=dict)
    #: (agent, stream, partition) held back now
    paused: set[tuple[str, str, int]] = field(default_factory=set)
    pauses_total: int = 0
    _events: list[dict[str, Any]] = field(default_factory=list)
    _checked: float = 0.0
    _reported: float = -REPORT_EVERY_S
    #: the process's resident bytes (the worker passes :func:`resident_bytes`; None: state only)
    resident: Callable[[], int] | None = None
    #: resident bytes at the first check (what the worker held before any state), and growth
    rss_base: int | None = None
    rss_growth_bytes: int = 0

    def watch(
        self, agent: str, units: PartitionUnits, topics: dict[str, str], out_topic: str = ""
    ) -> None:
        self.watched[agent] = _Watched(units, topics, out_topic)

    def check(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if now - self._checked < CHECK_EVERY_S:
            return
        self._checked = now
        held = sum(
            unit.unit.held_bytes()
            for w in self.watched.values()
            for unit in list(w.units.held.values())
        )
        self.held_bytes = held
        if self.resident is not None:
            rss = self.resident()
            if self.rss_base is None:
                self.rss_base = rss
            self.rss_growth_bytes = max(rss - self.rss_base, 0)
            # the worker's growth, scaled so that it trips the limit at RSS_SHARE of it; not
            # the first RSS_FLOOR of it (start-up's own: kernels, connections, first fetches)
            if self.rss_growth_bytes > RSS_FLOOR:
                held = max(held, int(self.rss_growth_bytes / RSS_SHARE))
        if held <= self.limit_bytes and not self.paused:
            return  # nothing to pause or let go: what waits where is not needed (a scan)
        waiting = self._waiting()
        if held > self.limit_bytes:
            fresh = sorted(set(waiting) - self.paused)
            if fresh:
                self._hold(fresh, held)
            elif not waiting and now - self._reported >= REPORT_EVERY_S:
                self._reported = now
                log.warning("memory limit: the query's state in this worker is %.0f MB, over its "
                            "limit of %.0f MB, with no input ahead to pause: its windows hold "
                            "that much (raise Query.memory_limit or shorten the windows)",
                            held / _MB, self.limit_bytes / _MB)  # fmt: skip
        let_go = sorted(
            k for k in self.paused if held < RESUME_AT * self.limit_bytes or k not in waiting
        )
        if let_go:
            self._release(let_go, held)

    def _waiting(self) -> dict[tuple[str, str, int], int]:
        """(agent, stream, partition) -> the bytes that wait there for a slower input."""
        waiting: dict[tuple[str, str, int], int] = {}
        for agent, w in self.watched.items():
            for p, unit in list(w.units.held.items()):
                for stream, nbytes in unit.unit.waiting_bytes().items():
                    if nbytes and stream in w.topics:
                        waiting[(agent, stream, p)] = nbytes
        return waiting

    def _tps(self, keys: list[tuple[str, str, int]]) -> list[TP]:
        """The input partitions to pause for each key: the waiting input's own, and those of
        the stateful step that writes it (a stream's window would otherwise go on taking the
        input in, and hold it twice)."""
        tps = []
        for agent, stream, p in keys:
            topic = self.watched[agent].topics[stream]
            tps.append(TP(topic, p))
            for writer in self.watched.values():
                if writer.out_topic == topic:
                    tps += [TP(upstream, p) for upstream in writer.topics.values()]
        return tps

    def _hold(self, keys: list[tuple[str, str, int]], held: int) -> None:
        self.consumer().hold_back(self._tps(keys))
        self.paused.update(keys)
        self.pauses_total += len(keys)
        self._say("paused", keys, held)

    def _release(self, keys: list[tuple[str, str, int]], held: int) -> None:
        self.consumer().let_go(self._tps(keys))
        self.paused.difference_update(keys)
        self._say("resumed", keys, held)

    def _say(self, what: str, keys: list[tuple[str, str, int]], held: int) -> None:
        names = [f"{stream}[{p}]" for _, stream, p in keys]
        log.info("memory limit: %s input %s (state %.1f MB, limit %.0f MB)", what,
                 ", ".join(names), held / _MB, self.limit_bytes / _MB)  # fmt: skip
        for agent, stream, p in keys:
            self._events.append({
                "partition": p, "agent": agent, "change": f"input {stream} {what}",
                "held_mb": round(held / _MB, 1), "limit_mb": self.limit_bytes // _MB,
            })  # fmt: skip

    def take_events(self, agent: str) -> list[dict[str, Any]]:
        """``agent``'s pauses and releases since the previous call (its plan-change events)."""
        mine = [e for e in self._events if e["agent"] == agent]
        self._events = [e for e in self._events if e["agent"] != agent]
        return mine

    def stats(self) -> dict[str, Any]:
        return {
            "limit_mb": self.limit_bytes // _MB,
            "held_mb": round(self.held_bytes / _MB, 1),
            "rss_growth_mb": round(self.rss_growth_bytes / _MB, 1),
            "paused": sorted(f"{stream}[{p}]" for _, stream, p in self.paused),
            "pauses_total": self.pauses_total,
        }


def freeze_heap(collect: bool = True) -> None:
    """Move every object to the permanent generation (``gc.freeze``), after a full collection
    with ``collect``: full collections then walk only what was made since. A frozen object
    dropped later is still freed by reference counting, unless it is part of a reference
    cycle (start-up's objects mostly live as long as the process).

    Only the freeze before the app starts collects: once input flows, a full collection of
    the records in flight stopped the worker for up to 0.9 s (``streamon bench latency``),
    while a freeze alone moves lists and takes microseconds."""
    started = time.perf_counter()
    if collect:
        gc.collect()
    gc.freeze()
    log.info("froze %d objects in %.1f ms", gc.get_freeze_count(),
             (time.perf_counter() - started) * 1000)  # fmt: skip
