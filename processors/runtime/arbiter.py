"""The arbiter: in each worker, which agent processes its next batch (one at a time).

Every agent of a worker runs in one asyncio loop, so only one processes at a time, as in the
scheduling paper's single-processor model (Babcock et al., Sect. 2). Left alone, the order is
whatever the event loop happens to wake, which in practice is the order in which the consumer
delivers fetched data. With an arbiter, an agent that has a batch in hand asks for a turn, and
the policy in force (Chain, Chain-Flush, Mixed, FIFO, Round-Robin, Greedy:
:mod:`processors.core.scheduling.policies`) picks the winner among the agents waiting.

Two details make the choice a real one:

- *Decisions wait for deliveries.* The consumer hands the records of one fetch to the agents
  one partition after another, and each handover lets the receiving agent run. Deciding at the
  first handover would grant whichever agent happens to come first, so a decision waits
  (``busy``) until the consumer has finished the round, and every agent with input is waiting.
- *Turns are short.* An agent asks again after at most a quantum of work (``turn_tuples``), so a
  long queue cannot hold the processor (Sect. 5.2 gives each operator "a maximum number of
  tuples" per scheduling step).

Prefetched input stays bounded by the consumer's flow control: the worker keeps each agent's
buffer of fetched events small (``stream_buffer_maxsize``), so the input partitions of an agent
that is not being granted turns are paused once its buffer fills, and resumed when it drains.

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

#: loop iterations a decision may wait for the consumer to finish a delivery round (a bound, so
#: that a stuck delivery cannot stop the agents)
MAX_DEFERRALS = 64


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
    deferrals: int = 0  # loop iterations decisions waited for a delivery round
    policy_errors: int = 0
    per_op: dict[str, OperatorCounters] = field(default_factory=dict)


class Arbiter:
    """Grants turns to agents, one at a time, in the order the installed policy chooses."""

    def __init__(
        self,
        *,
        enabled: bool = True,
        clock: Callable[[], float] = time.time,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        self.enabled = enabled
        self.clock = clock
        self._busy = busy
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
    async def turn(self, op: str, head_arrival: float, queued: float = 1.0) -> AsyncIterator[None]:
        """``async with arbiter.turn(agent, arrival_of_oldest_tuple, tuples):`` runs the body
        when the policy grants ``agent`` the processor; nobody else is granted until it ends."""
        if not self.enabled:
            yield
            return
        await self._acquire(op, head_arrival, queued)
        try:
            yield
        finally:
            self._release(op)

    async def _acquire(self, op: str, head_arrival: float, queued: float) -> None:
        if op in self._waiting:
            raise RuntimeError(f"agent {op} asked for a second turn while waiting for one")
        loop = asyncio.get_running_loop()
        waiter = _Waiter(op, head_arrival, queued, self.clock(), loop.create_future())
        self._waiting[op] = waiter
        self._schedule_decision(loop)
        try:
            await waiter.future
        except asyncio.CancelledError:
            if self._waiting.get(op) is waiter:  # cancelled before its turn
                del self._waiting[op]
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
            loop.call_soon(self._decide, loop, 0)

    def _decide(self, loop: asyncio.AbstractEventLoop, deferred: int) -> None:
        """Grant the turn to the waiter the policy chooses (run from the event loop)."""
        if self._holder is not None or not self._waiting:
            self._decision_pending = False
            return
        if self._busy is not None and deferred < MAX_DEFERRALS and self._busy():
            self.stats.deferrals += 1
            loop.call_soon(self._decide, loop, deferred + 1)  # let the delivery round finish
            return
        self._decision_pending = False
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
                    self.stats.policy_errors += 1
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
        if not waiter.future.done():
            waiter.future.set_result(None)
        spent = time.perf_counter_ns() - started
        self.stats.decisions += 1
        self.stats.decision_ns += spent
        self.stats.max_decision_ns = max(self.stats.max_decision_ns, spent)

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
            "deferrals": s.deferrals,
            "policy_errors": s.policy_errors,
            "holder": self._holder,
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
