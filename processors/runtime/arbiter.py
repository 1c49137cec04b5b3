"""The arbiter: in each worker, which agent processes its next batch (one at a time).

Every agent of a worker runs in one asyncio loop, so only one processes at a time, as in the
scheduling paper's single-processor model (Babcock et al., Sect. 2). Left alone, the order is
whatever the event loop happens to wake. With an arbiter, an agent that has a batch asks for a
turn; decisions are deferred to the next loop iteration, so that every agent with input at that
moment competes, and the policy in force (Chain, Chain-Flush, Mixed, FIFO, Round-Robin,
Greedy: :mod:`processors.core.scheduling.policies`) picks the winner. An agent that waits has its
input partition held (no further fetching), so that prefetched data stays bounded; the hold is
lifted when it is granted.

The policy comes from the scheduler agent through the control topic; until one arrives, turns
go to the oldest waiting batch (FIFO), which is what an unscheduled pipeline tends to do anyway.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from processors.core.scheduling.policies import ReadyOperator

log = logging.getLogger(__name__)


class Policy(Protocol):
    """What the arbiter needs of a scheduling policy."""

    name: str

    def choose(self, now: float, ready: list[ReadyOperator]) -> str | None: ...


@dataclass
class _Waiter:
    op: str
    head_arrival: float
    queued: float
    since: float
    future: asyncio.Future[None]
    hold: Any = None


@dataclass
class OperatorCounters:
    """Per agent: how it fared under the arbiter (shown on the status page)."""

    grants: int = 0
    wait_s: float = 0.0
    max_wait_s: float = 0.0


@dataclass
class ArbiterStats:
    decisions: int = 0
    decision_ns: int = 0  # time spent choosing (the policy plus bookkeeping)
    max_decision_ns: int = 0
    contested: int = 0  # decisions with more than one agent waiting
    holds: int = 0
    per_op: dict[str, OperatorCounters] = field(default_factory=dict)


class Arbiter:
    """Grants turns to agents; ``hold``/``unhold`` pause and resume an input partition."""

    def __init__(
        self,
        *,
        enabled: bool = True,
        clock: Callable[[], float] = time.time,
        hold: Callable[[Any], None] | None = None,
        unhold: Callable[[Any], None] | None = None,
    ) -> None:
        self.enabled = enabled
        self.clock = clock
        self._hold = hold
        self._unhold = unhold
        self.policy: Policy | None = None
        self.description: dict[str, Any] = {"policy": "fifo (no plan yet)"}
        self._holder: str | None = None
        self._waiting: dict[str, _Waiter] = {}
        self._decision_pending = False
        self.stats = ArbiterStats()

    # -- the policy in force ----------------------------------------------------------------
    def install(self, policy: Policy | None, description: dict[str, Any]) -> None:
        """Use ``policy`` from the next decision on (None: FIFO until a plan arrives)."""
        self.policy = policy
        self.description = description

    # -- turns ------------------------------------------------------------------------------
    @asynccontextmanager
    async def turn(
        self, op: str, head_arrival: float, queued: float = 1.0, hold: Any = None
    ) -> AsyncIterator[None]:
        """``async with arbiter.turn(agent, arrival_of_oldest_tuple, tuples, partition):``"""
        if not self.enabled:
            yield
            return
        await self._acquire(op, head_arrival, queued, hold)
        try:
            yield
        finally:
            self._release(op)

    async def _acquire(self, op: str, head_arrival: float, queued: float, hold: Any) -> None:
        if op in self._waiting:
            raise RuntimeError(f"agent {op} asked for a second turn while waiting for one")
        loop = asyncio.get_running_loop()
        waiter = _Waiter(op, head_arrival, queued, self.clock(), loop.create_future(), hold)
        self._waiting[op] = waiter
        if hold is not None and self._hold is not None:
            self._hold(hold)
            self.stats.holds += 1
        self._schedule_decision(loop)
        try:
            await waiter.future
        except asyncio.CancelledError:
            if self._waiting.get(op) is waiter:  # cancelled before its turn
                del self._waiting[op]
                self._lift(waiter)
            elif self._holder == op:  # cancelled right after being granted
                self._release(op)
            raise

    def _release(self, op: str) -> None:
        if self._holder == op:
            self._holder = None
        if self._waiting:
            self._schedule_decision(asyncio.get_running_loop())

    def _schedule_decision(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._holder is None and not self._decision_pending:
            self._decision_pending = True
            loop.call_soon(self._decide)

    def _decide(self) -> None:
        """Grant the turn to the waiter the policy chooses (run from the event loop)."""
        self._decision_pending = False
        if self._holder is not None or not self._waiting:
            return
        started = time.perf_counter_ns()
        now = self.clock()
        chosen = None
        if len(self._waiting) > 1:
            self.stats.contested += 1
            if self.policy is not None:
                ready = [
                    ReadyOperator(w.op, w.head_arrival, w.queued) for w in self._waiting.values()
                ]
                try:
                    chosen = self.policy.choose(now, ready)
                except Exception:  # a policy bug must not stop the worker: FIFO this time
                    log.exception("scheduling policy %s failed; FIFO this turn", self.policy.name)
        if chosen not in self._waiting:
            chosen = min(self._waiting.values(), key=lambda w: w.head_arrival).op
        waiter = self._waiting.pop(chosen)
        self._holder = chosen
        waited = max(now - waiter.since, 0.0)
        counters = self.stats.per_op.setdefault(chosen, OperatorCounters())
        counters.grants += 1
        counters.wait_s += waited
        counters.max_wait_s = max(counters.max_wait_s, waited)
        self._lift(waiter)
        if not waiter.future.done():
            waiter.future.set_result(None)
        spent = time.perf_counter_ns() - started
        self.stats.decisions += 1
        self.stats.decision_ns += spent
        self.stats.max_decision_ns = max(self.stats.max_decision_ns, spent)

    def _lift(self, waiter: _Waiter) -> None:
        if waiter.hold is not None and self._unhold is not None:
            self._unhold(waiter.hold)

    # -- reporting --------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        s = self.stats
        return {
            **self.description,
            "enabled": self.enabled,
            "decisions": s.decisions,
            "contested_decisions": s.contested,
            "decision_ns_avg": s.decision_ns / s.decisions if s.decisions else 0.0,
            "decision_ns_max": s.max_decision_ns,
            "partition_holds": s.holds,
            "waiting": sorted(self._waiting),
            "agents": {
                op: {
                    "grants": c.grants,
                    "wait_s_avg": c.wait_s / c.grants if c.grants else 0.0,
                    "wait_s_max": c.max_wait_s,
                }
                for op, c in sorted(s.per_op.items())
            },
        }
