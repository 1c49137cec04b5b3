"""The shedding controller of a query that declares ``shed()`` (issue 18; docs/shedding.md).

It runs where the scheduler runs: on the worker the stats topic's partition is assigned to,
which sees every worker's Stats records. Every CHECK_S it measures the load over the last
WINDOW_MS, from what was measured under the shares in force, and asks
:func:`processors.core.cost.shed_policy.next_keep` for the shares; when they differ
materially from those in force it publishes them as a DROP_RATES record, which every worker
(this one too) applies when it reads it back from the control topic, as the scheduling plan is
applied. Between those decisions, at every tick, a rise of the rate offered to its worker's
inputs is met at once (:func:`processors.core.cost.shed_policy.feed_forward`).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from typing import Any

from processors.core.cost.shed_policy import (
    Decided,
    at_the_rate_now,
    cut_explained,
    dropping,
    feed_forward,
    material,
    next_keep,
    target,
)
from processors.core.cost.shed_signals import Signals, signals
from processors.core.plan import LogicalPlan
from processors.runtime.control import SHED, control_key, encode_control

log = logging.getLogger(__name__)

#: how often the controller decides, and the window of statistics it decides on
CHECK_S = 1.0
WINDOW_MS = 3_000
#: after a change, statistics count from this long after it (the workers read the record and
#: the queues respond), and a decision needs at least MIN_SPAN_MS of them
SETTLE_MS = 300
MIN_SPAN_MS = 1_000
#: a worker's first seconds of work measure its warm-up (imports, compilation, connections,
#: the first fetches), not the load: its statistics count from this long after its first tuple
WARMUP_MS = 3_000
#: the offered rate between decisions is measured over this long
READ_RATE_S = 1.0
#: a fall of the offered rate raises the shares between decisions only once this many polls in a
#: row saw it (cut fast, raise slowly): a worker that falls behind reads less for a moment
#: while as much is offered, and raising the shares then would deepen its overload
FALL_CONFIRM_POLLS = 3
#: the records kept for the cost model's figures (every worker's, about the last minute)
KEPT_RECORDS = 2_000
#: a worker stops acting as the controller when no stats arrived for this long
LEADERSHIP_TIMEOUT_S = 5.0


class ShedController:
    def __init__(
        self,
        plan: LogicalPlan,
        publish: Callable[[bytes, bytes], None],
        worker_id: str,
        clock: Callable[[], float] = time.time,
        reads: Callable[[], int] | None = None,
        offered: Callable[[], tuple[int, int] | None] | None = None,
    ) -> None:
        assert plan.shedding is not None
        self.plan = plan
        self.config = plan.shedding
        self._publish = publish
        self.worker_id = worker_id
        self.clock = clock
        self.records: collections.deque[dict[str, Any]] = collections.deque(maxlen=KEPT_RECORDS)
        self._seen: set[tuple[str, str, int]] = set()  # (worker, agent, window end) had
        self._seen_order: collections.deque[tuple[str, str, int]] = collections.deque()
        self._last_stats = float("-inf")
        self._last_check = float("-inf")
        self.published: dict[str, float] | None = None
        self._since_ms = 0  # statistics before this were measured under other shares
        self._active_from: dict[str, int] = {}  # worker -> when its first tuple came
        self.decisions = 0
        self.last_signals: dict[str, Any] | None = None
        #: records this worker's drop boxes read so far (None: no fast path)
        self.reads = reads
        #: (which partitions, the records offered to them so far): their fetch high
        #: watermarks added up (None: not known yet)
        self.offered = offered
        self._offered_key: int | None = None
        self._reads: collections.deque[tuple[float, int]] = collections.deque()
        self._decided: Decided | None = None
        self._falls = 0  # polls in a row whose feed-forward would raise the shares
        #: when the last decision was a first cut left for the next one to confirm (None: not)
        self._doubted: float | None = None

    def on_stats(self, record: dict[str, Any], own: bool = False) -> None:
        """A Stats record: from the stats topic (every worker's), and ``own`` from this
        worker's board as it reports (the topic's copy comes later: a repeat is ignored). Only
        the topic's make this worker the leader."""
        if record.get("query") != self.plan.name or record.get("scope") != "AGENT":
            return
        if not own:
            self._last_stats = self.clock()
        worker = str(record.get("worker_id"))
        seen = (worker, str(record.get("agent")), int(record["window_end_ms"]))
        if seen in self._seen:
            return
        self._seen.add(seen)
        self._seen_order.append(seen)
        if len(self._seen_order) > KEPT_RECORDS:
            self._seen.discard(self._seen_order.popleft())
        if worker not in self._active_from:
            if not record.get("tuples_in"):
                return
            self._active_from[worker] = int(record["window_start_ms"])
        if record["window_start_ms"] < self._active_from[worker] + WARMUP_MS:
            return  # warming up
        self.records.append(record)

    @property
    def leading(self) -> bool:
        return self.clock() - self._last_stats < LEADERSHIP_TIMEOUT_S

    def offered_rate(self) -> float:
        """The records offered to this worker's inputs a second over the last READ_RATE_S,
        from the fetch high watermarks of its input partitions; before they are known, what
        its drop boxes read (0: neither known yet). Sampled at each tick. The reading comes
        in fetches of thousands of records: at three times the capacity its rate over a
        second swung by 10-25% from one poll to the next, and the feed-forward cut and
        raised on that noise; the high watermarks grow with what the producers write."""
        now = self.clock()
        count = self._offered_count()
        if count is None:
            if self.reads is None:
                return 0.0
            count = self.reads()
        self._reads.append((now, count))
        while len(self._reads) > 2 and now - self._reads[1][0] >= WINDOW_MS / 1000:
            self._reads.popleft()
        return self._rate_over(READ_RATE_S)

    def _offered_count(self) -> int | None:
        """The offered records' count, once known; a change of the partitions held (or the
        first count after the reads) starts the samples afresh."""
        got = self.offered() if self.offered is not None else None
        if got is None:
            if self._offered_key is not None:
                self._reads.clear()
                self._offered_key = None
            return None
        key, count = got
        if key != self._offered_key:
            self._reads.clear()
            self._offered_key = key
        return count

    def _offered_rising(self) -> float:
        """How fast the offered rate grows, a share of it a second: the last READ_RATE_S's
        rate against the one before (0 if falling or not known). The statistics' own figure
        comes from the records read, in fetches: at a steady top rate it said 21%/s, and met
        2 s ahead (LEAD_S) that cut the shares by a third."""
        if not self._reads:
            return 0.0
        t1, n1 = self._reads[-1]
        older, middle = self._sample_before(2 * READ_RATE_S), self._sample_before(READ_RATE_S)
        if older is None or middle is None:
            return 0.0
        (t0, n0), (tm, nm) = older, middle
        before, now = (nm - n0) / max(tm - t0, 1e-9), (n1 - nm) / max(t1 - tm, 1e-9)
        if before <= 0:
            return 0.0
        return max(0.0, (now - before) / before / ((t1 - t0) / 2))

    def _rate_over(self, span_s: float) -> float:
        """The offered rate from the newest sample at least ``span_s`` old (or the oldest) to
        the newest (0: under half of ``span_s`` known)."""
        if not self._reads:
            return 0.0
        t1, n1 = self._reads[-1]
        t0, n0 = self._sample_before(span_s) or self._reads[0]
        return (n1 - n0) / (t1 - t0) if t1 - t0 >= span_s / 2 else 0.0

    def _sample_before(self, span_s: float) -> tuple[float, int] | None:
        """The newest sample at least ``span_s`` older than the newest one (None: none is)."""
        t1 = self._reads[-1][0]
        return next((x for x in reversed(self._reads) if t1 - x[0] >= span_s), None)

    def tick(self, current: Mapping[str, float]) -> bool:
        """Decide if it is time; publish the shares when they changed. True if it published.
        Between decisions, a rise of the offered rate is acted on at once (:func:`feed_forward`)."""
        now = self.clock()
        rate = self.offered_rate()
        if not self.leading:
            return False
        if self._decided is not None and self._decided.rate <= 0 < rate:  # known since
            self._decided = replace(self._decided, rate=rate)
        if now - self._last_check < CHECK_S:
            fast = (
                None
                if self._decided is None
                else feed_forward(current, rate, self._decided, self.config)
            )
            if fast is None or not material(fast[0], current):
                self._falls = 0
                return False
            if any(v > current.get(n, 1.0) for n, v in fast[0].items()):
                self._falls += 1
                if self._falls < FALL_CONFIRM_POLLS:
                    return False
            self._falls = 0
            keep, self._decided, why = fast
            # shedding on, the load is held: what was measured still holds
            held = dropping(current) and dropping(keep)
            return self._publish_keep(keep, why, now, load_changed=not held)
        self._last_check = now
        measured = signals(list(self.records), WINDOW_MS, self._since_ms, MIN_SPAN_MS)
        if measured is None:
            return False
        # a rise shows first in the newest statistics: the window would average it away
        newest = signals(list(self.records), MIN_SPAN_MS, self._since_ms, MIN_SPAN_MS)
        if newest is not None and newest.need > measured.need:  # (a rise is a slope: the
            measured = replace(newest, rising=measured.rising)  # longer window's)
        # a fall shows first in the offered rate: the window's need is seconds old
        window_rate = self._rate_over(WINDOW_MS / 1000)
        measured = at_the_rate_now(measured, rate, window_rate, self.config)
        if self._offered_key is not None:  # a rise, from what is offered (not the reading)
            measured = replace(measured, rising=self._offered_rising())
        self.last_signals = asdict(measured)
        keep, why = next_keep(self.plan, list(self.records), measured, current, self.config)
        decided = Decided(rate, measured.need, target(self.config, measured))
        in_force = self.published if self.published is not None else dict(current)
        if self._unconfirmed(keep, current, measured, now):
            log.info("query %s: a first cut to %s not made yet: the next decision confirms it "
                     "(%s)", self.plan.name, keep, why)  # fmt: skip
            return False
        if not material(keep, in_force):
            if self._decided is not None and dropping(current):
                # shares held: they stay meant for the offered rate they were set at (the
                # statistics that held them are a second or two old: in a climb, moving the
                # rate along with every held decision would never let feed_forward act)
                decided = replace(decided, rate=self._decided.rate)
            self._decided = decided
            return False
        self._decided = decided
        # the need measured was at the shares in force; at these it is meant to be the aim
        self._decided = replace(self._decided, need=self._decided.aim)
        return self._publish_keep(keep, why, now)

    def _unconfirmed(self, keep: Mapping[str, float], current: Mapping[str, float],
                     s: Signals, now: float) -> bool:  # fmt: skip
        """Whether ``keep``, a first cut (every share at 1 now), waits for the next decision:
        nothing explains it at once (:func:`cut_explained`). At half the capacity after the
        experiment's ramp a stall's cut held the lift off for 15-21 s (docs/shedding.md); a
        real overload comes with a rise (which :func:`feed_forward` meets between decisions)
        or persists to the next decision."""
        first_cut = not dropping(current) and dropping(keep)
        explained = cut_explained(self.config, s)
        confirming = self._doubted is not None and now - self._doubted <= 3 * CHECK_S
        self._doubted = None if not first_cut or explained or confirming else now
        return self._doubted is not None

    def _publish_keep(
        self, keep: dict[str, float], why: str, now: float, load_changed: bool = True
    ) -> bool:
        """Publish ``keep``; statistics count afresh from a while after it unless it holds the
        load (the feed-forward while shedding, which keeps each input's kept rate and so the
        work: in a climb it changed the shares every second, and no decision on the
        statistics corrected a first cut's level until the top, docs/shedding.md)."""
        self.published = keep
        if load_changed:
            self._since_ms = int(now * 1000) + SETTLE_MS
        self.decisions += 1
        lifted = not dropping(keep)
        payload = {"keep": {} if lifted else keep, "reason": "load fell: " + why if lifted
                   else why, "measured": self.last_signals}  # fmt: skip
        self._publish(encode_control(SHED, self.plan.name, payload, self.worker_id),
                      control_key(self.plan.name, SHED))  # fmt: skip
        log.info("query %s: shedding controller publishes %s (%s)", self.plan.name,
                 "lifted" if lifted else keep, why)  # fmt: skip
        return True
